package hashroute

import (
	"strconv"
	"strings"

	"github.com/causallab/causallab/internal/sqllex"
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
// ':', but not ','). Optimizer hints `/*+ ... */`, `--` and `#` line
// comments, string literals ('...', "...") and quoted identifiers (`...`)
// never yield an id, nor does the SQL inside an executable comment
// `/*! ... */`. What is a comment is decided by the project's one SQL
// lexer (internal/sqllex; the proxy's classifier reads the same comments),
// which follows MySQL's default sql_mode for string literals (backslash
// escapes and doubled quotes). The key anywhere else (a column name, say)
// is ignored.
//
// Extract does not allocate. It lexes the statement only up to the last
// occurrence of the key that follows a "/*"; vectorised searches for "/*"
// and for the key skip the rest, and the lexer looks only at the bytes
// that can open a string, an identifier or a comment. A statement without
// "/*" costs one byte search; with the comment at the front, the comment's
// length plus one byte search over the rest.
func Extract(stmt string) Extraction {
	res := Extraction{Status: NoID, Offset: -1}
	next := nextKey(stmt, 0)
	if next < 0 {
		return res
	}
	l := sqllex.Lexer{S: stmt}
	for {
		c, ok := l.NextCommentBefore(next)
		// A comment holds the key only at next or later (next is the
		// first occurrence after the first "/*" at or after where this
		// comment was searched from), so one bound test finds it.
		if end := c.BodyStart + len(c.Body); ok && c.Kind != sqllex.Line && next < end {
			if k := next - c.BodyStart; k >= 0 {
				if c.Unterminated {
					return Extraction{Status: UnterminatedComment, Offset: c.Start}
				}
				if c.Kind == sqllex.Block {
					if bad := scanItems(stmt, c.BodyStart, c.BodyStart+len(c.Body), c.BodyStart+k, &res); bad.Status != Found {
						return bad
					}
				}
			}
		}
		if !ok && l.Pos() >= len(stmt) {
			return res
		}
		if !ok || l.Pos() > next {
			// The key at next is passed (inside this comment, or not in a
			// comment at all): only a later occurrence can matter.
			if next = nextKey(stmt, max(l.Pos(), next+1)); next < 0 {
				return res
			}
		}
	}
}

// nextKey returns the first occurrence of the key at or after pos that
// follows a "/*" (only those can be in a comment), or -1.
func nextKey(stmt string, pos int) int {
	c := indexCommentStart(stmt, pos)
	if c < 0 {
		return -1
	}
	j := strings.Index(stmt[c:], Key)
	if j < 0 {
		return -1
	}
	return c + j
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

// trimSpace narrows [i, j) of s to exclude ASCII whitespace at both ends.
func trimSpace(s string, i, j int) (int, int) {
	for i < j && sqllex.IsSpace(s[i]) {
		i++
	}
	for j > i && sqllex.IsSpace(s[j-1]) {
		j--
	}
	return i, j
}
