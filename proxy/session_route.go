package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router/live"
)

// The route-and-relay path: every read (a COM_QUERY, a prepared
// statement's execution relayed raw or decoded) goes through routeRelay,
// and every failure of a statement becomes the client's answer in one
// place (answer).

// readOptions builds the router's per-read options from the statement:
// its own token (this read only), its consistent_read_id, a session pin
// (sessionState.readPin), and the wait run on the session's replica
// connection.
func (s *session) readOptions(st Stmt) (live.ReadOptions[gtid.Set], error) {
	o := live.ReadOptions[gtid.Set]{Wait: s.waitFunc()}
	if pin := s.state.readPin(st, len(s.topo.replicas)); pin != "" {
		s.srv.m.primaryReasons.WithLabelValues(string(pin)).Inc()
		o.Pin = pin
		return o, nil
	}
	if st.Token != "" {
		c, err := s.parseToken(st.Token, st.TokenForm)
		if err != nil {
			return o, err
		}
		tok := c.forRead()
		o.Token, o.TokenEpoch = tok.GTIDs, tok.Epoch
	}
	if st.ReadID != "" {
		o.AffinityKey = hashroute.Hash(st.ReadID)
	}
	return o, nil
}

// conn returns the session's connection for a router target: the primary
// (reconnected outside transactions) or replica i (opened lazily; now is
// the caller's clock reading for its idle check). A
// connection that cannot be opened is the router's verdict: a node
// failure it may route around (marked down, decided again), or a
// replica that refused the session's state (sessionRefusedError, not a
// node fault).
func (s *session) conn(t live.Target, now time.Time) (*backendConn, *live.RunError) {
	if !s.topo.holds(t) {
		// A promotion between the session's command start (rebase) and
		// the router's decision: the decision is the new epoch's.
		return nil, &live.RunError{Err: s.proxyErr(failoverRetry, codeBackendLost,
			"the primary changed (epoch %d) while this statement was routed: it was not run; run it again", s.srv.topo.Load().epoch)}
	}
	if t.Replica < 0 {
		if err := s.ensurePrimary(); err != nil {
			if re := s.busyRun(err); re != nil {
				return nil, re
			}
			return nil, &live.RunError{Err: err, NodeFailed: true}
		}
		return s.primary, nil
	}
	bc, err := s.replica(t.Replica, now)
	if err != nil {
		if re := s.busyRun(err); re != nil {
			return nil, re // a busy pool (multiplex), not a node fault
		}
		if refusedSession(err) {
			// The replica is up; it refused this session's state (a
			// database it has not received yet): not a node fault.
			return nil, &live.RunError{Err: &sessionRefusedError{err}}
		}
		return nil, &live.RunError{Err: err, NodeFailed: true, Retry: true}
	}
	return bc, nil
}

// sessionRefusedError: a replica refused to take the session's state on a
// new connection (refusedSession). The read is run again pinned to the
// primary (routeRelay).
type sessionRefusedError struct{ err error }

func (e *sessionRefusedError) Error() string { return e.err.Error() }
func (e *sessionRefusedError) Unwrap() error { return e.err }

// refusedSession reports whether opening a replica connection failed
// because the server refused the session's own state: the handshake's
// database unknown there (ER_BAD_DB_ERROR, a lagging replica), or a
// replayed session statement refused. Anything else (unreachable, 1040,
// the proxy's account refused) is the node's.
func refusedSession(err error) bool {
	var be *BackendError
	if !errors.As(err, &be) || be.Code == 0 {
		return false
	}
	return be.Op == "replay" || be.Op == "connect" && be.Code == mysql.ER_BAD_DB_ERROR
}

// readQuery routes a COM_QUERY read through the router (ls.QueryFunc) and
// relays it raw from the chosen node on the session's own connection.
func (s *session) readQuery(query string, st Stmt) (*mysql.Result, error) {
	o, err := s.readOptions(st)
	if err != nil {
		return nil, err
	}
	refused := false
	res, err := s.routeRelay(st, o, func(bc *backendConn, t live.Target, at time.Time) (relayOut, error) {
		role := rolePrimary
		if t.Replica >= 0 {
			role = roleReplica
		}
		s.srv.m.statement(false, st.Kind, role).Inc()
		out, err := relayQuery(s.cc, bc, query, relayReq{ctx: s.ctx, sentAt: at, op: "query", wantGTIDs: s.state.wantGTIDs, watermark: t.Watermark, wmRead: s.wmRead(t.Replica), flush: s.flushFunc(), dropTracked: s.srv.dropTracked.Load(), holdReadOnly: t.Replica >= 0, rename: s.rename, token: s.tokenTracker()})
		refused = refused || out.readOnly
		return out, err
	})
	if !refused || err != nil {
		return res, err
	}
	return s.writingRead(query)
}

