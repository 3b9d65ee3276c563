package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// Target is where QueryFunc sends a read.
type Target struct {
	// Node is the node to run on.
	Node Node
	// Replica indexes the router's replica list, -1 for the primary.
	Replica int
	// Outcome is the outcome the read gets if run succeeds (router.OutReplica,
	// router.OutStale, router.OutFallback or router.OutPrimary), Reason the decision's reason.
	Outcome router.Outcome
	Reason  router.Reason
	// HashReason is hashroute's reason for an affinity read (zero
	// otherwise).
	HashReason hashroute.Reason
	// Pin is the session reason of a pinned read (ReadOptions.Pin), "" for
	// a routed one.
	Pin Pin
	// Watermark: run must return the node's watermark (the flavor's
	// watermark query, Watermarker; for MySQL gtid_executed joined with the
	// received set, mysqlwire.WatermarkQuery) read on the same connection
	// right after the statement. On the primary (Replica -1) that query
	// can lack a transaction the read saw (docs/router.md "The commit
	// race"): read performance_schema.log_status there where the server
	// answers it (LogStatusFlavor, mysqlwire.ProbeLogStatus). When false,
	// run returns the empty position.
	Watermark bool
}

// ReadOptions are per-read additions to the session's state.
type ReadOptions[P gtid.Position[P]] struct {
	// Token, issued in TokenEpoch, is merged into the session's token for
	// this read only (a token carried by a statement comment: a pooled
	// connection must not keep another request's token). Empty: none.
	Token      P
	TokenEpoch uint64
	// AffinityKey is the read's consistent_read_id hash (0: the session's).
	AffinityKey uint64
	// Pin, when set, keeps the read on the primary for a session reason the
	// caller knows (open transaction, temporary table, locked tables...):
	// no decision, no wait, no retry; counted as router.OutPrimary with Pin as the
	// reason label.
	Pin Pin
	// Wait, when set and the router waits by WaitGTIDFunction, runs the
	// wait on the caller's connection to t.Node (ok: the node contains
	// need). Nil: the router's own read pool. Ignored by WaitWatcher.
	Wait WaitFunc[P]
}

// RunFunc runs a read on the caller's own connection to t.Node and
// returns what the read could have observed (t.Watermark) or an error:
// a *mysql.MyError is a statement error (counted, returned); a *RunError
// says what the router should do; any other error marks the node down and
// the router decides again (at most maxNodeErrors times).
type RunFunc[P gtid.Position[P]] func(ctx context.Context, t Target) (observed P, err error)

// WaitFunc waits up to budget for t.Node to contain need (see
// ReadOptions.Wait). An error marks the node down and the read is decided
// again, except a *RunError without NodeFailed: the caller's, which ends
// the read with its Err (no hold-down).
type WaitFunc[P gtid.Position[P]] func(ctx context.Context, t Target, need P, budget time.Duration) (ok bool, err error)

// RunError is an error from a RunFunc with explicit instructions.
type RunError struct {
	// Err is the caller's error; QueryFunc returns it.
	Err error
	// NodeFailed marks the node down for DownHold (counted in
	// causallab_router_node_errors_total).
	NodeFailed bool
	// Retry lets the router decide again (nothing reached the client yet).
	// Without it the read ends with Err, counted as router.OutError with reason
	// "node" (NodeFailed) or "caller".
	Retry bool
}

func (e *RunError) Error() string { return e.Err.Error() }
func (e *RunError) Unwrap() error { return e.Err }

// QueryFunc routes one read like QueryWith (DecideLive, waits, the cap,
// epoch checks, a re-read of the primary's position before refusing,
// outcome metrics, trace) but lets the caller run it on its own
// connection: run is called with the Target (once, or again after a
// retryable node error). The session's watermark is raised with what run
// returns when t.Watermark is set (with WatermarkViewAtDecision, with the
// view's position instead). A proxy relaying raw packets on its own
// connections uses it; QueryWith is QueryFunc on the router's read pool.
func (s *LiveSession[P]) QueryFunc(ctx context.Context, pol router.Policy, o ReadOptions[P], run RunFunc[P]) (*Read[P], error) {
	if o.Pin != "" {
		return s.pinnedRead(ctx, pol, o.Pin, run)
	}
	var q liveRead[P]
	if err := q.begin(ctx, s, pol, &o); err != nil {
		return nil, err
	}
	// Each pass decides (liveRead.decide) and dispatches on the
	// decision's action to one step function, which ends the read or
	// asks for another decision (again).
	for {
		var (
			again bool
			rd    *Read[P]
			err   error
		)
		switch q.decide(); q.d.Action {
		case router.ActFail:
			again, err = q.stepFail(ctx)
		case router.ActDefer:
			err = q.stepDefer()
		case router.ActWait:
			again, err = q.stepWait(ctx)
		default: // ActReplica, ActStale, ActPrimary
			again, rd, err = q.stepServe(ctx, run)
		}
		if !again {
			return rd, err
		}
	}
}

