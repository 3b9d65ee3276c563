package lab

import (
	"time"

	"github.com/causallab/causallab/router"
)

// HistoryOp is one operation of a run as the driver saw it (Config.
// RecordHistory, Result.History): what was invoked and when, what came
// back and when. Times are since the start of the run.
type HistoryOp struct {
	// Run is the group of routers measured at once the operation belongs
	// to (one per router under Sequential mode): each starts from a fresh
	// schema, its hot rows at version 0.
	Run int
	// Router names the router that ran it; Session is the lab session.
	Router  string
	Session int
	// Write: a write, else a read.
	Write bool
	// Invoke and Complete bound the operation in time.
	Invoke, Complete time.Duration
	// A write's hot row, the version it gave it (0: unknown, the write's
	// outcome is not known) and its GTID.
	Hot     int
	Version int64
	GTID    string
	// A read's outcome, node, and, when served, the versions it returned:
	// its session's own row (Own) and every hot row (Hot[i]).
	Outcome router.Outcome
	Node    string
	Own     int64
	HotRead []int64
}

// recordOp appends the completed operation o, of router r, to the
// engine's history (Config.RecordHistory), at completion time now.
func (e *engine) recordOp(o *op, r string, now time.Duration) {
	h := HistoryOp{Router: r, Session: o.sess, Write: o.write, Invoke: o.started, Complete: now}
	if o.write {
		h.Hot, h.Version, h.GTID = o.hot, o.ack.Hot, o.ack.GTID
		if h.Version <= 0 {
			h.Version = 0 // the outcome is not known
		}
	} else {
		h.Invoke, h.Complete = o.read.Issued, o.read.Done
		h.Outcome, h.Node, h.Own = o.read.Outcome, o.read.Node, o.read.Own
		if o.read.Outcome.Served() {
			h.HotRead = append([]int64(nil), o.read.Hot...)
		}
	}
	e.history = append(e.history, h)
}