// writingRead runs on the primary a read a replica refused as a write
// (relayOut.readOnly: a SELECT of a stored function that writes; nothing
// ran there), counted in primary_statements_total{reason=
// "replica-read-only"}. The proxy cannot tell a stored function from a
// built-in one by its name, so such a read goes to a replica first.
func (s *session) writingRead(query string) (*mysql.Result, error) {
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	st := primary(ReasonReplicaReadOnly)
	s.srv.m.primaryReasons.WithLabelValues(st.Reason.String()).Inc()
	s.srv.m.statement(false, st.Kind, rolePrimary).Inc()
	out, err := s.relay(s.primary, query, nil)
	s.state.last = s.primary
	if err != nil {
		return s.answer(err, s.primary)
	}
	s.afterPrimary(st, out)
	return done(), nil
}

// readRun is what the session saw of one read's runs on the nodes the
// router chose. The router gets only its verdict on each run (a
// live.RunError: node failed, decide again); the client's answer is made
// from the readRun (answer), never by unwrapping the router's error.
type readRun struct {
	// served is the connection that ran the read to its end; out is what
	// its relay learnt; relayed: the response reached the client.
	served  *backendConn
	out     relayOut
	relayed bool
	// err is the cause of the last failed run, on errOn (nil: no
	// connection was had); sessionRefused: a replica refused the
	// session's state there.
	err            error
	errOn          *backendConn
	sessionRefused bool
}

// failed records a failed run and returns the router's verdict on it.
func (r *readRun) failed(cause error, on *backendConn, verdict error) error {
	var sre *sessionRefusedError
	r.err, r.errOn, r.sessionRefused = cause, on, errors.As(cause, &sre)
	return verdict
}

// relayFunc runs a read on bc, the session's connection to target t,
// writing its response to the client (or handing it to the caller, the
// decoded prepared path); at is the run's clock reading (relayReq.sentAt).
// Its error is a relay error (never retried
// unless nothing reached the client and the node is at fault), a
// *live.RunError with its own verdict, or the server's refusal
// (*mysql.MyError) before anything was written.
type relayFunc func(bc *backendConn, t live.Target, at time.Time) (relayOut, error)

// routeRelay routes one read through the router (ls.QueryFunc: decision,
// wait, cap, counting) and runs relayOne on the session's connection to
// the chosen node. The server's ERR packet, already relayed, counts as a
// statement error; the watermark read behind the read is the router's.
func (s *session) routeRelay(st Stmt, o live.ReadOptions[gtid.Set], relayOne relayFunc) (*mysql.Result, error) {
	var run readRun
	_, err := s.ls.QueryFunc(s.ctx, s.ls.Policy(), o, func(_ context.Context, t live.Target) (gtid.Set, error) {
		// One clock reading for the run: the idle peek's, the idle time's
		// and the command's (backendConn.used).
		now := time.Now()
		bc, rerr := s.conn(t, now)
		if rerr != nil {
			return gtid.Set{}, run.failed(rerr.Err, nil, rerr)
		}
		if on := s.srv.cfg.OnRead; on != nil {
			on(ReadRoute{Conn: s.id, Node: t.Node.Name, Replica: t.Replica, Reason: t.Reason, HashReason: t.HashReason})
		}
		run.served, s.state.last = bc, bc
		idleFor := now.Sub(bc.used) // before this command (closedWhileIdle's race)
		if h := s.watchFor(bc, t.Replica); h != nil {
			bc.watch(h)
		}
		out, err := relayOne(bc, t, now)
		bc.unwatch()
		if err != nil {
			return gtid.Set{}, s.runFailed(&run, bc, err, idleFor)
		}
		run.out, run.relayed = out, true
		s.state.noteAnswer(st, out.warnings, out.serverErr)
		if out.serverErr {
			// The node served the read; its answer was the server's
			// refusal of the statement (already with the client). That is
			// the statement's outcome, not the router's: counted here,
			// and the read counts where it was served.
			s.srv.m.serverErrors.WithLabelValues(t.Outcome.String()).Inc()
		}
		if f := s.srv.wmFault.Load(); f != nil && t.Watermark && out.wmErr == nil && bc != s.primary {
			if err := (*f)(bc.b.Name); err != nil {
				run.out.wmErr, bc.broken = err, true
			}
		}
		if t.Watermark {
			if out.wmFallback {
				s.srv.m.watermarkFallbacks.WithLabelValues("replica-query").Inc()
			}
			if run.out.wmErr != nil {
				return s.watermarkFromPrimary(bc, run.out.wmErr)
			}
			return out.watermark, nil
		}
		return gtid.Set{}, nil
	})
	s.afterRun(st, &run)
	if err == nil {
		return done(), nil
	}
	var rde *live.ReadError
	switch {
	case errors.As(err, &rde):
		// The router's own refusal (its error, not one of the runs').
		return nil, s.refused(rde, o)
	case run.relayed:
		// The result reached the client but the watermark could not be
		// read: the session's monotonic-reads state is unknown. Closing
		// the client is the explicit, counted way out.
		s.srv.m.clientErrors.WithLabelValues("watermark-read-failed").Inc()
		s.cc.Close()
		return done(), nil
	case (run.sessionRefused || errors.As(err, new(*sessionRefusedError))) && o.Pin == "":
		// (The second: the replica refused the session's state when the
		// wait opened the connection, before any run.)
		// Nothing reached the client: run it where the session's state
		// is, once (counted by the router as pinned, session-state).
		s.srv.m.primaryReasons.WithLabelValues("replica-refused-session").Inc()
		o.Pin = live.PinSessionState
		return s.routeRelay(st, o, relayOne)
	case run.err != nil:
		return s.answer(run.err, run.errOn)
	}
	// The router failed before any run (its view, its context).
	return nil, s.proxyErr("backend-lost", codeBackendLost, "%v", err)
}

