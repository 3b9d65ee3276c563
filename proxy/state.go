package proxy

import (
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/sqllex"

	"github.com/causallab/causallab/router/live"
)

// Hold is one thing a session holds on its primary connection that a new
// (or another session's) connection would not have: why reads stay on the
// primary, why a lost connection cannot be silently replaced, why the
// connection may not be handed to another session. A Hold value is a set
// (bits); zero holds nothing.
type Hold uint16

// The holds, in the order they are reported (the first one set names the
// set in one word, Hold.First).
const (
	// HoldTransaction: a transaction is open (SERVER_STATUS_IN_TRANS of
	// the primary's last OK or EOF).
	HoldTransaction Hold = 1 << iota
	// HoldAutocommitOff: autocommit is off (SERVER_STATUS_AUTOCOMMIT
	// clear): every statement opens a transaction.
	HoldAutocommitOff
	// HoldTempTable: a CREATE/DROP TEMPORARY TABLE ran (the proxy does not
	// track which tables still exist: held until a reset).
	HoldTempTable
	// HoldLockedTables: LOCK TABLES ran and no UNLOCK TABLES since.
	HoldLockedTables
	// HoldNamedLock: a locking function ran (GET_LOCK and friends): the
	// session may own a named lock (held until a reset: the proxy does not
	// read whether the lock was granted or released).
	HoldNamedLock
	// HoldUserVariables: user variables were set on the primary.
	HoldUserVariables
	// HoldSessionState: session state the proxy cannot replay was set on
	// the primary (a session statement inside a multi-statement query, a
	// system variable set from a subquery).
	HoldSessionState
	// HoldReplayOverflow: more session statements ran than max_replay or
	// max_session_bytes let the proxy remember: the replay is incomplete.
	HoldReplayOverflow
	// HoldPreparedStatements: the session has prepared statements, bound
	// to the connections that prepared them.
	HoldPreparedStatements
	// HoldStateChanged: a statement the proxy does not replay (CALL,
	// PREPARE, EXECUTE, a stored function, a prepared SET) changed the
	// session's state on the primary, as the server reported
	// (session_track_state_change): a user variable, a system variable,
	// a temporary table or a prepared statement lives on that connection
	// only. Held until a reset.
	HoldStateChanged
	// HoldStoredProcedure: a CALL ran; the procedure may hold what the
	// server does not report (named locks, table locks). Held until a
	// reset.
	HoldStoredProcedure
	// HoldSetPending: a SET whose values are evaluated once answered with
	// warnings; its values are read back before the session's next
	// statement that does not ask about them (sessionState.pendingEval),
	// the read-back would clear them.
	HoldSetPending
	// HoldHandlerOpen: HANDLER ... OPEN ran and as many HANDLER ... CLOSE
	// have not (the open handler and its read position live on the
	// connection that opened it).
	HoldHandlerOpen
	// HoldCascadeTriggers: a SET of enable_cascade_triggers ran on the
	// primary connection, which was never reset: MySQL 9.7 fires no
	// cascade trigger on a connection once reset (COM_RESET_CONNECTION),
	// whatever the variable says, so the session keeps that connection.
	// A new connection replays the SET and takes it (not a reconnect
	// loss). Held until a reset.
	HoldCascadeTriggers

	holdEnd // one past the last hold
)

// holdWords are the holds' names (errors, docs); where a hold is also a
// read pin (live.Pin, the primary_statements reason label) the word is
// the pin's.
var holdWords = map[Hold]string{
	HoldTransaction:        "in-transaction",
	HoldAutocommitOff:      "autocommit-off",
	HoldTempTable:          "temp-table-session",
	HoldLockedTables:       "locked-tables",
	HoldNamedLock:          "named-lock",
	HoldUserVariables:      "user-variables",
	HoldSessionState:       "session-state",
	HoldReplayOverflow:     "replay-overflow",
	HoldPreparedStatements: "prepared-statements",
	HoldStateChanged:       "session-state-changed",
	HoldStoredProcedure:    "stored-procedure",
	HoldSetPending:         "set-pending",
	HoldHandlerOpen:        "handler-open",
	HoldCascadeTriggers:    "cascade-triggers",
}

