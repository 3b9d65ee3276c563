package gtid

import "fmt"

// A PostgreSQL LSN read as a GTID set, for code that keeps GTID sets and
// meets a PostgreSQL server (the lab's instruments): LSN l is the set
// PGLSNSID():1-l, and a write whose commit ended at or before l the GTID
// PGLSNSID():l. Containment is then the LSN's order, which is what a
// standby's replay position means: it holds everything up to it. Like a
// MariaDB position, the set carries no timeline: across a promotion the
// new timeline's LSNs continue from the switch point, so the set says
// what the LSN says (a topology epoch is the defence, not the position).

// PGLSNSID is the source that stands for PostgreSQL's WAL in a set:
// "506f7374-6772-6553-8000-000000000000" ("PostgreS" in its first
// bytes), never a MySQL server's UUID nor a MariaDB domain's source.
func PGLSNSID() SID {
	var s SID
	copy(s[:], "PostgreS\x80")
	return s
}

// PGSetOf is l as a set: PGLSNSID():1-l (the zero LSN holds nothing). An
// LSN past MaxGNO is an error naming it.
func PGSetOf(l PGLSN) (Set, error) {
	if l == 0 {
		return Set{}, nil
	}
	if uint64(l) > uint64(MaxGNO) {
		return Set{}, fmt.Errorf("gtid: PostgreSQL LSN %s: past %d, the largest a set holds", l, MaxGNO)
	}
	return Set{srcs: []source{{key: SourceKey{SID: PGLSNSID()}, ivs: []Interval{{Start: 1, End: int64(l)}}}}}, nil
}

// PGWrite is a write tokened at LSN l as a GTID a PGSetOf set can be
// asked about: it holds the write when its LSN is at least l.
func PGWrite(l PGLSN) (GTID, error) {
	if l == 0 || uint64(l) > uint64(MaxGNO) {
		return GTID{}, fmt.Errorf("gtid: PostgreSQL LSN %s: out of range 1..%d", l, MaxGNO)
	}
	return GTID{SID: PGLSNSID(), GNO: int64(l)}, nil
}