// liveRead is one QueryFunc read across its decisions: what the read
// needs, what it has done so far, and its current decision, shared by
// the step functions. It lives on QueryFunc's stack.
type liveRead[P gtid.Position[P]] struct {
	s *LiveSession[P]
	r *Router[P]
	// st and pol are the read's state (the session's plus the read's own
	// token and key) and policy, in the session's working copies (qst,
	// qpol: as locals, the generic decision's calls moved them to the
	// heap, two allocations per read).
	st  *router.Session[P]
	pol *router.Policy
	// wait is ReadOptions.Wait.
	wait WaitFunc[P]
	// needWM: the policy needs the watermark; lazy: bounded lazily
	// (WatermarkLazy).
	needWM, lazy bool
	// gl is a PolicyGlobal read's target, fixed for every decision of
	// the read.
	gl glob[P]

	waited    time.Duration
	trace     []TraceStep
	nodeErrs  int
	refreshed bool
	known     map[string]P // positions proven by a server-side wait

	// The current decision (decide): d made on view v, the router's
	// replica list, primary and epoch then; step its trace step.
	d       router.Decision
	v       *router.View[P]
	nodes   []Node
	primary Node
	epoch   uint64
	step    TraceStep
}

// begin sets q up for a read of s under pol with options o. A
// PolicyGlobal read's target is read here (GlobalPrimaryQuery: on the
// primary), once for all its decisions.
func (q *liveRead[P]) begin(ctx context.Context, s *LiveSession[P], pol router.Policy, o *ReadOptions[P]) error {
	r := s.r
	s.qst, s.qpol = s.st, pol
	q.s, q.r, q.st, q.pol, q.wait = s, r, &s.qst, &s.qpol, o.Wait
	if !isEmpty(o.Token) {
		r.recordWrite(q.st, o.Token, o.TokenEpoch, q.st.LastWriteAt)
	}
	if o.AffinityKey != 0 {
		q.st.AffinityKey = o.AffinityKey
	}
	q.needWM = pol.Kind == router.PolicyTokenRYWMR || pol.Kind == router.PolicyTokenWait || pol.Kind == router.PolicyGlobal
	q.lazy = q.needWM && r.bounder != nil
	if pol.Kind == router.PolicyGlobal {
		var err error
		if q.gl.pos, q.gl.known, err = r.globalTarget(ctx); err != nil {
			q.count(router.OutError, "context")
			return err
		}
	}
	return nil
}

// count counts the read's outcome out (for reason) and, when it waited,
// that it did.
func (q *liveRead[P]) count(out router.Outcome, reason string) {
	m := q.r.m
	m.reads.WithLabelValues(q.pol.Kind.String(), out.String(), reason).Inc()
	if q.waited > 0 {
		m.waited.WithLabelValues(q.pol.Kind.String()).Inc()
	}
}

// record appends the current step to the read's trace (Config.Trace).
func (q *liveRead[P]) record() {
	if q.r.cfg.Trace {
		q.trace = append(q.trace, q.step)
	}
}

// contextDone ends the read when its context did: counted, ctx.Err().
func (q *liveRead[P]) contextDone(ctx context.Context) error {
	q.count(router.OutError, "context")
	return ctx.Err()
}

// decide makes the read's next decision: it bounds the pending seen
// first when a bound is there (WatermarkLazy), decides on the router's
// state, asks for fresher views when no replica's view held what the
// read needs, starts the decision's trace step and reanchors the session
// when the decision says so.
func (q *liveRead[P]) decide() {
	s, r := q.s, q.r
	var pendWait time.Duration
	if q.lazy && s.st.HasPending {
		pendWait = s.resolvePending(q.st)
	}
	q.d, q.v, q.nodes, q.primary, q.epoch = r.decide(q.st, q.pol, q.waited, q.known, q.gl, s.pendNode, s.lastNode, pendWait, &s.qview)
	d := q.d
	r.m.decision(d.Action, d.Reason).Inc()
	if r.demander != nil && wantsFresher(d) {
		// No replica's view holds what the read needs: ask for
		// fresher views (off the path of a read a replica serves).
		r.want(q.nodes, readNeed(q.st, q.pol, q.gl.pos, q.gl.known))
	}
	q.step = TraceStep{Decision: d, Node: decisionNode(d, q.nodes, q.primary), Epoch: q.epoch, Waited: q.waited}
	if r.cfg.Trace {
		q.step.At = r.now() // a clock read per read otherwise unused
	}
	if d.Reanchor {
		// Decide found every older-epoch part of this read's state
		// (a superset of the session's) in the new primary.
		q.st.Reanchor(q.epoch)
		s.st.Reanchor(q.epoch)
	}
}