// holdPhrases say what a new connection would lose, for the client.
var holdPhrases = map[Hold]string{
	HoldTransaction:        "open transaction",
	HoldAutocommitOff:      "autocommit-off transaction scope",
	HoldTempTable:          "temporary tables",
	HoldLockedTables:       "table locks",
	HoldNamedLock:          "named locks (GET_LOCK)",
	HoldUserVariables:      "user variables",
	HoldSessionState:       "session state set on the primary only (a multi-statement query, a SET from a subquery)",
	HoldReplayOverflow:     "session statements beyond max_replay or max_session_bytes",
	HoldPreparedStatements: "prepared statements",
	HoldStateChanged:       "session state set by a statement the proxy does not replay (CALL, PREPARE, a stored function)",
	HoldStoredProcedure:    "what a stored procedure left (named locks, table locks)",
	HoldSetPending:         "a SET's values not read back yet",
	HoldHandlerOpen:        "open HANDLER tables",
	HoldCascadeTriggers:    "enable_cascade_triggers (taken only on a connection never reset)",
}

// First returns the first hold set in h (0 when h is empty).
func (h Hold) First() Hold {
	return h & -h
}

// Has reports whether every hold of o is in h.
func (h Hold) Has(o Hold) bool { return h&o == o && o != 0 }

// String names the holds in h, comma-separated, in order ("" when empty).
func (h Hold) String() string {
	var b strings.Builder
	for x := Hold(1); x < holdEnd; x <<= 1 {
		if h&x != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(holdWords[x])
		}
	}
	return b.String()
}

// phrase says what h's first hold is, for the client.
func (h Hold) phrase() string { return holdPhrases[h.First()] }

// reconnectLosses are the holds a new primary connection cannot restore
// by replaying the session statements (prepared statements are prepared
// again there lazily; autocommit-off is a replayed SET).
const reconnectLosses = HoldTransaction | HoldTempTable | HoldLockedTables | HoldNamedLock |
	HoldUserVariables | HoldSessionState | HoldReplayOverflow | HoldStateChanged | HoldStoredProcedure | HoldSetPending | HoldHandlerOpen

// sessionState mirrors what MySQL holds for one client session: the
// schema, the capabilities, the session statements replayed on every
// backend connection, the holds (pins), the transaction state read from
// the primary's server status, the prepared statements and the backend
// that ran the previous statement (whose warnings, FOUND_ROWS and
// ROW_COUNT are the session's). It decides where a read may go
// (readPin), whether a lost connection may be replaced (reconnectLoss),
// and whether the primary connection may be handed to another session
// (Shareable). It does no I/O; the session's goroutine owns it.
type sessionState struct {
	// db is the current default schema (handshake, COM_INIT_DB, USE).
	db string
	// collation is the client's handshake collation name.
	collation string
	// flags are the client capabilities passed to the backends
	// (passedFlags); COM_SET_OPTION turns CLIENT_MULTI_STATEMENTS on/off.
	flags uint32
	// wantGTIDs: the client asked for session-tracking GTIDs
	// (SET session_track_gtids = OWN_GTID through the proxy).
	wantGTIDs bool
	// replay holds the session statements (SET ...) run so far, in order,
	// replayed on each backend connection the session opens; replayBytes
	// is what they take of the session's budget.
	replay      []string
	replayBytes int
	// held are the holds statements set (all but the three derived ones:
	// transaction and autocommit from status, prepared statements from
	// stmts).
	held Hold
	// status is the server status of the primary's last OK or EOF.
	status uint16
	// stmts are the client's prepared statements.
	stmts map[uint32]*pstmt
	// last is the backend connection that ran the previous statement
	// (ReasonPreviousStatement statements follow it: its warnings, its
	// FOUND_ROWS).
	last *backendConn
	// pendingEval are the targets of a SET to read back before the next
	// statement (HoldSetPending), nil when none.
	pendingEval []SetTarget
	// keepNext says why, under multiplexing, the connection that ran the
	// previous statement stays the session's for one more command (its
	// diagnostics may be asked for next: keepNext words), 0 when nothing
	// does. park consumes it.
	keepNext keepReason
	// handlers is how many HANDLER ... OPEN succeeded minus the HANDLER
	// ... CLOSE that did (HoldHandlerOpen while positive).
	handlers int
	// insertID is the session's LAST_INSERT_ID() as the proxy last read
	// it (multiplexing: park reads it before a connection that may have
	// changed it goes back); insertIDOn is the connection whose server
	// session has it (nil: none), insertIDDirty: a statement there may
	// have changed it since.
	insertID      uint64
	insertIDOn    *backendConn
	insertIDDirty bool
	// insertIDFresh: insertIDOn was lent with LAST_INSERT_ID() 0, not
	// given the session's value (0 read there later changes nothing).
	insertIDFresh bool
	// autoIsNull: the session set sql_auto_is_null (to any value: held
	// until a reset), withAutoIsNull.
	autoIsNull bool
	// traces: the session set optimizer_trace or profiling (held until a
	// reset): a SET's read-back waits, as for its warnings, until a
	// statement that does not read the trace (rememberSet).
	traces bool
	// kept is why park kept the previous statement's connection for this
	// command (keepNext's value then), 0 when it did not: a statement that
	// only reads diagnostics keeps it as long again.
	kept keepReason
}

