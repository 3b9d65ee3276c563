package proxy

import (
	"errors"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/charset"

	"github.com/causallab/causallab/router/live"
)

// Multiplexing (Config.Multiplex, docs/proxy-sessions.md "Multiplexing"): a session
// borrows its backend connections from the shared pools (pool.go) when it
// needs one and gives them back after each command when nothing pins them
// to it.
//
// A session is pinned (keeps every connection it holds) while
// sessionState.Shareable says no: an open transaction, autocommit off, a
// temporary table, LOCK TABLES, a named lock, user variables, session
// state the proxy cannot replay, an overflowing replay, prepared
// statements, state the server reported that the proxy does not replay
// (HoldStateChanged), a CALL, an open HANDLER. A session borrows only connections dialled with its client
// capabilities (passedFlags: CLIENT_MULTI_STATEMENTS, CLIENT_FOUND_ROWS,
// CLIENT_LOCAL_FILES change what statements return or may do), so every
// connection a session uses counts in pool_size. A borrowed connection is
// given the session's collation (SET NAMES) when it has another, its
// schema and its session statements replayed; the primary's is always
// reset when it goes back (COM_RESET_CONNECTION: LAST_INSERT_ID and the
// other values a write leaves in the server's session go with it), a
// replica's when session statements were replayed on it or a statement
// reported a session state change there (backendConn.changed).

// poolCollation is the collation pooled connections are dialled with
// (go-mysql's default, MySQL 8.0+'s utf8mb4 default).
const poolCollation = mysql.DEFAULT_COLLATION_NAME

// poolFor returns b's pool when the session borrows from it (Config.Multiplex),
// nil when it dials its own connections.
func (s *session) poolFor(b *Backend) *pool {
	if s.srv.pools == nil {
		return nil
	}
	return s.srv.pools[b.Name]
}

// borrow lends the session a connection to b from p, with the session's
// schema and session statements.
func (s *session) borrow(b *Backend, p *pool) (*backendConn, error) {
	for {
		bc, err := p.acquireAs(s.ctx, s.poolUse(), poolKey{flags: s.state.flags & passedFlags, acct: s.acct}, s.fresh)
		s.poolBusy = false
		s.fresh = false
		if err != nil {
			var pe *PoolError
			if errors.As(err, &pe) {
				switch pe.Reason {
				case PoolDialFailed:
					s.srv.m.backendErrors.WithLabelValues(b.Name, "connect").Inc()
				case PoolWaitTimeout, PoolQueueFull, PoolCanceled, PoolClosed:
					s.poolBusy = true
				}
			}
			return nil, err
		}
		if bc.pooledDB != s.state.db {
			if s.state.db == "" {
				// No way to unset a schema on a connection: another.
				p.discard(bc, discardSchema)
				continue
			}
			if err := bc.conn.UseDB(s.state.db); err != nil {
				p.release(bc, poolDirty)
				return nil, backendErr(b, "replay", err)
			}
			bc.pooledDB = s.state.db
		}
		if col := s.state.collation; col != "" && col != bc.pooledCollation {
			c, err := charset.GetCollationByName(col)
			if err != nil {
				p.release(bc, poolDirty)
				return nil, backendErr(b, "replay", err)
			}
			if _, err := bc.exec(s.ctx, "SET NAMES "+c.CharsetName+" COLLATE "+c.Name); err != nil {
				p.release(bc, poolDirty)
				return nil, backendErr(b, "replay", err)
			}
			bc.pooledCollation = c.Name
		}
		bc.replayed = len(s.state.replay) > 0
		for _, q := range s.state.replay {
			if _, err := bc.exec(s.ctx, q); err != nil {
				p.release(bc, poolDirty)
				s.srv.m.replayFailures.WithLabelValues(b.Name).Inc()
				return nil, backendErr(b, "replay", err)
			}
		}
		return bc, nil
	}
}

