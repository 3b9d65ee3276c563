package proxy

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/sqllex"
)

// Connection ids and KILL (docs/proxy-sessions.md, "Connection ids and KILL").
//
// A session's id is the proxy's own (Server.allocID): the greeting's
// thread id, CONNECTION_ID() (withConnectionID puts it in the statement
// text the proxy sends) and the Id of SHOW PROCESSLIST, which the proxy
// answers from its own sessions (processList). KILL [QUERY | CONNECTION]
// <id> names a proxy session and is carried out by the proxy (kill): a
// backend thread id never reaches a client, and no KILL reaches a server.
//
// What a session runs is published in its runState: the command and its
// text for the processlist, and the backend connection a statement is in
// flight on (backendConn.bind) for KILL QUERY. A kill takes the thread id
// of that connection and the session does not leave the call (so the
// connection cannot go back to a pool and run another session's
// statement) until the kill was carried out: a kill reaches the statement
// running when it was asked, or nothing.

// runState is what a session publishes of its current work to the other
// sessions (processlist, KILL). Its session's goroutine writes it; others
// read it under mu.
type runState struct {
	mu   sync.Mutex
	cond sync.Cond
	// cmd is the command being handled (0: none, Sleep); since is when it
	// began, or when the last one ended; info its statement text (up to
	// maxInfoBytes, copied: the command's buffer is the client
	// connection's); db the session's schema.
	cmd   byte
	since time.Time
	info  []byte
	db    string
	// bc is the backend connection a call is in flight on (nil: none),
	// thread its server thread id; killing counts kills of it in flight:
	// leave waits for them.
	bc      *backendConn
	thread  uint32
	node    *Backend
	home    *pool
	killing int
	// calls counts the calls entered: a kill re-sent (killRunning) only
	// reaches the call it was first sent to.
	calls uint64
	// interrupted: a KILL QUERY reached the current command's statement
	// (the command's error becomes 1317); ended: a KILL ended the session.
	interrupted bool
	ended       bool
	// end closes the client connection and ends the session's context
	// (KILL CONNECTION from another session).
	end func()
}

// maxInfoBytes bounds the statement text a session publishes for SHOW
// FULL PROCESSLIST (what a longer statement shows is its start).
const maxInfoBytes = 64 << 10

func newRunState() *runState {
	r := &runState{since: time.Now()}
	r.cond.L = &r.mu
	return r
}

// begin publishes that the session handles command cmd with text info.
func (r *runState) begin(cmd byte, info string, db string) {
	r.mu.Lock()
	r.cmd, r.since, r.db, r.interrupted = cmd, time.Now(), db, false
	r.info = append(r.info[:0], info[:min(len(info), maxInfoBytes)]...)
	r.mu.Unlock()
}

// finish publishes that the session is idle; it reports whether a KILL
// QUERY reached the command.
func (r *runState) finish(db string) (interrupted bool) {
	r.mu.Lock()
	interrupted = r.interrupted
	r.cmd, r.since, r.db, r.interrupted = 0, time.Now(), db, false
	r.info = r.info[:0]
	r.mu.Unlock()
	return interrupted
}

