package sim

import (
	"context"
	"fmt"
	"slices"
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
	// Now, Rand and Waited are the Input's scalars.
	Now    time.Duration
	Rand   uint64
	Waited time.Duration
	// Bucket is the fallback bucket before the call.
	Bucket router.Bucket
	// Decision is what router.Decide answered and the engine did.
	Decision router.Decision
}

// Input returns the record's input; its pointers point into the record.
func (r *DecisionRecord) Input() router.Input[LogPos] {
	return router.Input[LogPos]{Policy: &r.Policy, Cap: &r.Cap, Session: &r.Session, View: &r.View,
		Now: r.Now, Rand: r.Rand, Waited: r.Waited}
}

// RecordDecisions runs trial trial of cfg under spec and calls fn with
// every routing decision, in order. It drives the engine's own event
// handlers (the same route, fillView and router.Decide call as Run), with
// a recording step around each routing event: the input is copied after
// the engine built it, the decision is recomputed from the copy and a copy
// of the bucket, and checked against what the engine did (the reason it
// counted, the node it chose, fallback, failure and stale counters, the
// bucket after the call). A mismatch is an error, so every record is a
// decision the simulator made. The Result is the trial's result; it equals
// Run's for the same trial (sim's tests check this).
//
// The record passed to fn is reused after fn returns: copy what you keep.
func RecordDecisions(ctx context.Context, cfg Config, spec RouterSpec, trial int, fn func(*DecisionRecord)) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if trial < 0 {
		return Result{}, fmt.Errorf("sim: trial %d is negative", trial)
	}
	e := newEngine()
	var wl workload
	var m trialMetrics
	wl.draw(&cfg, trial)
	e.reset(&cfg, &wl, &spec, trial, &m)
	rec := &DecisionRecord{}
	if e.nw > 0 {
		e.h.push(e.wl.send[0]+e.rtt2, evWriteArrive, 0)
	}
	n := 0
	for e.h.len() > 0 {
		ev := e.h.pop()
		var err error
		switch ev.kind {
		case evWriteArrive:
			e.writeArrive(ev.t, ev.id)
		case evWriteAck:
			e.writeAck(ev.t, ev.id)
		case evReadIssue:
			e.ss[ev.id].waited = false
			err = e.recordRoute(ev.t, ev.id, 0, rec, fn)
		case evWaitWake:
			err = e.recordRoute(ev.t, ev.id, ev.t-e.ss[ev.id].waitStart, rec, fn)
		case evReadReach:
			e.readReach(ev.t, ev.id)
		case evReadDone:
			e.readDone(ev.t, ev.id)
		default:
			err = fmt.Errorf("sim: RecordDecisions: unknown event kind %d (engine.run changed: update the recorder)", ev.kind)
		}
		if err != nil {
			return Result{}, err
		}
		n++
		if n&0xffff == 0 && ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
	}
	e.m.events += int64(n)
	return m.result(), nil
}

// recordRoute runs e.route and records its decision (see RecordDecisions).
func (e *engine) recordRoute(t usec, s int32, waited usec, rec *DecisionRecord, fn func(*DecisionRecord)) error {
	m := e.m
	sess := e.sess[s]
	bucket := e.bucket
	reasons, fb, failed, stale := m.reasons, m.fallbacks, m.failed, m.staleServed
	e.route(t, s, waited)

	rec.Policy, rec.Cap, rec.Session, rec.Bucket = e.pol, e.cfg.Cap, sess, bucket
	rec.View = router.View[LogPos]{Replicas: append(rec.View.Replicas[:0], e.view.Replicas...),
		Primary: e.view.Primary, PrimaryKnown: e.view.PrimaryKnown, Epoch: e.view.Epoch, Hash: e.view.Hash}
	rec.Now, rec.Rand, rec.Waited = e.in.Now, e.in.Rand, e.in.Waited
	in := rec.Input()
	after := bucket
	d := router.Decide(&in, &after)
	rec.Decision = d

	b2i := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	want := reasons
	want[d.Reason]++
	var bad []string
	if m.reasons != want {
		bad = append(bad, fmt.Sprintf("reason counters %v, want %v", m.reasons, want))
	}
	if after != e.bucket {
		bad = append(bad, "bucket differs")
	}
	if m.fallbacks-fb != b2i(d.Action == router.ActPrimary && d.Fallback) {
		bad = append(bad, "fallback counter")
	}
	if m.failed-failed != b2i(d.Action == router.ActFail) {
		bad = append(bad, "failure counter")
	}
	if m.staleServed-stale != b2i(d.Action == router.ActStale) {
		bad = append(bad, "stale counter")
	}
	switch d.Action {
	case router.ActReplica, router.ActStale:
		if int(e.ss[s].node) != d.Replica {
			bad = append(bad, fmt.Sprintf("engine routed to node %d", e.ss[s].node))
		}
	case router.ActPrimary:
		if e.ss[s].node != -1 {
			bad = append(bad, fmt.Sprintf("engine routed to node %d", e.ss[s].node))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("sim: RecordDecisions at t=%dus session %d: recomputed %+v disagrees with the engine: %v",
			t, s, d, slices.Clip(bad))
	}
	fn(rec)
	return nil
}
