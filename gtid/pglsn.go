package gtid

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// This file is the PostgreSQL flavor: a WAL position (LSN) is a byte
// offset in the write-ahead log, totally ordered on one timeline. A
// promotion starts a new timeline that shares the old one's history up to
// the switch point and nothing after it, so the same LSN on two timelines
// can name different WAL: a bare LSN compared by value (PGLSN.Contains) is
// the failover hazard; PGPosition carries the timeline, and PGHistory (a
// timeline history file) says which positions of an earlier timeline a
// later one still holds.

// PGLSN is a PostgreSQL log sequence number (pg_lsn), text "X/Y": the high
// and low 32 bits in upper-case hex without leading zeros, as PostgreSQL 18
// prints it ("0/3000148", "16/B374D848").
type PGLSN uint64

// Compile-time checks: both PostgreSQL positions are router positions.
var (
	_ Position[PGLSN]      = PGLSN(0)
	_ Position[PGPosition] = PGPosition{}
)

// ParsePGLSN parses pg_lsn text as PostgreSQL's pg_lsn_in does: 1 to 8 hex
// digits (either case), '/', 1 to 8 hex digits, nothing else (no spaces).
func ParsePGLSN(s string) (PGLSN, error) {
	hi, i, err := pgHex(s, 0, "high")
	if err != nil {
		return 0, err
	}
	if i >= len(s) || s[i] != '/' {
		return 0, newParseError(s, i, "expected '/' between the two halves of an LSN")
	}
	lo, j, err := pgHex(s, i+1, "low")
	if err != nil {
		return 0, err
	}
	if j != len(s) {
		return 0, newParseError(s, j, "unexpected text after the LSN")
	}
	return PGLSN(hi<<32 | lo), nil
}

func pgHex(s string, i int, half string) (uint64, int, error) {
	start := i
	var n uint64
	for i < len(s) {
		c, ok := unhex(s[i])
		if !ok {
			break
		}
		if i-start == 8 {
			return 0, i, newParseError(s, start, "the %s half of an LSN has more than 8 hex digits", half)
		}
		n = n<<4 | uint64(c)
		i++
	}
	if i == start {
		return 0, i, newParseError(s, i, "expected hex digits (the %s half of an LSN)", half)
	}
	return n, i, nil
}

// MustParsePGLSN is ParsePGLSN that panics on error.
func MustParsePGLSN(s string) PGLSN {
	l, err := ParsePGLSN(s)
	if err != nil {
		panic(err)
	}
	return l
}

// String returns "X/Y" as PostgreSQL prints it.
func (l PGLSN) String() string {
	return strings.ToUpper(strconv.FormatUint(uint64(l)>>32, 16)) + "/" + strings.ToUpper(strconv.FormatUint(uint64(l)&0xffffffff, 16))
}

// Contains reports l >= o: by value, whatever the timeline (the hazard).
func (l PGLSN) Contains(o PGLSN) bool { return l >= o }

// Union returns the later LSN.
func (l PGLSN) Union(o PGLSN) PGLSN { return max(l, o) }