// enter publishes that a call is in flight on bc (backendConn.bind);
// false: a KILL QUERY reached the session's command, the call must not
// be made.
func (r *runState) enter(bc *backendConn) bool {
	var id uint32
	if bc.conn != nil {
		id = bc.conn.GetConnectionID()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.interrupted {
		return false
	}
	r.bc, r.thread, r.node, r.home = bc, id, bc.b, bc.home
	r.calls++
	return true
}

// errInterrupted is MySQL's answer to a statement KILL QUERY ended.
var errInterrupted = mysql.NewDefaultError(mysql.ER_QUERY_INTERRUPTED)

// leave ends the call on bc, once no kill of it is in flight.
func (r *runState) leave(bc *backendConn) {
	r.mu.Lock()
	if r.bc == bc {
		r.bc = nil
	}
	for r.killing > 0 {
		r.cond.Wait()
	}
	r.mu.Unlock()
}

// runKey is the context key of a session's runState: backendConn.bind
// finds it in the context every call on a session's behalf is made with.
type runKey struct{}

// unpublished is ctx for the proxy's own calls on a session's behalf
// that are not its statement (a KILL QUERY it sends): not published in
// its runState. Published, two sessions killing each other's kill would
// each wait in leave for the other's.
func unpublished(ctx context.Context) context.Context {
	return context.WithValue(ctx, runKey{}, (*runState)(nil))
}

// runOf is ctx's session runState, nil for the proxy's own calls.
func runOf(ctx context.Context) *runState {
	if ctx == nil {
		return nil
	}
	r, _ := ctx.Value(runKey{}).(*runState)
	return r
}

// allocID gives a new session its id, registered until dropID: the
// next of the proxy's counter, from 1; after 2^32-1 ids it wraps and
// skips ids still in use (and 0), so no two live sessions share one. With
// --workers N, worker i's ids are i+1, i+1+N, ...: unique across the
// workers.
func (s *Server) allocID(sess *session) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	step := uint32(max(s.cfg.Workers, 1))
	for {
		if s.nextID == 0 {
			s.nextID = uint32(s.cfg.WorkerIndex) + 1
		} else {
			s.nextID += step
			if s.nextID <= step {
				s.nextID = uint32(s.cfg.WorkerIndex) + 1 // wrapped
			}
		}
		if s.byID[s.nextID] == nil {
			s.byID[s.nextID] = sess
			s.sessionsOpen.Store(int64(len(s.byID)))
			return s.nextID
		}
	}
}

// dropID frees a session's id.
func (s *Server) dropID(id uint32) {
	s.mu.Lock()
	delete(s.byID, id)
	s.sessionsOpen.Store(int64(len(s.byID)))
	s.mu.Unlock()
}

// peer is another session as SHOW PROCESSLIST and KILL see it.
type peer struct {
	id   uint32
	sess *session
	user string
	host string
}

// peers are the logged-in sessions (id order), or only the one of id
// when id is non-zero.
func (s *Server) peers(id uint32) []peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []peer
	for pid, sess := range s.byID {
		if id != 0 && pid != id {
			continue
		}
		if sess.slot == nil || !sess.slot.session {
			continue // still in its login
		}
		out = append(out, peer{id: pid, sess: sess, user: sess.slot.user, host: sess.slot.c.RemoteAddr().String()})
	}
	slices.SortFunc(out, func(a, b peer) int { return int(int64(a.id) - int64(b.id)) })
	return out
}

// account is the user name the session logged in with (COM_CHANGE_USER
// moves it): MySQL's account for KILL's and the processlist's checks.
func (s *session) account() string {
	if s.slot == nil {
		return ""
	}
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	return s.slot.user
}

// Privileges the proxy asks the server about (hasPrivilege).
const (
	privProcess = "PROCESS"
	privKill    = "CONNECTION_ADMIN"
)

// privilegeQuery lists the grants of the connection's own account with
// its active roles expanded (SHOW GRANTS without FOR: a privilege held
// through a role, granted and active, is listed as the account's, which
// information_schema.USER_PRIVILEGES does not show), as MySQL checks
// them for PROCESSLIST and KILL.
const privilegeQuery = "SHOW GRANTS"

// hasPrivilege asks the server, on the session's own primary connection
// (its account: with pass-through authentication the client's own),
// whether the account holds priv (PROCESS, or CONNECTION_ADMIN) on *.*,
// itself or through an active role, SUPER counting for either as in
// MySQL. Server.privFault, set by tests only, answers instead.
func (s *session) hasPrivilege(priv string) (bool, error) {
	if f := s.srv.privFault.Load(); f != nil {
		return (*f)(s.account(), priv), nil
	}
	if err := s.ensurePrimary(); err != nil {
		return false, err
	}
	r, err := s.primary.exec(s.ctx, privilegeQuery)
	if err != nil {
		return false, s.answerErr(err, s.primary)
	}
	for i := range r.RowNumber() {
		g, err := r.GetString(i, 0)
		if err != nil {
			return false, backendErr(s.primary.b, "privileges", err)
		}
		if grantsGlobal(g, priv) || grantsGlobal(g, "SUPER") {
			return true, nil
		}
	}
	return false, nil
}

