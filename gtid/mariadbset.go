package gtid

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// This file is the one bridge between the flavors: a MariaDB position
// read as a MySQL GTID set, for the code that keeps GTID sets (the proxy,
// its tokens, the lab's instruments) and meets a MariaDB server.
//
// Position "d-s-n" is the set MariaDBDomainSID(d):1-n. That is exact for
// containment and union: a MariaDB replica applies a domain in sequence
// order, so a position is a per-domain prefix, and a set of such prefixes
// contains another exactly when each domain's sequence number is at least
// the other's (MariaDBPosition.Contains); their union keeps each domain's
// highest. The server id is dropped, as MariaDB's own comparison drops
// it: across a failover, where a new primary's sequence numbers repeat
// lost ones under another server id, the set says what MariaDB says (a
// topology epoch is the defence, not the position).

// MariaDBDomainSID is the source that stands for MariaDB replication
// domain d in a set: "4d617269-6144-4200-8000-0000<d in hex>" ("MariaDB"
// in its first bytes), never a MySQL server's UUID (its version nibble is
// 4 and its variant bits 10 would make it a random UUID, but the first
// seven bytes are fixed).
func MariaDBDomainSID(d uint32) SID {
	var s SID
	copy(s[:], "MariaDB\x00\x80\x00\x00\x00")
	binary.BigEndian.PutUint32(s[12:], d)
	return s
}

// mariaDBDomainOf is the domain MariaDBDomainSID gave s; ok is false for
// any other source.
func mariaDBDomainOf(s SID) (uint32, bool) {
	if z := MariaDBDomainSID(0); [12]byte(z[:12]) != [12]byte(s[:12]) {
		return 0, false
	}
	return binary.BigEndian.Uint32(s[12:]), true
}

// AsSet is p as a GTID set: each domain d at sequence n is
// MariaDBDomainSID(d):1-n (a domain at sequence 0 holds nothing). A
// sequence number past MaxGNO is an error naming it.
func (p MariaDBPosition) AsSet() (Set, error) {
	var s Set
	for _, g := range p.gtids {
		if g.Seq == 0 {
			continue
		}
		if g.Seq > uint64(MaxGNO) {
			return Set{}, fmt.Errorf("gtid: MariaDB GTID %s: sequence number past %d, the largest a set holds", g, MaxGNO)
		}
		s.srcs = append(s.srcs, source{key: SourceKey{SID: MariaDBDomainSID(g.Domain)}, ivs: []Interval{{Start: 1, End: int64(g.Seq)}}})
	}
	return s, nil
}

// MariaDBSetOf parses MariaDB position text (ParseMariaDBPosition; a
// write's last_gtid is a position of one domain) as a set (AsSet).
func MariaDBSetOf(text string) (Set, error) {
	p, err := ParseMariaDBPosition(text)
	if err != nil {
		return Set{}, err
	}
	return p.AsSet()
}

// MariaDBWaitPosition is the position a MariaDB server must reach to
// hold set s (AsSet's inverse, widened): each domain at the highest
// sequence number s holds for it, under server id 0 (MASTER_GTID_WAIT
// compares domain and sequence number alone). A source that does not
// stand for a domain is an error naming it: such a set did not come from
// a MariaDB server.
func MariaDBWaitPosition(s Set) (MariaDBPosition, error) {
	gs := make([]MariaDBGTID, 0, len(s.srcs))
	for _, src := range s.srcs {
		d, ok := mariaDBDomainOf(src.key.SID)
		if !ok || src.key.Tag != "" {
			return MariaDBPosition{}, fmt.Errorf("gtid: source %s does not stand for a MariaDB domain", src.key.SID)
		}
		gs = append(gs, MariaDBGTID{Domain: d, Seq: uint64(src.ivs[len(src.ivs)-1].End)})
	}
	// Sources are sorted by SID, and a domain's SID orders as its number.
	return MariaDBPosition{gtids: gs}, nil
}

// MariaDBWriterSID is the source that stands for the writes server s made
// in MariaDB replication domain d: "4d617269-6144-4201-<s in hex>-
// <d in hex>" ("MariaDB" then 0x01). Unlike MariaDBDomainSID it tells a
// failover's lost write d-s-n from the new primary's write d-s'-n of the
// same sequence number, so it names a write exactly (the lab's ground
// truth); positions, which MariaDB keeps per domain, never hold such a
// source.
func MariaDBWriterSID(d, s uint32) SID {
	var sid SID
	copy(sid[:], "MariaDB\x01")
	binary.BigEndian.PutUint32(sid[8:], s)
	binary.BigEndian.PutUint32(sid[12:], d)
	return sid
}

// MariaDBWrite is MariaDB GTID text ("d-s-n", as last_gtid reports it) as
// the GTID MariaDBWriterSID(d, s):n.
func MariaDBWrite(text string) (GTID, error) {
	g, err := ParseMariaDBGTID(text)
	if err != nil {
		return GTID{}, err
	}
	if g.Seq == 0 || g.Seq > uint64(MaxGNO) {
		return GTID{}, fmt.Errorf("gtid: MariaDB GTID %s: sequence number out of 1..%d", g, MaxGNO)
	}
	return GTID{SID: MariaDBWriterSID(g.Domain, g.Server), GNO: int64(g.Seq)}, nil
}

// ParseMariaDBRanges parses FormatMariaDBRanges' text ("0-1-6..8,1-2-3..3";
// "" is none) as the set of the writes it names: each range's sequence
// numbers under MariaDBWriterSID(domain, server).
func ParseMariaDBRanges(s string) (Set, error) {
	var out Set
	if s == "" {
		return out, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		head, to, ok := strings.Cut(part, "..")
		if !ok {
			return Set{}, &ParseError{Input: s, Reason: "range " + strconv.Quote(part) + " has no \"..\""}
		}
		from, err := MariaDBWrite(head)
		if err != nil {
			return Set{}, &ParseError{Input: s, Reason: "range " + strconv.Quote(part) + ": " + err.Error()}
		}
		end, err := strconv.ParseInt(to, 10, 64)
		if err != nil || end < from.GNO || end > MaxGNO {
			return Set{}, &ParseError{Input: s, Reason: "range " + strconv.Quote(part) + ": bad end " + strconv.Quote(to)}
		}
		out.UnionInPlace(Set{srcs: []source{{key: SourceKey{SID: from.SID}, ivs: []Interval{{Start: from.GNO, End: end}}}}})
	}
	return out, nil
}
