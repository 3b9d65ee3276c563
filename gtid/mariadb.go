package gtid

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// This file is the MariaDB flavor, kept apart from MySQL's GTID sets as
// Vitess keeps its flavors apart: a MariaDB GTID names a transaction by
// replication domain, originating server and a sequence number that is
// per domain, not per server; a position holds one GTID per domain and is
// compared per domain by sequence number alone. Nothing here converts
// between the flavors: a MySQL Set and a MariaDBPosition are different
// kinds of position.

// MariaDBGTID is one MariaDB GTID, "domain-server-seq" (for example
// "0-1-42"): Domain and Server are 32-bit, Seq is 64-bit, all unsigned.
type MariaDBGTID struct {
	Domain uint32 // replication domain (gtid_domain_id of the writer)
	Server uint32 // server_id of the server that wrote the transaction
	Seq    uint64 // sequence number within the domain
}

// String returns "domain-server-seq", as MariaDB prints it.
func (g MariaDBGTID) String() string { return string(g.appendText(nil)) }

func (g MariaDBGTID) appendText(b []byte) []byte {
	b = strconv.AppendUint(b, uint64(g.Domain), 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(g.Server), 10)
	b = append(b, '-')
	return strconv.AppendUint(b, g.Seq, 10)
}

// ParseMariaDBGTID parses one GTID with MariaDB's own rules (see
// ParseMariaDBPosition).
func ParseMariaDBGTID(s string) (MariaDBGTID, error) {
	g, i, err := parseMariaDBGTIDAt(s, 0)
	if err != nil {
		return MariaDBGTID{}, err
	}
	if i != len(s) {
		return MariaDBGTID{}, newParseError(s, i, "unexpected text after the MariaDB GTID")
	}
	return g, nil
}

// MariaDBPosition is a MariaDB GTID position, as in @@gtid_slave_pos,
// @@gtid_binlog_pos or @@gtid_current_pos: at most one GTID per domain.
//
// Invariants (every MariaDBPosition, parsed or built, satisfies them):
//  1. GTIDs are sorted by Domain, strictly increasing: a domain appears at
//     most once. So String is canonical and is byte for byte MariaDB's own
//     text ("0-1-5,3-2-7", no spaces), and Equal is structural.
//  2. The empty position (no domain) is the zero value; its text is "".
//
// Contains is MariaDB's comparison, the one MASTER_GTID_WAIT makes: per
// domain of the other position, this position's sequence number in that
// domain is at least the other's. The server id plays no part: a position
// whose domain 0 is at 0-2-105 (written by a new primary after a failover)
// contains 0-1-103 even when the old primary's transaction 0-1-103 never
// reached it. That is MariaDB's semantics, reproduced on purpose, not a
// defect of this type: the lab counts what it does to read-your-writes.
// A sequence number 0 is contained by every position (MASTER_GTID_WAIT
// returns at once for it, whether or not the domain exists).
//
// Values are immutable: methods return new positions sharing no memory
// with their receiver or argument.
type MariaDBPosition struct {
	gtids []MariaDBGTID
}

// Compile-time check: MariaDBPosition is a router position.
var _ Position[MariaDBPosition] = MariaDBPosition{}

// NewMariaDBPosition builds a position from GTIDs in any order. Like
// SET GLOBAL gtid_slave_pos, it rejects two GTIDs of one domain.
func NewMariaDBPosition(gtids ...MariaDBGTID) (MariaDBPosition, error) {
	gs := slices.Clone(gtids)
	slices.SortFunc(gs, func(a, b MariaDBGTID) int { return cmpU32(a.Domain, b.Domain) })
	for i := 1; i < len(gs); i++ {
		if gs[i].Domain == gs[i-1].Domain {
			return MariaDBPosition{}, &ParseError{Input: gs[i-1].String() + "," + gs[i].String(),
				Reason: "GTIDs " + gs[i-1].String() + " and " + gs[i].String() + " conflict (duplicate domain id " + strconv.FormatUint(uint64(gs[i].Domain), 10) + ")"}
		}
	}
	return MariaDBPosition{gtids: gs}, nil
}