// grantsGlobal reports whether grant, one line of SHOW GRANTS, grants
// priv on *.*: "GRANT <privilege>, ... ON *.* TO ..." naming it, or ALL
// [PRIVILEGES] (every static privilege, and the dynamic ones registered
// when it was granted). A role's grant ("GRANT `r`@`%` TO ..."), a
// narrower level and a REVOKE grant nothing here.
func grantsGlobal(grant, priv string) bool {
	list, ok := strings.CutPrefix(grant, "GRANT ")
	if !ok {
		return false
	}
	list, _, ok = strings.Cut(list, " ON *.* TO ")
	if !ok {
		return false
	}
	for p := range strings.SplitSeq(list, ",") {
		switch p = strings.TrimSpace(p); {
		case strings.EqualFold(p, priv), strings.EqualFold(p, "ALL"), strings.EqualFold(p, "ALL PRIVILEGES"):
			return true
		}
	}
	return false
}

// processList answers SHOW [FULL] PROCESSLIST from the proxy's sessions:
// the session's own account's, every session's when the account has
// PROCESS. Info is cut to 100 characters without FULL, as MySQL does.
func (s *session) processList(full bool) (*mysql.Result, error) {
	me := s.account()
	all, err := s.hasPrivilege(privProcess)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var mine []peerRow
	for _, p := range s.srv.peers(0) {
		if !all && p.user != me {
			continue
		}
		mine = append(mine, peerRow{ID: p.id, Row: p.row(now, full, p.sess == s)})
	}
	rows, err := s.peerRows(mine, all, full)
	if err != nil {
		return nil, err
	}
	rs := processListResultset(full)
	for _, r := range rows {
		rs.RowDatas = append(rs.RowDatas, r.Row)
	}
	return mysql.NewResult(rs), nil
}

// row is p's processlist row (self: the asking session, shown running
// the statement it runs).
func (p peer) row(now time.Time, full bool, self bool) mysql.RowData {
	r := p.sess.run
	r.mu.Lock()
	cmd, since, db := r.cmd, r.since, r.db
	info := string(r.info)
	r.mu.Unlock()
	if self {
		since = now
	}
	state := "executing"
	if cmd == 0 {
		state = ""
	}
	if !full {
		info = truncateChars(info, 100)
	}
	row := lenc(nil, strconv.FormatUint(uint64(p.id), 10))
	row = lenc(row, p.user)
	row = lenc(row, p.host)
	row = lencNull(row, db)
	row = lenc(row, commandName(cmd))
	row = lenc(row, strconv.FormatInt(int64(now.Sub(since)/time.Second), 10))
	row = lenc(row, state)
	return lencNull(row, info)
}

func lenc(row []byte, v string) []byte {
	return append(row, mysql.PutLengthEncodedString([]byte(v))...)
}

// lencNull is lenc, NULL for "".
func lencNull(row []byte, v string) []byte {
	if v == "" {
		return append(row, 0xfb)
	}
	return lenc(row, v)
}

// truncateChars cuts s to n characters (bytes, when s is not UTF-8).
func truncateChars(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if !utf8.ValidString(s) {
		return s[:n]
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k]
		}
		i++
	}
	return s
}

