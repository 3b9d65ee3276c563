package proxy

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/router/live"
)

const (
	stAutocommit = mysql.SERVER_STATUS_AUTOCOMMIT
	stInTx       = mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_IN_TRANS
)

// mustClassify classifies q or fails the test.
func mustClassify(t *testing.T, q string) Stmt {
	t.Helper()
	st, err := Classify(q)
	if err != nil {
		t.Fatalf("Classify(%q): %v", q, err)
	}
	return st
}

// TestStateMirror runs statements through the mirror as the primary
// answered them and checks what it then holds, where a read goes, whether
// a lost primary connection may be replaced and whether the connection
// may be shared.
func TestStateMirror(t *testing.T) {
	type step struct {
		q         string
		status    uint16
		serverErr bool
	}
	cases := []struct {
		name      string
		steps     []step
		holds     Hold
		pin       live.Pin // for the read "SELECT @a"
		reconnect Hold     // reconnectLoss
	}{
		{name: "fresh", holds: 0},
		{name: "begin", steps: []step{{"BEGIN", stInTx, false}}, holds: HoldTransaction, pin: live.PinTransaction, reconnect: HoldTransaction},
		{name: "begin then commit", steps: []step{{"BEGIN", stInTx, false}, {"COMMIT", stAutocommit, false}}},
		{name: "refused commit keeps the transaction", steps: []step{{"BEGIN", stInTx, false}, {"COMMIT", 0, true}},
			holds: HoldTransaction, pin: live.PinTransaction, reconnect: HoldTransaction},
		{name: "autocommit off", steps: []step{{"SET autocommit = 0", 0, false}}, holds: HoldAutocommitOff, pin: live.PinAutocommitOff},
		{name: "temp table", steps: []step{{"CREATE TEMPORARY TABLE t (a INT)", stAutocommit, false}},
			holds: HoldTempTable, pin: live.PinTempTable, reconnect: HoldTempTable},
		{name: "refused temp table", steps: []step{{"CREATE TEMPORARY TABLE t (a INT)", stAutocommit, true}}},
		{name: "lock tables", steps: []step{{"LOCK TABLES t READ", stAutocommit, false}},
			holds: HoldLockedTables, pin: live.PinLockedTables, reconnect: HoldLockedTables},
		{name: "lock then unlock", steps: []step{{"LOCK TABLES t READ", stAutocommit, false}, {"UNLOCK TABLES", stAutocommit, false}}},
		{name: "named lock", steps: []step{{"SELECT GET_LOCK('x', 0)", stAutocommit, false}},
			holds: HoldNamedLock, reconnect: HoldNamedLock},
		{name: "user variable from a SELECT", steps: []step{{"SELECT @a := 1", stAutocommit, false}},
			holds: HoldUserVariables, pin: live.PinUserVariables, reconnect: HoldUserVariables},
		{name: "replayed user variable holds nothing", steps: []step{{"SET @a = 1", stAutocommit, false}}},
		{name: "SET NAMES with an expression", steps: []step{{"SET NAMES utf8mb4, @a = UUID()", stAutocommit, false}},
			holds: HoldSessionState | HoldUserVariables, pin: live.PinSessionState, reconnect: HoldSessionState | HoldUserVariables},
		{name: "transaction and temp table", steps: []step{{"CREATE TEMPORARY TABLE t (a INT)", stAutocommit, false}, {"BEGIN", stInTx, false}},
			holds: HoldTransaction | HoldTempTable, pin: live.PinTransaction, reconnect: HoldTransaction | HoldTempTable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newSessionState()
			for _, s := range c.steps {
				m.afterPrimary(mustClassify(t, s.q), s.status, s.serverErr, false)
			}
			if got := m.Holds(); got != c.holds {
				t.Errorf("Holds() = %q, want %q", got, c.holds)
			}
			ok, why := m.Shareable()
			if ok != (c.holds == 0) || why != c.holds {
				t.Errorf("Shareable() = %v, %q; want %v, %q", ok, why, c.holds == 0, c.holds)
			}
			if got := m.readPin(mustClassify(t, "SELECT @a"), 2); got != c.pin {
				t.Errorf("readPin = %q, want %q", got, c.pin)
			}
			if got := m.reconnectLoss(); got != c.reconnect {
				t.Errorf("reconnectLoss() = %q, want %q", got, c.reconnect)
			}
		})
	}
}

