package binlogwatch

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/causallab/causallab/gtid"
)

var (
	sidA = [16]byte{0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62}
	sidB = [16]byte{0x4e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62}
)

func hdr(t replication.EventType) *replication.EventHeader {
	return &replication.EventHeader{EventType: t}
}

func gtidEv(sid [16]byte, gno int64) *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: hdr(replication.GTID_EVENT), Event: &replication.GTIDEvent{SID: sid[:], GNO: gno, ImmediateCommitTimestamp: 1_700_000_000_000_000}}
}

func taggedEv(sid [16]byte, tag string, gno int64) *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: hdr(replication.GTID_TAGGED_LOG_EVENT), Event: &replication.GtidTaggedLogEvent{GTIDEvent: replication.GTIDEvent{SID: sid[:], GNO: gno, Tag: mysql.NewTag(tag)}}}
}

func anonEv() *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: hdr(replication.ANONYMOUS_GTID_EVENT), Event: &replication.GTIDEvent{SID: make([]byte, 16)}}
}

func queryEv(q string) *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: hdr(replication.QUERY_EVENT), Event: &replication.QueryEvent{Query: []byte(q)}}
}

func xidEv() *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: hdr(replication.XID_EVENT), Event: &replication.XIDEvent{XID: 7}}
}

func rowsEv() *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: hdr(replication.WRITE_ROWS_EVENTv2), Event: &replication.RowsEvent{}}
}

func payloadEv(inner ...*replication.BinlogEvent) *replication.BinlogEvent {
	return &replication.BinlogEvent{Header: hdr(replication.TRANSACTION_PAYLOAD_EVENT), Event: &replication.TransactionPayloadEvent{Events: inner}}
}

