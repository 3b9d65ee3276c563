package live

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// ReadError is the typed error of a read the router refused to serve. It
// matches ErrCapExceeded, ErrWriteLost, ErrSeenLost, ErrTimedOut or
// ErrInvalidPolicy with errors.Is.
type ReadError struct {
	// Reason is the decision's reason.
	Reason router.Reason
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
		return e.Reason == router.ReasonCapExceeded
	case ErrWriteLost:
		return e.Reason == router.ReasonWriteLost
	case ErrSeenLost:
		return e.Reason == router.ReasonSeenLost
	case ErrTimedOut:
		return e.Reason == router.ReasonTimedOut
	case ErrInvalidPolicy:
		return e.Reason == router.ReasonInvalidPolicy
	}
	return false
}

// Retryable reports whether retrying later may succeed (cap exceeded, or a
// timeout while replicas catch up). A lost write is not retryable.
func (e *ReadError) Retryable() bool {
	return e.Reason == router.ReasonCapExceeded || e.Reason == router.ReasonTimedOut
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
	Decision router.Decision
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
	// Result is the statement's result (nil from QueryFunc: the caller
	// ran the statement).
	Result *mysql.Result
	// Node is the node that served it.
	Node string
	// Outcome is the typed outcome (OutReplica, OutFallback, OutPrimary or
	// OutStale: Stale is then true and the data may lack the session's
	// writes).
	Outcome Outcome
	Stale   bool
	// Reason is the final decision's reason (zero for a pinned read).
	Reason router.Reason
	// Pin is the session reason a pinned read stayed on the primary
	// (ReadOptions.Pin, or in-transaction/autocommit-off/session-state for
	// Query), "" for a routed read.
	Pin string
	// Waited is the total time spent waiting for replicas.
	Waited time.Duration
	// Watermark is the position the session's watermark was raised with.
	Watermark gtid.Set
	// Trace holds the decisions when Config.Trace is set.
	Trace []TraceStep
}

// NewSession starts a session with the router's default policy. A session
// holds no connection: writes borrow one from the router's shared primary
// pool, reads one from the per-node read pool (or the caller's own, with
// QueryFunc).
func (r *Router) NewSession() *LiveSession {
	return &LiveSession{r: r, policy: r.cfg.Policy}
}

// SetPolicy changes the session's policy.
func (s *LiveSession) SetPolicy(p router.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := liveSupports(p, router.Cap{}); err != nil {
		return err
	}
	s.policy = p
	return nil
}

// Policy returns the session's policy.
func (s *LiveSession) Policy() router.Policy { return s.policy }

// SetConsistentReadID sets the session's affinity key from an id.
func (s *LiveSession) SetConsistentReadID(id string) { s.st.AffinityKey = hashAffinity(id) }

// SetAffinityKey sets the session's affinity key (hashroute.Hash of an id).
func (s *LiveSession) SetAffinityKey(k uint64) { s.st.AffinityKey = k }

// State returns a copy of the session's causal state.
func (s *LiveSession) State() router.Session[gtid.Set] { return s.st }

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
	s.r.recordWrite(&s.st, t.GTIDs.Clone(), t.Epoch, s.st.LastWriteAt)
}

// SetToken replaces the session's token with t (an empty t clears it),
// e.g. for a proxy's SET @causal_token. The watermark is kept.
func (s *LiveSession) SetToken(t gtid.Token) {
	s.st.Token, s.st.HasToken, s.st.Epoch = gtid.Set{}, false, 0
	s.AddToken(t)
}

// RecordAck records a GTID set the primary acknowledged to this session on
// a connection the router does not own (a proxy's own primary
// connection): it joins the session's token (current epoch) and the
// router's lower bound of the primary's position, as Exec does.
func (s *LiveSession) RecordAck(set gtid.Set) {
	if set.IsEmpty() {
		return
	}
	r := s.r
	r.mu.Lock()
	epoch := r.st.Epoch
	if !r.st.PrimaryPos.Contains(set) {
		r.st.PrimaryPos = r.st.PrimaryPos.Union(set)
	}
	r.mu.Unlock()
	r.recordWrite(&s.st, set, epoch, r.now())
	r.m.writes.Inc()
}

// Close returns the session's pinned primary connection, if any. A
// connection inside a transaction or carrying session state is closed
// (the server rolls the transaction back), never handed to another
// session.
func (s *LiveSession) Close() { s.release(false) }

// release gives the pinned primary connection back: to the pool when
// reusable (and nothing pins it), closed otherwise.
func (s *LiveSession) release(reusable bool) {
	if s.prim == nil {
		return
	}
	s.r.prim.put(s.prim, reusable && !s.inTx && !s.sticky)
	s.prim, s.inTx, s.txDirty, s.sticky = nil, false, false, false
}

// pinReason says why the session keeps its primary connection, or "".
func (s *LiveSession) pinReason() string {
	switch {
	case s.prim == nil:
		return ""
	case s.inTx:
		return "in-transaction"
	case s.sticky:
		return "session-state"
	case !s.prim.c.IsAutoCommit():
		return "autocommit-off"
	}
	return ""
}