// keepReason is why a session keeps its pooled connection for the next
// command only (ProxySQL's rules: the pinned_total reason label).
type keepReason uint8

const (
	keepNone keepReason = iota
	// keepWarnings: the answer carried warnings or was an error (SHOW
	// WARNINGS, SHOW ERRORS, @@warning_count may follow).
	keepWarnings
	// keepFoundRows: SELECT SQL_CALC_FOUND_ROWS ran (FOUND_ROWS() follows).
	keepFoundRows
	// keepNextTransaction: SET TRANSACTION (no SESSION) ran: its
	// characteristics are the connection's next transaction's.
	keepNextTransaction
)

var keepWords = [...]string{keepNone: "", keepWarnings: "next-statement-warnings",
	keepFoundRows:       "next-statement-found-rows",
	keepNextTransaction: "next-transaction"}

func (k keepReason) String() string { return keepWords[k] }

// noteAnswer records what a statement's answer (on any backend) leaves
// for the next statement to ask about (keepNext). An insert id does not
// keep the connection (ProxySQL's auto_increment_delay_multiplex does):
// the OK packet carries it to the client, and an UPDATE with
// LAST_INSERT_ID(expr) or an INSERT of an explicit id sets one too, so
// keeping after each held a primary connection through the client's think
// time after every such write (the scale harness's writes: 13,892 kept of
// 13,898, 417 statements failed past pool_wait); the session's
// LAST_INSERT_ID() is carried across connections instead (saveInsertID,
// seedInsertID). A statement that only reads diagnostics keeps what park
// kept as long again (kept).
func (m *sessionState) noteAnswer(st Stmt, warnings uint16, serverErr bool) {
	switch {
	case st.Reason == ReasonPreviousStatement && !serverErr && m.kept == keepWarnings:
		// SHOW WARNINGS, @@warning_count leave what they read (MySQL's
		// diagnostics area) for the next one to read again.
		m.keepNext = m.kept
	case st.NextTransaction && !serverErr:
		m.keepNext = keepNextTransaction
	case st.CalcFoundRows && !serverErr:
		m.keepNext = keepFoundRows
	case warnings != 0 || serverErr:
		m.keepNext = keepWarnings
	default:
		m.keepNext = keepNone
	}
}

func newSessionState() *sessionState {
	return &sessionState{status: mysql.SERVER_STATUS_AUTOCOMMIT, stmts: map[uint32]*pstmt{}}
}