func TestTrackerCommitPoints(t *testing.T) {
	cases := []struct {
		name   string
		events []*replication.BinlogEvent
		want   string // the set afterwards
		added  []int  // per event
		check  func(t *testing.T, st trackerStats)
	}{
		{
			name:   "row transaction commits at XID, not before",
			events: []*replication.BinlogEvent{gtidEv(sidA, 1), queryEv("BEGIN"), rowsEv(), xidEv()},
			want:   "3e11fa47-71ca-11e1-9e33-c80aa9429562:1",
			added:  []int{0, 0, 0, 1},
		},
		{
			name:   "DDL commits at its query event",
			events: []*replication.BinlogEvent{gtidEv(sidA, 1), queryEv("CREATE TABLE t (a int)")},
			want:   "3e11fa47-71ca-11e1-9e33-c80aa9429562:1",
			added:  []int{0, 1},
		},
		{
			name:   "lower-case begin does not commit",
			events: []*replication.BinlogEvent{gtidEv(sidA, 1), queryEv(" begin "), queryEv("COMMIT")},
			want:   "3e11fa47-71ca-11e1-9e33-c80aa9429562:1",
			added:  []int{0, 0, 1},
		},
		{
			name:   "tagged GTID",
			events: []*replication.BinlogEvent{taggedEv(sidA, "Blue", 4), queryEv("BEGIN"), xidEv()},
			want:   "3e11fa47-71ca-11e1-9e33-c80aa9429562:blue:4",
			added:  []int{0, 0, 1},
		},
		{
			name:   "compressed transaction payload",
			events: []*replication.BinlogEvent{gtidEv(sidA, 1), payloadEv(queryEv("BEGIN"), rowsEv(), xidEv())},
			want:   "3e11fa47-71ca-11e1-9e33-c80aa9429562:1",
			added:  []int{0, 1},
		},
		{
			name:   "anonymous GTID ignored and counted",
			events: []*replication.BinlogEvent{anonEv(), queryEv("BEGIN"), xidEv()},
			want:   "",
			added:  []int{0, 0, 0},
			check: func(t *testing.T, st trackerStats) {
				if st.anonymous != 1 || st.orphans != 1 {
					t.Fatalf("stats %+v", st)
				}
			},
		},
		{
			name: "re-streamed transaction deduplicated",
			events: []*replication.BinlogEvent{
				gtidEv(sidA, 1), xidEv(), gtidEv(sidA, 2), xidEv(),
				gtidEv(sidA, 2), queryEv("BEGIN"), xidEv(), // the reconnect re-sends trx 2
				gtidEv(sidA, 3), xidEv(),
			},
			want:  "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3",
			added: []int{0, 1, 0, 1, 0, 0, 0, 0, 1},
			check: func(t *testing.T, st trackerStats) {
				if st.duplicates != 1 || st.commits != 3 {
					t.Fatalf("stats %+v", st)
				}
			},
		},
		{
			name:   "a GTID cut off before its commit is never added",
			events: []*replication.BinlogEvent{gtidEv(sidA, 1), queryEv("BEGIN"), rowsEv(), gtidEv(sidA, 2), xidEv()},
			want:   "3e11fa47-71ca-11e1-9e33-c80aa9429562:2",
			added:  []int{0, 0, 0, 0, 1},
			check: func(t *testing.T, st trackerStats) {
				if st.abandoned != 1 {
					t.Fatalf("stats %+v", st)
				}
			},
		},
		{
			name: "XA prepare commits the prepared part, XA COMMIT its own GTID",
			events: []*replication.BinlogEvent{
				gtidEv(sidA, 5), queryEv("XA START X'01',X'',1"), rowsEv(), queryEv("XA END X'01',X'',1"),
				{Header: hdr(replication.XA_PREPARE_LOG_EVENT), Event: &replication.GenericEvent{}},
				gtidEv(sidA, 6), queryEv("XA COMMIT X'01',X'',1"),
			},
			want:  "3e11fa47-71ca-11e1-9e33-c80aa9429562:5-6",
			added: []int{0, 0, 0, 0, 1, 0, 1},
		},
		{
			name: "statement-based transaction commits at XID, not at its DML or SAVEPOINT",
			events: []*replication.BinlogEvent{
				gtidEv(sidA, 1), queryEv("BEGIN"), queryEv("INSERT INTO t VALUES (1)"), queryEv("SAVEPOINT s1"),
				queryEv("ROLLBACK TO s1"), queryEv("UPDATE t SET a=2"), xidEv(),
			},
			want:  "3e11fa47-71ca-11e1-9e33-c80aa9429562:1",
			added: []int{0, 0, 0, 0, 0, 0, 1},
		},
		{
			name:   "non-transactional change ends with a COMMIT query",
			events: []*replication.BinlogEvent{gtidEv(sidA, 1), queryEv("BEGIN"), queryEv("INSERT INTO m VALUES (1)"), queryEv("COMMIT")},
			want:   "3e11fa47-71ca-11e1-9e33-c80aa9429562:1",
			added:  []int{0, 0, 0, 1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(gtid.Set{})
			for i, ev := range tc.events {
				r := tr.apply(ev)
				if tc.added != nil && r.added != tc.added[i] {
					t.Fatalf("event %d (%T): added %d, want %d", i, ev.Event, r.added, tc.added[i])
				}
			}
			if got := tr.set.String(); got != tc.want {
				t.Fatalf("set %q, want %q", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, tr.stats)
			}
		})
	}
}

// TestTrackerNeverAheadOfCommits drives random interleavings and checks that
// the set only ever holds GTIDs whose commit event was applied.
func TestTrackerNeverAheadOfCommits(t *testing.T) {
	tr := newTracker(gtid.Set{})
	committed := map[int64]bool{}
	for g := int64(1); g <= 500; g++ {
		tr.apply(gtidEv(sidA, g))
		if tr.set.ContainsGTID(gtid.GTID{SID: sidA, GNO: g}) {
			t.Fatalf("gno %d visible at its GTID event", g)
		}
		tr.apply(queryEv("BEGIN"))
		tr.apply(rowsEv())
		if g%7 == 0 {
			continue // cut off: no commit
		}
		tr.apply(xidEv())
		committed[g] = true
	}
	for g := int64(1); g <= 500; g++ {
		if tr.set.ContainsGTID(gtid.GTID{SID: sidA, GNO: g}) != committed[g] {
			t.Fatalf("gno %d: contained %v, committed %v", g, !committed[g], committed[g])
		}
	}
}
