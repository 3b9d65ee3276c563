package live

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// ReadError is the typed error of a read the router refused to serve. It
// matches ErrCapExceeded, ErrWriteLost, ErrSeenLost, ErrTimedOut or
// ErrInvalidPolicy (by Reason) and ErrDeferred (by Outcome) with
// errors.Is.
type ReadError struct {
	// Reason is the decision's reason.
	Reason router.Reason
	// Outcome is router.OutFailedFast (refused at once),
	// router.OutTimedOut (refused after waiting) or router.OutDeferred
	// (deferred: retry after RetryAfter), as counted.
	Outcome router.Outcome
	// Waited is how long the read waited before failing.
	Waited time.Duration
	// RetryAfter is a deferred read's estimate of when to try again
	// (router.Decision.RetryAfter: the least time lag among the up
	// replicas, from the router's commit log; at least
	// router.MinRetryAfter); zero for the other outcomes.
	RetryAfter time.Duration
	// Trace holds the decisions when Config.Trace is set.
	Trace []TraceStep
}

func (e *ReadError) Error() string {
	if e.Outcome == router.OutDeferred {
		return deferredMessage(e)
	}
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
	case ErrDeferred:
		return e.Outcome == router.OutDeferred
	}
	return false
}

// Retryable reports whether retrying later may succeed (deferred, cap
// exceeded, or a timeout while replicas catch up). A lost write is not
// retryable.
func (e *ReadError) Retryable() bool {
	return e.Outcome == router.OutDeferred || e.Reason == router.ReasonCapExceeded || e.Reason == router.ReasonTimedOut
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
type Read[P gtid.Position[P]] struct {
	// Result is the statement's result (nil from QueryFunc: the caller
	// ran the statement).
	Result *mysql.Result
	// Node is the node that served it.
	Node string
	// Outcome is the typed outcome (router.OutReplica, router.OutFallback, router.OutPrimary or
	// router.OutStale: Stale is then true and the data may lack the session's
	// writes).
	Outcome router.Outcome
	Stale   bool
	// Reason is the final decision's reason (zero for a pinned read).
	Reason router.Reason
	// HashReason is hashroute's reason for an affinity read (first
	// choice, reselected because the first choice was down, remapped by
	// available-only, moved by the rebalancer); zero otherwise.
	HashReason hashroute.Reason
	// Pin is the session reason a pinned read stayed on the primary
	// (ReadOptions.Pin, or PinTransaction, PinAutocommitOff or
	// PinSessionState for Query), "" for a routed read.
	Pin Pin
	// Waited is the total time spent waiting for replicas.
	Waited time.Duration
	// Watermark is the position the session's watermark was raised with.
	Watermark P
	// Trace holds the decisions when Config.Trace is set.
	Trace []TraceStep
}

// NewSession starts a session with the router's default policy. A session
// holds no connection: writes borrow one from the router's shared primary
// pool, reads one from the per-node read pool (or the caller's own, with
// QueryFunc).
func (r *Router[P]) NewSession() *LiveSession[P] {
	return &LiveSession[P]{r: r, policy: r.cfg.Policy}
}

// SetPolicy changes the session's policy.
func (s *LiveSession[P]) SetPolicy(p router.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if err := checkLivePolicy(p); err != nil {
		return err
	}
	s.policy = p
	return nil
}

// Policy returns the session's policy.
func (s *LiveSession[P]) Policy() router.Policy { return s.policy }

// SetConsistentReadID sets the session's affinity key from an id.
func (s *LiveSession[P]) SetConsistentReadID(id string) { s.st.AffinityKey = hashAffinity(id) }

// SetAffinityKey sets the session's affinity key (hashroute.Hash of an id).
func (s *LiveSession[P]) SetAffinityKey(k uint64) { s.st.AffinityKey = k }

// State returns a copy of the session's causal state.
func (s *LiveSession[P]) State() router.Session[P] { return s.st }

// Token returns the session's write token (the position of its
// acknowledged writes, empty when none) and the epoch it was issued in,
// to carry across connections, processes or job payloads (for MySQL as a
// gtid.Token). The position shares no memory with the session's.
func (s *LiveSession[P]) Token() (P, uint64) {
	var zero P
	if !s.st.HasToken {
		return zero, 0
	}
	return zero.Union(s.st.Token), s.st.Epoch
}

// AddToken merges a token carried from elsewhere (position and epoch) into
// the session. An empty position adds nothing.
func (s *LiveSession[P]) AddToken(pos P, epoch uint64) {
	if isEmpty(pos) {
		return
	}
	var zero P
	s.r.recordWrite(&s.st, zero.Union(pos), epoch, s.st.LastWriteAt)
}

// SetToken replaces the session's token with pos and epoch (an empty pos
// clears it), e.g. for a proxy's SET @causal_token. The watermark is kept.
func (s *LiveSession[P]) SetToken(pos P, epoch uint64) {
	var zero P
	s.st.Token, s.st.HasToken, s.st.Epoch = zero, false, 0
	s.AddToken(pos, epoch)
}

// Seen returns the session's monotonic-reads watermark (what its reads
// were shown; a pending seen not bounded yet is not in it) and the epoch
// it was raised in, to carry across connections with its token (empty
// and 0 when none). The position shares no memory with the session's.
func (s *LiveSession[P]) Seen() (P, uint64) {
	var zero P
	if !s.st.HasSeen {
		return zero, 0
	}
	return zero.Union(s.st.Seen), s.st.SeenEpoch
}

// AddSeen raises the session's watermark with a position carried from
// elsewhere (a session token): the session's later reads under a
// monotonic-reads policy see at least it. An empty position adds
// nothing.
func (s *LiveSession[P]) AddSeen(pos P, epoch uint64) {
	if isEmpty(pos) {
		return
	}
	var zero P
	router.Observe(&s.st, zero.Union(pos), epoch)
}

// ObservePrimary raises the session's watermark with pos, the primary's
// position read after a statement the primary served outside QueryFunc
// showed data (a proxy's locking read), in the current epoch; a pending
// seen is bounded by it too (within an epoch the primary holds what a
// replica showed).
func (s *LiveSession[P]) ObservePrimary(pos P) {
	r := s.r
	r.mu.Lock()
	epoch := r.st.Epoch
	r.mu.Unlock()
	var zero P
	pos = zero.Union(pos)
	router.ResolvePending(&s.st, pos)
	router.Observe(&s.st, pos, epoch)
}

// StartAfterAcked gives a new session, before its first statement, a
// token of every write the primary acknowledged to any session of this
// router in the current epoch (LiveState.Acked): a read-your-writes policy
// then shows it every write acknowledged before it began, as one server
// does for a new connection, whichever connection made them. Without a
// write acknowledged yet it adds nothing.
func (s *LiveSession[P]) StartAfterAcked() {
	r := s.r
	r.mu.Lock()
	acked, at, epoch := r.st.Acked, r.st.AckedAt, r.st.Epoch
	r.mu.Unlock()
	if isEmpty(acked) {
		return
	}
	var zero P
	r.recordWrite(&s.st, zero.Union(acked), epoch, at)
}

// noteAckedLocked joins an acknowledged write (current epoch) to
// LiveState.Acked; r.mu is held.
func (r *Router[P]) noteAckedLocked(pos P, at time.Duration) {
	if !r.st.Acked.Contains(pos) {
		r.st.Acked = r.cfg.Flavor.Compact(r.st.Acked.Union(pos))
	}
	r.st.AckedAt = at
}

// isEmpty reports whether p is the empty position (contained in the zero
// value, which holds nothing: gtid.Position's contract).
func isEmpty[P gtid.Position[P]](p P) bool {
	var zero P
	return zero.Contains(p)
}

// RecordAck records a write position the primary acknowledged to this
// session on a connection the router does not own (a proxy's own primary
// connection): it joins the session's token (current epoch) and the
// router's lower bound of the primary's position, as Exec does.
func (s *LiveSession[P]) RecordAck(set P) {
	if isEmpty(set) {
		return
	}
	r := s.r
	at := r.now()
	r.mu.Lock()
	epoch, reps := r.st.Epoch, r.st.Replicas
	if !r.st.PrimaryPos.Contains(set) {
		r.st.PrimaryPos = r.st.PrimaryPos.Union(set)
		r.st.Commits.Record(time.Now(), r.st.PrimaryPos)
	}
	r.noteAckedLocked(set, at)
	r.mu.Unlock()
	r.want(reps, set)
	r.recordWrite(&s.st, set, epoch, at)
	r.m.writes.Inc()
}

// Close returns the session's pinned primary connection, if any. A
// connection inside a transaction or carrying session state is closed
// (the server rolls the transaction back), never handed to another
// session.
func (s *LiveSession[P]) Close() { s.release(false) }

// release gives the pinned primary connection back: to the pool when
// reusable (and nothing pins it), closed otherwise.
func (s *LiveSession[P]) release(reusable bool) {
	if s.prim == nil {
		return
	}
	s.r.prim.put(s.prim, reusable && !s.inTx && !s.sticky)
	s.prim, s.inTx, s.txDirty, s.sticky = nil, false, false, false
}

// Pin says why a read stays on the primary without a decision: a session
// reason (Read.Pin, ReadOptions.Pin, the reason label of the metrics). The
// live router's own sessions pin for the first three; the proxy knows the
// others from the statements it relays.
type Pin string

const (
	// PinTransaction: an explicit transaction is open.
	PinTransaction Pin = "in-transaction"
	// PinAutocommitOff: autocommit is off (every statement is in a
	// transaction).
	PinAutocommitOff Pin = "autocommit-off"
	// PinSessionState: the connection carries session state (SET, USE,
	// temporary tables, user variables: session_track_state_change).
	PinSessionState Pin = "session-state"
	// PinTempTable: the session created a temporary table (it exists on
	// the primary only).
	PinTempTable Pin = "temp-table-session"
	// PinLockedTables: the session holds LOCK TABLES.
	PinLockedTables Pin = "locked-tables"
	// PinUserVariables: the statement uses user variables set on the
	// primary.
	PinUserVariables Pin = "user-variables"
	// PinNoReplicas: no replica is configured.
	PinNoReplicas Pin = "no-replicas"
)

// pinReason says why the session keeps its primary connection, or "".
func (s *LiveSession[P]) pinReason() Pin {
	switch {
	case s.prim == nil:
		return ""
	case s.inTx:
		return PinTransaction
	case s.sticky:
		return PinSessionState
	case !s.prim.c.IsAutoCommit():
		return PinAutocommitOff
	}
	return ""
}

// Exec runs a statement on the primary (writes, transactions) and captures
// the position the primary reports for a committed write (for MySQL its
// GTID) into the session's token. The connection is borrowed from the
// router's shared, bounded primary pool (Config.PrimaryPool; Exec waits for
// a free one until ctx ends) and returned after the statement, unless a
// transaction is open, autocommit is off or the statement changed session
// state (SET, USE, temporary tables, user variables: reported by
// session_track_state_change): then the session keeps it until the
// transaction ends (or, for session state, until Close), and reads go to
// it too. A write acknowledged without a position returns ErrMissingGTID
// (with the result): the token would be wrong.
func (s *LiveSession[P]) Exec(ctx context.Context, query string, args ...any) (*mysql.Result, error) {
	res, _, err := s.ExecWrite(ctx, query, args...)
	return res, err
}

// Write is what ExecWrite reports of a statement's write.
type Write[P gtid.Position[P]] struct {
	// Pos is the write's position (Flavor.WritePosition), the one Exec added
	// to the session's token; meaningful when OK.
	Pos P
	// OK: the statement committed a write and the router tokened it (false
	// when it committed nothing, its transaction is still open, and on
	// every error).
	OK bool
	// GTID is the GTID text the server tracked for it ("" when none).
	GTID string
}

// ExecWrite is Exec that also returns what the primary reported for the
// statement (parsed from the router's own copy of the OK packet).
func (s *LiveSession[P]) ExecWrite(ctx context.Context, query string, args ...any) (*mysql.Result, Write[P], error) {
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
			return nil, Write[P]{}, ErrTxLost
		}
	}
	if s.prim == nil {
		pc, err := r.prim.get(ctx, primary)
		if err != nil {
			return nil, Write[P]{}, err
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
			return nil, Write[P]{}, err
		}
		s.settle(wasPinned)
		return nil, Write[P]{}, err
	}
	nowInTx := s.prim.c.IsInTransaction()
	if nowInTx && res.AffectedRows > 0 {
		s.txDirty = true
	}
	// The GTID and state change come from the router's own copy of the
	// response (mysqlwire.Recorder), never from res.SessionTracking (see
	// package mysqlwire).
	var ack Ack
	if tr, err := mysqlwire.ParseLastOK(raw); err == nil {
		ack = Ack{GTID: tr.GTID, StateChanged: tr.StateChanged, Vars: tr.Vars}
		if tr.StateChanged {
			s.sticky = true
		}
	} else if !errors.Is(err, mysqlwire.ErrNoOK) {
		s.release(false)
		return res, Write[P]{}, fmt.Errorf("%w: %v", ErrMissingGTID, err)
	}
	ended := s.inTx && !nowInTx
	wrote := (!nowInTx && !s.inTx && res.AffectedRows > 0) || (ended && s.txDirty)
	s.inTx = nowInTx
	if ended {
		s.txDirty = false
	}
	// The write's position, on its own connection before it goes back to
	// the pool (a flavor may read it there right after the commit).
	sc := &sessionConn{c: s.prim.c}
	pos, ok, perr := r.cfg.Flavor.WritePosition(ctx, ack, sc)
	if sc.broken {
		s.release(false)
	} else {
		s.settle(wasPinned)
	}
	w := Write[P]{GTID: ack.GTID}
	if perr != nil {
		return res, w, fmt.Errorf("%w: %v", ErrMissingGTID, perr)
	}
	if !ok {
		if wrote {
			return res, w, fmt.Errorf("%w: %q affected rows", ErrMissingGTID, mysqlwire.Excerpt(query))
		}
		return res, w, nil
	}
	at := r.now()
	r.recordWrite(&s.st, pos, epoch, at)
	r.mu.Lock()
	if r.st.Epoch == epoch {
		if !r.st.PrimaryPos.Contains(pos) {
			r.st.PrimaryPos = r.st.PrimaryPos.Union(pos)
			r.st.Commits.Record(time.Now(), r.st.PrimaryPos)
		}
		r.noteAckedLocked(pos, at)
	}
	reps := r.st.Replicas
	r.mu.Unlock()
	r.want(reps, pos)
	r.m.writes.Inc()
	w.Pos, w.OK = pos, true
	return res, w, nil
}