// inTx reports whether the primary said a transaction is open.
func (m *sessionState) inTx() bool { return m.status&mysql.SERVER_STATUS_IN_TRANS != 0 }

// Holds returns everything the session holds now.
func (m *sessionState) Holds() Hold {
	h := m.held
	if m.status&mysql.SERVER_STATUS_IN_TRANS != 0 {
		h |= HoldTransaction
	}
	if m.status&mysql.SERVER_STATUS_AUTOCOMMIT == 0 {
		h |= HoldAutocommitOff
	}
	if len(m.stmts) > 0 {
		h |= HoldPreparedStatements
	}
	return h
}

// Shareable answers whether the session's primary connection may be
// handed to another session now (between statements): ok when the
// session holds nothing on it but its replayable session statements
// (which a new connection replays), else false and every hold that keeps
// it. Autocommit off counts: every statement then opens a transaction.
func (m *sessionState) Shareable() (ok bool, why Hold) {
	h := m.Holds()
	return h == 0, h
}

// reconnectLoss returns what of the session a new primary connection
// would lose (0: replaying the session statements restores it all).
func (m *sessionState) reconnectLoss() Hold { return m.Holds() & reconnectLosses }

// readPin returns why read st must stay on the primary for session
// reasons, or "" (replicas is the number of configured replicas).
func (m *sessionState) readPin(st Stmt, replicas int) live.Pin {
	h := m.Holds()
	switch {
	case h&HoldTransaction != 0:
		return live.PinTransaction
	case h&HoldAutocommitOff != 0:
		return live.PinAutocommitOff
	case h&HoldTempTable != 0:
		return live.PinTempTable
	case h&HoldLockedTables != 0:
		return live.PinLockedTables
	case h&(HoldSessionState|HoldReplayOverflow|HoldStateChanged|HoldSetPending) != 0:
		return live.PinSessionState
	case h&HoldUserVariables != 0 && st.UsesUserVar:
		return live.PinUserVariables
	case replicas == 0:
		return live.PinNoReplicas
	}
	return ""
}

// observeStatus takes the transaction state from a primary response's
// server status (an ERR packet carries none: serverErr with status 0
// leaves it).
func (m *sessionState) observeStatus(status uint16, serverErr bool) {
	if status != 0 || !serverErr {
		m.status = status
	}
}

// afterPrimary mirrors what statement st did to the session on the
// primary (status is its response's; serverErr: the server refused it;
// stateChanged: the server reported a session state change, possibly
// before an error ended a CALL).
func (m *sessionState) afterPrimary(st Stmt, status uint16, serverErr, stateChanged bool) {
	m.observeStatus(status, serverErr)
	if stateChanged && !st.replayedState() {
		m.held |= HoldStateChanged
	}
	if st.Call {
		// Even when it failed: what ran before the error stays.
		m.held |= HoldStoredProcedure
	}
	if serverErr {
		return
	}
	if st.TempTable {
		m.held |= HoldTempTable
	}
	if st.LocksTables {
		m.held |= HoldLockedTables
	}
	if st.UnlocksTables {
		m.held &^= HoldLockedTables
	}
	if st.Reason == ReasonLockingFunction || st.NamedLock {
		m.held |= HoldNamedLock
	}
	if st.SetsUserVar {
		m.held |= HoldUserVariables
	}
	if st.PinsSession {
		m.held |= HoldSessionState
	}
	if st.CascadeTriggers {
		m.held |= HoldCascadeTriggers
	}
	m.autoIsNull = m.autoIsNull || st.AutoIsNull
	m.traces = m.traces || st.Traces
	m.noteHandler(st)
}

// noteHandler counts the session's open HANDLER tables (st succeeded).
// A statement that closes handlers implicitly (FLUSH TABLES, DDL on the
// table) leaves the count high: the session stays pinned until a reset
// or its end, never released with a handler open.
func (m *sessionState) noteHandler(st Stmt) {
	switch {
	case st.HandlerOpen:
		m.handlers++
	case st.HandlerClose && m.handlers > 0:
		m.handlers--
	default:
		return
	}
	if m.handlers > 0 {
		m.held |= HoldHandlerOpen
	} else {
		m.held &^= HoldHandlerOpen
	}
}

