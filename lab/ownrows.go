package lab

import (
	"sync"
	"time"
)

// ownRows is the ground truth of the experiments whose sessions read
// only their own rows (`lab failover --engines`, `lab gated --engine`):
// one Checker over every session number of the run (no hot rows), and,
// with record, every operation as a HistoryOp. Safe for concurrent use.
type ownRows struct {
	mu      sync.Mutex // guards chk and history
	chk     *Checker
	start   time.Time
	record  bool
	history []HistoryOp
}

// newOwnRows judges sessions session numbers from start.
func newOwnRows(sessions int, start time.Time, record bool) (*ownRows, error) {
	chk, err := NewChecker(sessions, 0)
	if err != nil {
		return nil, err
	}
	return &ownRows{chk: chk, start: start, record: record}, nil
}

// write records router's session sess's write of seq, invoked at t0 and
// done now (err: it failed; its outcome is not known).
func (o *ownRows) write(router string, sess int, seq int64, t0 time.Time, err error) {
	if !o.record {
		return
	}
	now := time.Now()
	o.mu.Lock()
	o.history = append(o.history, HistoryOp{Router: router, Session: sess, Write: true, Invoke: t0.Sub(o.start), Complete: now.Sub(o.start),
		Hot: -1, Seq: seq, WriteError: err != nil})
	o.mu.Unlock()
}

// read judges r (r.Session the session's number), router's read invoked
// at t0 and done now, and records it.
func (o *ownRows) read(router string, r *Read, t0 time.Time) (Verdict, error) {
	now := time.Now()
	r.Issued, r.Done = t0.Sub(o.start), now.Sub(o.start)
	o.mu.Lock()
	defer o.mu.Unlock()
	v, err := o.chk.Check(r)
	if o.record {
		h := HistoryOp{Router: router, Session: r.Session, Invoke: r.Issued, Complete: r.Done, Outcome: r.Outcome, AckedSeq: r.AckedSeq}
		if r.Outcome.Served() {
			h.Own = r.Own
		}
		o.history = append(o.history, h)
	}
	return v, err
}