// settle returns the connection to the pool after a statement unless
// something pins it; a new pin is counted by reason.
func (s *LiveSession[P]) settle(wasPinned Pin) {
	why := s.pinReason()
	if why == "" {
		s.release(true)
		return
	}
	if why != wasPinned {
		s.r.m.pins.WithLabelValues(string(why)).Inc()
	}
}

// Query routes a read with the session's policy.
func (s *LiveSession[P]) Query(ctx context.Context, query string, args ...any) (*Read[P], error) {
	return s.QueryWith(ctx, s.policy, query, args...)
}

// QueryWith routes one read with policy pol (a per-statement override) and
// runs it on the router's read pool. While the session holds a primary
// connection (open transaction, autocommit off, session state) the read
// runs there, pinned. Refused reads return a *ReadError. It is QueryFunc
// with the router's own connections.
func (s *LiveSession[P]) QueryWith(ctx context.Context, pol router.Policy, query string, args ...any) (*Read[P], error) {
	r := s.r
	var o ReadOptions[P]
	o.Pin = s.pinReason()
	var res *mysql.Result
	rd, err := s.QueryFunc(ctx, pol, o, func(ctx context.Context, t Target) (P, error) {
		var wm P
		if t.Pin != "" {
			var err error
			if res, err = mysqlwire.Exec(ctx, s.prim.c, query, args...); err != nil {
				var me *mysql.MyError
				if !errors.As(err, &me) {
					s.release(false)
				}
				return wm, err
			}
			return wm, nil
		}
		if t.Replica >= 0 {
			// A replica that stops answering (paused, hung) while its
			// position source reports it unhealthy is given up: the
			// connection is cut, the node held down, the read decided
			// again.
			var stop func()
			ctx, stop = r.watchNode(ctx, t.Node)
			defer stop()
		}
		wk := wmNone
		switch {
		case t.Watermark && t.Replica < 0:
			wk = wmPrimary
		case t.Watermark:
			wk = wmNode
		}
		var err error
		res, wm, err = r.run(ctx, t.Node, wk, query, args...)
		return wm, err
	})
	if err != nil {
		return nil, err
	}
	rd.Result = res
	return rd, nil
}