// TestStateReadPin: user variables pin only reads that use them; no
// replicas pins every read; a transaction outranks the rest.
func TestStateReadPin(t *testing.T) {
	m := newSessionState()
	plain := mustClassify(t, "SELECT 1")
	if got := m.readPin(plain, 2); got != "" {
		t.Fatalf("fresh session pins %q", got)
	}
	if got := m.readPin(plain, 0); got != live.PinNoReplicas {
		t.Fatalf("no replicas: pin %q, want %q", got, live.PinNoReplicas)
	}
	m.afterPrimary(mustClassify(t, "SELECT @a := 1"), stAutocommit, false, false)
	if got := m.readPin(plain, 2); got != "" {
		t.Fatalf("a read without user variables pinned %q", got)
	}
	if got := m.readPin(mustClassify(t, "SELECT @a"), 2); got != live.PinUserVariables {
		t.Fatalf("a read of @a pinned %q, want %q", got, live.PinUserVariables)
	}
	m.observeStatus(stInTx, false)
	if got := m.readPin(plain, 2); got != live.PinTransaction {
		t.Fatalf("in a transaction: pin %q, want %q", got, live.PinTransaction)
	}
}

// TestStateMulti: a multi-statement query's session statements ran on
// the primary only; UNLOCK TABLES in one ends the lock.
func TestStateMulti(t *testing.T) {
	m := newSessionState()
	e, ok := ClassifyMulti("SET sql_mode = ''; CREATE TEMPORARY TABLE t (a INT); LOCK TABLES t2 READ")
	if !ok {
		t.Fatal("not a multi-statement query")
	}
	m.afterMulti(e)
	want := HoldSessionState | HoldTempTable | HoldLockedTables
	if got := m.Holds(); got != want {
		t.Fatalf("Holds() = %q, want %q", got, want)
	}
	e, _ = ClassifyMulti("SELECT 1; UNLOCK TABLES")
	m.afterMulti(e)
	if got := m.Holds(); got != want&^HoldLockedTables {
		t.Fatalf("after UNLOCK TABLES: %q", got)
	}
}

// TestStateReplayKeepsLastUse: a USE supersedes the ones remembered
// before it, its bytes given back: replayed on a new connection, a
// schema dropped since would fail it (main.lowercase_table5: USE FoO,
// USE Foo, DROP DATABASE FoO, then a new pooled connection).
func TestStateReplayKeepsLastUse(t *testing.T) {
	budget := &byteBudget{limit: 1 << 20}
	m := newSessionState()
	for _, q := range []string{"USE FoO", "SET NAMES utf8mb4", "USE `Foo`"} {
		if !m.remember(q, 8, budget) {
			t.Fatalf("remember(%q) refused", q)
		}
	}
	if len(m.replay) != 2 || m.replay[0] != "SET NAMES utf8mb4" || m.replay[1] != "USE `Foo`" {
		t.Fatalf("replay = %q, want the SET and the last USE", m.replay)
	}
	if want := len("SET NAMES utf8mb4") + len("USE `Foo`"); budget.used != want || m.replayBytes != want {
		t.Fatalf("bytes held: budget %d, replay %d, want %d", budget.used, m.replayBytes, want)
	}
}