// decisionNode names the node decision d refers to ("" when none).
func decisionNode(d router.Decision, nodes []Node, primary Node) string {
	switch {
	case d.Replica >= 0 && d.Replica < len(nodes) && d.Action != router.ActPrimary && d.Action != router.ActFail:
		return nodes[d.Replica].Name
	case d.Action == router.ActPrimary:
		return primary.Name
	}
	return ""
}

// stepFail handles ActFail: after a refusal that the primary's position
// may explain (ReasonTimedOut, ReasonWriteLost), once per read, the
// primary is re-read and the read decided again (refreshPrimary);
// otherwise the read ends with a *ReadError (ReasonSeenLost drops the
// session's watermark).
func (q *liveRead[P]) stepFail(ctx context.Context) (again bool, err error) {
	d := q.d
	if !q.refreshed && (d.Reason == router.ReasonTimedOut || d.Reason == router.ReasonWriteLost) {
		q.refreshed = true
		if again, err = q.refreshPrimary(ctx); again || err != nil {
			return again, err
		}
	}
	q.record()
	out := router.OutFailedFast
	if d.Reason == router.ReasonTimedOut || (d.Reason == router.ReasonCapExceeded && q.waited > 0 && q.r.cfg.Cap.Behavior == router.CapWaitLonger) {
		out = router.OutTimedOut
	}
	if d.Reason == router.ReasonSeenLost {
		q.s.st.DropSeen()
	}
	q.count(out, d.Reason.String())
	return false, &ReadError{Reason: d.Reason, Outcome: out, Waited: q.waited, Trace: q.trace}
}

// refreshPrimary re-reads the primary's position before a refusal: the
// view's may trail a token issued elsewhere (another process, a proxy's
// own connection). again: read, decide again; an error: the context
// ended; neither: the refusal stands.
func (q *liveRead[P]) refreshPrimary(ctx context.Context) (again bool, err error) {
	if err := q.r.refreshPrimary(ctx, q.primary); err != nil {
		if ctx.Err() != nil {
			return false, q.contextDone(ctx)
		}
		return false, nil
	}
	q.step.Note = "primary position re-read"
	q.record()
	return true, nil
}

// stepDefer handles ActDefer: the read ends with a deferral.
func (q *liveRead[P]) stepDefer() error {
	q.record()
	q.count(router.OutDeferred, q.d.Reason.String())
	return q.r.deferred(q.d, q.waited, q.trace)
}

// stepWait handles ActWait: a wait for the pending seen's bound
// (ReasonSeenPending) or for a replica; then the read is decided again.
func (q *liveRead[P]) stepWait(ctx context.Context) (again bool, err error) {
	if q.d.Reason == router.ReasonSeenPending {
		return q.waitBound(ctx)
	}
	return q.waitReplica(ctx)
}

// waitBound waits for a poll of the pending seen's node that started
// after its reads ended (asked for at once); the next decide resolves
// it.
func (q *liveRead[P]) waitBound(ctx context.Context) (again bool, err error) {
	s, r := q.s, q.r
	t0 := time.Now()
	wctx, cancel := context.WithTimeout(ctx, q.d.WaitFor)
	werr := r.bounder.WaitBound(wctx, s.pendNode, s.pendAt)
	cancel()
	el := time.Since(t0)
	q.waited += max(el, time.Microsecond)
	res := "polled"
	if werr != nil {
		res = "timeout"
	}
	r.m.waitSecs.WithLabelValues("seen-bound", res).Observe(el.Seconds())
	q.step.Note = fmt.Sprintf("waited %v for a poll of %s: %s", el.Round(time.Microsecond), s.pendNode, res)
	q.record()
	if ctx.Err() != nil {
		return false, q.contextDone(ctx)
	}
	return true, nil
}