// afterRun mirrors what a read that reached the client did to the
// session: on the primary, as any primary statement; on a replica, a
// state change is dropped (dropReplicaState).
func (s *session) afterRun(st Stmt, run *readRun) {
	switch {
	case !run.relayed || run.served == nil:
	case run.served == s.primary:
		s.afterPrimary(st, run.out)
	case run.out.stateChanged:
		s.dropReplicaState(run.served)
	}
}

// dropReplicaState gives up bc, a replica connection on which a routed
// read changed the session's state (a stored function that sets a
// variable; the server's report, relayOut.stateChanged). The state cannot
// follow the session (it is not on the primary, and the function's
// effects must not run twice): it is dropped with the connection, which
// goes back to its pool reset (multiplex) or is closed; the session's
// next statement finds its state as it was before the read. Counted as
// session_state_total{event="replica-state-dropped"}; docs/proxy.md says
// to run such reads on the primary.
func (s *session) dropReplicaState(bc *backendConn) {
	s.srv.m.sessionState.WithLabelValues("replica-state-dropped").Inc()
	if s.state.last == bc {
		s.state.last = nil
	}
	for i, r := range s.replicas {
		if r != bc {
			continue
		}
		s.replicas[i] = nil
		for _, p := range s.state.stmts {
			delete(p.onReplica, i)
		}
		if bc.home != nil {
			bc.home.release(bc, poolDirty)
			return
		}
		bc.close()
		return
	}
}

// runFailed records a run of relayOne on bc that failed with err and
// returns the router's verdict: relayOne's own (a *live.RunError); for a
// relay error that wrote nothing to the client, decide again when the
// watchdog cut an unresponsive replica (held down) or a replica closed a
// connection idle past its wait_timeout as the read was sent (not a
// node fault); any other relay error ends the read (a node failure); the
// server's refusal ends it as the statement's outcome.
func (s *session) runFailed(run *readRun, bc *backendConn, err error, idleFor time.Duration) error {
	var (
		own *live.RunError
		re  *relayError
	)
	switch {
	case errors.As(err, &own):
		return run.failed(own.Err, bc, own)
	case !errors.As(err, &re) && !errors.Is(err, errClientGone):
		// The server refused the statement before anything was written
		// (a prepare on a replica): the router counts a statement error.
		return run.failed(err, bc, err)
	case re != nil && !re.partial && bc.unresponsive():
		// Nothing reached the client: the read is decided again
		// (another replica, or the primary as a fallback the cap
		// counts), the replica held down.
		s.srv.m.backendErrors.WithLabelValues(bc.b.Name, "unresponsive").Inc()
		cause := backendErr(bc.b, "unresponsive", errUnresponsive)
		return run.failed(cause, bc, &live.RunError{Err: cause, NodeFailed: true, Retry: true})
	case re != nil && !re.partial && bc != s.primary && idleFor >= idleCheckAfter:
		// The server closed a connection idle past its wait_timeout as
		// the read was sent (after the peek found it open): nothing
		// reached the client, and a replica read is sent again on a new
		// connection. Not a node fault.
		s.srv.m.idleClosed.WithLabelValues(bc.b.Name, "resent").Inc()
		return run.failed(err, bc, &live.RunError{Err: err, Retry: true})
	}
	return run.failed(err, bc, &live.RunError{Err: err, NodeFailed: re != nil})
}

// wmRead is the watermark reader of a read run on replica i (-1: the
// primary): the node's reader (wmReader), never a statement on the
// session's connection; nil where there is none (a replica under
// watermark_source lazy, which reads no watermark after a read).
func (s *session) wmRead(i int) func(context.Context) (gtid.Set, error) {
	switch {
	case i < 0 && s.topo.primaryWM != nil:
		return s.topo.primaryWM.read
	case i >= 0 && i < len(s.topo.replicaWM):
		return s.topo.replicaWM[i].read
	}
	return nil
}