func cmpU32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ParseMariaDBPosition parses a GTID position exactly as MariaDB 11.8 does
// for SET GLOBAL gtid_slave_pos (gtid_parser_helper in rpl_gtid.cc, whose
// numbers are read by my_strtoll10):
//
//   - "" is the empty position;
//   - otherwise GTIDs "domain-server-seq" separated by ',';
//   - each number may be preceded by spaces or tabs and one '+', may have
//     any number of leading zeros, and must not be negative; domain and
//     server are at most 4294967295, seq at most 18446744073709551615;
//   - nothing may follow a sequence number but ',' or the end (so a space
//     before a ',' or at the end is an error, a space after a ',' is not);
//   - two GTIDs of one domain are an error ("conflict (duplicate domain
//     id)"), as MariaDB reports for gtid_slave_pos. (MASTER_GTID_WAIT
//     alone accepts them and waits for each; ParseMariaDBWait reads that
//     form.)
//
// The differential test checks these rules against a real MariaDB.
func ParseMariaDBPosition(s string) (MariaDBPosition, error) {
	gs, err := parseMariaDBList(s)
	if err != nil {
		return MariaDBPosition{}, err
	}
	p, err := NewMariaDBPosition(gs...)
	if pe, ok := err.(*ParseError); ok {
		pe.Input = s
	}
	return p, err
}

// ParseMariaDBWait parses the argument of MASTER_GTID_WAIT: the same
// syntax as ParseMariaDBPosition, but several GTIDs of one domain are
// allowed; the wait needs each of them, so the result keeps the highest
// sequence number of each domain (and that GTID's server).
func ParseMariaDBWait(s string) (MariaDBPosition, error) {
	gs, err := parseMariaDBList(s)
	if err != nil {
		return MariaDBPosition{}, err
	}
	var p MariaDBPosition
	for _, g := range gs {
		p = p.Union(MariaDBPosition{gtids: []MariaDBGTID{g}})
	}
	return p, nil
}

// MustParseMariaDBPosition is ParseMariaDBPosition that panics on error.
func MustParseMariaDBPosition(s string) MariaDBPosition {
	p, err := ParseMariaDBPosition(s)
	if err != nil {
		panic(err)
	}
	return p
}

func parseMariaDBList(s string) ([]MariaDBGTID, error) {
	if s == "" {
		return nil, nil
	}
	var out []MariaDBGTID
	for i := 0; ; {
		g, j, err := parseMariaDBGTIDAt(s, i)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
		if j == len(s) {
			return out, nil
		}
		if s[j] != ',' {
			return nil, newParseError(s, j, "expected ',' or the end after a MariaDB GTID")
		}
		i = j + 1
	}
}

// parseMariaDBGTIDAt parses "domain-server-seq" at s[i:].
func parseMariaDBGTIDAt(s string, i int) (MariaDBGTID, int, error) {
	var g MariaDBGTID
	d, i, err := mariaNumber(s, i, 0xffffffff, "domain id")
	if err != nil {
		return g, i, err
	}
	if i >= len(s) || s[i] != '-' {
		return g, i, newParseError(s, i, "expected '-' after the domain id")
	}
	sv, i, err := mariaNumber(s, i+1, 0xffffffff, "server id")
	if err != nil {
		return g, i, err
	}
	if i >= len(s) || s[i] != '-' {
		return g, i, newParseError(s, i, "expected '-' after the server id")
	}
	q, i, err := mariaNumber(s, i+1, ^uint64(0), "sequence number")
	if err != nil {
		return g, i, err
	}
	return MariaDBGTID{Domain: uint32(d), Server: uint32(sv), Seq: q}, i, nil
}

// mariaNumber reads an unsigned decimal as my_strtoll10 does: leading
// spaces and tabs, an optional '+', digits; a '-' is refused.
func mariaNumber(s string, i int, limit uint64, what string) (uint64, int, error) {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	if i < len(s) && s[i] == '-' {
		return 0, i, newParseError(s, i, "the %s must not be negative", what)
	}
	if i < len(s) && s[i] == '+' {
		i++
	}
	start := i
	var n uint64
	over := false
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		c := uint64(s[i] - '0')
		if n > (^uint64(0)-c)/10 {
			over = true
		} else {
			n = n*10 + c
		}
		i++
	}
	if i == start {
		return 0, i, newParseError(s, i, "expected the %s (a number)", what)
	}
	if over || n > limit {
		return 0, start, newParseError(s, start, "the %s is past %d", what, limit)
	}
	return n, i, nil
}

// IsEmpty reports whether the position has no domain.
func (p MariaDBPosition) IsEmpty() bool { return len(p.gtids) == 0 }

// GTIDs returns the position's GTIDs in domain order (a copy).
func (p MariaDBPosition) GTIDs() []MariaDBGTID { return slices.Clone(p.gtids) }

// Domain returns the GTID of one domain.
func (p MariaDBPosition) Domain(d uint32) (MariaDBGTID, bool) {
	i, ok := p.search(d)
	if !ok {
		return MariaDBGTID{}, false
	}
	return p.gtids[i], true
}

