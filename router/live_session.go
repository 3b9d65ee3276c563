package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
)

// ReadError is the typed error of a read the router refused to serve. It
// matches ErrCapExceeded, ErrWriteLost, ErrSeenLost, ErrTimedOut or
// ErrInvalidPolicy with errors.Is.
type ReadError struct {
	// Reason is the decision's reason.
	Reason Reason
	// Waited is how long the read waited before failing.
	Waited time.Duration
	// Trace holds the decisions when Config.Trace is set.
	Trace []TraceStep
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("router: read not served: %v (after waiting %v)", e.Reason, e.Waited)
}

// Is matches the sentinel of the error's reason.
func (e *ReadError) Is(target error) bool {
	switch target {
	case ErrCapExceeded:
		return e.Reason == ReasonCapExceeded
	case ErrWriteLost:
		return e.Reason == ReasonWriteLost
	case ErrSeenLost:
		return e.Reason == ReasonSeenLost
	case ErrTimedOut:
		return e.Reason == ReasonTimedOut
	case ErrInvalidPolicy:
		return e.Reason == ReasonInvalidPolicy
	}
	return false
}

// Retryable reports whether retrying later may succeed (cap exceeded, or a
// timeout while replicas catch up). A lost write is not retryable.
func (e *ReadError) Retryable() bool {
	return e.Reason == ReasonCapExceeded || e.Reason == ReasonTimedOut
}

// Sentinels for ReadError reasons.
var (
	ErrCapExceeded   = errors.New("router: freshness fallback cap exceeded (retryable)")
	ErrWriteLost     = errors.New("router: the session's write was lost in a failover")
	ErrSeenLost      = errors.New("router: data the session was shown was lost in a failover")
	ErrTimedOut      = errors.New("router: no server can serve the session's token within the budget")
	ErrInvalidPolicy = errors.New("router: invalid policy")
)

// TraceStep is one decision of a read (Config.Trace).
type TraceStep struct {
	// At is the router clock at the decision.
	At time.Duration
	// Decision is Decide's answer; Node names the node it refers to ("" when
	// none).
	Decision Decision
	Node     string
	// Epoch is the topology epoch, Waited the time waited so far.
	Epoch  uint64
	Waited time.Duration
	// Note says what happened next (wait result, node error).
	Note string
}

func (t TraceStep) String() string {
	return fmt.Sprintf("t=%v epoch=%d waited=%v %v/%v node=%q fallback=%v %s",
		t.At, t.Epoch, t.Waited, t.Decision.Action, t.Decision.Reason, t.Node, t.Decision.Fallback, t.Note)
}

// Read is a served read.
type Read struct {
	// Result is the statement's result.
	Result *mysql.Result
	// Node is the node that served it.
	Node string
	// Outcome is the typed outcome (OutReplica, OutFallback, OutPrimary or
	// OutStale: Stale is then true and the data may lack the session's
	// writes).
	Outcome Outcome
	Stale   bool
	// Reason is the final decision's reason.
	Reason Reason
	// Waited is the total time spent waiting for replicas.
	Waited time.Duration
	// Watermark is the position the session's watermark was raised with.
	Watermark gtid.Set
	// Trace holds the decisions when Config.Trace is set.
	Trace []TraceStep
}

// NewSession starts a session with the router's default policy.
func (r *Router) NewSession() *LiveSession {
	return &LiveSession{r: r, policy: r.cfg.Policy}
}

// SetPolicy changes the session's policy.
func (s *LiveSession) SetPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.policy = p
	return nil
}

// SetConsistentReadID sets the session's affinity key from an id.
func (s *LiveSession) SetConsistentReadID(id string) { s.st.AffinityKey = hashAffinity(id) }

// State returns a copy of the session's causal state.
func (s *LiveSession) State() Session[gtid.Set] { return s.st }

// Token returns the session's write token (GTID set and epoch) to carry
// across connections, processes or job payloads.
func (s *LiveSession) Token() gtid.Token {
	if !s.st.HasToken {
		return gtid.Token{}
	}
	return gtid.Token{Epoch: s.st.Epoch, GTIDs: s.st.Token.Clone()}
}

