package hashroute

import (
	"errors"
	"strings"
	"testing"

	"github.com/causallab/causallab/internal/sqllex"
)

var long257 = strings.Repeat("x", MaxIDLen+1)
var long256 = strings.Repeat("y", MaxIDLen)

type extractCase struct {
	name   string
	stmt   string
	status Status
	id     string
}

func extractCases() []extractCase {
	return []extractCase{
		{"standalone front", "/* consistent_read_id:abc */ SELECT 1", Found, "abc"},
		{"standalone end", "SELECT * FROM t WHERE x = 1 /* consistent_read_id:job-7 */", Found, "job-7"},
		{"standalone middle", "SELECT /* consistent_read_id:m1 */ * FROM t", Found, "m1"},
		{"no spaces", "/*consistent_read_id:abc*/SELECT 1", Found, "abc"},
		{"spaces around", "/*   consistent_read_id  :  a b  */ SELECT 1", Found, "a b"},
		{"list form", "/*action:query,consistent_read_id:u-42,controller:x*/ SELECT 1", Found, "u-42"},
		{"list form spaced", "SELECT 1 /* application:shop , consistent_read_id: 9f , line:/app/x.rb:12 */", Found, "9f"},
		{"list first", "/*consistent_read_id:first,a:b*/ SELECT 1", Found, "first"},
		{"list last", "/*a:b,consistent_read_id:last*/ SELECT 1", Found, "last"},
		{"value with colons", "/* consistent_read_id:user:1001 */ SELECT 1", Found, "user:1001"},
		{"uuid", "/* consistent_read_id:3f2504e0-4f89-11d3-9a0c-0305e82c3301 */ SELECT 1", Found, "3f2504e0-4f89-11d3-9a0c-0305e82c3301"},
		{"256 bytes ok", "/* consistent_read_id:" + long256 + " */ SELECT 1", Found, long256},
		{"multiline comment", "/*\n  consistent_read_id:nl\n*/\nSELECT 1", Found, "nl"},
		{"after other comment", "/* hello */ /* consistent_read_id:two */ SELECT 1", Found, "two"},
		{"same value twice", "/* consistent_read_id:s */ SELECT 1 /* consistent_read_id:s */", Found, "s"},
		{"same value twice in list", "/*consistent_read_id:s,consistent_read_id: s */ SELECT 1", Found, "s"},
		{"key also in a string", "/* consistent_read_id:c */ SELECT 'consistent_read_id:d'", Found, "c"},
		{"key as a column", "SELECT consistent_read_id FROM t /* consistent_read_id:col */", Found, "col"},
		{"hint before id", "SELECT /*+ MAX_EXECUTION_TIME(10) */ 1 /* consistent_read_id:h */", Found, "h"},
		{"escaped quote before", `SELECT 'it\'s /* consistent_read_id:no */' /* consistent_read_id:yes */`, Found, "yes"},
		{"doubled quote before", `SELECT 'it''s /* consistent_read_id:no */' /* consistent_read_id:yes */`, Found, "yes"},
		{"minus minus arithmetic", "SELECT 1--1 /* consistent_read_id:arith */", Found, "arith"},
		{"division", "SELECT 4/2 /* consistent_read_id:div */", Found, "div"},
		{"line comment then id", "SELECT 1 -- note\n/* consistent_read_id:after */", Found, "after"},
		{"hash comment then id", "SELECT 1 # note\n/* consistent_read_id:after */", Found, "after"},
		{"unterminated elsewhere", "/* consistent_read_id:u */ SELECT 1 /* oops", Found, "u"},
		{"unterminated string elsewhere", "/* consistent_read_id:u */ SELECT 'oops", Found, "u"},

		{"no comment", "SELECT 1", NoID, ""},
		{"empty statement", "", NoID, ""},
		{"other comment", "/* controller:x */ SELECT 1", NoID, ""},
		{"in single quotes", "SELECT '/* consistent_read_id:abc */'", NoID, ""},
		{"in double quotes", `SELECT "/* consistent_read_id:abc */"`, NoID, ""},
		{"in backticks", "SELECT `/* consistent_read_id:abc */` FROM t", NoID, ""},
		{"in dash comment", "SELECT 1 -- /* consistent_read_id:abc */", NoID, ""},
		{"in dash comment tab", "SELECT 1 --\t/* consistent_read_id:abc */", NoID, ""},
		{"in hash comment", "SELECT 1 # /* consistent_read_id:abc */", NoID, ""},
		{"in hint", "SELECT /*+ consistent_read_id:abc */ 1", NoID, ""},
		{"in executable comment", "SELECT /*!80000 consistent_read_id:abc */ 1", NoID, ""},
		{"prose mention", "/* TODO drop consistent_read_id here */ SELECT 1", NoID, ""},
		{"other key prefix", "/* my_consistent_read_id:abc */ SELECT 1", NoID, ""},
		{"key case differs", "/* Consistent_Read_ID:abc */ SELECT 1", NoID, ""},
		{"unterminated string hides", "SELECT 'abc /* consistent_read_id:x */", NoID, ""},
		{"unterminated comment no key", "SELECT 1 /* consistent_read", NoID, ""},
		{"key as column only", "SELECT consistent_read_id FROM t", NoID, ""},

		{"empty value", "/* consistent_read_id: */ SELECT 1", EmptyID, ""},
		{"bare key", "/* consistent_read_id */ SELECT 1", EmptyID, ""},
		{"empty in list", "/*a:b,consistent_read_id:,c:d*/ SELECT 1", EmptyID, ""},
		{"too long", "/* consistent_read_id:" + long257 + " */ SELECT 1", IDTooLong, ""},
		{"unterminated", "/* consistent_read_id:abc SELECT 1", UnterminatedComment, ""},
		{"unterminated later", "SELECT 1 /* consistent_read_id:abc", UnterminatedComment, ""},
		{"unterminated hint with key", "SELECT 1 /*+ consistent_read_id:abc", UnterminatedComment, ""},
		{"twice different", "/* consistent_read_id:a */ SELECT 1 /* consistent_read_id:b */", DuplicateKey, ""},
		{"twice different list", "/*consistent_read_id:a,consistent_read_id:b*/ SELECT 1", DuplicateKey, ""},
		{"first error wins", "/* consistent_read_id: */ /* consistent_read_id:" + long257 + " */", EmptyID, ""},
	}
}