// unresetPrimary gives a SET of enable_cascade_triggers (st) a primary
// connection no pool ever reset, multiplexed: MySQL 9.7 fires no cascade
// trigger on a connection once reset by COM_RESET_CONNECTION, whatever
// the variable says (a client that resets its own connection directly
// sees the same), and the pool resets every connection it takes back
// (main.foreign_key_sql_child_trig). The session's connection, when it
// was reset and nothing holds it, goes back, and a new one is dialled
// (borrow with fresh; the replay, then the SET); HoldCascadeTriggers
// keeps it. A session held on a reset connection is refused loudly.
func (s *session) unresetPrimary(st Stmt) error {
	if !st.CascadeTriggers || s.srv.pools == nil {
		return nil
	}
	if bc := s.primary; bc != nil {
		if !bc.wasReset {
			return nil
		}
		if ok, why := s.state.Shareable(); !ok {
			return s.proxyErr("cascade-triggers", mysql.ER_NOT_SUPPORTED_YET,
				"SET enable_cascade_triggers would not take on this session's pooled connection: MySQL fires no cascade trigger on a connection once reset, and the session's %s keeps this one; set it before that, or connect without multiplexing", why.phrase())
		}
		s.primary = nil
		if bc.home != nil {
			bc.home.release(bc, poolDirty)
		} else {
			bc.close()
		}
	}
	s.fresh = true
	return nil
}

// busyRun is the router's verdict on a connection the session could not
// get because its pool was busy (poolBusy: every connection lent past
// pool_wait, pool_max_waiters already waiting, the session's context
// ended, the proxy closing), nil for
// any other failure. That is not the node's fault: the node is not marked
// down and the read is not routed elsewhere (a busy replica pool would
// otherwise move its reads onto the primary's pool, and a busy primary
// pool mark the primary down); the statement fails, counted in
// causallab_proxy_pool_acquire_failures_total.
func (s *session) busyRun(err error) *live.RunError {
	if !s.poolBusy {
		return nil
	}
	s.poolBusy = false
	return &live.RunError{Err: err}
}

// poolUse is what the session borrows for now (the metrics' label).
func (s *session) poolUse() string {
	if s.use == "" {
		return useOther
	}
	return s.use
}

// park gives the session's borrowed connections back after a command
// unless the session is pinned (counted by reason). With final (the
// session ends) they go back whatever holds them: the reset rolls back a
// transaction, drops temporary tables and releases locks as MySQL does
// when a client disconnects.
func (s *session) park(final bool) {
	if s.srv.pools == nil {
		return
	}
	s.use = ""
	keep := s.state.keepNext
	s.state.keepNext, s.state.kept = keepNone, keepNone // one command only
	if !final {
		if ok, why := s.state.Shareable(); !ok {
			if s.holdsPooled() {
				s.srv.pm.pinned.WithLabelValues(why.First().String()).Inc()
				s.pinPooled()
			}
			return
		}
		s.unpinPooled()
		if keep != keepNone && s.holdsPooled() {
			// The previous statement's diagnostics stay asked-for one
			// command longer (ProxySQL keeps the connection likewise).
			s.srv.pm.pinned.WithLabelValues(keep.String()).Inc()
			s.state.kept = keep
			return
		}
		s.saveInsertID()
		s.dropOwn()
	}
	s.state.insertIDOn, s.state.insertIDDirty, s.state.insertIDFresh = nil, false, false
	if bc := s.primary; bc != nil && bc.home != nil {
		s.primary = nil
		bc.home.release(bc, poolDirty)
	}
	for i, bc := range s.replicas {
		if bc != nil && bc.home != nil {
			s.replicas[i] = nil
			state := poolClean
			if bc.replayed || bc.changed || final {
				state = poolDirty
			}
			bc.home.release(bc, state)
		}
	}
	// The previous statement's connection is gone: its diagnostics
	// (SHOW WARNINGS, FOUND_ROWS()) are not the session's any more.
	s.state.last = nil
}

// holdsPooled reports whether the session holds a borrowed connection,
// or one of its own a pin past max_pinned_share made (pinPooled).
func (s *session) holdsPooled() bool {
	if fromPool(s.primary) {
		return true
	}
	for _, bc := range s.replicas {
		if fromPool(bc) {
			return true
		}
	}
	return false
}

// fromPool: bc is lent by a pool, or was (its session's own since a pin
// past max_pinned_share).
func fromPool(bc *backendConn) bool { return bc != nil && (bc.home != nil || bc.own != nil) }

