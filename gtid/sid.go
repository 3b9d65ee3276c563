package gtid

import (
	"encoding/binary"
	"fmt"
)

// SID is a source identifier: the 16 bytes of a server UUID.
type SID [16]byte

// MaxGNO is the largest transaction number MySQL accepts in a GTID (2^63-2).
const MaxGNO int64 = 1<<63 - 2

// MaxTagLen is the longest tag MySQL accepts.
const MaxTagLen = 32

// ParseSID parses a UUID in the forms MySQL accepts: 8-4-4-4-12 hex digits
// with dashes, optionally in braces, or 32 hex digits. Case is ignored.
func ParseSID(s string) (SID, error) {
	sid, n, err := parseSIDAt(s, 0)
	if err != nil {
		return SID{}, err
	}
	if n != len(s) {
		return SID{}, newParseError(s, n, "unexpected text after the UUID")
	}
	return sid, nil
}

// String returns the lower-case 8-4-4-4-12 form MySQL prints.
func (s SID) String() string {
	var b [36]byte
	return string(s.appendText(b[:0]))
}

// IsZero reports whether s is all zero bytes (the SID of anonymous GTIDs).
func (s SID) IsZero() bool { return s == SID{} }

// compare orders SIDs by their bytes, the order MySQL prints them in.
func (s SID) compare(o SID) int {
	a, b := binary.BigEndian.Uint64(s[:8]), binary.BigEndian.Uint64(o[:8])
	if a != b {
		if a < b {
			return -1
		}
		return 1
	}
	a, b = binary.BigEndian.Uint64(s[8:]), binary.BigEndian.Uint64(o[8:])
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

const hexDigits = "0123456789abcdef"

func (s SID) appendText(dst []byte) []byte {
	for i, c := range s {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return dst
}

// hexVal maps a byte to its hex digit value, or 0xff if it is not one.
const hexVal = "" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\xff\xff\xff\xff\xff\xff" +
	"\xff\x0a\x0b\x0c\x0d\x0e\x0f\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\x0a\x0b\x0c\x0d\x0e\x0f\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" +
	"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"

// parseDashedFast decodes a well-formed lower- or upper-case 8-4-4-4-12 UUID
// at s[i:i+36]; ok is false for anything else (the slow path then names the
// error).
func parseDashedFast(s string, i int) (sid SID, ok bool) {
	if i+36 > len(s) {
		return SID{}, false
	}
	u := s[i : i+36]
	if u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-' {
		return SID{}, false
	}
	var h [32]byte
	h[0], h[1] = hexVal[u[0]], hexVal[u[1]]
	h[2], h[3] = hexVal[u[2]], hexVal[u[3]]
	h[4], h[5] = hexVal[u[4]], hexVal[u[5]]
	h[6], h[7] = hexVal[u[6]], hexVal[u[7]]
	h[8], h[9] = hexVal[u[9]], hexVal[u[10]]
	h[10], h[11] = hexVal[u[11]], hexVal[u[12]]
	h[12], h[13] = hexVal[u[14]], hexVal[u[15]]
	h[14], h[15] = hexVal[u[16]], hexVal[u[17]]
	h[16], h[17] = hexVal[u[19]], hexVal[u[20]]
	h[18], h[19] = hexVal[u[21]], hexVal[u[22]]
	h[20], h[21] = hexVal[u[24]], hexVal[u[25]]
	h[22], h[23] = hexVal[u[26]], hexVal[u[27]]
	h[24], h[25] = hexVal[u[28]], hexVal[u[29]]
	h[26], h[27] = hexVal[u[30]], hexVal[u[31]]
	h[28], h[29] = hexVal[u[32]], hexVal[u[33]]
	h[30], h[31] = hexVal[u[34]], hexVal[u[35]]
	bad := byte(0)
	for k := range sid {
		hi, lo := h[2*k], h[2*k+1]
		bad |= hi | lo
		sid[k] = hi<<4 | lo
	}
	return sid, bad&0xf0 == 0
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// parseSIDAt parses a UUID starting at s[i] and returns the index after it.
func parseSIDAt(s string, i int) (SID, int, error) {
	if sid, ok := parseDashedFast(s, i); ok {
		return sid, i + 36, nil
	}
	var sid SID
	start := i
	brace := i < len(s) && s[i] == '{'
	if brace {
		i++
	}
	// Dashed form: 8-4-4-4-12. Undashed: 32 hex digits.
	dashed := i+8 < len(s) && s[i+8] == '-'
	for k := 0; k < 16; k++ {
		if dashed && (k == 4 || k == 6 || k == 8 || k == 10) {
			if i >= len(s) || s[i] != '-' {
				return SID{}, i, newParseError(s, i, "malformed UUID starting at byte %d: expected '-'", start)
			}
			i++
		}
		if i+1 >= len(s) {
			return SID{}, i, newParseError(s, start, "malformed UUID: too short or cut off")
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			bad := i
			if ok1 {
				bad = i + 1
			}
			return SID{}, bad, newParseError(s, bad, "malformed UUID starting at byte %d: %q is not a hex digit", start, s[bad])
		}
		sid[k] = hi<<4 | lo
		i += 2
	}
	if brace {
		if i >= len(s) || s[i] != '}' {
			return SID{}, i, newParseError(s, i, "malformed UUID starting at byte %d: missing '}'", start)
		}
		i++
	}
	return sid, i, nil
}

// ParseError reports bad GTID, GTID set or token text. Pos is the byte offset
// in Input where the offending text starts.
type ParseError struct {
	Input  string // the whole input (may be long; Error shows an excerpt)
	Pos    int    // byte offset of the offending text
	Reason string // what is wrong
}

func newParseError(s string, pos int, format string, args ...any) *ParseError {
	return &ParseError{Input: s, Pos: pos, Reason: fmt.Sprintf(format, args...)}
}

// Error names the offending text, its position and the reason.
func (e *ParseError) Error() string {
	return fmt.Sprintf("gtid: bad text %q at byte %d: %s", e.excerpt(), e.Pos, e.Reason)
}

// excerpt returns up to 40 bytes of input starting at Pos.
func (e *ParseError) excerpt() string {
	if e.Pos >= len(e.Input) {
		return "<end of input>"
	}
	rest := e.Input[e.Pos:]
	if len(rest) > 40 {
		return rest[:40] + "..."
	}
	return rest
}

// Is makes errors.Is(err, ErrSyntax) true for every ParseError.
func (e *ParseError) Is(target error) bool { return target == ErrSyntax }

// ErrSyntax matches (with errors.Is) every error that bad text causes.
var ErrSyntax = errSyntax{}

type errSyntax struct{}

func (errSyntax) Error() string { return "gtid: syntax error" }