// waitReplica waits for the decision's replica to contain what the read
// needs (Router.wait). A node error marks it down; the caller's error
// (a *RunError without NodeFailed) ends the read. A server-side wait
// that succeeded proves the position on that node (known).
func (q *liveRead[P]) waitReplica(ctx context.Context) (again bool, err error) {
	r := q.r
	need := readNeed(q.st, q.pol, q.gl.pos, q.gl.known)
	t := Target{Node: q.nodes[q.d.Replica], Replica: q.d.Replica, Reason: q.d.Reason}
	t0 := time.Now()
	ok, werr := r.wait(ctx, t, need, q.d.WaitFor, q.wait)
	el := time.Since(t0)
	q.waited += max(el, time.Microsecond)
	q.step.Note = fmt.Sprintf("waited %v ok=%v", el.Round(time.Microsecond), ok)
	q.record()
	if ctx.Err() != nil {
		return false, q.contextDone(ctx)
	}
	if werr != nil {
		var re *RunError
		if errors.As(werr, &re) && !re.NodeFailed {
			// The caller's verdict on the wait (a WaitFunc that
			// could not start it for a reason of the caller's,
			// such as a replica refusing the caller's session
			// state): not a node fault, no hold-down; the read
			// ends with its error, counted as the caller's.
			q.count(router.OutError, "caller")
			return false, re.Err
		}
		r.markDown(ctx, t.Node, werr)
	}
	if ok && r.cfg.Wait == WaitGTIDFunction {
		if q.known == nil {
			q.known = map[string]P{}
		}
		q.known[t.Node.Name] = need
	}
	return true, nil
}

// stepServe handles ActReplica, ActStale and ActPrimary: run serves the
// read on the decision's node. A failed run may let the read be decided
// again (runFailed).
func (q *liveRead[P]) stepServe(ctx context.Context, run RunFunc[P]) (again bool, rd *Read[P], err error) {
	r := q.r
	t, viewPos := q.target()
	var gen uint64
	if q.lazy && t.Replica >= 0 {
		// Before the read begins: a bound must come from a poll
		// connection open since then (the same server throughout).
		gen = r.bounder.Generation(t.Node.Name)
	}
	r.inFlight(t.Node.Name, 1)
	wm, err := run(ctx, t)
	r.inFlight(t.Node.Name, -1)
	if err != nil {
		again, err = q.runFailed(ctx, t, err)
		return again, nil, err
	}
	return false, q.served(t, gen, wm, viewPos), nil
}

// target is where the decision sends the read, and the view's position
// of that node (the watermark under WatermarkViewAtDecision).
func (q *liveRead[P]) target() (t Target, viewPos P) {
	d := q.d
	t = Target{Node: q.primary, Replica: -1, Reason: d.Reason, HashReason: d.HashReason, Watermark: q.needWM && !q.lazy && q.r.cfg.Watermark == WatermarkAfterRead}
	switch {
	case d.Action == router.ActReplica || d.Action == router.ActStale:
		t.Node, t.Replica, t.Outcome = q.nodes[d.Replica], d.Replica, router.OutReplica
		if d.Action == router.ActStale {
			t.Outcome = router.OutStale
		}
		viewPos = q.v.Replicas[d.Replica].Applied
	case d.Fallback:
		t.Outcome, viewPos = router.OutFallback, q.v.Primary
	default:
		t.Outcome, viewPos = router.OutPrimary, q.v.Primary
	}
	if q.lazy && t.Replica < 0 {
		// A read on the primary (a fallback) reads its watermark
		// after it, pipelined, as WatermarkAfterRead does: bounding
		// it lazily would make the session's next read wait for a
		// poll of the primary, whose bound no lagging replica holds.
		t.Watermark = true
	}
	return t, viewPos
}

// runFailed handles run's error err on t: the context's and a statement
// error end the read; a *RunError says what to do (runError); any other
// error marks the node down and the read is decided again, at most
// maxNodeErrors times.
func (q *liveRead[P]) runFailed(ctx context.Context, t Target, err error) (again bool, _ error) {
	var (
		re *RunError
		me *mysql.MyError
	)
	switch {
	case ctx.Err() != nil:
		q.count(router.OutError, "context")
		return false, err
	case errors.As(err, &re):
		return q.runError(ctx, t, re)
	case errors.As(err, &me):
		q.count(router.OutError, "statement")
		return false, err
	}
	q.step.Note = "node error: " + oneLine(err.Error())
	q.record()
	q.r.markDown(ctx, t.Node, err)
	if q.nodeErrs++; q.nodeErrs > maxNodeErrors {
		q.count(router.OutError, "node")
		return false, err
	}
	return true, nil
}

// runError follows a *RunError's instructions: NodeFailed marks the node
// down, Retry decides again (at most maxNodeErrors node errors);
// otherwise the read ends with re.Err.
func (q *liveRead[P]) runError(ctx context.Context, t Target, re *RunError) (again bool, _ error) {
	q.step.Note = "run error: " + oneLine(re.Error())
	q.record()
	if re.NodeFailed {
		q.r.markDown(ctx, t.Node, re.Err)
	}
	if re.Retry {
		if q.nodeErrs++; q.nodeErrs <= maxNodeErrors {
			return true, nil
		}
	}
	reason := "caller"
	if re.NodeFailed {
		reason = "node"
	}
	q.count(router.OutError, reason)
	return false, re.Err
}