// processListResultset is SHOW PROCESSLIST's header, as MySQL's.
func processListResultset(full bool) *mysql.Resultset {
	infoLen := uint32(100 * 4)
	if full {
		infoLen = 1 << 24
	}
	col := func(name string, typ byte, length uint32, flags uint16) *mysql.Field {
		cs := uint16(255) // utf8mb4_0900_ai_ci
		if typ != mysql.MYSQL_TYPE_VAR_STRING {
			cs = 63 // binary
		}
		return &mysql.Field{Name: []byte(name), OrgName: []byte(name), Table: []byte("PROCESSLIST"), Charset: cs, Type: typ, ColumnLength: length, Flag: flags}
	}
	fs := []*mysql.Field{
		col("Id", mysql.MYSQL_TYPE_LONGLONG, 21, mysql.NOT_NULL_FLAG|mysql.UNSIGNED_FLAG),
		col("User", mysql.MYSQL_TYPE_VAR_STRING, 32*4, mysql.NOT_NULL_FLAG),
		col("Host", mysql.MYSQL_TYPE_VAR_STRING, 261*4, mysql.NOT_NULL_FLAG),
		col("db", mysql.MYSQL_TYPE_VAR_STRING, 64*4, 0),
		col("Command", mysql.MYSQL_TYPE_VAR_STRING, 16*4, mysql.NOT_NULL_FLAG),
		col("Time", mysql.MYSQL_TYPE_LONG, 7, mysql.NOT_NULL_FLAG),
		col("State", mysql.MYSQL_TYPE_VAR_STRING, 30*4, 0),
		col("Info", mysql.MYSQL_TYPE_VAR_STRING, infoLen, 0),
	}
	names := map[string]int{}
	for i, f := range fs {
		names[string(f.Name)] = i
	}
	return &mysql.Resultset{Fields: fs, FieldNames: names}
}

// commandName is a command's name in the processlist, as MySQL's.
func commandName(cmd byte) string {
	switch cmd {
	case mysql.COM_QUERY:
		return "Query"
	case mysql.COM_STMT_PREPARE:
		return "Prepare"
	case mysql.COM_STMT_EXECUTE:
		return "Execute"
	case mysql.COM_STMT_RESET:
		return "Reset stmt"
	case mysql.COM_INIT_DB:
		return "Init DB"
	case mysql.COM_FIELD_LIST:
		return "Field List"
	case mysql.COM_PING:
		return "Ping"
	case mysql.COM_CHANGE_USER:
		return "Change user"
	case mysql.COM_RESET_CONNECTION:
		return "Reset Connection"
	case mysql.COM_SET_OPTION:
		return "Set option"
	}
	return "Sleep"
}

// KILL's outcomes (kills_total's outcome label).
const (
	killDone    = "killed"
	killIdle    = "idle"
	killUnknown = "unknown-thread"
	killDenied  = "denied"
	killRefused = "not-literal"
)

// kill carries out KILL [QUERY | CONNECTION] <id> on the proxy's own
// sessions, as MySQL would: an id no session has is 1094; another
// account's session needs CONNECTION_ADMIN or SUPER (1095 without).
// KILL QUERY ends the statement the session runs (its client gets 1317),
// if any; KILL CONNECTION ends the session. Killing one's own connection
// answers 1317 (and then ends it, for KILL CONNECTION).
func (s *session) kill(st Stmt) (*mysql.Result, error) {
	kind := "connection"
	if st.KillQuery {
		kind = "query"
	}
	count := func(outcome string) { s.srv.m.kills.WithLabelValues(kind, outcome).Inc() }
	if st.KillBad {
		count(killRefused)
		return nil, s.proxyErr("kill-not-literal", mysql.ER_NOT_SUPPORTED_YET,
			"KILL takes one literal connection id here (KILL [QUERY | CONNECTION] <id>, @variable, or CONNECTION_ID()); the ids are the proxy's sessions' (SHOW PROCESSLIST)")
	}
	if st.KillVar != "" {
		id, err := s.userVarID(st.KillVar)
		if err != nil {
			return nil, err
		}
		st.KillID = id
	}
	var ps []peer
	if st.KillID > 0 && st.KillID <= 1<<32-1 {
		ps = s.srv.peers(uint32(st.KillID))
	}
	if len(ps) == 0 {
		if w := s.srv.peerOwner(st.KillID); w >= 0 {
			return s.killOnPeer(st, w, count)
		}
		count(killUnknown)
		return nil, mysql.NewDefaultError(mysql.ER_NO_SUCH_THREAD, st.KillID)
	}
	t := ps[0]
	if t.user != s.account() {
		ok, err := s.hasPrivilege(privKill)
		if err != nil {
			return nil, err
		}
		if !ok {
			count(killDenied)
			return nil, mysql.NewDefaultError(mysql.ER_KILL_DENIED_ERROR, st.KillID)
		}
	}
	if t.sess == s {
		count(killDone)
		if !st.KillQuery {
			s.closeAfter = true
		}
		return nil, mysql.NewDefaultError(mysql.ER_QUERY_INTERRUPTED)
	}
	if s.killRunning(t.sess.run, !st.KillQuery) || !st.KillQuery {
		// killed: a statement in flight was killed, or the connection ended
		count(killDone)
	} else {
		count(killIdle)
	}
	return nil, nil
}

