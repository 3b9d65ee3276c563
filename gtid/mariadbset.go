package gtid

import (
	"encoding/binary"
	"fmt"
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