// MarshalText implements encoding.TextMarshaler ("X/Y").
func (l PGLSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParsePGLSN.
func (l *PGLSN) UnmarshalText(b []byte) error {
	v, err := ParsePGLSN(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// PGPosition is an LSN on a timeline. Text "<timeline>:<X/Y>" ("2:0/3000148").
type PGPosition struct {
	Timeline uint32 // timeline ID, 1 from initdb, +1 at each promotion
	LSN      PGLSN
}

// ParsePGPosition parses "<timeline>:<X/Y>"; the timeline is a decimal
// 1..4294967295.
func ParsePGPosition(s string) (PGPosition, error) {
	k := strings.IndexByte(s, ':')
	if k < 0 {
		return PGPosition{}, newParseError(s, 0, "expected '<timeline>:<X/Y>'")
	}
	tli, err := strconv.ParseUint(s[:k], 10, 32)
	if err != nil || tli == 0 || s[0] == '+' {
		return PGPosition{}, newParseError(s, 0, "the timeline must be a decimal number 1..4294967295")
	}
	lsn, err := ParsePGLSN(s[k+1:])
	if err != nil {
		if pe, ok := err.(*ParseError); ok {
			return PGPosition{}, newParseError(s, k+1+pe.Pos, "%s", pe.Reason)
		}
		return PGPosition{}, err
	}
	return PGPosition{Timeline: uint32(tli), LSN: lsn}, nil
}

// String returns "<timeline>:<X/Y>".
func (p PGPosition) String() string {
	return strconv.FormatUint(uint64(p.Timeline), 10) + ":" + p.LSN.String()
}

// Contains reports whether p includes o without a timeline history: only
// on the same timeline, by LSN. A position on another timeline is never
// contained (PGHistory.Contains decides those exactly).
func (p PGPosition) Contains(o PGPosition) bool { return p.Timeline == o.Timeline && p.LSN >= o.LSN }

// Union returns the later of the two: the higher timeline, and on one
// timeline the higher LSN. (A position on an earlier timeline is dropped,
// not merged: without a history nothing says whether the later timeline
// holds it.)
func (p PGPosition) Union(o PGPosition) PGPosition {
	if o.Timeline > p.Timeline || (o.Timeline == p.Timeline && o.LSN > p.LSN) {
		return o
	}
	return p
}

// MarshalText implements encoding.TextMarshaler.
func (p PGPosition) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParsePGPosition.
func (p *PGPosition) UnmarshalText(b []byte) error {
	v, err := ParsePGPosition(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalJSON writes the text form as a JSON string.
func (p PGPosition) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// UnmarshalJSON reads a JSON string with ParsePGPosition.
func (p *PGPosition) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	return p.UnmarshalText([]byte(s))
}

// PGSwitch is one line of a timeline history file: timeline Parent ended
// at End (the switch point), where its child timeline begins.
type PGSwitch struct {
	Parent uint32
	End    PGLSN
}

// PGHistory is a timeline's history: the switch points of its ancestors,
// oldest first, as in the file pg_wal/<timeline>.history that promotion
// writes ("1\t0/3000148\tno recovery target specified"). Timeline is the
// timeline the history belongs to.
type PGHistory struct {
	Timeline uint32
	Switches []PGSwitch
}

// ParsePGHistory parses a timeline history file's text for timeline tli
// (comment lines start with '#'; blank lines are skipped). Parents must
// strictly increase, each below tli, and switch points must not decrease.
func ParsePGHistory(tli uint32, text string) (PGHistory, error) {
	h := PGHistory{Timeline: tli}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return PGHistory{}, fmt.Errorf("gtid: timeline history line %d: want '<parent> <X/Y> [reason]', got %q", n+1, line)
		}
		parent, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil || parent == 0 {
			return PGHistory{}, fmt.Errorf("gtid: timeline history line %d: bad parent timeline %q", n+1, f[0])
		}
		end, err := ParsePGLSN(f[1])
		if err != nil {
			return PGHistory{}, fmt.Errorf("gtid: timeline history line %d: %w", n+1, err)
		}
		if k := len(h.Switches); k > 0 && (uint32(parent) <= h.Switches[k-1].Parent || end < h.Switches[k-1].End) {
			return PGHistory{}, fmt.Errorf("gtid: timeline history line %d: timeline %d at %s does not follow timeline %d at %s", n+1, parent, end, h.Switches[k-1].Parent, h.Switches[k-1].End)
		}
		if uint32(parent) >= tli {
			return PGHistory{}, fmt.Errorf("gtid: timeline history line %d: parent %d is not before timeline %d", n+1, parent, tli)
		}
		h.Switches = append(h.Switches, PGSwitch{Parent: uint32(parent), End: end})
	}
	return h, nil
}

// SwitchPoint returns where timeline tli stops being an ancestor of h's
// timeline: the LSN up to which the two share WAL. ok is false when tli is
// not an ancestor (nor h's timeline itself, for which the end is unbounded
// and ok is true with the largest LSN).
func (h PGHistory) SwitchPoint(tli uint32) (PGLSN, bool) {
	if tli == h.Timeline {
		return PGLSN(^uint64(0)), true
	}
	for _, s := range h.Switches {
		if s.Parent == tli {
			return s.End, true
		}
	}
	return 0, false
}

// Contains reports whether a server at position at (on h's timeline)
// includes o: o's timeline must be h's or an ancestor whose WAL the
// timeline shares up to o.LSN, and at.LSN must be at least o.LSN.
func (h PGHistory) Contains(at, o PGPosition) bool {
	if at.Timeline != h.Timeline || at.LSN < o.LSN {
		return false
	}
	end, ok := h.SwitchPoint(o.Timeline)
	return ok && o.LSN <= end
}

// PGRange is the WAL of one timeline from From (exclusive) to To
// (inclusive): after a failover, what the old timeline had past the switch
// point. Text "<timeline>:<X/Y>..<X/Y>".
type PGRange struct {
	Timeline uint32
	From, To PGLSN
}

// String returns "<timeline>:<from>..<to>".
func (r PGRange) String() string {
	return strconv.FormatUint(uint64(r.Timeline), 10) + ":" + r.From.String() + ".." + r.To.String()
}

// Bytes is the length of the range in WAL bytes.
func (r PGRange) Bytes() uint64 { return uint64(r.To - r.From) }