// served ends a read t served: the session's last replica, its
// watermark (observe), the outcome's metrics and the Read.
func (q *liveRead[P]) served(t Target, gen uint64, wm, viewPos P) *Read[P] {
	r, d := q.r, q.d
	q.record()
	if t.Replica >= 0 {
		q.s.lastNode = t.Node.Name
	}
	wm = q.observe(t, gen, wm, viewPos)
	if t.Outcome == router.OutFallback {
		r.m.fallbacks.WithLabelValues(d.Reason.String()).Inc()
	}
	r.m.served(q.pol.Kind, t.Outcome, d.Reason).Inc()
	if q.waited > 0 {
		r.m.waited.WithLabelValues(q.pol.Kind.String()).Inc()
	}
	return &Read[P]{Node: t.Node.Name, Outcome: t.Outcome, Stale: t.Outcome == router.OutStale, Reason: d.Reason,
		HashReason: d.HashReason, Waited: q.waited, Watermark: wm, Trace: q.trace}
}

// observe raises the session's watermark after a read served on t (gen:
// the node's poll generation when it began) that returned wm, and
// returns the watermark the read reports: lazily, a replica's read
// becomes the pending seen and a primary's bounds it; otherwise (the MR
// policies) wm, or the view's position viewPos under
// WatermarkViewAtDecision, is observed.
func (q *liveRead[P]) observe(t Target, gen uint64, wm, viewPos P) P {
	s := q.s
	switch {
	case q.lazy && t.Replica >= 0:
		s.notePending(t, gen, time.Now(), q.epoch)
	case q.lazy:
		// Within an epoch the primary holds everything a replica
		// showed: its watermark bounds a replica's pending seen too
		// (an older epoch's is resolved first, rule 1).
		router.ResolvePending(&s.st, wm)
		router.Observe(&s.st, wm, q.epoch)
	case q.needWM:
		if q.r.cfg.Watermark == WatermarkViewAtDecision {
			wm = viewPos
		}
		router.Observe(&s.st, wm, q.epoch)
	}
	return wm
}

// wantsFresher reports whether decision d was made because no replica's
// view held what the read needs: a wait for a replica (not for a pending
// seen's bound, which WaitBound asks for itself), a freshness fallback,
// a stale read or a deferral. A fresher view may let the next such read
// (or this one, after its wait) be served by a replica.
func wantsFresher(d router.Decision) bool {
	switch d.Action {
	case router.ActWait:
		return d.Reason != router.ReasonSeenPending
	case router.ActStale, router.ActDefer:
		return true
	}
	return d.Fallback
}

// want tells the position source, when it is a Demander, that clients
// need views of the replicas (reps: the router's replica list) that
// contain need: after a write the router learns (RecordAck, ExecWrite),
// and when a read finds no replica's view holding what it needs
// (wantsFresher). Empty: nothing.
func (r *Router[P]) want(reps []Node, need P) {
	if r.demander == nil || isEmpty(need) {
		return
	}
	for _, n := range reps {
		r.demander.Want(n.Name, need)
	}
}

// pinnedRead runs a read on the primary for a session reason: no
// decision, no wait, no retry (a connection lost inside a transaction
// must reach the client).
func (s *LiveSession[P]) pinnedRead(ctx context.Context, pol router.Policy, pin Pin, run RunFunc[P]) (*Read[P], error) {
	r := s.r
	r.mu.Lock()
	primary, epoch := r.st.Primary, r.st.Epoch
	r.mu.Unlock()
	// Under the monotonic-reads policies a pinned read raises the
	// watermark as a routed one on the primary does (the primary's
	// position read after it, in every watermark mode): a later routed
	// read must not show less than a locking read or a transaction's
	// read did. Without replicas (PinNoReplicas) every read is the
	// primary's and none is routed: nothing to raise.
	mr := (pol.Kind == router.PolicyTokenRYWMR || pol.Kind == router.PolicyTokenWait || pol.Kind == router.PolicyGlobal) && pin != PinNoReplicas
	t := Target{Node: primary, Replica: -1, Outcome: router.OutPrimary, Pin: pin, Watermark: mr}
	r.inFlight(primary.Name, 1)
	wm, err := run(ctx, t)
	r.inFlight(primary.Name, -1)
	if err != nil {
		var me *mysql.MyError
		reason := "node"
		switch {
		case ctx.Err() != nil:
			reason = "context"
		case errors.As(err, &me):
			reason = "statement"
		}
		r.m.reads.WithLabelValues(pol.Kind.String(), router.OutError.String(), reason).Inc()
		var re *RunError
		if errors.As(err, &re) {
			return nil, re.Err
		}
		return nil, err
	}
	if mr {
		router.ResolvePending(&s.st, wm) // the primary holds what a replica showed
		router.Observe(&s.st, wm, epoch)
	}
	r.m.reads.WithLabelValues(pol.Kind.String(), router.OutPrimary.String(), string(pin)).Inc()
	var trace []TraceStep
	if r.cfg.Trace {
		trace = []TraceStep{{At: r.now(), Decision: router.Decision{Action: router.ActPrimary, Replica: -1}, Node: primary.Name, Note: "pinned: " + string(pin)}}
	}
	return &Read[P]{Node: primary.Name, Outcome: router.OutPrimary, Pin: pin, Trace: trace}, nil
}

