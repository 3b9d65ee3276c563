package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/causallab/causallab/router"
)

// DecisionRecord is one router.Decide call of a simulated trial: the input
// as the engine handed it over (copied: the engine reuses its buffers),
// the fallback bucket before the call, and the decision the engine carried
// out.
type DecisionRecord struct {
	// Policy, Cap, Session and View are copies of what Input pointed to.
	// View.Replicas is a private copy; View.Hash is the engine's table
	// (immutable).
	Policy  router.Policy
	Cap     router.Cap
	Session router.Session[LogPos]
	View    router.View[LogPos]
	// Now, Rand, Waited, Global, GlobalKnown, NeedAge and NeedAgeKnown
	// are the Input's scalars.
	Now          time.Duration
	Rand         uint64
	Waited       time.Duration
	Global       LogPos
	GlobalKnown  bool
	NeedAge      time.Duration
	NeedAgeKnown bool
	// Bucket is the fallback bucket before the call.
	Bucket router.Bucket
	// Decision is what router.Decide answered and the engine did.
	Decision router.Decision

	commit []usec // the engine's commit times (valid during fn only)
}

// CommitTime is when the primary committed record p (LogPos p, 1-based),
// exact: what a live router's commit log (live.CommitLog) would hold if it
// learned every commit as it happened. False for 0 and for a record not
// committed by the record's Now. Valid only during the call of
// RecordDecisions' fn.
func (r *DecisionRecord) CommitTime(p LogPos) (time.Duration, bool) {
	if p == 0 || int(p) > len(r.commit) {
		return 0, false
	}
	c := r.commit[p-1] // math.MaxInt64 until committed
	if c > usec(r.Now/time.Microsecond) {
		return 0, false
	}
	return time.Duration(c) * time.Microsecond, true
}

// Input returns the record's input; its pointers point into the record.
func (r *DecisionRecord) Input() router.Input[LogPos] {
	return router.Input[LogPos]{Policy: &r.Policy, Cap: &r.Cap, Session: &r.Session, View: &r.View,
		Now: r.Now, Rand: r.Rand, Waited: r.Waited, Global: r.Global, GlobalKnown: r.GlobalKnown,
		NeedAge: r.NeedAge, NeedAgeKnown: r.NeedAgeKnown}
}

// RecordDecisions runs trial trial of cfg under spec and calls fn with
// every routing decision, in order. It is the engine's own run (the same
// event loop as Run) with a recorder hooked into engine.route: just before
// router.Decide the recorder copies the input and the bucket; after the
// engine carried the decision out it recomputes the decision from the copy
// and checks it against what the engine did (the decision, the bucket
// after the call, the reason, fallback, failure and stale counters, the
// node it chose). A mismatch stops the run with an error, so every record
// is a decision the simulator made and a complete copy of its input. The
// Result is the trial's result; it equals Run's for the same trial (sim's
// tests check this).
//
// The record passed to fn is reused after fn returns: copy what you keep.
func RecordDecisions(ctx context.Context, cfg Config, spec RouterSpec, trial int, fn func(*DecisionRecord)) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if trial < 0 {
		return Result{}, fmt.Errorf("sim: trial %d is negative", trial)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e := newEngine()
	var wl workload
	var m trialMetrics
	wl.draw(&cfg, trial)
	e.reset(&cfg, &wl, &spec, trial, &m)
	e.rec = &decisionRecorder{fn: fn, stop: cancel}
	err := e.run(ctx)
	if e.rec.err != nil {
		return Result{}, e.rec.err
	}
	if err != nil {
		return Result{}, err
	}
	return e.result(), nil
}

// decisionRecorder is engine.route's optional hook (engine.rec, nil in
// normal runs). before copies the input the engine built; after checks the
// engine's decision against one recomputed from the copy and hands the
// record to fn.
type decisionRecorder struct {
	fn   func(*DecisionRecord)
	stop context.CancelFunc // stops the run at the first mismatch
	err  error
	rec  DecisionRecord

	// counters before the call
	reasons                   [len(trialMetrics{}.reasons)]int64
	fallbacks, failed, staled int64
}

func (dr *decisionRecorder) before(e *engine) {
	r := &dr.rec
	in := &e.in
	r.Policy, r.Cap, r.Session, r.Bucket = *in.Policy, *in.Cap, *in.Session, e.bucket
	v := in.View
	r.View = router.View[LogPos]{Replicas: append(r.View.Replicas[:0], v.Replicas...),
		Primary: v.Primary, PrimaryKnown: v.PrimaryKnown, Epoch: v.Epoch, Hash: v.Hash}
	r.Now, r.Rand, r.Waited, r.Global, r.GlobalKnown = in.Now, in.Rand, in.Waited, in.Global, in.GlobalKnown
	r.NeedAge, r.NeedAgeKnown = in.NeedAge, in.NeedAgeKnown
	r.commit = e.commit
	m := e.m
	dr.reasons, dr.fallbacks, dr.failed, dr.staled = m.reasons, m.fallbacks, m.failed, m.staleServed
}

func (dr *decisionRecorder) after(e *engine, t usec, c int32, got router.Decision) {
	if dr.err != nil {
		return
	}
	r := &dr.rec
	in := r.Input()
	bucket := r.Bucket
	d := router.Decide(&in, &bucket)
	r.Decision = d

	b2i := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	m := e.m
	var bad []string
	if d != got {
		bad = append(bad, fmt.Sprintf("engine decided %+v", got))
	}
	if bucket != e.bucket {
		bad = append(bad, "bucket differs")
	}
	want := dr.reasons
	want[d.Reason]++
	if m.reasons != want {
		bad = append(bad, fmt.Sprintf("reason counters %v, want %v", m.reasons, want))
	}
	if m.fallbacks-dr.fallbacks != b2i(d.Action == router.ActPrimary && d.Fallback) {
		bad = append(bad, "fallback counter")
	}
	if m.failed-dr.failed != b2i(d.Action == router.ActFail) {
		bad = append(bad, "failure counter")
	}
	if m.staleServed-dr.staled != b2i(d.Action == router.ActStale) {
		bad = append(bad, "stale counter")
	}
	switch d.Action {
	case router.ActReplica, router.ActStale:
		if int(e.cs[c].node) != d.Replica {
			bad = append(bad, fmt.Sprintf("engine routed to node %d", e.cs[c].node))
		}
	case router.ActPrimary:
		if e.cs[c].node != -1 {
			bad = append(bad, fmt.Sprintf("engine routed to node %d", e.cs[c].node))
		}
	}
	if len(bad) > 0 {
		dr.err = fmt.Errorf("sim: RecordDecisions at t=%dus chain %d (session %d): recomputed %+v disagrees with the engine: %v",
			t, c, e.wl.session[c], d, bad)
		dr.stop()
		return
	}
	dr.fn(r)
}