// TestStateReplay: session statements are remembered in order within
// max_replay and the byte budget; past either the replay is incomplete,
// reads are pinned and nothing more is remembered; reset gives the bytes
// back and keeps the schema.
func TestStateReplay(t *testing.T) {
	budget := &byteBudget{limit: 1 << 20}
	m := newSessionState()
	m.db = "app"
	for _, q := range []string{"SET NAMES utf8mb4", "SET sql_mode = ''"} {
		if !m.remember(q, 2, budget) {
			t.Fatalf("remember(%q) refused", q)
		}
	}
	if len(m.replay) != 2 || m.replay[0] != "SET NAMES utf8mb4" || m.replay[1] != "SET sql_mode = ''" {
		t.Fatalf("replay = %q", m.replay)
	}
	if ok, why := m.Shareable(); !ok {
		t.Fatalf("replayable statements only: not shareable (%q)", why)
	}
	if m.remember("SET time_zone = '+00:00'", 2, budget) {
		t.Fatal("a third statement fitted max_replay 2")
	}
	if got := m.Holds(); got != HoldReplayOverflow {
		t.Fatalf("Holds() = %q, want replay-overflow", got)
	}
	if got := m.readPin(mustClassify(t, "SELECT 1"), 2); got != live.PinSessionState {
		t.Fatalf("overflowed replay: pin %q", got)
	}
	if m.reconnectLoss() != HoldReplayOverflow {
		t.Fatalf("reconnectLoss() = %q", m.reconnectLoss())
	}
	if m.remember("SET x = 1", 100, budget) {
		t.Fatal("remembered after an overflow: the replay would have a gap")
	}
	used := budget.used
	p := &pstmt{cost: 700}
	m.stmts[1] = p
	if got := m.Holds(); got != HoldReplayOverflow|HoldPreparedStatements {
		t.Fatalf("with a prepared statement: %q", got)
	}
	freed := m.reset()
	if want := len("SET NAMES utf8mb4") + len("SET sql_mode = ''") + 700; freed != want {
		t.Fatalf("reset freed %d, want %d", freed, want)
	}
	if used != freed-700 {
		t.Fatalf("budget used %d, replay bytes %d", used, freed-700)
	}
	if m.Holds() != 0 || len(m.replay) != 0 || len(m.stmts) != 0 || m.db != "app" {
		t.Fatalf("after reset: holds %q replay %q stmts %d db %q", m.Holds(), m.replay, len(m.stmts), m.db)
	}
	if m.status != mysql.SERVER_STATUS_AUTOCOMMIT {
		t.Fatalf("after reset: status %#x", m.status)
	}
}

// TestBudgetOverflowReplay: the byte budget, not only the count, ends the
// replay.
func TestBudgetOverflowReplay(t *testing.T) {
	budget := &byteBudget{limit: 10}
	m := newSessionState()
	if m.remember("SET sql_mode = 'ANSI'", 100, budget) {
		t.Fatal("a statement over the byte budget was remembered")
	}
	if !m.Holds().Has(HoldReplayOverflow) {
		t.Fatalf("Holds() = %q", m.Holds())
	}
}

// TestHoldNames: every hold has a word and a phrase, String lists them in
// order, First picks the lowest.
func TestHoldNames(t *testing.T) {
	for h := Hold(1); h < holdEnd; h <<= 1 {
		if holdWords[h] == "" || holdPhrases[h] == "" {
			t.Errorf("hold %#x has no word or phrase", uint16(h))
		}
	}
	h := HoldUserVariables | HoldTransaction | HoldPreparedStatements
	if got := h.String(); got != "in-transaction,user-variables,prepared-statements" {
		t.Fatalf("String() = %q", got)
	}
	if h.First() != HoldTransaction || Hold(0).First() != 0 {
		t.Fatalf("First() = %q", h.First())
	}
	if h.phrase() != "open transaction" {
		t.Fatalf("phrase() = %q", h.phrase())
	}
}

// TestHoldWordsArePinWords: a hold that is also a read pin has the pin's
// name (one vocabulary).
func TestHoldWordsArePinWords(t *testing.T) {
	for h, p := range map[Hold]live.Pin{
		HoldTransaction:   live.PinTransaction,
		HoldAutocommitOff: live.PinAutocommitOff,
		HoldTempTable:     live.PinTempTable,
		HoldLockedTables:  live.PinLockedTables,
		HoldUserVariables: live.PinUserVariables,
		HoldSessionState:  live.PinSessionState,
	} {
		if h.String() != string(p) {
			t.Errorf("hold %q, pin %q", h, p)
		}
	}
}

// TestNoteAnswer: what an answer leaves for the next statement to ask
// about, most specific first; an answer with nothing clears it.
func TestNoteAnswer(t *testing.T) {
	m := newSessionState()
	for _, c := range []struct {
		st        Stmt
		warnings  uint16
		serverErr bool
		want      keepReason
	}{
		{Stmt{Kind: KindRead}, 0, false, keepNone},
		{Stmt{Kind: KindRead}, 2, false, keepWarnings},
		{Stmt{Kind: KindPrimary}, 0, true, keepWarnings},
		{Stmt{Kind: KindPrimary, CalcFoundRows: true}, 1, false, keepFoundRows},
		{Stmt{Kind: KindPrimary, NextTransaction: true}, 1, false, keepNextTransaction},
		{Stmt{Kind: KindPrimary, NextTransaction: true}, 0, true, keepWarnings},
		{Stmt{Kind: KindPrimary}, 0, false, keepNone},
	} {
		m.noteAnswer(c.st, c.warnings, c.serverErr)
		if m.keepNext != c.want {
			t.Errorf("%+v warnings %d error %v: keep %q, want %q", c.st, c.warnings, c.serverErr, m.keepNext, c.want)
		}
	}
	m.noteAnswer(Stmt{Kind: KindPrimary}, 1, false)
	m.reset()
	if m.keepNext != keepNone {
		t.Error("COM_RESET_CONNECTION kept the previous statement's keep")
	}
}