func (p MariaDBPosition) search(d uint32) (int, bool) {
	return slices.BinarySearchFunc(p.gtids, d, func(g MariaDBGTID, d uint32) int { return cmpU32(g.Domain, d) })
}

// String returns MariaDB's text: GTIDs in domain order joined by ','.
func (p MariaDBPosition) String() string {
	b := make([]byte, 0, 24*len(p.gtids))
	for i, g := range p.gtids {
		if i > 0 {
			b = append(b, ',')
		}
		b = g.appendText(b)
	}
	return string(b)
}

// Contains reports whether p includes o as MariaDB's MASTER_GTID_WAIT
// judges it: for every domain of o, p's sequence number there is at least
// o's (a sequence number 0 is always included). Server ids are ignored.
func (p MariaDBPosition) Contains(o MariaDBPosition) bool {
	for _, g := range o.gtids {
		if g.Seq == 0 {
			continue
		}
		i, ok := p.search(g.Domain)
		if !ok || p.gtids[i].Seq < g.Seq {
			return false
		}
	}
	return true
}

// ContainsGTID reports whether p includes the GTID g (Contains of the
// one-GTID position).
func (p MariaDBPosition) ContainsGTID(g MariaDBGTID) bool {
	return p.Contains(MariaDBPosition{gtids: []MariaDBGTID{g}})
}

// AtLeast is Contains, named as in Vitess's Position.
func (p MariaDBPosition) AtLeast(o MariaDBPosition) bool { return p.Contains(o) }

// Equal reports whether p and o hold the same GTIDs.
func (p MariaDBPosition) Equal(o MariaDBPosition) bool { return slices.Equal(p.gtids, o.gtids) }

// Union returns the smallest position containing both: per domain the
// GTID with the higher sequence number (on a tie, the one with the lower
// server id, so that Union is commutative). Inputs are not modified.
func (p MariaDBPosition) Union(o MariaDBPosition) MariaDBPosition {
	out := make([]MariaDBGTID, 0, len(p.gtids)+len(o.gtids))
	i, j := 0, 0
	for i < len(p.gtids) && j < len(o.gtids) {
		a, b := p.gtids[i], o.gtids[j]
		switch {
		case a.Domain < b.Domain:
			out = append(out, a)
			i++
		case a.Domain > b.Domain:
			out = append(out, b)
			j++
		default:
			if b.Seq > a.Seq || (b.Seq == a.Seq && b.Server < a.Server) {
				a = b
			}
			out = append(out, a)
			i++
			j++
		}
	}
	out = append(out, p.gtids[i:]...)
	out = append(out, o.gtids[j:]...)
	if len(out) == 0 {
		return MariaDBPosition{}
	}
	return MariaDBPosition{gtids: out}
}

// MariaDBRange is the transactions of one domain with sequence numbers
// From..To (inclusive) as last written by Server: what a position is ahead
// of another by in that domain. Text form "domain-server-from..to".
type MariaDBRange struct {
	Domain   uint32
	Server   uint32
	From, To uint64
}

// String returns "domain-server-from..to" ("0-1-6..8").
func (r MariaDBRange) String() string {
	return strconv.FormatUint(uint64(r.Domain), 10) + "-" + strconv.FormatUint(uint64(r.Server), 10) + "-" +
		strconv.FormatUint(r.From, 10) + ".." + strconv.FormatUint(r.To, 10)
}

// Ahead returns, per domain, the sequence numbers p has past o: after a
// failover, old.Ahead(new) is what the new primary lacks of the old one's
// writes (by sequence number; MariaDB positions do not say more).
func (p MariaDBPosition) Ahead(o MariaDBPosition) []MariaDBRange {
	var out []MariaDBRange
	for _, g := range p.gtids {
		var have uint64
		if i, ok := o.search(g.Domain); ok {
			have = o.gtids[i].Seq
		}
		if g.Seq > have {
			out = append(out, MariaDBRange{Domain: g.Domain, Server: g.Server, From: have + 1, To: g.Seq})
		}
	}
	return out
}

// FormatMariaDBRanges joins ranges with ',' ("" for none).
func FormatMariaDBRanges(rs []MariaDBRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// MarshalText implements encoding.TextMarshaler (MariaDB's text).
func (p MariaDBPosition) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with
// ParseMariaDBPosition.
func (p *MariaDBPosition) UnmarshalText(b []byte) error {
	v, err := ParseMariaDBPosition(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// MarshalJSON writes the text form as a JSON string.
func (p MariaDBPosition) MarshalJSON() ([]byte, error) { return json.Marshal(p.String()) }

// UnmarshalJSON reads a JSON string with ParseMariaDBPosition.
func (p *MariaDBPosition) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	return p.UnmarshalText([]byte(s))
}
