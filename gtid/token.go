package gtid

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Position is what the router (its pure core, package router, and its live
// layer, router/live) and the simulator are generic over: a session or
// replica position. It is a partial order for GTID sets and a total one for
// LSN; callers must not assume either, and never ask "less than".
//
// The zero value of P is the empty position: it holds nothing, and every
// position contains it.
type Position[P any] interface {
	// Contains reports whether every transaction of other is also in the
	// receiver (other ⊆ receiver). It must not allocate or modify either
	// side: the router's decision calls it on the hot path.
	Contains(other P) bool
	// Union returns a position holding every transaction of both. It must
	// not modify the receiver or other, and its result shares no memory
	// with either. Used off the hot path, to raise a session's token and
	// monotonic-reads watermark.
	Union(other P) P
}

// Compile-time checks.
var (
	_ Position[LSN] = LSN(0)
	_ Position[Set] = Set{}
)

// LSN is a scalar log position compared by value, like a PostgreSQL LSN or a
// binlog offset. It models the "LSN-style" tokens whose failover hazard the
// lab demonstrates: after a failover a new timeline reaches the same numbers
// without holding the same transactions.
type LSN uint64

// Contains reports l >= o: compared by value only, whatever the timeline.
func (l LSN) Contains(o LSN) bool { return l >= o }

// AtLeast is Contains.
func (l LSN) AtLeast(o LSN) bool { return l >= o }

// Union is the larger position.
func (l LSN) Union(o LSN) LSN { return max(l, o) }

// Token is a read-your-writes session token: the GTIDs a session must see and
// the topology epoch in which it was issued.
//
// Text form: "g1." + epoch + "." + the set in canonical order with sources
// separated by "~" (for example "g1.3.3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5").
// It holds only [0-9a-z.:_~-], so it is safe in a SQL comment, a cookie value,
// a URL query and a job payload. JSON is {"epoch":3,"gtids":"<set text>"}.
type Token struct {
	Epoch uint64 // topology epoch (bumped at each failover) the token was issued in
	GTIDs Set    // transactions the session has written or read
}

// Contains reports whether t includes every transaction of o. Epochs do not
// matter: GTIDs name their source, so a set stays exact across failovers (a
// write lost in a failover is never contained by the new primary's set).
func (t Token) Contains(o Token) bool { return t.GTIDs.Contains(o.GTIDs) }

// AtLeast is Contains, named as in Vitess's Position.
func (t Token) AtLeast(o Token) bool { return t.Contains(o) }

// SatisfiedBy reports whether a server whose executed set is executed can
// serve this session's reads.
func (t Token) SatisfiedBy(executed Set) bool { return executed.Contains(t.GTIDs) }

// Merge returns the token covering both t and o: the union of the sets and the
// later epoch. Inputs are not modified.
func (t Token) Merge(o Token) Token {
	return Token{Epoch: max(t.Epoch, o.Epoch), GTIDs: t.GTIDs.Union(o.GTIDs)}
}

// IsZero reports whether the token requires nothing (empty set, epoch 0).
func (t Token) IsZero() bool { return t.Epoch == 0 && t.GTIDs.IsEmpty() }

// String returns the text form.
func (t Token) String() string {
	b, _ := t.MarshalText()
	return string(b)
}

const (
	tokenPrefix    = "g1."
	lsnTokenPrefix = "l1."
)

// MarshalText implements encoding.TextMarshaler.
func (t Token) MarshalText() ([]byte, error) {
	b := make([]byte, 0, len(tokenPrefix)+21+t.GTIDs.textLen())
	b = append(b, tokenPrefix...)
	b = strconv.AppendUint(b, t.Epoch, 10)
	b = append(b, '.')
	return t.GTIDs.appendText(b, "~"), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseToken.
func (t *Token) UnmarshalText(b []byte) error {
	v, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseToken parses the text form of a Token.
func ParseToken(s string) (Token, error) {
	epoch, rest, err := parseTokenHead(s, tokenPrefix)
	if err != nil {
		return Token{}, err
	}
	off := len(s) - len(rest)
	if k := strings.IndexAny(rest, ", \t\r\n"); k >= 0 {
		return Token{}, newParseError(s, off+k, "token set separates sources with '~', not ',' or whitespace")
	}
	set, err := Parse(strings.ReplaceAll(rest, "~", ","))
	if err != nil {
		if pe, ok := err.(*ParseError); ok {
			return Token{}, newParseError(s, off+pe.Pos, "%s", pe.Reason)
		}
		return Token{}, err
	}
	return Token{Epoch: epoch, GTIDs: set}, nil
}

// parseTokenHead checks the prefix and parses "epoch." after it.
func parseTokenHead(s, prefix string) (uint64, string, error) {
	if !strings.HasPrefix(s, prefix) {
		return 0, "", newParseError(s, 0, "token must start with %q", prefix)
	}
	i := len(prefix)
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i {
		return 0, "", newParseError(s, i, "expected the epoch number")
	}
	epoch, err := strconv.ParseUint(s[i:j], 10, 64)
	if err != nil {
		return 0, "", newParseError(s, i, "epoch is past 18446744073709551615")
	}
	if j >= len(s) || s[j] != '.' {
		return 0, "", newParseError(s, j, "expected '.' after the epoch")
	}
	return epoch, s[j+1:], nil
}

type tokenJSON struct {
	Epoch uint64 `json:"epoch"`
	GTIDs string `json:"gtids"`
}

// MarshalJSON writes {"epoch":N,"gtids":"<canonical set>"}.
func (t Token) MarshalJSON() ([]byte, error) {
	return json.Marshal(tokenJSON{Epoch: t.Epoch, GTIDs: t.GTIDs.String()})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (t *Token) UnmarshalJSON(b []byte) error {
	var v tokenJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	set, err := Parse(v.GTIDs)
	if err != nil {
		return err
	}
	*t = Token{Epoch: v.Epoch, GTIDs: set}
	return nil
}

// LSNToken is the scalar counterpart of Token: an LSN and the topology epoch
// it was issued in. Text form "l1.<epoch>.<lsn>"; JSON {"epoch":N,"lsn":M}.
type LSNToken struct {
	Epoch uint64 // topology epoch (bumped at each failover) the LSN belongs to
	LSN   LSN    // position on that epoch's timeline
}

// Contains reports whether t includes o: only positions of the same epoch
// are comparable, so a different epoch is never contained. (Comparing the
// bare LSN values instead is the silent failover hazard; LSN.Contains does
// that, for the lab to show it.)
func (t LSNToken) Contains(o LSNToken) bool { return t.Epoch == o.Epoch && t.LSN >= o.LSN }

// AtLeast is Contains.
func (t LSNToken) AtLeast(o LSNToken) bool { return t.Contains(o) }

// Merge returns the later of the two tokens: the higher epoch wins, and in
// the same epoch the higher LSN.
func (t LSNToken) Merge(o LSNToken) LSNToken {
	if o.Epoch > t.Epoch || (o.Epoch == t.Epoch && o.LSN > t.LSN) {
		return o
	}
	return t
}

// String returns the text form.
func (t LSNToken) String() string {
	b, _ := t.MarshalText()
	return string(b)
}

// MarshalText implements encoding.TextMarshaler.
func (t LSNToken) MarshalText() ([]byte, error) {
	b := make([]byte, 0, 44)
	b = append(b, lsnTokenPrefix...)
	b = strconv.AppendUint(b, t.Epoch, 10)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(t.LSN), 10), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseLSNToken.
func (t *LSNToken) UnmarshalText(b []byte) error {
	v, err := ParseLSNToken(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseLSNToken parses the text form of an LSNToken.
func ParseLSNToken(s string) (LSNToken, error) {
	epoch, rest, err := parseTokenHead(s, lsnTokenPrefix)
	if err != nil {
		return LSNToken{}, err
	}
	off := len(s) - len(rest)
	for k := 0; k < len(rest); k++ {
		if rest[k] < '0' || rest[k] > '9' {
			return LSNToken{}, newParseError(s, off+k, "LSN must be a decimal number")
		}
	}
	if rest == "" {
		return LSNToken{}, newParseError(s, off, "expected the LSN")
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil {
		return LSNToken{}, newParseError(s, off, "LSN is past 18446744073709551615")
	}
	return LSNToken{Epoch: epoch, LSN: LSN(n)}, nil
}

type lsnTokenJSON struct {
	Epoch uint64 `json:"epoch"`
	LSN   uint64 `json:"lsn"`
}

// MarshalJSON writes {"epoch":N,"lsn":M}.
func (t LSNToken) MarshalJSON() ([]byte, error) {
	return json.Marshal(lsnTokenJSON{Epoch: t.Epoch, LSN: uint64(t.LSN)})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (t *LSNToken) UnmarshalJSON(b []byte) error {
	var v lsnTokenJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*t = LSNToken{Epoch: v.Epoch, LSN: LSN(v.LSN)}
	return nil
}