// TestStateChangedHold: the server's report of a state change after a
// statement the proxy does not replay (CALL, PREPARE, a prepared SET run
// as KindPrimary) holds the session on the primary (reads pinned, the
// connection kept) until a reset; after a SET or USE it replays, a
// temporary table or a user variable it knows, it adds nothing. CALL
// holds its connection even when it failed; a locking function in DO or
// SET holds a named lock; FTWRL holds table locks until UNLOCK TABLES.
func TestStateChangedHold(t *testing.T) {
	for _, c := range []struct {
		q         string
		changed   bool
		serverErr bool
		want      Hold
	}{
		{"CALL p()", true, false, HoldStateChanged | HoldStoredProcedure},
		{"CALL p()", false, true, HoldStoredProcedure},
		{"PREPARE s FROM 'SELECT 1'", true, false, HoldStateChanged},
		{"SELECT f()", true, false, HoldStateChanged},
		{"SET @a = 1", true, false, 0},
		{"SET @u = UUID()", true, false, 0},
		{"USE db", true, false, 0},
		{"SELECT @a := 1", true, false, HoldUserVariables},
		{"CREATE TEMPORARY TABLE t (a INT)", true, false, HoldTempTable},
		{"DO GET_LOCK('a', 0)", false, false, HoldNamedLock},
		{"SET @g = GET_LOCK('a', 0)", true, false, HoldNamedLock},
		{"FLUSH TABLES WITH READ LOCK", false, false, HoldLockedTables},
		{"FLUSH TABLES t FOR EXPORT", false, false, HoldLockedTables},
		{"FLUSH LOGS", false, false, 0},
	} {
		m := newSessionState()
		m.afterPrimary(mustClassify(t, c.q), stAutocommit, c.serverErr, c.changed)
		if got := m.Holds(); got != c.want {
			t.Errorf("%q (changed %v, error %v): holds %q, want %q", c.q, c.changed, c.serverErr, got, c.want)
		}
		if c.want&HoldStateChanged != 0 {
			if pin := m.readPin(mustClassify(t, "SELECT 1"), 2); pin != live.PinSessionState {
				t.Errorf("%q: read pin %q, want %q", c.q, pin, live.PinSessionState)
			}
			m.reset()
			if m.Holds() != 0 {
				t.Errorf("%q: holds %q after a reset", c.q, m.Holds())
			}
		}
	}
	m := newSessionState()
	m.afterPrimary(mustClassify(t, "FLUSH TABLES WITH READ LOCK"), stAutocommit, false, false)
	m.afterPrimary(mustClassify(t, "UNLOCK TABLES"), stAutocommit, false, false)
	if m.Holds() != 0 {
		t.Errorf("after UNLOCK TABLES: holds %q", m.Holds())
	}
}

// TestStateHandlerCount: the session is held as handler-open while more
// HANDLER OPEN succeeded than HANDLER CLOSE; a reset ends it.
func TestStateHandlerCount(t *testing.T) {
	m := newSessionState()
	open, closeH := Stmt{Kind: KindPrimary, HandlerOpen: true}, Stmt{Kind: KindPrimary, HandlerClose: true}
	m.afterPrimary(open, 2, false, false)
	m.afterPrimary(open, 2, true, false) // refused (alias not unique): not counted
	m.afterPrimary(open, 2, false, false)
	for i, want := range []bool{true, false, false} {
		m.afterPrimary(closeH, 2, false, false)
		if ok, why := m.Shareable(); ok == want || why.Has(HoldHandlerOpen) != want {
			t.Fatalf("after close %d: shareable %v (%s), want held %v", i+1, ok, why, want)
		}
	}
	m.afterPrimary(open, 2, false, false)
	m.reset()
	if ok, _ := m.Shareable(); !ok || m.handlers != 0 {
		t.Fatalf("a reset left a handler held")
	}
}

