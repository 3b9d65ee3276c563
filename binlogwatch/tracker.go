package binlogwatch

import (
	"bytes"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/causallab/causallab/gtid"
)

// pendingTrx is the transaction whose GTID event has been seen but whose
// commit event has not (yet).
type pendingTrx struct {
	g          gtid.GTID
	commitTime time.Time // the replica's immediate commit timestamp, zero if unknown
}

// trackerStats counts what the state machine saw. Every path that does not
// add a GTID is counted: nothing is dropped silently.
type trackerStats struct {
	events     uint64 // events applied (payload events count their inner events too)
	invalid    uint64 // GTIDs the set rejected (GNO out of range, bad tag): not added
	commits    uint64 // transactions added to the set
	duplicates uint64 // commits of a GTID the set already held (re-streamed)
	anonymous  uint64 // anonymous GTID events (ignored)
	orphans    uint64 // commit events with no pending GTID (not added)
	abandoned  uint64 // pending GTIDs replaced by another GTID before any commit
	heartbeats uint64
}

// commitResult describes one apply call.
type commitResult struct {
	added      int       // GTIDs newly added to the set
	commitTime time.Time // commit timestamp of the last added transaction
	last       gtid.GTID // the last added GTID (valid when added > 0)
}

// tracker is the event-to-commit state machine. It owns set (mutated in
// place) and is used by one goroutine only.
type tracker struct {
	set        gtid.Set
	pending    pendingTrx
	hasPending bool
	// inTrx: the pending transaction opened with BEGIN or XA START, so only
	// XID, COMMIT, ROLLBACK or an XA prepare ends it (statement-based
	// binlogs carry DML, SAVEPOINT and XA END as query events in between).
	inTrx bool
	stats trackerStats
	// lastTag caches the string of the last tagged GTID's tag to avoid an
	// allocation per tagged transaction.
	lastTag string
}

func newTracker(set gtid.Set) *tracker { return &tracker{set: set} }

// reset forgets the pending transaction (the stream it came from is gone)
// and takes set as the new executed set.
func (t *tracker) reset(set gtid.Set) {
	if t.hasPending {
		t.stats.abandoned++
	}
	t.hasPending = false
	t.inTrx = false
	t.set = set
}

// queryKind classifies a query event's statement for the state machine.
type queryKind int

const (
	queryOther  queryKind = iota // DDL, DML, SAVEPOINT, XA END, ...
	queryBegin                   // BEGIN, XA START: opens a transaction
	queryCommit                  // COMMIT, ROLLBACK: ends one
)

func hasPrefixFold(q []byte, p string) bool {
	return len(q) >= len(p) && bytes.EqualFold(q[:len(p)], []byte(p)) && (len(q) == len(p) || q[len(p)] == ' ' || q[len(p)] == '\t' || q[len(p)] == '\n' || q[len(p)] == ';')
}

func classifyQuery(q []byte) queryKind {
	q = bytes.TrimSpace(q)
	switch {
	case hasPrefixFold(q, "BEGIN"), hasPrefixFold(q, "XA START"), hasPrefixFold(q, "XA BEGIN"):
		return queryBegin
	case hasPrefixFold(q, "COMMIT"), hasPrefixFold(q, "ROLLBACK") && !bytes.Contains(bytes.ToUpper(q), []byte(" TO ")):
		return queryCommit
	}
	return queryOther
}

// apply feeds one event. It reports what it added.
func (t *tracker) apply(ev *replication.BinlogEvent) commitResult {
	var r commitResult
	t.applyOne(ev, &r)
	return r
}

func (t *tracker) applyOne(ev *replication.BinlogEvent, r *commitResult) {
	t.stats.events++
	switch e := ev.Event.(type) {
	case *replication.GTIDEvent:
		if ev.Header != nil && ev.Header.EventType == replication.ANONYMOUS_GTID_EVENT {
			t.anonymous()
			return
		}
		t.begin(e, "")
	case *replication.GtidTaggedLogEvent:
		tag := e.Tag.String()
		if tag != t.lastTag {
			t.lastTag = tag
		}
		t.begin(&e.GTIDEvent, t.lastTag)
	case *replication.XIDEvent:
		t.commit(r)
	case *replication.QueryEvent:
		switch classifyQuery(e.Query) {
		case queryBegin:
			t.inTrx = true
		case queryCommit:
			t.commit(r)
		default:
			if !t.inTrx {
				t.commit(r) // DDL or another self-committing statement
			}
		}
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			t.applyOne(inner, r)
		}
	case *replication.GenericEvent:
		if ev.Header != nil && ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
			t.commit(r) // the prepared part of an XA transaction owns its GTID
		}
	case *replication.HeartbeatEvent:
		t.stats.heartbeats++
	}
}

func (t *tracker) anonymous() {
	t.stats.anonymous++
	if t.hasPending {
		t.stats.abandoned++
		t.hasPending = false
	}
}

func (t *tracker) begin(e *replication.GTIDEvent, tag string) {
	if len(e.SID) != 16 || isZero(e.SID) || e.GNO < 1 {
		t.anonymous()
		return
	}
	if t.hasPending {
		t.stats.abandoned++
	}
	t.hasPending = true
	t.inTrx = false
	p := &t.pending
	copy(p.g.SID[:], e.SID)
	p.g.Tag = tag
	p.g.GNO = e.GNO
	p.commitTime = time.Time{}
	if e.ImmediateCommitTimestamp != 0 {
		p.commitTime = time.UnixMicro(int64(e.ImmediateCommitTimestamp))
	}
}

func (t *tracker) commit(r *commitResult) {
	if !t.hasPending {
		t.stats.orphans++
		return
	}
	t.hasPending = false
	t.inTrx = false
	p := &t.pending
	if t.set.ContainsGTID(p.g) {
		t.stats.duplicates++
		return
	}
	if err := t.set.AddInPlace(p.g); err != nil {
		t.stats.invalid++
		return
	}
	t.stats.commits++
	r.added++
	r.commitTime = p.commitTime
	r.last = p.g
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
