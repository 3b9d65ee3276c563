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
// Extract does not allocate. It lexes the statement only up to the last
// occurrence of the key that follows a "/*"; vectorised searches for "/*"
// and for the key skip the rest. A statement without "/*" costs one
// byte search; with the comment at the front, the comment's length plus one
// byte search over the rest.
func Extract(stmt string) Extraction {
	res := Extraction{Status: NoID, Offset: -1}
	// next is the next occurrence of the key at or after pos that follows a
	// "/*" (only those can be in a comment); -1 means none, so stop: nothing
	// after pos can change the result. Searching for "/*" first is cheap
	// ('/' is rare in SQL) and keeps the key search off plain SQL.
	pos, next := 0, -1
	for pos < len(stmt) {
		if next < pos {
			c := indexCommentStart(stmt, pos)
			if c < 0 {
				return res
			}
			j := strings.Index(stmt[c:], Key)
			if j < 0 {
				return res
			}
			next = c + j
		}
		// Skip plain bytes quickly; only the bytes below can start a token.
		for pos < next && !isTokenStart(stmt[pos]) {
			pos++
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
				if bad := scanItems(stmt, bodyStart, bodyEnd, next, &res); bad.Status != Found {
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

// indexCommentStart returns the index of the first "/*" at or after pos, or
// -1. It may point inside a string literal: callers only use it as a bound.
func indexCommentStart(s string, pos int) int {
	for pos < len(s) {
		i := strings.IndexByte(s[pos:], '/')
		if i < 0 {
			return -1
		}
		pos += i + 1
		if pos < len(s) && s[pos] == '*' {
			return pos - 1
		}
	}
	return -1
}

// scanItems reads the key:value items of the comment body stmt[start:end]
// that hold the key into res; first (start <= first < end) is the first
// occurrence of the key in the body. It returns an Extraction with Status Found
// when all is well, else the error to return. Items without the key are
// skipped by a substring search, so the cost is linear in the body's length
// with the constant of that search.
func scanItems(stmt string, start, end, first int, res *Extraction) Extraction {
	ok := Extraction{Status: Found}
	at := first // the first occurrence, already known to the caller
	for start < end {
		if at < start {
			j := strings.Index(stmt[start:end], Key)
			if j < 0 {
				return ok
			}
			at = start + j
		}
		// The item holding this occurrence: from just after the previous
		// ',' to just before the next one.
		itemStart := start + strings.LastIndexByte(stmt[start:at], ',') + 1
		itemEnd := strings.IndexByte(stmt[at:end], ',')
		if itemEnd < 0 {
			itemEnd = end
		} else {
			itemEnd += at
		}
		if bad := scanItem(stmt, itemStart, itemEnd, res); bad.Status != Found {
			return bad
		}
		start = itemEnd + 1
	}
	return ok
}

// scanItem reads one key:value item stmt[start:end] into res when its key
// is the Key.
func scanItem(stmt string, start, end int, res *Extraction) Extraction {
	ks, ke := trimSpace(stmt, start, end)
	colon := strings.IndexByte(stmt[ks:ke], ':')
	keyEnd := ke
	if colon >= 0 {
		keyEnd = ks + colon
	}
	if k0, k1 := trimSpace(stmt, ks, keyEnd); stmt[k0:k1] != Key {
		return Extraction{Status: Found}
	}
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
	return Extraction{Status: Found}
}

// isTokenStart reports whether c can open a string literal, a quoted
// identifier or a comment: ' " ` # - /.
func isTokenStart(c byte) bool {
	const mask = 1<<'\'' | 1<<'"' | 1<<'#' | 1<<'-' | 1<<'/'
	return c < 64 && (uint64(mask)>>c)&1 != 0 || c == '`'
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