// AddToken merges a token carried from elsewhere into the session.
func (s *LiveSession) AddToken(t gtid.Token) {
	if t.GTIDs.IsEmpty() {
		return
	}
	RecordWrite(&s.st, t.GTIDs.Clone(), t.Epoch, s.st.LastWriteAt)
}

// Close closes the session's primary connection.
func (s *LiveSession) Close() {
	if s.prim != nil {
		s.prim.Close()
		s.prim = nil
	}
}

// Exec runs a statement on the primary on the session's own connection
// (writes, transactions) and captures the GTID the primary reports for a
// committed write into the session's token. A write acknowledged without a
// GTID returns ErrMissingGTID (with the result): the token would be wrong.
func (s *LiveSession) Exec(ctx context.Context, query string, args ...any) (*mysql.Result, error) {
	r := s.r
	r.mu.Lock()
	primary, epoch := r.st.Primary, r.st.Epoch
	r.mu.Unlock()
	if s.prim != nil && s.primAt != primary {
		s.prim.Close()
		s.prim, s.inTx, s.txDirty = nil, false, false
	}
	if s.prim == nil {
		c, err := r.dial.dialTracking(ctx, primary.Addr)
		if err != nil {
			return nil, err
		}
		s.prim, s.primAt = c, primary
	}
	res, err := execCtx(ctx, s.prim, query, args...)
	if err != nil {
		var me *mysql.MyError
		if !errors.As(err, &me) {
			s.prim.Close()
			s.prim, s.inTx, s.txDirty = nil, false, false
		}
		return nil, err
	}
	nowInTx := s.prim.IsInTransaction()
	if nowInTx && res.AffectedRows > 0 {
		s.txDirty = true
	}
	var g string
	if res.SessionTracking != nil {
		g = strings.Clone(res.SessionTracking.GTID)
	}
	ended := s.inTx && !nowInTx
	wrote := (!nowInTx && !s.inTx && res.AffectedRows > 0) || (ended && s.txDirty)
	s.inTx = nowInTx
	if ended {
		s.txDirty = false
	}
	if g == "" {
		if wrote {
			return res, fmt.Errorf("%w: %q affected rows", ErrMissingGTID, truncate(query))
		}
		return res, nil
	}
	set, err := gtid.Parse(g)
	if err != nil {
		return res, fmt.Errorf("%w: unparsable GTID %q: %v", ErrMissingGTID, g, err)
	}
	RecordWrite(&s.st, set, epoch, r.now())
	r.mu.Lock()
	if r.st.Epoch == epoch {
		r.st.PrimaryPos = r.st.PrimaryPos.Union(set)
	}
	r.mu.Unlock()
	r.m.writes.Inc()
	return res, nil
}

func truncate(q string) string {
	if len(q) > 60 {
		return q[:60] + "..."
	}
	return q
}

// Query routes a read with the session's policy.
func (s *LiveSession) Query(ctx context.Context, query string, args ...any) (*Read, error) {
	return s.QueryWith(ctx, s.policy, query, args...)
}

// maxNodeErrors bounds the node errors one read retries past.
const maxNodeErrors = 3