// need is what a replica must contain for session state st under pol.
func need[P gtid.Position[P]](st *router.Session[P], pol *router.Policy) P {
	var n P
	if st.HasToken {
		n = st.Token
	}
	if st.HasSeen && pol.Kind != router.PolicyTokenRYW {
		n = n.Union(st.Seen)
	}
	return n
}

// inFlight adjusts the count of reads running on a node (affinity's
// rebalance-override mode reads it). A node's entry stays at zero when
// its last read ends (deleted and added again by every read, it cost a
// map delete and insert per read); the map holds one entry per node name
// ever read from, and a missing entry reads as zero the same.
func (r *Router[P]) inFlight(node string, d int) {
	r.mu.Lock()
	r.st.InFlight[node] += d
	r.mu.Unlock()
}

// recordWrite is RecordWrite, with the token widened by Flavor.Compact
// (for MySQL to each source's prefix) when Config.CompactTokens is set.
func (r *Router[P]) recordWrite(st *router.Session[P], pos P, epoch uint64, at time.Duration) {
	router.RecordWrite(st, pos, epoch, at)
	if r.cfg.CompactTokens {
		st.Token = r.cfg.Flavor.Compact(st.Token)
	}
}

// glob is a PolicyGlobal read's target (router.Input.Global).
type glob[P gtid.Position[P]] struct {
	pos   P
	known bool
}

// resolvePending bounds the session's pending seen when its source has a
// poll of the node that started after the reads ended (on the connection
// of their generation): both the session and st (this read's copy of it)
// fold the bound into their watermark. Otherwise it returns how much
// longer a bound may take (0: none will come).
func (s *LiveSession[P]) resolvePending(st *router.Session[P]) time.Duration {
	bound, ok, wait := s.r.bounder.SeenBound(s.pendNode, s.pendAt, s.pendGen)
	if !ok {
		return wait
	}
	router.ResolvePending(&s.st, bound)
	router.ResolvePending(st, bound)
	return 0
}

// notePending records a served read as the session's pending seen
// (WatermarkLazy): on node t.Node, ended at at, begun under poll
// generation gen. More reads on the same node keep the first one's
// generation (a changed one cannot bound the earlier reads: 0).
func (s *LiveSession[P]) notePending(t Target, gen uint64, at time.Time, epoch uint64) {
	switch {
	case !s.st.HasPending || s.pendNode != t.Node.Name:
		s.pendGen = gen
	case s.pendGen != gen:
		s.pendGen = 0
	}
	s.pendNode, s.pendAt = t.Node.Name, at
	router.ObservePending(&s.st, t.Replica, epoch)
}

// decide calls DecideLive under the router's lock with the router's state
// and stores the primary position it raised. A pending seen's node
// (pendNode) is named by its index in the replica list now (-1: the
// primary; past the list: neither, so not sticky), and pendWait is
// router.Input.PendingWait. The session's last replica (lastNode, "":
// none yet) becomes Session.LastReplica when it is still a replica. The
// view is built in view (the session's, reused read after read:
// decideLiveIn).
func (r *Router[P]) decide(st *router.Session[P], pol *router.Policy, waited time.Duration, known map[string]P, gl glob[P], pendNode, lastNode string, pendWait time.Duration, view *router.View[P]) (router.Decision, *router.View[P], []Node, Node, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wall := time.Now()
	st.HasLast = false
	if lastNode != "" {
		for i, n := range r.st.Replicas {
			if n.Name == lastNode {
				st.HasLast, st.LastReplica = true, i
				break
			}
		}
	}
	if st.HasPending {
		st.PendingReplica = len(r.st.Replicas)
		if pendNode == r.st.Primary.Name {
			st.PendingReplica = -1
		}
		for i, n := range r.st.Replicas {
			if n.Name == pendNode {
				st.PendingReplica = i
			}
		}
	}
	req := LiveRequest[P]{Session: st, Policy: pol, Cap: &r.cfg.Cap, Wall: wall, Now: wall.Sub(r.start), // r.now() from the same clock read
		Rand: r.rng.Uint64(), Waited: waited, Known: known, Global: gl.pos, GlobalKnown: gl.known, PendingWait: pendWait}
	d, v, prim := decideLiveIn(&r.st, r.cfg.Positions, &req, &r.bucket, view)
	if !r.st.PrimaryPos.Contains(prim) {
		r.st.Commits.Record(wall, prim)
	}
	r.st.PrimaryPos = prim
	return d, v, r.st.Replicas, r.st.Primary, r.st.Epoch
}

