package gtid

import (
	"strconv"
	"strings"
)

// GTID names one transaction: a source UUID, an optional tag and a
// transaction number (GNO).
type GTID struct {
	SID SID    // server UUID of the source that committed the transaction
	Tag string // "" for classic GTIDs; else a lower-case tag (MySQL 8.3+)
	GNO int64  // transaction number, 1..MaxGNO
}

// NewGTID validates and normalises (lower-cases the tag) a GTID.
func NewGTID(sid SID, tag string, gno int64) (GTID, error) {
	g := GTID{SID: sid, Tag: tag, GNO: gno}
	if err := g.normalize(); err != nil {
		return GTID{}, err
	}
	return g, nil
}

// normalize lower-cases the tag and checks the GNO and the tag.
func (g *GTID) normalize() error {
	if g.GNO < 1 || g.GNO > MaxGNO {
		return &ParseError{Input: strconv.FormatInt(g.GNO, 10), Reason: "GNO must be between 1 and 9223372036854775806"}
	}
	if g.Tag == "" {
		return nil
	}
	if n, err := scanTag(g.Tag, 0); err != nil {
		return err
	} else if n != len(g.Tag) {
		return newParseError(g.Tag, n, "tag holds a character other than a letter, digit or '_'")
	}
	g.Tag = lowerTag(g.Tag)
	return nil
}

// ParseGTID parses one GTID, "uuid:gno" or "uuid:tag:gno", with the same
// leniency (case, surrounding spaces) as Parse.
func ParseGTID(s string) (GTID, error) {
	i := skipWS(s, 0)
	sid, i, err := parseSIDAt(s, i)
	if err != nil {
		return GTID{}, err
	}
	g := GTID{SID: sid}
	i = skipWS(s, i)
	if i >= len(s) || s[i] != ':' {
		return GTID{}, newParseError(s, i, "expected ':' after the UUID")
	}
	i = skipWS(s, i+1)
	if i < len(s) && isTagStart(s[i]) {
		end, err := scanTag(s, i)
		if err != nil {
			return GTID{}, err
		}
		g.Tag = lowerTag(s[i:end])
		i = skipWS(s, end)
		if i >= len(s) || s[i] != ':' {
			return GTID{}, newParseError(s, i, "expected ':' and a GNO after the tag")
		}
		i = skipWS(s, i+1)
	}
	g.GNO, i, err = parseGNO(s, i)
	if err != nil {
		return GTID{}, err
	}
	if i = skipWS(s, i); i != len(s) {
		return GTID{}, newParseError(s, i, "unexpected text after the GTID")
	}
	return g, nil
}

// MustParseGTID is ParseGTID that panics on error, for tests and constants.
func MustParseGTID(s string) GTID {
	g, err := ParseGTID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// String returns "uuid:gno" or "uuid:tag:gno".
func (g GTID) String() string {
	b := make([]byte, 0, 64)
	b = g.SID.appendText(b)
	b = append(b, ':')
	if g.Tag != "" {
		b = append(b, g.Tag...)
		b = append(b, ':')
	}
	b = strconv.AppendInt(b, g.GNO, 10)
	return string(b)
}

func isTagStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isTagChar(c byte) bool { return isTagStart(c) || (c >= '0' && c <= '9') }

// scanTag returns the end of the tag that starts at s[i] (s[i] must be a tag
// start), rejecting tags longer than MaxTagLen.
func scanTag(s string, i int) (int, error) {
	if i >= len(s) || !isTagStart(s[i]) {
		return i, newParseError(s, i, "a tag must start with a letter or '_'")
	}
	j := i + 1
	for j < len(s) && isTagChar(s[j]) {
		j++
	}
	if j-i > MaxTagLen {
		return j, newParseError(s, i, "tag is %d characters long, at most %d are allowed", j-i, MaxTagLen)
	}
	return j, nil
}

// lowerTag lower-cases an ASCII tag without allocating when it already is.
func lowerTag(t string) string {
	for i := 0; i < len(t); i++ {
		if c := t[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(t)
		}
	}
	return t
}

func isWS(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

func skipWS(s string, i int) int {
	for i < len(s) && isWS(s[i]) {
		i++
	}
	return i
}

// parseGNO parses a decimal GNO in 1..MaxGNO at s[i].
func parseGNO(s string, i int) (int64, int, error) {
	start := i
	var n uint64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		if n > uint64(MaxGNO)/10 {
			return 0, i, newParseError(s, start, "number is past the largest GNO 9223372036854775806")
		}
		n = n*10 + uint64(s[i]-'0')
		i++
	}
	if i == start {
		return 0, i, newParseError(s, i, "expected a number")
	}
	if n > uint64(MaxGNO) {
		return 0, i, newParseError(s, start, "number is past the largest GNO 9223372036854775806")
	}
	if n == 0 {
		return 0, i, newParseError(s, start, "GNO 0 is not allowed, transaction numbers start at 1")
	}
	return int64(n), i, nil
}