func TestExtract(t *testing.T) {
	for _, c := range extractCases() {
		got := Extract(c.stmt)
		if got.Status != c.status || got.ID != c.id {
			t.Errorf("%s: Extract(%q) = %+v, want status %v id %q", c.name, c.stmt, got, c.status, c.id)
			continue
		}
		if ref := referenceExtract(c.stmt); ref != got {
			t.Errorf("%s: reference %+v, fast %+v", c.name, ref, got)
		}
		switch got.Status {
		case Found:
			if c.stmt[got.Offset:got.Offset+len(got.ID)] != got.ID {
				t.Errorf("%s: offset %d does not point at the id", c.name, got.Offset)
			}
		case NoID:
			if got.Offset != -1 {
				t.Errorf("%s: NoID offset %d", c.name, got.Offset)
			}
		}
		err := got.Err()
		if got.Status.IsError() {
			var ee *ExtractError
			if !errors.As(err, &ee) || ee.Status != c.status || !strings.Contains(err.Error(), Key) {
				t.Errorf("%s: Err() = %v", c.name, err)
			}
		} else if err != nil {
			t.Errorf("%s: Err() = %v, want nil", c.name, err)
		}
	}
}

func TestExtractOffsets(t *testing.T) {
	s := "SELECT 1 /* consistent_read_id:abc"
	if got := Extract(s); got.Offset != strings.Index(s, "/*") {
		t.Errorf("unterminated offset %d", got.Offset)
	}
	s = "/* consistent_read_id:a */ SELECT /* x:y, consistent_read_id:b */"
	if got := Extract(s); got.Offset != strings.LastIndex(s, "consistent_read_id") {
		t.Errorf("duplicate offset %d, want the second occurrence", got.Offset)
	}
}