// refreshPrimary reads the primary's executed position on a pooled primary
// connection and raises the router's bound with it (counted).
func (r *Router[P]) refreshPrimary(ctx context.Context, primary Node) error {
	r.m.refreshes.Inc()
	set, err := r.readPrimary(ctx, primary)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if r.st.Primary == primary && !r.st.PrimaryPos.Contains(set) {
		r.st.PrimaryPos = r.st.PrimaryPos.Union(set)
		r.st.Commits.Record(time.Now(), r.st.PrimaryPos)
	}
	r.mu.Unlock()
	return nil
}

// wait waits up to d for t.Node to contain need, by the configured method
// (fn, when given, runs the server-side wait on the caller's connection).
// ok reports that the node is known to contain need; err a node failure.
func (r *Router[P]) wait(ctx context.Context, t Target, need P, d time.Duration, fn WaitFunc[P]) (ok bool, err error) {
	t0 := time.Now()
	overran := false
	defer func() {
		res := "caught-up"
		switch {
		case err != nil:
			res = "error"
		case overran:
			res = "overran"
		case !ok:
			res = "timeout"
		}
		r.m.waitSecs.WithLabelValues(r.cfg.Wait.String(), res).Observe(time.Since(t0).Seconds())
	}()
	if r.cfg.Wait == WaitWatcher {
		wctx, cancel := context.WithTimeout(ctx, max(d, time.Millisecond))
		defer cancel()
		werr := r.cfg.Positions.WaitFor(wctx, t.Node.Name, need)
		return werr == nil, nil
	}
	if fn != nil {
		return fn(ctx, t, need, d)
	}
	c, err := r.pool.get(ctx, t.Node.Addr)
	if err != nil {
		return false, err
	}
	// The statement's own timeout is d; the connection gets a little
	// slack beyond it. A wait that outlives it (a server busy parsing a
	// huge position answers long after its timeout) is given up: the
	// connection closed, the wait killed on the server, the read told it
	// timed out (no node is held down for it).
	wctx, cancel := context.WithTimeout(ctx, d+mysqlwire.WaitSlack)
	defer cancel()
	ok, err = mysqlwire.WaitAnswer(mysqlwire.Exec(wctx, c, r.cfg.Flavor.WaitQuery(need, d)))
	if err != nil {
		id := c.GetConnectionID()
		c.Close()
		if ctx.Err() == nil && wctx.Err() != nil {
			overran = true
			r.killQuery(ctx, t.Node, id)
			return false, nil
		}
		return false, err
	}
	r.pool.put(t.Node.Addr, c)
	return ok, nil
}

// maxKills bounds the KILL QUERY connections of overrun waits at once.
const maxKills = 16

// killQuery runs KILL QUERY id on n in the background, on a connection of
// its own, bounded by the dial timeout (at most maxKills at once; past
// that the wait is left to its own timeout). Close waits for them.
func (r *Router[P]) killQuery(ctx context.Context, n Node, id uint32) {
	select {
	case r.kills <- struct{}{}:
	default:
		return
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DialTimeout)
	r.killWG.Go(func() {
		defer func() { <-r.kills }()
		defer cancel()
		c, err := r.dial.Dial(kctx, n.Addr, false)
		if err != nil {
			r.cfg.Logger.Debug("router: KILL QUERY of an overrun wait: connect", slog.String("node", n.Name), errAttr(err))
			return
		}
		defer c.Close()
		if _, err := mysqlwire.Exec(kctx, c, "KILL QUERY "+strconv.FormatUint(uint64(id), 10)); err != nil {
			r.cfg.Logger.Debug("router: KILL QUERY of an overrun wait", slog.String("node", n.Name), errAttr(err))
		}
	})
}

// wmKind is what a read served from the router's read pool reads after
// it (Target.Watermark).
type wmKind uint8

const (
	// wmNone: nothing.
	wmNone wmKind = iota
	// wmNode: the flavor's watermark query (a replica's read).
	wmNode
	// wmPrimary: a read served by the primary: log_status where it is
	// sound (watermarkFor), else the flavor's watermark query.
	wmPrimary
)