// userVarID reads user variable name's value as a connection id on the
// primary, where the session's user variables live (KILL @id): NULL, or
// what is no number, is 0, as MySQL's KILL takes it (1094).
func (s *session) userVarID(name string) (uint64, error) {
	if err := s.ensurePrimary(); err != nil {
		return 0, err
	}
	r, err := s.primary.exec(s.ctx, "SELECT CAST("+name+" AS UNSIGNED)")
	if err != nil {
		return 0, s.answerErr(err, s.primary)
	}
	if r.Resultset == nil || len(r.Values) != 1 || len(r.Values[0]) != 1 {
		return 0, s.proxyErr("kill-not-literal", mysql.ER_NOT_SUPPORTED_YET, "KILL %s: its value could not be read on the primary", name)
	}
	v, _ := r.GetUint(0, 0)
	return v, nil
}

// killRunning ends the command r's session runs, if any (true): KILL
// QUERY of the call it has in flight on a backend, if any, on the node
// that runs it, with the
// proxy's own account (killQuery: the pool's connection under
// multiplexing, else one of its own), and with end ends the session. The
// target session does not leave its call before the kill ran
// (runState.leave).
func (s *session) killRunning(r *runState, end bool) bool {
	r.mu.Lock()
	bc, id, node, home, call := r.bc, r.thread, r.node, r.home, r.calls
	running := bc != nil && id != 0
	hit := r.cmd != 0
	if running {
		r.killing++
	}
	if hit {
		// The command's later calls are not made (enter): a kill that
		// falls between two of its calls (a replica's lazy prepare, then
		// the execution) still ends it.
		r.interrupted = true
	}
	stop := r.end
	if end {
		r.ended = true
	}
	r.mu.Unlock()
	if running {
		if s.sendKill(r, node, id, home) {
			s.killAgain(r, bc, call, node, id, home)
		}
	}
	if end && stop != nil {
		stop()
	}
	return hit
}

// killResend bounds how long killAgain re-sends a kill: the first wait,
// and the total.
const (
	killResendFirst = 20 * time.Millisecond
	killResendTotal = 2500 * time.Millisecond
)

// killAgain re-sends the kill while the call it was sent to (call, on
// bc) is still in flight, at doubling intervals up to killResendTotal. The
// proxy publishes a statement as running when it sends it: a kill that
// reaches the server before the statement finds the thread idle, which
// MySQL ignores, and the statement would run on. A re-sent kill never
// reaches another statement: it is sent only while the call has not
// left, and the call does not leave before it ran (runState.leave), so
// the session's next command cannot have begun. A kill that failed (its
// node unreachable, counted) is not sent again.
func (s *session) killAgain(r *runState, bc *backendConn, call uint64, node *Backend, id uint32, home *pool) {
	deadline := time.Now().Add(killResendTotal)
	for wait := killResendFirst; time.Now().Add(wait).Before(deadline); wait *= 2 {
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		r.mu.Lock()
		still := r.bc == bc && r.calls == call
		if still {
			r.killing++
		}
		r.mu.Unlock()
		if !still {
			return
		}
		s.srv.m.killResends.Inc()
		if !s.sendKill(r, node, id, home) {
			return
		}
	}
}

// sendKill sends KILL QUERY id to node for a call of r (whose killing
// count the caller raised) and lets the call leave once it ran; false:
// it failed, counted and logged at debug (the KILL statement itself
// succeeds, as MySQL's does once it found the thread).
func (s *session) sendKill(r *runState, node *Backend, id uint32, home *pool) bool {
	// Bounded by connect_timeout; it outlives neither session's need.
	err := killQuery(unpublished(context.WithoutCancel(s.ctx)), node, id, &s.srv.cfg, home)
	if err != nil {
		s.srv.m.backendErrors.WithLabelValues(node.Name, "kill").Inc()
		s.srv.log.Debug("KILL QUERY of a session's statement failed", "backend", node.Name, "err", err.Error())
	}
	r.mu.Lock()
	r.killing--
	r.cond.Broadcast()
	r.mu.Unlock()
	return err == nil
}