func TestExtractErrorMessages(t *testing.T) {
	for st, want := range map[Status]string{
		EmptyID:             "empty value",
		IDTooLong:           "longer than 256 bytes",
		UnterminatedComment: "not terminated",
		DuplicateKey:        "different values",
	} {
		msg := (&ExtractError{Status: st, Offset: 7}).Error()
		if !strings.Contains(msg, want) || !strings.Contains(msg, "byte 7") {
			t.Errorf("%v: message %q", st, msg)
		}
	}
}

func TestExtractAllocs(t *testing.T) {
	stmts := []string{}
	for _, c := range extractCases() {
		stmts = append(stmts, c.stmt)
	}
	allocs := testing.AllocsPerRun(50, func() {
		for _, s := range stmts {
			Extract(s)
		}
	})
	if allocs != 0 {
		t.Errorf("Extract allocates: %v per run", allocs)
	}
}

// referenceExtract is a deliberately simple, independent implementation of
// the documented extraction rules: it lexes the whole statement into tokens
// first (no search shortcuts), then reads the plain comments in order.
// The content of an executable comment /*!...*/ is SQL (a plain comment
// inside it is a comment, even one that starts with '!').
func referenceExtract(stmt string) Extraction {
	type comment struct{ start, bodyStart, bodyEnd int }
	var comments []comment
	unterminated := -1
	inExec := false
	for i := 0; i < len(stmt); {
		switch {
		case inExec && strings.HasPrefix(stmt[i:], "*/"):
			inExec = false
			i += 2
		case !inExec && strings.HasPrefix(stmt[i:], "/*!"):
			inExec = true
			i += 3
			for i < len(stmt) && stmt[i] >= '0' && stmt[i] <= '9' {
				i++
			}
		case stmt[i] == '\'' || stmt[i] == '"' || stmt[i] == '`':
			q := stmt[i]
			j := i + 1
			for j < len(stmt) {
				if stmt[j] == '\\' && q != '`' {
					j += 2
				} else if stmt[j] == q && j+1 < len(stmt) && stmt[j+1] == q {
					j += 2
				} else if stmt[j] == q {
					break
				} else {
					j++
				}
			}
			i = j + 1
		case stmt[i] == '#' || strings.HasPrefix(stmt[i:], "-- ") || strings.HasPrefix(stmt[i:], "--") && (len(stmt) == i+2 || stmt[i+2] <= ' ' || stmt[i+2] == 0x7f):
			j := strings.IndexByte(stmt[i:], '\n')
			if j < 0 {
				i = len(stmt)
			} else {
				i += j + 1
			}
		case strings.HasPrefix(stmt[i:], "/*"):
			j := strings.Index(stmt[i+2:], "*/")
			if j < 0 {
				if strings.Contains(stmt[i:], Key) {
					unterminated = i
				}
				i = len(stmt)
				continue
			}
			body := stmt[i+2 : i+2+j]
			if !strings.HasPrefix(body, "+") {
				comments = append(comments, comment{i, i + 2, i + 2 + j})
			}
			i += 2 + j + 2
		default:
			i++
		}
	}
	res := Extraction{Status: NoID, Offset: -1}
	for _, c := range comments {
		off := c.bodyStart
		for _, item := range strings.Split(stmt[c.bodyStart:c.bodyEnd], ",") {
			itemOff := off + (len(item) - len(strings.TrimLeft(item, " \t\n\r\f\v")))
			off += len(item) + 1
			k, v, hasColon := strings.Cut(item, ":")
			if strings.Trim(k, " \t\n\r\f\v") != Key {
				continue
			}
			val := strings.Trim(v, " \t\n\r\f\v")
			switch {
			case !hasColon || val == "":
				return Extraction{Status: EmptyID, Offset: itemOff}
			case len(val) > MaxIDLen:
				return Extraction{Status: IDTooLong, Offset: itemOff}
			case res.Status == Found && res.ID != val:
				return Extraction{Status: DuplicateKey, Offset: itemOff}
			case res.Status == NoID:
				valOff := strings.Index(stmt[itemOff:], ":") + itemOff + 1
				for strings.IndexByte(" \t\n\r\f\v", stmt[valOff]) >= 0 {
					valOff++
				}
				res = Extraction{ID: val, Status: Found, Offset: valOff}
			}
		}
	}
	if unterminated >= 0 {
		return Extraction{Status: UnterminatedComment, Offset: unterminated}
	}
	return res
}