// watermarkFor is the query that reads, on c right after a read on n,
// the read's watermark (wk). For a read served by the primary it is the
// flavor's log_status query (LogStatusFlavor) once a probe on one of the
// read pool's connections to n (made here, the first time) found it
// sound; else the flavor's watermark query, each such read counted in
// watermark_fallbacks_total{source="primary-no-log-status"} (the
// commit race's gap stays open there) and the refusal logged once. An
// error is the connection's (the probe's).
func (r *Router[P]) watermarkFor(ctx context.Context, n Node, c *client.Conn, wk wmKind) (string, error) {
	q := watermarkQuery(r.cfg.Flavor)
	lf, ok := any(r.cfg.Flavor).(LogStatusFlavor)
	if wk != wmPrimary || !ok {
		return q, nil
	}
	ls := r.pool.logStatusOf(n.Addr)
	if !ls.Known() {
		refusal, err := ls.Probe(ctx, func(ctx context.Context, q string) (string, error) { return mysqlwire.ReadValue(ctx, c, q) })
		if err != nil {
			return "", err
		}
		if refusal != nil {
			r.cfg.Logger.Warn("router: performance_schema.log_status is not the primary's watermark; monotonic-reads watermarks of reads served by the primary use gtid_executed, which can lack a transaction the read saw (grant BACKUP_ADMIN; docs/router.md, \"The commit race\")",
				slog.String("node", n.Name), slog.String("reason", refusal.Error()))
		}
	}
	if ls.Sound() {
		return lf.LogStatusQuery(), nil
	}
	r.m.wmFallbacks.WithLabelValues("primary-no-log-status").Inc()
	return q, nil
}

// run executes a read on n from the router's read pool and, unless wk is
// wmNone, reads n's watermark (watermarkFor) on the same connection
// right after it: everything the statement could observe is in it. Both
// leave in one write (pipelined: mysqlwire.ExecPipelined); a read with
// args runs the connection's cached prepared statement.
func (r *Router[P]) run(ctx context.Context, n Node, wk wmKind, query string, args ...any) (*mysql.Result, P, error) {
	var wm P
	c, err := r.pool.get(ctx, n.Addr)
	if err != nil {
		return nil, wm, err
	}
	follow := ""
	if wk != wmNone {
		if follow, err = r.watermarkFor(ctx, n, c, wk); err != nil {
			c.Close()
			return nil, wm, err
		}
	}
	if _, ok := mysqlwire.PipeOf(c); ok && (follow != "" || len(args) > 0) {
		res, text, err := mysqlwire.ExecPipelined(ctx, c, follow, query, args...)
		if err == nil && follow != "" {
			if wm, err = r.cfg.Flavor.ParseExecuted(text); err != nil {
				err = fmt.Errorf("watermark: %w", err)
			}
		}
		if err != nil {
			r.release(n, c, err)
			if errors.Is(err, ErrArgCount) {
				// The caller's mistake, caught before anything was sent:
				// not a node fault (no hold-down, no retry elsewhere).
				err = &RunError{Err: err}
			}
			return nil, wm, err
		}
		r.pool.put(n.Addr, c)
		return res, wm, nil
	}
	res, err := mysqlwire.Exec(ctx, c, query, args...)
	if err != nil {
		r.release(n, c, err)
		return nil, wm, err
	}
	if follow != "" {
		if wm, err = r.readWatermark(ctx, c, follow); err != nil {
			r.release(n, c, err)
			return nil, wm, err
		}
	}
	r.pool.put(n.Addr, c)
	return res, wm, nil
}

// release returns c after a server error or a caller's (ErrArgCount),
// and closes it after a broken one.
func (r *Router[P]) release(n Node, c *client.Conn, err error) {
	var me *mysql.MyError
	if errors.As(err, &me) || errors.Is(err, ErrArgCount) {
		r.pool.put(n.Addr, c)
		return
	}
	c.Close()
}

// maxNodeErrors bounds the node errors one read retries past.
const maxNodeErrors = 3

// ErrUnresponsive is the cause of a read's context when its replica did
// not answer while its position source reported it unhealthy (the read is
// then decided again elsewhere; it is never returned to the caller).
var ErrUnresponsive = errors.New("router: the node did not answer and its position source reports it unhealthy")

// watchNode returns a context of ctx that ends (cause ErrUnresponsive)
// once the position source reports n unhealthy (mysqlwire.WatchHealth),
// until stop: a statement on a replica that stops answering (a paused
// server keeps its sockets open) is cut instead of hanging until the
// socket's deadline.
func (r *Router[P]) watchNode(ctx context.Context, n Node) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	stop := mysqlwire.WatchHealth(func() bool {
		_, ok := r.cfg.Positions.Position(n.Name)
		return ok
	}, func() { cancel(ErrUnresponsive) })
	return wctx, func() {
		stop()
		cancel(nil)
	}
}