// pinPooled counts the borrowed connections of a session its state pins
// among their pools' pinned connections; one whose pool has
// max_pinned_share of it pinned already becomes the session's own, its
// place in the pool freed (pool.pin): pinned sessions cannot take every
// pooled connection and leave the others' statements waiting.
func (s *session) pinPooled() {
	pin := func(bc *backendConn) {
		if bc != nil && bc.home != nil && bc.pinnedIn == nil {
			bc.home.pin(bc)
		}
	}
	pin(s.primary)
	for _, bc := range s.replicas {
		pin(bc)
	}
}

// unpinPooled takes the session's borrowed connections out of their
// pools' pinned connections: its state no longer pins them.
func (s *session) unpinPooled() {
	unpin := func(bc *backendConn) {
		if bc != nil && bc.pinnedIn != nil {
			bc.pinnedIn.unpin(bc)
		}
	}
	unpin(s.primary)
	for _, bc := range s.replicas {
		unpin(bc)
	}
}

// dropOwn closes the connections a pin past max_pinned_share made the
// session's own, once nothing pins it: the next statement borrows from
// the pool again.
func (s *session) dropOwn() {
	if bc := s.primary; bc != nil && bc.own != nil {
		bc.close()
		s.primary = nil
	}
	for i, bc := range s.replicas {
		if bc != nil && bc.own != nil {
			bc.close()
			s.replicas[i] = nil
		}
	}
}

// Multiplexed, the session's LAST_INSERT_ID() outlives the connection it
// was set on: park reads it (saveInsertID) before giving back a primary
// connection where a statement may have changed it (its OK carried an
// insert id, or it called LAST_INSERT_ID), and a later statement calling
// LAST_INSERT_ID on another connection gets it set there first
// (seedInsertID: DO LAST_INSERT_ID(n)). Keeping the connection after
// every write instead held it through the client's think time (see
// noteAnswer).

// noteInsertID: statement st ran on the primary (its answer out).
func (s *session) noteInsertID(st Stmt, out relayOut) {
	if s.srv.pools != nil && (out.insertID || st.LastInsertID) {
		if s.state.insertIDOn != s.primary {
			// A connection lent with LAST_INSERT_ID() 0 (reset or new),
			// not the session's value.
			s.state.insertIDFresh = true
		}
		s.state.insertIDOn, s.state.insertIDDirty = s.primary, true
	}
}

// saveInsertID reads the session's LAST_INSERT_ID() from its primary
// connection before it goes back, when a statement there may have
// changed it. A failed read forgets it (a later LAST_INSERT_ID() answers
// 0, as on a new connection), counted in
// session_state_total{event="insert-id-lost"}.
func (s *session) saveInsertID() {
	bc := s.primary
	if !s.state.insertIDDirty || bc == nil || s.state.insertIDOn != bc {
		return
	}
	s.state.insertIDDirty = false
	res, err := bc.exec(s.ctx, "SELECT LAST_INSERT_ID()")
	var v uint64
	if err == nil && res.Resultset != nil {
		v, err = res.GetUint(0, 0)
	}
	if err != nil || res.Resultset == nil {
		s.srv.m.sessionState.WithLabelValues("insert-id-lost").Inc()
		s.state.insertID = 0
		return
	}
	if v != 0 || !s.state.insertIDFresh {
		// 0 on a connection lent with 0: no statement there set one
		// (an INSERT of an explicit id reports it, sets none).
		s.state.insertID = v
	}
}

// seedInsertID sets the session's LAST_INSERT_ID() on its primary
// connection before statement st, which calls LAST_INSERT_ID, when that
// connection does not have it. A failure leaves the statement to answer
// as on a new connection, counted in
// session_state_total{event="insert-id-lost"}.
func (s *session) seedInsertID(st Stmt) {
	if !st.LastInsertID || s.srv.pools == nil || s.state.insertID == 0 || s.state.insertIDOn == s.primary {
		return
	}
	if _, err := s.primary.exec(s.ctx, "DO LAST_INSERT_ID("+strconv.FormatUint(s.state.insertID, 10)+")"); err != nil {
		s.srv.m.sessionState.WithLabelValues("insert-id-lost").Inc()
		return
	}
	s.state.insertIDOn, s.state.insertIDFresh = s.primary, false
}