func extractSeeds(f *testing.F) {
	for _, c := range extractCases() {
		f.Add(c.stmt)
	}
	for _, s := range []string{
		"/*", "*/", "/**/", "/*/", "--", "-", "#", "'", `"`, "`", `'\`, `"\"`, "``",
		"/*consistent_read_id:", "consistent_read_id", "/*consistent_read_id:a,", "/*,,:,*/",
		"'/*' consistent_read_id:a '*/'", "/* 'consistent_read_id:a */ '", "/*+*/",
		"/*!*/ /*consistent_read_id:z*/", "\x00/*consistent_read_id:\x00*/", "/*consistent_read_id:\xff\xfe*/",
	} {
		f.Add(s)
	}
}

// FuzzExtract: no panic, results within the statement, and the same answer
// as the independent reference implementation.
func FuzzExtract(f *testing.F) {
	extractSeeds(f)
	f.Fuzz(func(t *testing.T, stmt string) {
		got := Extract(stmt)
		if ref := referenceExtract(stmt); got != ref {
			t.Fatalf("Extract(%q) = %+v, reference %+v", stmt, got, ref)
		}
		switch got.Status {
		case Found:
			if got.Offset < 0 || got.Offset+len(got.ID) > len(stmt) || stmt[got.Offset:got.Offset+len(got.ID)] != got.ID {
				t.Fatalf("offset %d len %d outside or wrong in %q", got.Offset, len(got.ID), stmt)
			}
			if got.ID == "" || len(got.ID) > MaxIDLen || strings.ContainsRune(got.ID, ',') ||
				sqllex.IsSpace(got.ID[0]) || sqllex.IsSpace(got.ID[len(got.ID)-1]) || strings.Contains(got.ID, "*/") {
				t.Fatalf("malformed id %q", got.ID)
			}
		case NoID:
			if got.ID != "" || got.Offset != -1 {
				t.Fatalf("NoID with %+v", got)
			}
		default:
			if got.ID != "" || got.Offset < 0 || got.Offset >= len(stmt) || got.Err() == nil {
				t.Fatalf("error result %+v", got)
			}
		}
	})
}

// sqlQuote returns s as a MySQL single-quoted literal.
func sqlQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", "''") + "'"
}

// FuzzExtractNeverFromLiteralOrLineComment: whatever s holds, an id is never
// taken from inside a string literal, a quoted identifier, a `--`/`#` line
// comment or an optimizer hint.
func FuzzExtractNeverFromLiteralOrLineComment(f *testing.F) {
	extractSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		oneLine := strings.ReplaceAll(s, "\n", " ")
		noEnd := strings.ReplaceAll(s, "*/", "* /")
		for _, stmt := range []string{
			"SELECT " + sqlQuote(s) + " FROM t",
			`SELECT "` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `""`) + `"`,
			"SELECT `" + strings.ReplaceAll(s, "`", "``") + "` FROM t",
			"SELECT 1 -- " + oneLine,
			"SELECT 1 # " + oneLine + "\nFROM t",
			"SELECT /*+ " + noEnd + " */ 1",
		} {
			if got := Extract(stmt); got.Status != NoID {
				t.Fatalf("Extract(%q) = %+v, want no-id", stmt, got)
			}
		}
		// And a real id after the literal is still found.
		stmt := "SELECT " + sqlQuote(s) + " /* consistent_read_id:ok */"
		if got := Extract(stmt); got.Status != Found || got.ID != "ok" {
			t.Fatalf("Extract(%q) = %+v, want found ok", stmt, got)
		}
	})
}