// endFunc is what KILL CONNECTION does to a session: its client
// connection closed and its context ended (its backend calls cut; its
// pooled connections go back reset or are discarded as at any end).
func (s *Server) endFunc(c net.Conn, cancel context.CancelFunc) func() {
	return func() {
		_ = c.Close()
		cancel()
	}
}

// withConnectionID returns query with every call of the built-in
// CONNECTION_ID() replaced by id, as CAST(<id> AS UNSIGNED) (the
// function's type, and never an ORDER BY position): a select-list item
// that is the call alone keeps its column name (AS `CONNECTION_ID()`, as
// the client wrote it). Strings, quoted identifiers, comments, user
// variables and qualified names (db.CONNECTION_ID(), a stored function)
// are left as they are; executable comments are SQL and rewritten. The
// rename puts the first call's text back in the names of result columns
// the server names after an expression containing it (columnRename).
func withConnectionID(query string, id uint32) (string, columnRename) {
	if !containsFold(query, "CONNECTION_ID") || storesText(query) {
		return query, columnRename{}
	}
	var (
		b      strings.Builder
		rename columnRename
	)
	done := 0
	lit := "CAST(" + strconv.FormatUint(uint64(id), 10) + " AS UNSIGNED)"
	w := idRewriter{l: sqllex.Lexer{S: query}}
	for {
		start, end, alias, ok := w.next()
		if !ok {
			break
		}
		if rename.from == "" {
			rename = columnRename{from: lit, to: strings.Clone(query[start:end])}
		}
		b.WriteString(query[done:start])
		b.WriteString(lit)
		if alias {
			b.WriteString(" AS `" + query[start:end] + "`")
		}
		done = end
	}
	if done == 0 {
		return query, columnRename{}
	}
	b.WriteString(query[done:])
	return b.String(), rename
}

// storesText: the statement keeps its text or shows it rather than
// running it: CREATE and ALTER (a view's, a routine's, a trigger's or an
// event's body, run later by other sessions: one session's id in it would
// be a constant), EXPLAIN and DESCRIBE (the statement echoed in its plan's
// note). CONNECTION_ID() stays there, as the client wrote it.
func storesText(query string) bool {
	l := sqllex.Lexer{S: query}
	t := l.Next()
	return t.Is("CREATE") || t.Is("ALTER") || t.Is("EXPLAIN") || t.Is("DESCRIBE") || t.Is("DESC")
}

// idRewriter finds CONNECTION_ID() calls in a statement (withConnectionID).
type idRewriter struct {
	l     sqllex.Lexer
	prev  sqllex.Token
	depth int
	// selectList: at depth 0, between SELECT and the end of its list.
	selectList bool
}

// next returns the next call's span and whether it is a select-list
// item of its own.
func (w *idRewriter) next() (start, end int, alias, ok bool) {
	for {
		t := w.l.Next()
		if t.Kind == sqllex.EOF {
			return 0, 0, false, false
		}
		w.track(t)
		if !t.Is("CONNECTION_ID") || w.prev.Punct('.') || w.prev.Is("FUNCTION") {
			w.prev = t
			continue
		}
		save := w.l
		if !w.l.Next().Punct('(') {
			w.l, w.prev = save, t
			continue
		}
		rp := w.l.Next()
		if !rp.Punct(')') || !onlyParens(w.l.S[t.Pos+len(t.Text):rp.Pos+1]) {
			w.l, w.prev = save, t
			continue
		}
		end = rp.Pos + 1
		after := w.l
		n := after.Next()
		alias = w.selectList && w.depth == 0 && itemStart(w.prev) && itemEnd(n) &&
			!strings.ContainsAny(w.l.S[t.Pos:end], "`") && end-t.Pos <= 64
		w.prev = rp
		return t.Pos, end, alias, true
	}
}