// afterMulti mirrors what a multi-statement query run on the primary left
// in the session (ClassifyMulti), whether or not all of it ran: its
// session statements ran on the primary only (not replayed).
func (m *sessionState) afterMulti(e MultiEffects) {
	if e.Session {
		m.held |= HoldSessionState
	}
	if e.TempTable {
		m.held |= HoldTempTable
	}
	if e.LocksTables {
		m.held |= HoldLockedTables
	} else if e.UnlocksTables {
		m.held &^= HoldLockedTables
	}
	if e.SetsUserVar {
		m.held |= HoldUserVariables
	}
}

// withAutoIsNull is st as the session runs it: once the session set
// sql_auto_is_null, an IS NULL test may find the row of the session's
// last insert id (ODBC's idiom, main.odbc), which is LAST_INSERT_ID():
// the statement runs on the primary, with the session's value there
// (seedInsertID, multiplexed).
func (m *sessionState) withAutoIsNull(st Stmt) Stmt {
	if m.autoIsNull && st.IsNull {
		st.LastInsertID = true
		pinRead(&st, ReasonSessionFunction)
	}
	return st
}

// remember adds session statement q (already run on the primary) to the
// replay, within max statements and the budget; when it does not fit the
// replay is incomplete (HoldReplayOverflow) and it returns false: replica
// connections must then be closed, reads stay on the primary.
func (m *sessionState) remember(q string, max int, budget *byteBudget) bool {
	if m.held&HoldReplayOverflow != 0 || len(m.replay) >= max || !budget.take(len(q)) {
		m.held |= HoldReplayOverflow
		return false
	}
	if isUse(q) {
		// A USE supersedes the ones before it: replayed, a dropped
		// schema an earlier one named would fail the new connection
		// (main.lowercase_table5).
		budget.give(m.dropUses())
	}
	q = strings.Clone(q)
	m.replay = append(m.replay, q)
	m.replayBytes += len(q)
	return true
}

// dropUses removes the remembered USE statements and returns the bytes
// they held.
func (m *sessionState) dropUses() (freed int) {
	kept := m.replay[:0]
	for _, q := range m.replay {
		if isUse(q) {
			freed += len(q)
			continue
		}
		kept = append(kept, q)
	}
	clear(m.replay[len(kept):])
	m.replay = kept
	m.replayBytes -= freed
	return freed
}

// replaysUse reports whether a USE is among the replayed statements.
func (m *sessionState) replaysUse() bool {
	for _, q := range m.replay {
		if isUse(q) {
			return true
		}
	}
	return false
}

// forgetSchema leaves the session with no current schema (its schema was
// dropped): the schema and every replayed USE are forgotten; it returns
// the bytes the budget gets back.
func (m *sessionState) forgetSchema() (freed int) {
	m.db = ""
	return m.dropUses()
}

// isUse: statement q is a USE.
func isUse(q string) bool {
	l := sqllex.Lexer{S: q}
	return l.Next().Is("USE")
}

// reset is COM_RESET_CONNECTION: the session's variables, holds,
// transaction, prepared statements and previous backend are gone, the
// schema, collation and capabilities stay (as MySQL keeps them). It
// returns the bytes the budget gets back.
func (m *sessionState) reset() (freed int) {
	freed = m.replayBytes
	for _, p := range m.stmts {
		freed += p.cost
	}
	m.replay, m.replayBytes = nil, 0
	m.held, m.handlers = 0, 0
	m.insertID, m.insertIDOn, m.insertIDDirty, m.insertIDFresh = 0, nil, false, false
	m.autoIsNull, m.traces = false, false
	m.status = mysql.SERVER_STATUS_AUTOCOMMIT
	m.stmts = map[uint32]*pstmt{}
	m.last = nil
	m.keepNext, m.kept = keepNone, keepNone
	m.wantGTIDs = false
	m.pendingEval = nil
	return freed
}