// Exec runs a statement on the primary (writes, transactions) and captures
// the GTID the primary reports for a committed write into the session's
// token. The connection is borrowed from the router's shared, bounded
// primary pool (Config.PrimaryPool; Exec waits for a free one until ctx
// ends) and returned after the statement, unless a transaction is open,
// autocommit is off or the statement changed session state (SET, USE,
// temporary tables, user variables: reported by session_track_state_change):
// then the session keeps it until the transaction ends (or, for session
// state, until Close), and reads go to it too. A write acknowledged without
// a GTID returns ErrMissingGTID (with the result): the token would be
// wrong.
func (s *LiveSession) Exec(ctx context.Context, query string, args ...any) (*mysql.Result, error) {
	res, _, err := s.ExecGTID(ctx, query, args...)
	return res, err
}

// ExecGTID is Exec that also returns the GTID set the primary reported for
// the statement (parsed from the router's own copy of the OK packet, the
// set Exec added to the session's token): empty when the statement
// committed nothing (or its transaction is still open) and on every error.
func (s *LiveSession) ExecGTID(ctx context.Context, query string, args ...any) (*mysql.Result, gtid.Set, error) {
	r := s.r
	r.mu.Lock()
	primary, epoch := r.st.Primary, r.st.Epoch
	r.mu.Unlock()
	if s.prim != nil && s.prim.node != primary {
		// Failover: the pinned connection is to the old primary; what it
		// held (an open transaction, session state) is gone. Running the
		// statement in autocommit on the new primary would silently split
		// the transaction: refuse it.
		lost := s.inTx
		s.release(false)
		if lost {
			return nil, gtid.Set{}, ErrTxLost
		}
	}
	if s.prim == nil {
		pc, err := r.prim.get(ctx, primary)
		if err != nil {
			return nil, gtid.Set{}, err
		}
		s.prim = pc
	}
	wasPinned := s.pinReason()
	rec := mysqlwire.InstallRecorder(s.prim.c)
	rec.Start()
	res, err := mysqlwire.Exec(ctx, s.prim.c, query, args...)
	raw := rec.Stop()
	if err != nil {
		var me *mysql.MyError
		if !errors.As(err, &me) {
			s.release(false) // broken connection: a transaction on it is rolled back
			return nil, gtid.Set{}, err
		}
		s.settle(wasPinned)
		return nil, gtid.Set{}, err
	}
	nowInTx := s.prim.c.IsInTransaction()
	if nowInTx && res.AffectedRows > 0 {
		s.txDirty = true
	}
	// The GTID and state change come from the router's own copy of the
	// response (mysqlwire.Recorder), never from res.SessionTracking (see
	// package mysqlwire).
	var g string
	if tr, err := mysqlwire.ParseLastOK(raw); err == nil {
		g = tr.GTID
		if tr.StateChanged {
			s.sticky = true
		}
	} else if !errors.Is(err, mysqlwire.ErrNoOK) {
		s.release(false)
		return res, gtid.Set{}, fmt.Errorf("%w: %v", ErrMissingGTID, err)
	}
	ended := s.inTx && !nowInTx
	wrote := (!nowInTx && !s.inTx && res.AffectedRows > 0) || (ended && s.txDirty)
	s.inTx = nowInTx
	if ended {
		s.txDirty = false
	}
	s.settle(wasPinned)
	if g == "" {
		if wrote {
			return res, gtid.Set{}, fmt.Errorf("%w: %q affected rows", ErrMissingGTID, mysqlwire.Excerpt(query))
		}
		return res, gtid.Set{}, nil
	}
	set, err := gtid.Parse(g)
	if err != nil {
		return res, gtid.Set{}, fmt.Errorf("%w: unparsable GTID %q: %v", ErrMissingGTID, g, err)
	}
	r.recordWrite(&s.st, set, epoch, r.now())
	r.mu.Lock()
	if r.st.Epoch == epoch && !r.st.PrimaryPos.Contains(set) {
		r.st.PrimaryPos = r.st.PrimaryPos.Union(set)
	}
	r.mu.Unlock()
	r.m.writes.Inc()
	return res, set, nil
}

// settle returns the connection to the pool after a statement unless
// something pins it; a new pin is counted by reason.
func (s *LiveSession) settle(wasPinned string) {
	why := s.pinReason()
	if why == "" {
		s.release(true)
		return
	}
	if why != wasPinned {
		s.r.m.pins.WithLabelValues(why).Inc()
	}
}

// Query routes a read with the session's policy.
func (s *LiveSession) Query(ctx context.Context, query string, args ...any) (*Read, error) {
	return s.QueryWith(ctx, s.policy, query, args...)
}

// QueryWith routes one read with policy pol (a per-statement override) and
// runs it on the router's read pool. While the session holds a primary
// connection (open transaction, autocommit off, session state) the read
// runs there, pinned. Refused reads return a *ReadError. It is QueryFunc
// with the router's own connections.
func (s *LiveSession) QueryWith(ctx context.Context, pol router.Policy, query string, args ...any) (*Read, error) {
	r := s.r
	var o ReadOptions
	o.Pin = s.pinReason()
	var res *mysql.Result
	rd, err := s.QueryFunc(ctx, pol, o, func(ctx context.Context, t Target) (gtid.Set, error) {
		if t.Pin != "" {
			var err error
			if res, err = mysqlwire.Exec(ctx, s.prim.c, query, args...); err != nil {
				var me *mysql.MyError
				if !errors.As(err, &me) {
					s.release(false)
				}
				return gtid.Set{}, err
			}
			return gtid.Set{}, nil
		}
		var wm gtid.Set
		var err error
		res, wm, err = r.run(ctx, t.Node, t.Watermark, query, args...)
		return wm, err
	})
	if err != nil {
		return nil, err
	}
	rd.Result = res
	return rd, nil
}