// TestStateForgetSchema: forgetting a dropped schema drops it and every
// replayed USE, keeps the other statements in order and frees their bytes.
func TestStateForgetSchema(t *testing.T) {
	m := newSessionState()
	m.db = "d"
	for _, q := range []string{"SET a = 1", "USE d", "/* c */ use `d`", "SET b = 2"} {
		m.remember(q, 10, nil)
	}
	if !m.replaysUse() {
		t.Fatal("replaysUse false")
	}
	before := m.replayBytes
	freed := m.forgetSchema()
	// The second USE superseded the first when it was remembered
	// (TestStateReplayKeepsLastUse): only it is left to forget.
	if m.db != "" || m.replaysUse() || strings.Join(m.replay, ";") != "SET a = 1;SET b = 2" || m.replayBytes != before-freed || freed != len("/* c */ use `d`") {
		t.Fatalf("after forgetSchema: db %q, replay %q, bytes %d (freed %d of %d)", m.db, m.replay, m.replayBytes, freed, before)
	}
}

// TestStateCascadeTriggers: a SET of enable_cascade_triggers holds the
// primary connection (cascade-triggers) but pins no read and loses
// nothing on a new connection (which replays it); a refused one holds
// nothing; a reset ends it.
func TestStateCascadeTriggers(t *testing.T) {
	m := newSessionState()
	set := Stmt{Kind: KindSession, CascadeTriggers: true}
	m.afterPrimary(set, 2, true, false)
	if ok, _ := m.Shareable(); !ok {
		t.Fatal("a refused SET held the session")
	}
	m.afterPrimary(set, 2, false, false)
	if ok, why := m.Shareable(); ok || why != HoldCascadeTriggers || why.String() != "cascade-triggers" {
		t.Fatalf("after the SET: shareable %v (%s)", ok, why)
	}
	if pin := m.readPin(Stmt{Kind: KindRead}, 2); pin != "" {
		t.Errorf("reads pinned: %s", pin)
	}
	if loss := m.reconnectLoss(); loss != 0 {
		t.Errorf("a new connection would lose %s", loss)
	}
	m.reset()
	if ok, _ := m.Shareable(); !ok {
		t.Fatal("a reset left cascade-triggers held")
	}
}

// TestStateAutoIsNull: once the session set sql_auto_is_null, a read
// with an IS NULL test runs on the primary as a LAST_INSERT_ID() read;
// other reads, and every read before the SET or after a reset, are
// routed as before.
func TestStateAutoIsNull(t *testing.T) {
	m := newSessionState()
	isNull, _ := Classify("SELECT * FROM t WHERE a IS NULL")
	notNull, _ := Classify("SELECT * FROM t WHERE a IS NOT NULL")
	set, _ := Classify("SET sql_auto_is_null = 1")
	if !isNull.IsNull || notNull.IsNull || !set.AutoIsNull || set.Kind != KindSession {
		t.Fatalf("classified: IS NULL %+v, IS NOT NULL %+v, SET %+v", isNull, notNull, set)
	}
	if st := m.withAutoIsNull(isNull); st.Kind != KindRead || st.LastInsertID {
		t.Fatalf("before the SET: %+v", st)
	}
	m.afterPrimary(set, 2, false, false)
	if st := m.withAutoIsNull(isNull); st.Kind != KindPrimary || st.Reason != ReasonSessionFunction || !st.LastInsertID {
		t.Fatalf("after the SET, IS NULL: %+v", st)
	}
	if st := m.withAutoIsNull(notNull); st.Kind != KindRead || st.LastInsertID {
		t.Fatalf("after the SET, IS NOT NULL: %+v", st)
	}
	del, _ := Classify("DELETE FROM t WHERE a IS NULL")
	if st := m.withAutoIsNull(del); !st.LastInsertID || st.Kind != KindPrimary {
		t.Fatalf("a write with IS NULL: %+v", st)
	}
	m.reset()
	if st := m.withAutoIsNull(isNull); st.Kind != KindRead {
		t.Fatalf("after a reset: %+v", st)
	}
}