// QueryWith routes one read with policy pol (a per-statement override).
// Reads inside an explicit transaction run on the session's primary
// connection. Refused reads return a *ReadError.
func (s *LiveSession) QueryWith(ctx context.Context, pol Policy, query string, args ...any) (*Read, error) {
	r := s.r
	if s.inTx && s.prim != nil {
		res, err := execCtx(ctx, s.prim, query, args...)
		if err != nil {
			r.m.reads.WithLabelValues(pol.Kind.String(), OutError.String(), "in-transaction").Inc()
			return nil, err
		}
		r.m.reads.WithLabelValues(pol.Kind.String(), OutPrimary.String(), "in-transaction").Inc()
		return &Read{Result: res, Node: s.primAt.Name, Outcome: OutPrimary}, nil
	}
	var (
		waited   time.Duration
		trace    []TraceStep
		nodeErrs int
		known    map[string]gtid.Set // positions proven by WAIT_FOR_EXECUTED_GTID_SET
	)
	needWM := pol.Kind == PolicyTokenRYWMR || pol.Kind == PolicyTokenWait
	fail := func(reason Reason, out Outcome) (*Read, error) {
		r.m.reads.WithLabelValues(pol.Kind.String(), out.String(), reason.String()).Inc()
		if waited > 0 {
			r.m.waited.WithLabelValues(pol.Kind.String()).Inc()
		}
		return nil, &ReadError{Reason: reason, Waited: waited, Trace: trace}
	}
	for {
		d, v, nodes, primary, epoch := r.decide(&s.st, &pol, waited, known)
		node := ""
		if d.Replica >= 0 && d.Replica < len(nodes) {
			node = nodes[d.Replica].Name
		} else if d.Action == ActPrimary {
			node = primary.Name
		}
		step := TraceStep{At: r.now(), Decision: d, Node: node, Epoch: epoch, Waited: waited}
		if d.Reanchor {
			s.st.Reanchor(epoch)
		}
		switch d.Action {
		case ActFail:
			if r.cfg.Trace {
				trace = append(trace, step)
			}
			out := OutFailedFast
			if d.Reason == ReasonTimedOut || (d.Reason == ReasonCapExceeded && waited > 0 && r.cfg.Cap.Behavior == CapWaitLonger) {
				out = OutTimedOut
			}
			if d.Reason == ReasonSeenLost {
				s.st.DropSeen()
			}
			return fail(d.Reason, out)
		case ActWait:
			need := s.need(&pol)
			t0 := time.Now()
			ok, werr := r.wait(ctx, nodes[d.Replica], need, d.WaitFor)
			el := time.Since(t0)
			waited += el
			step.Note = fmt.Sprintf("waited %v ok=%v", el.Round(time.Microsecond), ok)
			if r.cfg.Trace {
				trace = append(trace, step)
			}
			if ctx.Err() != nil {
				r.m.reads.WithLabelValues(pol.Kind.String(), OutError.String(), "context").Inc()
				return nil, ctx.Err()
			}
			if werr != nil {
				r.markDown(nodes[d.Replica], werr)
			}
			if ok && r.cfg.Wait == WaitGTIDFunction {
				if known == nil {
					known = map[string]gtid.Set{}
				}
				known[nodes[d.Replica].Name] = need
			}
			continue
		}
		// Serve: replica, stale replica or primary.
		target := primary
		var viewPos gtid.Set
		if d.Action == ActReplica || d.Action == ActStale {
			target = nodes[d.Replica]
			viewPos = v.Replicas[d.Replica].Applied
		} else {
			viewPos = v.Primary
		}
		res, wm, err := r.run(ctx, target, needWM && r.cfg.Watermark == WatermarkAfterRead, query, args...)
		if err != nil {
			var me *mysql.MyError
			if errors.As(err, &me) || ctx.Err() != nil {
				r.m.reads.WithLabelValues(pol.Kind.String(), OutError.String(), "statement").Inc()
				return nil, err
			}
			step.Note = "node error: " + err.Error()
			if r.cfg.Trace {
				trace = append(trace, step)
			}
			r.markDown(target, err)
			if nodeErrs++; nodeErrs > maxNodeErrors {
				r.m.reads.WithLabelValues(pol.Kind.String(), OutError.String(), "node").Inc()
				return nil, err
			}
			continue
		}
		if r.cfg.Trace {
			trace = append(trace, step)
		}
		if needWM {
			if r.cfg.Watermark == WatermarkViewAtDecision {
				wm = viewPos
			}
			Observe(&s.st, wm, epoch)
		}
		out := OutReplica
		switch {
		case d.Action == ActStale:
			out = OutStale
		case d.Action == ActPrimary && d.Fallback:
			out = OutFallback
			r.m.fallbacks.WithLabelValues(d.Reason.String()).Inc()
		case d.Action == ActPrimary:
			out = OutPrimary
		}
		r.m.reads.WithLabelValues(pol.Kind.String(), out.String(), d.Reason.String()).Inc()
		if waited > 0 {
			r.m.waited.WithLabelValues(pol.Kind.String()).Inc()
		}
		return &Read{Result: res, Node: target.Name, Outcome: out, Stale: out == OutStale, Reason: d.Reason,
			Waited: waited, Watermark: wm, Trace: trace}, nil
	}
}