// track follows parentheses and, at depth 0, SELECT's list.
func (w *idRewriter) track(t sqllex.Token) {
	switch {
	case t.Punct('('):
		w.depth++
	case t.Punct(')'):
		w.depth = max(w.depth-1, 0)
	case w.depth != 0 || t.Kind != sqllex.Word:
	case t.Is("SELECT"):
		w.selectList = true
	case t.Is("FROM"), t.Is("INTO"), t.Is("WHERE"), t.Is("GROUP"), t.Is("ORDER"), t.Is("HAVING"),
		t.Is("LIMIT"), t.Is("WINDOW"), t.Is("FOR"), t.Is("UNION"), t.Is("EXCEPT"), t.Is("INTERSECT"),
		t.Is("SET"), t.Is("VALUES"), t.Is("ON"), t.Is("LOCK"):
		w.selectList = false
	}
	if t.Punct(';') {
		w.selectList = false
	}
}

// onlyParens: s is "()" with whitespace around (a call with a comment
// inside is left as it is: the comment is the client's).
func onlyParens(s string) bool {
	n := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '(' || c == ')':
			n++
		case !sqllex.IsSpace(c):
			return false
		}
	}
	return n == 2
}

// itemStart: a select-list item begins after t.
func itemStart(t sqllex.Token) bool {
	return t.Punct(',') || t.Is("SELECT") || t.Is("DISTINCT") || t.Is("ALL") || t.Is("DISTINCTROW") ||
		t.Is("HIGH_PRIORITY") || t.Is("STRAIGHT_JOIN") || t.Is("SQL_SMALL_RESULT") || t.Is("SQL_BIG_RESULT") ||
		t.Is("SQL_BUFFER_RESULT") || t.Is("SQL_NO_CACHE") || t.Is("SQL_CALC_FOUND_ROWS")
}

// itemEnd: a select-list item ends before t.
func itemEnd(t sqllex.Token) bool {
	return t.Kind == sqllex.EOF || t.Punct(',') || t.Punct(';') || t.Is("FROM") || t.Is("INTO")
}

// containsFold reports whether s contains upper (upper case, ASCII)
// ignoring case, without allocating.
func containsFold(s, upper string) bool {
	c0 := upper[0]
	for i := 0; i+len(upper) <= len(s); i++ {
		if s[i]&^0x20 == c0 && sqllex.EqualFoldUpper(s[i:i+len(upper)], upper) {
			return true
		}
	}
	return false
}

// killAfterFirst reports whether a statement after the first of a
// multi-statement query is a KILL (refused: no KILL reaches a server).
func killAfterFirst(query string) bool {
	if strings.IndexByte(query, ';') < 0 || !containsFold(query, "KILL") {
		return false
	}
	l := sqllex.Lexer{S: query}
	for t := l.Next(); t.Kind != sqllex.EOF; t = l.Next() {
		if t.Punct(';') {
			if n := l.Next(); n.Is("KILL") {
				return true
			}
		}
	}
	return false
}

// errKillInMulti refuses a multi-statement query with a KILL after its
// first statement.
func (s *session) errKillInMulti() error {
	return s.proxyErr("kill-not-literal", mysql.ER_NOT_SUPPORTED_YET,
		"KILL must be a statement of its own here: the proxy carries it out on its own sessions, never a server")
}

// greetingWithID returns the greeting packet pkt (header included) with
// id as its thread id (a copy), or pkt unchanged when it is not a
// protocol-10 greeting.
func greetingWithID(pkt []byte, id uint32) []byte {
	if len(pkt) < 5 || pkt[3] != 0 || pkt[4] != 10 || packetLen(pkt) != len(pkt)-4 {
		return pkt
	}
	nul := -1
	for i := 5; i < len(pkt); i++ {
		if pkt[i] == 0 {
			nul = i
			break
		}
	}
	if nul < 0 || len(pkt) < nul+5 {
		return pkt
	}
	out := slices.Clone(pkt)
	out[nul+1], out[nul+2], out[nul+3], out[nul+4] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
	return out
}
