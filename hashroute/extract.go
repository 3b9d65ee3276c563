package hashroute

import (
	"strconv"
	"strings"
)

// Key is the comment key that carries the id.
const Key = "consistent_read_id"

// MaxIDLen is the longest id accepted, in bytes.
const MaxIDLen = 256

// Status is the outcome of Extract.
type Status uint8

const (
	// NoID: the statement carries no consistent_read_id in a comment. The
	// caller routes without hashing (its normal policy). Not an error.
	NoID Status = iota
	// Found: exactly one id value was found (the key may repeat with the
	// same value).
	Found
	// EmptyID: the key is present with an empty value (`consistent_read_id:`
	// or the bare key). An error the proxy returns to the client.
	EmptyID
	// IDTooLong: the value is longer than MaxIDLen bytes. An error.
	IDTooLong
	// UnterminatedComment: a `/*` comment holding the key never closes. An
	// error (MySQL would reject the statement too). An unterminated comment
	// that does not contain the key does not matter to extraction.
	UnterminatedComment
	// DuplicateKey: the key appears twice with different values. An error.
	DuplicateKey
)

// String names the status.
func (s Status) String() string {
	switch s {
	case NoID:
		return "no-id"
	case Found:
		return "found"
	case EmptyID:
		return "empty-id"
	case IDTooLong:
		return "id-too-long"
	case UnterminatedComment:
		return "unterminated-comment"
	case DuplicateKey:
		return "duplicate-key"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// IsError reports whether the status is an error the proxy must return to
// the client (everything but Found and NoID).
func (s Status) IsError() bool { return s != Found && s != NoID }

// Extraction is the result of Extract. ID aliases the statement (no copy).
type Extraction struct {
	// ID is the id value when Status is Found, else "".
	ID string
	// Status is the outcome.
	Status Status
	// Offset is the byte offset in the statement of the id value (Found), of
	// the offending key:value item (EmptyID, IDTooLong, DuplicateKey: the
	// second occurrence), or of the opening `/*` (UnterminatedComment); -1
	// for NoID.
	Offset int
}

// Err returns nil for Found and NoID, else an *ExtractError describing the
// problem. It allocates only on the error path.
func (e Extraction) Err() error {
	if !e.Status.IsError() {
		return nil
	}
	return &ExtractError{Status: e.Status, Offset: e.Offset}
}

// ExtractError is a bad consistent_read_id, as returned by Extraction.Err.
type ExtractError struct {
	// Status is the kind of problem (never Found or NoID).
	Status Status
	// Offset is where in the statement, as in Extraction.
	Offset int
}

// Error implements error.
func (e *ExtractError) Error() string {
	var what string
	switch e.Status {
	case EmptyID:
		what = "empty value"
	case IDTooLong:
		what = "value longer than " + strconv.Itoa(MaxIDLen) + " bytes"
	case UnterminatedComment:
		what = "comment holding the key is not terminated"
	case DuplicateKey:
		what = "key given twice with different values"
	default:
		what = e.Status.String()
	}
	return "hashroute: " + Key + ": " + what + " at byte " + strconv.Itoa(e.Offset)
}

// Extract finds the consistent_read_id in a statement's comments. It takes
// the id only from plain block comments `/* ... */`, whose body is read as a
// comma-separated list of key:value items (a standalone
// `/* consistent_read_id:<id> */` is a list of one); keys and values are
// trimmed of ASCII whitespace, the key is matched exactly (case-sensitive)
// and the value is everything after the first ':' (it may itself contain
// ':', but not ','). Optimizer hints `/*+ ... */`, executable comments
// `/*! ... */`, `--` and `#` line comments, string literals ('...', "...")
// and quoted identifiers (`...`) are skipped and never yield an id; string
// literals follow MySQL's default sql_mode (backslash escapes and doubled
// quotes). The key anywhere else (a column name, say) is ignored.
//
// Extract does not allocate. Its cost is a vectorised substring search over
// the statement plus a byte scan of the statement up to the last occurrence
// of the key, so a statement without the key costs one search.
func Extract(stmt string) Extraction {
	res := Extraction{Status: NoID, Offset: -1}
	next := strings.Index(stmt, Key)
	if next < 0 {
		return res
	}
	pos := 0
	for pos < len(stmt) {
		if next < pos {
			j := strings.Index(stmt[pos:], Key)
			if j < 0 {
				return res
			}
			next = pos + j
		}
		switch c := stmt[pos]; c {
		case '\'', '"', '`':
			pos = skipQuoted(stmt, pos, c)
		case '#':
			pos = skipLine(stmt, pos)
		case '-':
			if pos+1 < len(stmt) && stmt[pos+1] == '-' && (pos+2 == len(stmt) || isDashCommentSpace(stmt[pos+2])) {
				pos = skipLine(stmt, pos)
			} else {
				pos++
			}
		case '/':
			if pos+1 >= len(stmt) || stmt[pos+1] != '*' {
				pos++
				continue
			}
			bodyStart := pos + 2
			end := strings.Index(stmt[bodyStart:], "*/")
			if end < 0 {
				// next >= pos here, so the key lies inside this comment.
				return Extraction{Status: UnterminatedComment, Offset: pos}
			}
			bodyEnd := bodyStart + end
			plain := bodyStart == bodyEnd || (stmt[bodyStart] != '+' && stmt[bodyStart] != '!')
			if plain && next < bodyEnd {
				if bad := scanItems(stmt, bodyStart, bodyEnd, &res); bad.Status != Found {
					return bad
				}
			}
			pos = bodyEnd + 2
		default:
			pos++
		}
	}
	return res
}

// scanItems reads the key:value items of the comment body stmt[start:end]
// into res. It returns an Extraction with Status Found when all is well,
// else the error to return.
func scanItems(stmt string, start, end int, res *Extraction) Extraction {
	ok := Extraction{Status: Found}
	for start <= end {
		itemEnd := strings.IndexByte(stmt[start:end], ',')
		if itemEnd < 0 {
			itemEnd = end
		} else {
			itemEnd += start
		}
		ks, ke := trimSpace(stmt, start, itemEnd)
		colon := strings.IndexByte(stmt[ks:ke], ':')
		keyEnd := ke
		if colon >= 0 {
			keyEnd = ks + colon
		}
		k0, k1 := trimSpace(stmt, ks, keyEnd)
		if stmt[k0:k1] == Key {
			if colon < 0 {
				return Extraction{Status: EmptyID, Offset: ks}
			}
			v0, v1 := trimSpace(stmt, keyEnd+1, ke)
			switch {
			case v0 == v1:
				return Extraction{Status: EmptyID, Offset: ks}
			case v1-v0 > MaxIDLen:
				return Extraction{Status: IDTooLong, Offset: ks}
			case res.Status == Found && res.ID != stmt[v0:v1]:
				return Extraction{Status: DuplicateKey, Offset: ks}
			case res.Status != Found:
				*res = Extraction{ID: stmt[v0:v1], Status: Found, Offset: v0}
			}
		}
		start = itemEnd + 1
	}
	return ok
}

// trimSpace narrows [i, j) of s to exclude ASCII whitespace at both ends.
func trimSpace(s string, i, j int) (int, int) {
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	return i, j
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// isDashCommentSpace: MySQL starts a `--` comment only when the second dash
// is followed by whitespace or a control character.
func isDashCommentSpace(c byte) bool { return c <= ' ' || c == 0x7f }

// skipLine returns the index just past the newline ending the line comment
// starting at pos, or len(s).
func skipLine(s string, pos int) int {
	if i := strings.IndexByte(s[pos:], '\n'); i >= 0 {
		return pos + i + 1
	}
	return len(s)
}

// skipQuoted returns the index just past the literal or quoted identifier
// opened by quote q at pos, or len(s) when it never closes. A doubled quote
// is an escaped quote; a backslash escapes the next byte inside '...' and
// "..." (not inside backticks).
func skipQuoted(s string, pos int, q byte) int {
	i := pos + 1
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\' && q != '`':
			i += 2
		case c == q:
			if i+1 < len(s) && s[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		default:
			i++
		}
	}
	return len(s)
}