// need is what a replica must contain for the session under pol.
func (s *LiveSession) need(pol *Policy) gtid.Set {
	var n gtid.Set
	if s.st.HasToken {
		n = s.st.Token
	}
	if s.st.HasSeen && pol.Kind != PolicyTokenRYW {
		n = n.Union(s.st.Seen)
	}
	return n
}

// decide calls DecideLive under the router's lock with the router's state
// and stores the primary position it raised.
func (r *Router) decide(st *Session[gtid.Set], pol *Policy, waited time.Duration, known map[string]gtid.Set) (Decision, *View[gtid.Set], []Node, Node, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	req := LiveRequest{Session: st, Policy: pol, Cap: &r.cfg.Cap, Wall: time.Now(), Now: r.now(),
		Rand: r.rng.Uint64(), Waited: waited, Known: known}
	d, v, prim := DecideLive(&r.st, r.cfg.Positions, &req, &r.bucket)
	r.st.PrimaryPos = prim
	return d, v, r.st.Replicas, r.st.Primary, r.st.Epoch
}

// wait waits up to d for node to contain need, by the configured method.
// ok reports that the node is known to contain need; err a node failure.
func (r *Router) wait(ctx context.Context, n Node, need gtid.Set, d time.Duration) (ok bool, err error) {
	t0 := time.Now()
	defer func() {
		res := "caught-up"
		if !ok {
			res = "timeout"
		}
		r.m.waitSecs.WithLabelValues(r.cfg.Wait.String(), res).Observe(time.Since(t0).Seconds())
	}()
	if r.cfg.Wait == WaitWatcher {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		werr := r.cfg.Positions.WaitFor(wctx, n.Name, need)
		return werr == nil, nil
	}
	c, err := r.pool.get(ctx, n.Addr)
	if err != nil {
		return false, err
	}
	secs := strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', 3, 64)
	// The statement itself is bounded by its timeout; give the connection a
	// little slack beyond it.
	wctx, cancel := context.WithTimeout(ctx, d+time.Second)
	defer cancel()
	res, err := execCtx(wctx, c, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, "+secs+")", need.String())
	if err != nil {
		c.Close()
		return false, err
	}
	r.pool.put(n.Addr, c)
	v, err := res.GetInt(0, 0)
	if err != nil {
		return false, err
	}
	return v == 0, nil
}

// run executes a read on n and, when wantWM, reads n's @@gtid_executed on
// the same connection right after it: everything the statement could
// observe was committed before that read, so the set contains it.
func (r *Router) run(ctx context.Context, n Node, wantWM bool, query string, args ...any) (*mysql.Result, gtid.Set, error) {
	r.mu.Lock()
	r.st.InFlight[n.Name]++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.st.InFlight[n.Name]--; r.st.InFlight[n.Name] <= 0 {
			delete(r.st.InFlight, n.Name)
		}
		r.mu.Unlock()
	}()
	c, err := r.pool.get(ctx, n.Addr)
	if err != nil {
		return nil, gtid.Set{}, err
	}
	res, err := execCtx(ctx, c, query, args...)
	if err != nil {
		r.release(n, c, err)
		return nil, gtid.Set{}, err
	}
	var wm gtid.Set
	if wantWM {
		if wm, err = readExecuted(ctx, c); err != nil {
			r.release(n, c, err)
			return nil, gtid.Set{}, err
		}
	}
	r.pool.put(n.Addr, c)
	return res, wm, nil
}

// release returns c after a server error or closes it after a broken one.
func (r *Router) release(n Node, c *client.Conn, err error) {
	var me *mysql.MyError
	if errors.As(err, &me) {
		r.pool.put(n.Addr, c)
		return
	}
	c.Close()
}