// watermarkFromPrimary stands in for a replica's watermark that could not
// be read after its result reached the client (wmErr): the primary's
// watermark, read now by the proxy's reader (wmReader). Within
// one topology epoch a replica applies only what the primary committed,
// so what the replica had when it answered is contained in what the
// primary has afterwards: a sound (more cautious) watermark, and the
// client keeps its connection. Counted as
// watermark_fallbacks_total{source="primary"}; when the primary cannot
// answer either, the read fails with wmErr (the client is then closed,
// counted as watermark-read-failed).
func (s *session) watermarkFromPrimary(bc *backendConn, wmErr error) (gtid.Set, error) {
	if bc == s.primary || s.topo.primaryWM == nil {
		return gtid.Set{}, &live.RunError{Err: wmErr, NodeFailed: true}
	}
	set, err := s.topo.primaryWM.read(s.ctx)
	if err != nil {
		return gtid.Set{}, &live.RunError{Err: errors.Join(wmErr, err), NodeFailed: true}
	}
	s.srv.m.watermarkFallbacks.WithLabelValues("primary").Inc()
	return set, nil
}

// refused is the client's error for a read the router refused; the token
// named is the read's own (a comment's) when it carried one, else the
// session's.
func (s *session) refused(e *live.ReadError, o live.ReadOptions[gtid.Set]) error {
	if errors.Is(e, live.ErrDeferred) {
		return s.deferredErr(e)
	}
	epoch := o.TokenEpoch
	if o.Token.IsEmpty() {
		_, epoch = s.ls.Token()
	}
	return s.proxyErr("route-"+e.Reason.String(), codeProxy,
		"cannot serve this read consistently: %s (token epoch %d, topology epoch %d)", e.Reason, epoch, s.srv.rt.Epoch())
}

// answer is the session's one error mapping: what the client gets for a
// statement that failed with err on bc (nil: no connection was had).
//   - The client is gone (errClientGone): its connection closes.
//   - A relay failure (*relayError): the client's connection closes when
//     part of the response was written (its protocol state is lost),
//     else a lost-connection error (lostErr).
//   - The server's refusal or the proxy's own error (*mysql.MyError): as
//     it is.
//   - A failure to reach or set up a backend (*BackendError): 2013
//     naming it.
//   - Any other error is go-mysql's client failing on bc's socket: bc is
//     unusable, a lost-connection error.
//
// A closed client gets (done(), nil): nothing more is written.
func (s *session) answer(err error, bc *backendConn) (*mysql.Result, error) {
	var (
		re *relayError
		me *mysql.MyError
		be *BackendError
	)
	switch {
	case err == nil:
		return done(), nil
	case errors.Is(err, errClientGone):
		s.srv.m.clientErrors.WithLabelValues("client-gone").Inc()
		s.cc.Close()
		return done(), nil
	case errors.As(err, &re):
		if bc != nil {
			s.srv.m.backendErrors.WithLabelValues(bc.b.Name, re.err.Op).Inc()
		}
		if re.partial || bc == nil {
			s.srv.m.clientErrors.WithLabelValues("backend-lost-mid-result").Inc()
			s.cc.Close()
			return done(), nil
		}
		return nil, s.lostErr(bc)
	case errors.As(err, &me):
		return nil, me
	case errors.As(err, &be):
		return nil, s.proxyErr("backend-lost", codeBackendLost, "%v", be)
	case bc != nil:
		bc.broken = true
		s.srv.m.backendErrors.WithLabelValues(bc.b.Name, "query").Inc()
		return nil, s.lostErr(bc)
	}
	return nil, s.proxyErr("backend-lost", codeBackendLost, "%v", err)
}

// answerErr is answer for a command whose handler returns only an error
// (COM_INIT_DB, COM_FIELD_LIST, COM_STMT_PREPARE, COM_SET_OPTION: go-mysql
// writes it).
func (s *session) answerErr(err error, bc *backendConn) error {
	_, e := s.answer(err, bc)
	return e
}

// lostErr is the client's error for a lost connection to bc; a
// transaction open on the primary is gone with it (mirrored).
func (s *session) lostErr(bc *backendConn) error {
	if bc == s.primary && s.state.inTx() {
		s.state.observeStatus(s.state.status&^mysql.SERVER_STATUS_IN_TRANS, false)
		s.cc.setInTransaction(false)
		return s.proxyErr("backend-lost", codeBackendLost,
			"lost the connection to %s inside a transaction: the transaction is rolled back and was not retried", bc.b.Name)
	}
	return s.proxyErr("backend-lost", codeBackendLost,
		"lost the connection to %s; the statement may or may not have run and was not retried", bc.b.Name)
}
