package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
	"github.com/pingcap/tidb/pkg/parser/charset"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
	"github.com/causallab/causallab/sessiontoken"
)

// Error codes the proxy itself returns (MySQL's own codes where one fits).
const (
	// codeProxy is ER_UNKNOWN_ERROR, SQLSTATE HY000, for proxy-side refusals.
	codeProxy = mysql.ER_UNKNOWN_ERROR
	// codeBackendLost is CR_SERVER_LOST, as a client library would report it.
	codeBackendLost = 2013
	// codeClientTimeout is ER_CLIENT_INTERACTION_TIMEOUT, MySQL's answer
	// when it closes a connection idle past wait_timeout.
	codeClientTimeout = 4031
)

// session is one client connection's proxy session. Its goroutine alone
// runs it (serveConn: the login, then handleNextCommand in a loop), so it
// needs no locks; everything shared lives in *Server.
type session struct {
	srv *Server
	// ctx is the client connection's: cancelled when the session ends
	// (the client went, or the proxy's shutdown timeout cut it), never at
	// the server's shutdown signal alone, so that statements in flight
	// are not cut then. Every backend call is bound to it
	// (backendConn.bind).
	ctx context.Context
	// id is the session's connection id (Server.allocID): the greeting's
	// thread id, CONNECTION_ID(), the processlist's Id, KILL's.
	id uint32
	// run is what the session publishes of its work to the other
	// sessions (SHOW PROCESSLIST, KILL; session_admin.go).
	run *runState
	// slot is the client connection's place in the Server's bounds
	// (fairness.go): its account is the user it logged in with
	// (COM_CHANGE_USER moves it).
	slot *connSlot
	// cc is the client connection after the login: every byte to the
	// client goes through it (nil during the login).
	cc *clientConn

	// state mirrors what MySQL holds for this session (state.go): it
	// decides where a read goes and what a new connection replays.
	state *sessionState

	// topo is the topology the session's connections belong to (rebase
	// moves it to a promotion's).
	topo     *topology
	primary  *backendConn
	replicas []*backendConn // lazily opened, index = replica index
	// replicaFails[i] is the router's failure count of replica i when
	// replicas[i] was opened (Router.Failures): a connection that
	// predates a later failure of its node is redialled, not tried.
	replicaFails []uint64

	// closeAfter: close the client connection once the current response
	// is written (after an oversized packet, as MySQL does).
	closeAfter bool
	// diag: user variables a GET DIAGNOSTICS set on a replica, copied to
	// the session before its next other statement (settleDiag).
	diag diagCopy
	// sock is the client's socket, looked at (never read) while a
	// command runs: watchClients ends the session of a client that hung
	// up (nil: not a socket).
	sock syscall.RawConn
	// tls is the client link's TLS state (nil: plain), for KindConnStatus;
	// compressed: the link speaks the compressed protocol (compressedConn).
	tls        *tls.ConnectionState
	compressed bool
	// ls is the session's causal state in the router (token, watermark,
	// affinity key); reads go through ls.QueryFunc.
	ls *live.LiveSession[gtid.Set]

	// prepares is the last statement id given to the client (incremented
	// before every COM_STMT_PREPARE is handled, failed or not, as MySQL
	// does); stmts remembers the statements' parameter types and long
	// data (stmtdata.go).
	prepares uint32
	stmts    *stmtMemory
	// budget is max_session_bytes: long data (stmtMemory), prepared
	// statement texts (pstmt.cost) and remembered session statements
	// (sessionState.replayBytes), drawn from max_total_session_bytes
	// (Server.totalBytes) too.
	budget *byteBudget
	// caps are the client's capabilities from the handshake.
	caps uint32
	// acct is the account every backend connection of the session logs
	// in as (identity.go; the zero account: each server's own). fresh:
	// the next primary connection must be a new one (auth passthrough:
	// opening it verifies the account's password, borrow).
	acct  account
	fresh bool
	// healthFns[i] is replica i's health check for the watchdog (built
	// once: watchFor).
	healthFns []func() bool
	// use is what the current command borrows pooled connections for
	// (multiplexing's metrics: poolUse); poolBusy: the last borrow failed
	// because the pool was busy, not the node (busyRun).
	use      string
	poolBusy bool
	// rename is the current statement's column rename (withConnectionID).
	rename columnRename
	// waitFn and flushFn are the method values waitOn and flush, made
	// once (each use of a method value as a func allocates; they are
	// passed with every read): waitFunc, flushFunc.
	waitFn  live.WaitFunc[gtid.Set]
	flushFn func() error
	// trackFn is trackToken as a relayReq.token, made once; tracked is
	// the token text the client was last sent in an OK packet's
	// session-state block ("" none: not yet, or NULL).
	trackFn func(string) (string, bool)
	tracked string
}

// waitFunc is s.waitOn as a live.WaitFunc, made once.
func (s *session) waitFunc() live.WaitFunc[gtid.Set] {
	if s.waitFn == nil {
		s.waitFn = s.waitOn
	}
	return s.waitFn
}

// flushFunc is s.flush as a func, made once.
func (s *session) flushFunc() func() error {
	if s.flushFn == nil {
		s.flushFn = s.flush
	}
	return s.flushFn
}

// pstmt is a client's prepared statement, prepared on each backend that
// runs it.
type pstmt struct {
	query string
	class Stmt
	// id is the statement id the client was given (stmtMemory's key).
	id uint32
	// params is the statement's parameter count.
	params int
	// onPrimary is prepared at COM_STMT_PREPARE; onReplica lazily.
	onPrimary *client.Stmt
	onReplica map[int]*client.Stmt
	// cost is what the statement takes of the session's budget.
	cost int
	// rename: its result columns' names get CONNECTION_ID() back
	// (withConnectionID).
	rename columnRename
}

func newSession(ctx context.Context, srv *Server) *session {
	topo := srv.topo.Load()
	n := len(topo.replicas)
	budget := &byteBudget{limit: srv.cfg.MaxSessionBytes, total: srv.totalBytes}
	run := newRunState()
	ctx = context.WithValue(ctx, runKey{}, run)
	s := &session{
		run:          run,
		srv:          srv,
		topo:         topo,
		ctx:          ctx,
		replicas:     make([]*backendConn, n),
		replicaFails: make([]uint64, n),
		ls:           newLiveSession(srv),
		state:        newSessionState(),
		budget:       budget,
	}
	s.stmts = newStmtMemory(budget, srv.cfg.MaxAllowedPacket, s.countClientError)
	return s
}

// newLiveSession is a new causal state for the session (a new client
// connection, COM_RESET_CONNECTION, COM_CHANGE_USER): its token starts as
// Config.StartToken says.
func newLiveSession(srv *Server) *live.LiveSession[gtid.Set] {
	ls := srv.rt.NewSession()
	if srv.cfg.StartToken == StartTokenProxyWrites {
		ls.StartAfterAcked()
	}
	return ls
}

// countClientError counts a client error of kind (the client connection's
// and the statement memory's refusals).
func (s *session) countClientError(kind string) { s.srv.m.clientErrors.WithLabelValues(kind).Inc() }

// start runs after authentication (go-mysql's handshake, loginHandler):
// pick up the client's capabilities and collation and connect to the
// primary.
func (s *session) start(cc *server.Conn) error {
	s.caps = cc.Capability()
	s.ls.SetAffinityKey(hashroute.Hash(strconv.FormatUint(uint64(s.id), 10)))
	if col, err := charset.GetCollationByID(int(cc.Charset())); err == nil {
		s.state.collation = col.Name
	}
	s.state.flags = cc.Capability() & passedFlags
	s.use = useLogin
	bc, err := s.dial(s.topo.primary)
	if err != nil {
		return err
	}
	s.primary = bc
	return nil
}

func (s *session) close() {
	s.budget.release() // max_total_session_bytes: the session's share back
	s.primary.close()
	for _, r := range s.replicas {
		r.close()
	}
}

func (s *session) dial(b *Backend) (*backendConn, error) {
	if p := s.poolFor(b); p != nil {
		return s.borrow(b, p)
	}
	var healthy func() bool
	if b != s.topo.primary {
		healthy = s.healthy(b)
	}
	allGTIDs := healthy != nil && s.srv.cfg.WatermarkSource == "all-gtids"
	bc, err := dialBackend(s.ctx, b, s.acct, s.state.db, s.state.collation, s.state.flags, &s.srv.cfg, healthy, allGTIDs)
	s.fresh = false
	if err != nil {
		s.srv.m.backendErrors.WithLabelValues(b.Name, "connect").Inc()
		return nil, err
	}
	if healthy != nil && len(s.state.replay) > 0 {
		bc.watch(healthy)
		defer bc.unwatch()
	}
	for _, q := range s.state.replay {
		if _, err := bc.exec(s.ctx, q); err != nil {
			bc.close()
			s.srv.m.replayFailures.WithLabelValues(b.Name).Inc()
			return nil, backendErr(b, "replay", err)
		}
	}
	return bc, nil
}

// passedFlags are the client capabilities passed on to the backends:
// CLIENT_MULTI_STATEMENTS (several statements in one COM_QUERY),
// CLIENT_FOUND_ROWS (an UPDATE's affected rows are the rows it matched)
// and CLIENT_LOCAL_FILES (LOAD DATA LOCAL INFILE, the file relayed from
// the client, relayLocalFile).
const passedFlags = mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_FOUND_ROWS | mysql.CLIENT_LOCAL_FILES

// localFile is the relay's reader of a LOAD DATA LOCAL INFILE file from
// the client, or nil when the client did not offer local files (the
// server then refuses the statement itself: the backend connection does
// not offer them either).
func (s *session) localFile() func() ([]byte, byte, error) {
	if s.state.flags&mysql.CLIENT_LOCAL_FILES == 0 {
		return nil
	}
	return s.cc.filePacket
}

// proxyErr is an error the proxy returns to the client itself.
func (s *session) proxyErr(kind string, code uint16, format string, args ...any) error {
	s.srv.m.clientErrors.WithLabelValues(kind).Inc()
	return mysql.NewError(code, "causallab proxy: "+fmt.Sprintf(format, args...))
}

// ensurePrimary reconnects the primary after a loss (outside
// transactions), and before a statement is sent to a primary connection
// the server closed while it was idle (wait_timeout, closedWhileIdle):
// the statement was not sent, so when the session holds nothing a new
// connection cannot restore (sessionState.reconnectLoss) the proxy reconnects, as a
// driver's pool would; otherwise the client gets MySQL's own 4031 and its
// connection closes, as MySQL's would have.
func (s *session) ensurePrimary() error {
	if s.primary.closedWhileIdle(time.Now()) {
		s.primary.broken = true
		if why := s.state.reconnectLoss(); why != 0 {
			s.srv.m.idleClosed.WithLabelValues(s.primary.b.Name, "client-closed").Inc()
			s.closeAfter = true
			return s.proxyErr("backend-closed-idle-session", codeClientTimeout,
				"the primary closed this session's connection while it was idle (wait_timeout): the session's %s cannot be restored on a new one; this connection closes", why.phrase())
		}
		s.srv.m.idleClosed.WithLabelValues(s.primary.b.Name, "reconnected").Inc()
	}
	if s.primary != nil && !s.primary.broken {
		return nil
	}
	s.primary.close()
	s.primary = nil
	verifying := s.fresh // COM_CHANGE_USER's new account (auth passthrough)
	bc, err := s.dial(s.topo.primary)
	if err != nil {
		if verifying && backendDenied(err) {
			return err // the server's verdict on the account: 1045
		}
		return s.proxyErr("backend-lost", codeBackendLost, "%v", err)
	}
	s.primary = bc
	// Prepared statements of the old connection are gone.
	for _, p := range s.state.stmts {
		p.onPrimary = nil
	}
	return nil
}

// replica returns the session's connection to replica i, opening it. A
// connection the replica closed while it was idle (wait_timeout) is
// redialled: it holds only replayed state.
func (s *session) replica(i int, now time.Time) (*backendConn, error) {
	fails := s.srv.rt.Failures(s.topo.replicas[i].Name)
	if bc := s.replicas[i]; bc != nil && !bc.broken && s.replicaFails[i] == fails {
		if s.srv.skipIdlePeek.Load() || !bc.closedWhileIdle(now) {
			return bc, nil
		}
		s.srv.m.idleClosed.WithLabelValues(bc.b.Name, "reconnected").Inc()
	}
	s.replicas[i].close()
	s.replicas[i] = nil
	for _, p := range s.state.stmts {
		delete(p.onReplica, i)
	}
	bc, err := s.dial(s.topo.replicas[i])
	if err != nil {
		return nil, err
	}
	s.replicas[i], s.replicaFails[i] = bc, fails
	return bc, nil
}

// afterDropSchema runs after a DROP DATABASE that dropped a schema: when
// it was the session's current one, MySQL leaves the session with none,
// and so must the proxy, or the next connection it gives the session is
// told to use the dropped schema (1049, the client sees 2013). Which
// schema is current the primary says (SELECT DATABASE(): the server
// compared the names as it stores them, whatever quoting and
// lower_case_table_names); only when it has none does the proxy forget
// the session's (COM_INIT_DB's and every replayed USE), and closes the
// session's replica connections, which still use it. A failed check
// leaves the schema (the next statement may fail as before), counted in
// session_state_total{event="schema-check-failed"}.
func (s *session) afterDropSchema() {
	if s.state.db == "" && !s.state.replaysUse() {
		return
	}
	res, err := s.primary.exec(s.ctx, "SELECT DATABASE()")
	if err != nil || res.Resultset == nil || len(res.Values) != 1 || len(res.Values[0]) != 1 {
		s.srv.m.sessionState.WithLabelValues("schema-check-failed").Inc()
		return
	}
	if res.Values[0][0].Type != mysql.FieldValueTypeNull {
		return // another schema was dropped
	}
	s.srv.m.sessionState.WithLabelValues("schema-dropped").Inc()
	s.budget.give(s.state.forgetSchema())
	s.primary.pooledDB = ""
	for i, r := range s.replicas {
		r.close()
		s.replicas[i] = nil
	}
}

// useDB handles COM_INIT_DB.
func (s *session) useDB(db string) error {
	if err := s.ensurePrimary(); err != nil {
		return err
	}
	if err := s.primary.do(s.ctx, func() error { return s.primary.conn.UseDB(db) }); err != nil {
		return s.answerErr(err, s.primary)
	}
	s.state.db = strings.Clone(db)
	for i, r := range s.replicas {
		if r != nil && !r.broken {
			if err := r.do(s.ctx, func() error { return r.conn.UseDB(db) }); err != nil {
				s.srv.m.replayFailures.WithLabelValues(r.b.Name).Inc()
				r.close()
				s.replicas[i] = nil
			}
		}
	}
	return nil
}

// done is the result a handler returns when the response was already
// written (relayed from a backend): writeResult writes nothing more.
func done() *mysql.Result { return relayed }

// relayed is done's sentinel, compared by address; never written.
var relayed = new(mysql.Result)

// oneValueResultset is a one-row, one-column text result (NULL when v is
// nil). It is built by hand, not with mysql.BuildSimpleTextResultset:
// go-mysql v1.16.0's pooled Resultset.Reset keeps stale *Field pointers, so
// a Resultset another package returned to the pool (binlogwatch does) made
// BuildSimpleTextResultset fail with "row types aren't consistent".
func oneValueResultset(name string, v *string) *mysql.Resultset {
	f := &mysql.Field{Name: []byte(name), Charset: 33, Type: mysql.MYSQL_TYPE_VAR_STRING}
	var row []byte
	if v == nil {
		f.Type = mysql.MYSQL_TYPE_NULL
		row = []byte{0xfb}
	} else {
		row = mysql.PutLengthEncodedString([]byte(*v))
	}
	return &mysql.Resultset{Fields: []*mysql.Field{f}, FieldNames: map[string]int{name: 0}, RowDatas: []mysql.RowData{row}}
}

// connStatus is the value of a status variable of the client's own link
// (KindConnStatus), as MySQL reports it for its client: the TLS version
// ("TLSv1.3") and cipher suite of the proxy's TLS session with the client,
// empty without TLS (cipher names are Go's, IANA's; for TLS 1.3 they are
// the names MySQL reports); whether the link is compressed, with which
// algorithm and level (zlib at zlib's default level, 6, as MySQL).
func (s *session) connStatus(name string) string {
	switch name {
	case "Compression":
		if s.compressed {
			return "ON"
		}
		return "OFF"
	case "Compression_algorithm":
		if s.compressed {
			return "zlib"
		}
		return ""
	case "Compression_level":
		if s.compressed {
			return "6"
		}
		return "0"
	}
	if s.tls == nil {
		return ""
	}
	switch name {
	case "Ssl_cipher":
		return tls.CipherSuiteName(s.tls.CipherSuite)
	case "Ssl_version":
		return strings.Replace(tls.VersionName(s.tls.Version), "TLS 1.", "TLSv1.", 1)
	}
	return ""
}

// statusResultset is SHOW STATUS's answer of one row (Variable_name,
// Value), built by hand like oneValueResultset.
func statusResultset(name, value string) *mysql.Resultset {
	fs := []*mysql.Field{
		{Name: []byte("Variable_name"), Charset: 33, Type: mysql.MYSQL_TYPE_VAR_STRING},
		{Name: []byte("Value"), Charset: 33, Type: mysql.MYSQL_TYPE_VAR_STRING},
	}
	return &mysql.Resultset{Fields: fs, FieldNames: map[string]int{"Variable_name": 0, "Value": 1}, RowDatas: []mysql.RowData{statusRow(name, value)}}
}

// statusRow is one row of SHOW STATUS's answer.
func statusRow(name, value string) mysql.RowData {
	return append(mysql.PutLengthEncodedString([]byte(name)), mysql.PutLengthEncodedString([]byte(value))...)
}

// classify classifies a statement from the client (Classify) and holds
// its annotations to what they must be: a token annotation is data, one
// valid token, whatever the statement (a write's or a pinned read's is
// checked too, never ignored): a statement carrying anything else is
// refused before it reaches a server. Application code that pastes a
// value from a cookie or a header into the comment form cannot make the
// proxy run what follows the comment's end (docs/proxy.md, "Tokens").
func (s *session) classify(query string) (Stmt, error) {
	st, err := Classify(query)
	if err != nil {
		return Stmt{}, s.proxyErr("bad-annotation", codeProxy, "%s", strings.TrimPrefix(err.Error(), "proxy: "))
	}
	if st.Kind != KindKill && killAfterFirst(query) {
		return Stmt{}, s.errKillInMulti()
	}
	if st.TrackVars && s.srv.cfg.mariaDB() {
		return Stmt{}, s.proxyErr("mariadb-track-variables", mysql.ER_NOT_SUPPORTED_YET,
			"SET session_track_system_variables refused (mariadb-track-variables): on MariaDB the proxy tracks last_gtid there to learn each write's GTID (docs/proxy-mariadb.md)")
	}
	if st.Token != "" && st.Kind != KindSetToken {
		if _, err := s.parseToken(st.Token, st.TokenForm); err != nil {
			return Stmt{}, err
		}
	}
	return st, nil
}

// handleQuery handles COM_QUERY: a statement the proxy answers itself
// (tokens, policy, the client link's status), a read routed by the
// router, or a statement for the primary.
func (s *session) handleQuery(query string) (*mysql.Result, error) {
	query, s.rename = withConnectionID(query, s.id) // the proxy's id, not a backend thread's
	if handled, res, restore, err := s.selectPolicy(query); handled || err != nil {
		return res, err // SET / SELECT @causal_policy (policyselect.go)
	} else if restore != nil {
		defer restore() // a /* causal_policy=... */ statement
	}
	st, err := s.classify(query)
	if err != nil {
		return nil, err
	}
	st = s.state.withAutoIsNull(st)
	s.use, s.poolBusy = st.Kind.String(), false
	if st.Reason != ReasonPreviousStatement {
		if err := s.settleDiag(); err != nil {
			return nil, err
		}
	}
	if res, ok, err := s.proxyAnswer(st); ok {
		return res, err
	}
	if s.state.pendingEval != nil && st.Reason != ReasonPreviousStatement {
		s.evalPending()
	}
	if st.Kind == KindRead {
		// The primary connection is checked (ensurePrimary) only if the
		// router sends the read there (conn): checking it before every
		// read cost a read-only session one more system call per read
		// (the idle peek) once its primary connection sat idle a second.
		return s.readQuery(query, st)
	}
	return s.primaryQuery(query, st)
}

// primaryQuery runs statement st (query) on the session's primary
// connection and mirrors what it did to the session.
func (s *session) primaryQuery(query string, st Stmt) (*mysql.Result, error) {
	if err := s.unresetPrimary(st); err != nil {
		return nil, err
	}
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	if st.Reason == ReasonPreviousStatement {
		if bc := s.previous(); bc != nil {
			return s.onPrevious(bc, query, st)
		}
	}
	if st.Kind == KindPrimary {
		s.srv.m.primaryReasons.WithLabelValues(st.Reason.String()).Inc()
	}
	s.srv.m.statement(false, st.Kind, rolePrimary).Inc()
	s.seedInsertID(st)
	out, err := s.relay(s.primary, query, s.localFile())
	s.state.last = s.primary
	if err != nil {
		return s.answer(err, s.primary)
	}
	s.afterPrimaryQuery(query, st, out)
	return done(), nil
}

// afterPrimaryQuery mirrors what statement st (query), answered on the
// primary with out, did to the session.
func (s *session) afterPrimaryQuery(query string, st Stmt, out relayOut) {
	s.afterPrimary(st, out)
	if st.primaryRead() && !out.serverErr {
		s.seenAfterPrimary()
	}
	if st.DropsSchema && !out.serverErr && out.warnings == 0 {
		s.afterDropSchema()
	}
	if st.Kind == KindSession && !out.serverErr {
		s.rememberSet(query, st, out.warnings)
	}
	if s.state.flags&mysql.CLIENT_MULTI_STATEMENTS != 0 && strings.IndexByte(query, ';') >= 0 {
		if e, ok := ClassifyMulti(query); ok {
			s.state.afterMulti(e)
		}
	}
}

// proxyAnswer answers the statements the proxy itself holds the answer
// to: setting or reading the session's causal token, GTID tracking, the
// client link's TLS status. ok is false for every other statement.
func (s *session) proxyAnswer(st Stmt) (res *mysql.Result, ok bool, err error) {
	switch st.Kind {
	case KindSetToken:
		s.srv.m.statement(false, st.Kind, roleProxy).Inc()
		if st.TokenForm == TokenParam {
			return nil, true, s.proxyErr("bad-token", mysql.ER_PARSE_ERROR,
				"SET @causal_token = ? takes its token as a prepared statement's parameter (COM_STMT_PREPARE, then COM_STMT_EXECUTE)")
		}
		if st.Token == "" {
			s.ls.SetToken(gtid.Set{}, 0)
			return nil, true, nil
		}
		c, err := s.parseToken(st.Token, st.TokenForm)
		if err != nil {
			return nil, true, err
		}
		s.setCarried(c)
		return nil, true, nil
	case KindGetToken:
		s.srv.m.statement(false, st.Kind, roleProxy).Inc()
		rs := oneValueResultset("@causal_token", s.tokenText())
		return mysql.NewResult(rs), true, nil
	case KindTrackGTIDs:
		s.srv.m.statement(false, st.Kind, roleProxy).Inc()
		s.state.wantGTIDs = st.TrackGTIDs
		return nil, true, nil
	case KindConnStatus:
		s.srv.m.statement(false, st.Kind, roleProxy).Inc()
		names := []string{st.Status}
		if st.Status == compressionStatus {
			names = []string{"Compression", "Compression_algorithm", "Compression_level"}
		}
		rs := statusResultset(names[0], s.connStatus(names[0]))
		for _, n := range names[1:] {
			rs.RowDatas = append(rs.RowDatas, statusRow(n, s.connStatus(n)))
		}
		return mysql.NewResult(rs), true, nil
	case KindProcessList:
		s.srv.m.statement(false, st.Kind, roleProxy).Inc()
		res, err := s.processList(st.Full)
		return res, true, err
	case KindKill:
		s.srv.m.statement(false, st.Kind, roleProxy).Inc()
		res, err := s.kill(st)
		return res, true, err
	}
	return nil, false, nil
}

// onPrevious runs a statement that reads what the previous statement
// left on bc, the replica connection that ran it. The diagnostics stay
// asked-for one more command (multiplexing keeps bc: a second GET
// DIAGNOSTICS or SHOW WARNINGS reads them too); the user variables a GET
// DIAGNOSTICS assigned there are copied to the session later
// (settleDiag).
func (s *session) onPrevious(bc *backendConn, query string, st Stmt) (*mysql.Result, error) {
	s.srv.m.statement(false, st.Kind, roleReplica).Inc()
	out, err := s.relay(bc, query, nil)
	if err != nil {
		return s.answer(err, bc)
	}
	s.state.noteAnswer(st, out.warnings, out.serverErr)
	if len(st.DiagVars) > 0 && !out.serverErr {
		if s.diag.bc != bc {
			s.diag = diagCopy{bc: bc}
		}
		s.diag.vars = append(s.diag.vars, strings.Split(strings.TrimSuffix(st.DiagVars, "\x00"), "\x00")...)
		// The variables are copied from bc before the next other
		// statement: bc stays the session's until then.
		s.state.keepNext = keepWarnings
	}
	return done(), nil
}

// previous returns the replica connection that ran the session's
// previous statement, for a statement that reads what it left there
// (ReasonPreviousStatement: warnings, FOUND_ROWS): nil when that was the
// primary, or when the connection is gone (closed, redialled, or closed
// by the server while idle: what it held is lost, the primary answers).
func (s *session) previous() *backendConn {
	if s.state.last == nil || s.state.last == s.primary || s.state.last.broken {
		return nil
	}
	for _, r := range s.replicas {
		if r == s.state.last {
			if r.closedWhileIdle(time.Now()) {
				return nil
			}
			return r
		}
	}
	return nil
}

// afterPrimary mirrors what a statement did to the session on the
// primary and records the write's GTID.
func (s *session) afterPrimary(st Stmt, out relayOut) {
	s.state.afterPrimary(st, out.status, out.serverErr, out.stateChanged)
	s.state.noteAnswer(st, out.warnings, out.serverErr)
	s.noteInsertID(st, out)
	s.cc.mirrorStatus(s.state.status)
	if !out.serverErr && out.gtid != "" && !out.recorded {
		s.recordWrite(out.gtid)
	}
}

func (s *session) recordWrite(g string) {
	set, err := gtid.Parse(g)
	if err != nil {
		// The server's own text: a parse failure is a bug, never silently
		// ignored: count it and drop the session's token guarantee loudly.
		s.srv.m.clientErrors.WithLabelValues("unparsable-session-gtid").Inc()
		s.srv.log.Error("unparsable session-tracking GTID from the primary", "session", s.id, "err", err.Error())
		return
	}
	s.ls.RecordAck(set)
}

// replayEverywhere runs a session statement (already run on the primary)
// on every open replica connection and remembers it for later ones.
func (s *session) replayEverywhere(query string) {
	if !s.state.remember(query, s.srv.cfg.MaxReplay, s.budget) {
		// Too many to remember: close replica connections so they are not
		// left with a different session state; reads stay on the primary
		// (HoldReplayOverflow).
		s.srv.m.primaryReasons.WithLabelValues("replay-overflow").Inc()
		for i, r := range s.replicas {
			r.close()
			s.replicas[i] = nil
		}
		return
	}
	q := s.state.replay[len(s.state.replay)-1]
	for i, r := range s.replicas {
		if r == nil || r.broken {
			continue
		}
		if _, err := r.exec(s.ctx, q); err != nil {
			s.srv.m.replayFailures.WithLabelValues(r.b.Name).Inc()
			r.close()
			s.replicas[i] = nil
		}
	}
}

// seenAfterPrimary raises the session's watermark after a read the
// classifier sent to the primary (Stmt.primaryRead: a locking read, ...)
// reached the client, under the monotonic-reads policies: a later routed
// read must not show less than it did. The primary's watermark reader
// reads the position after it (one batched read). When that fails the
// session's monotonic-reads state is unknown: the client's connection
// closes after this response, counted as watermark-read-failed, as after
// a routed read.
func (s *session) seenAfterPrimary() {
	if len(s.topo.replicas) == 0 {
		return // no read is ever routed
	}
	switch s.ls.Policy().Kind {
	case router.PolicyTokenRYWMR, router.PolicyTokenWait, router.PolicyGlobal:
	default:
		return
	}
	wm, err := s.topo.primaryWM.read(s.ctx)
	if err != nil {
		s.srv.m.clientErrors.WithLabelValues("watermark-read-failed").Inc()
		s.closeAfter = true
		return
	}
	s.ls.ObservePrimary(wm)
}

// carried is what a client's token carries: the writes a read must see
// (read-your-writes) and, from a signed session token, what the session's
// reads were shown (monotonic reads; empty from the unsigned forms).
type carried struct {
	writes, seen gtid.Token
}

// forRead is the one token a single read must honour (a token in a
// comment or min_gtid): the writes and the seen, with the older epoch of
// the two (the router checks the oldest part against each failover).
func (c carried) forRead() gtid.Token {
	switch {
	case c.seen.GTIDs.IsEmpty():
		return c.writes
	case c.writes.GTIDs.IsEmpty():
		return c.seen
	}
	return gtid.Token{Epoch: min(c.writes.Epoch, c.seen.Epoch), GTIDs: c.writes.GTIDs.Union(c.seen.GTIDs)}
}

// parseToken parses a token from a client: a signed session token
// (s1., Config.TokenKeys), the unsigned g1.<epoch>.<set> text form, or a
// bare GTID set (session-tracking text, ProxySQL's min_gtid), taken as
// issued in the current epoch; the unsigned forms only under
// accept_unsigned_tokens. A token from an epoch past the topology's is
// refused (token-future-epoch): it cannot have been issued here.
func (s *session) parseToken(text string, form TokenForm) (carried, error) {
	if len(text) > s.srv.cfg.MaxTokenBytes {
		// Parsing is linear, but the wait on a replica and every set
		// operation grow with the token: bound it before any of them.
		return carried{}, s.proxyErr("token-too-large", codeProxy,
			"causal token of %d bytes refused: longer than max_token_bytes (%d); compact_tokens keeps the proxy's own tokens to one interval per source",
			len(text), s.srv.cfg.MaxTokenBytes)
	}
	if strings.HasPrefix(text, sessiontoken.Prefix) {
		return s.parseSigned(text)
	}
	if !*s.srv.cfg.AcceptUnsignedTokens {
		return carried{}, s.proxyErr("token-unsigned", codeProxy,
			"causal token refused (token-unsigned): this proxy takes only signed session tokens (%s..., from SELECT @causal_token; accept_unsigned_tokens is off)", sessiontoken.Prefix)
	}
	if strings.HasPrefix(text, "g1.") {
		tok, err := gtid.ParseToken(text)
		if err != nil {
			return carried{}, s.proxyErr("bad-token", codeProxy, "bad causal token: %v", err)
		}
		if err := s.checkEpoch(tok.Epoch); err != nil {
			return carried{}, err
		}
		return carried{writes: tok}, s.checkTokenEngine(tok.GTIDs)
	}
	if s.srv.cfg.mariaDB() {
		// MariaDB's own form: a position, as last_gtid and
		// gtid_current_pos print it (MaxScale's causal reads take it).
		if set, err := gtid.MariaDBSetOf(text); err == nil {
			return carried{writes: gtid.Token{Epoch: s.srv.topo.Load().epoch, GTIDs: set}}, nil
		}
	}
	set, err := gtid.Parse(text)
	if err != nil {
		return carried{}, s.proxyErr("bad-token", codeProxy,
			"unknown causal token format (want %s..., g1.<epoch>.<gtid set>, a GTID set or, on MariaDB, a GTID position): %v", sessiontoken.Prefix, err)
	}
	return carried{writes: gtid.Token{Epoch: s.srv.topo.Load().epoch, GTIDs: set}}, s.checkTokenEngine(set)
}

// checkTokenEngine refuses, on MariaDB, a token set with a source that
// does not stand for a MariaDB domain (gtid.MariaDBWaitPosition): it was
// issued in front of MySQL, and no MariaDB server would ever hold it.
func (s *session) checkTokenEngine(sets ...gtid.Set) error {
	if !s.srv.cfg.mariaDB() {
		return nil
	}
	for _, set := range sets {
		if _, err := gtid.MariaDBWaitPosition(set); err != nil {
			return s.proxyErr("token-wrong-engine", codeProxy,
				"causal token refused (token-wrong-engine): this proxy fronts MariaDB, and the token names MySQL GTIDs (%v)", err)
		}
	}
	return nil
}

// parseSigned verifies and reads a signed session token.
func (s *session) parseSigned(text string) (carried, error) {
	if s.srv.tokens == nil {
		return carried{}, s.proxyErr("token-unknown-key", codeProxy,
			"causal token refused (token-unknown-key): this proxy holds no token_keys to verify a signed session token")
	}
	t, err := s.srv.tokens.Parse(text)
	if err != nil {
		var te *sessiontoken.Error
		if errors.As(err, &te) {
			return carried{}, s.proxyErr(string(te.Reason), codeProxy, "%v", err)
		}
		return carried{}, s.proxyErr("bad-token", codeProxy, "%v", err)
	}
	for _, e := range []uint64{t.Epoch, t.SeenEpoch} {
		if err := s.checkEpoch(e); err != nil {
			return carried{}, err
		}
	}
	return carried{writes: gtid.Token{Epoch: t.Epoch, GTIDs: t.Writes}, seen: gtid.Token{Epoch: t.SeenEpoch, GTIDs: t.Seen}}, s.checkTokenEngine(t.Writes, t.Seen)
}

// checkEpoch refuses a token epoch past the topology's.
func (s *session) checkEpoch(epoch uint64) error {
	if cur := s.srv.topo.Load().epoch; epoch > cur {
		return s.proxyErr("token-future-epoch", codeProxy,
			"causal token refused (token-future-epoch): issued in epoch %d, but the topology is at epoch %d", epoch, cur)
	}
	return nil
}

// setCarried makes c the session's token (SET @causal_token): its writes
// replace the session's; its seen raises the session's watermark.
func (s *session) setCarried(c carried) {
	s.ls.SetToken(c.writes.GTIDs, c.writes.Epoch)
	s.ls.AddSeen(c.seen.GTIDs, c.seen.Epoch)
}

// tokenText is SELECT @causal_token's answer (nil: NULL, nothing to
// carry): signed, with what the session's reads were shown, when the
// proxy has token_keys; else the unsigned g1. form of its writes.
func (s *session) tokenText() *string {
	set, epoch := s.ls.Token()
	var txt string
	if s.srv.tokens != nil {
		seen, seenEpoch := s.ls.Seen()
		if set.IsEmpty() && seen.IsEmpty() {
			return nil
		}
		txt = s.srv.tokens.Sign(sessiontoken.Token{Epoch: epoch, Writes: set, SeenEpoch: seenEpoch, Seen: seen})
	} else {
		if set.IsEmpty() {
			return nil
		}
		txt = gtid.Token{Epoch: epoch, GTIDs: set}.String()
	}
	return &txt
}

// tokenTracker is the session's relayReq.token: nil unless track_token
// is on and the client negotiated CLIENT_SESSION_TRACK.
func (s *session) tokenTracker() func(string) (string, bool) {
	if !*s.srv.cfg.TrackToken || !s.cc.hasCapability(mysql.CLIENT_SESSION_TRACK) {
		return nil
	}
	if s.trackFn == nil {
		s.trackFn = s.trackToken
	}
	return s.trackFn
}

// trackToken is called as the OK packet that ends a statement's response
// is written to a client that tracks the token: it records the
// response's write GTIDs g first (the token the OK carries holds the
// write it acknowledges; afterPrimary then records nothing,
// relayOut.recorded), and returns the session's token text when it
// differs from the one the client was last sent ("" when it became
// NULL). A read's watermark raised after its result set (whose classic
// EOF packet carries no session state) reaches the next OK packet, or
// SELECT @causal_token.
func (s *session) trackToken(g string) (string, bool) {
	if g != "" {
		s.recordWrite(g)
	}
	txt := ""
	if t := s.tokenText(); t != nil {
		txt = *t
	}
	if txt == s.tracked {
		return "", false
	}
	s.tracked = txt
	return txt, true
}

// withTrackedToken is the proxy's own OK answer r with the session's
// token in its session-state block when it changed (tokenTracker).
func (s *session) withTrackedToken(r *mysql.Result) *mysql.Result {
	f := s.tokenTracker()
	if f == nil {
		return r
	}
	tok, changed := f("")
	if !changed {
		return r
	}
	out := mysql.Result{}
	if r != nil {
		out = *r
	}
	out.Status |= mysql.SERVER_SESSION_STATE_CHANGED
	out.SessionTracking = &mysql.SessionTrackingInfo{Variables: map[string]string{tokenVariable: tok}}
	return &out
}

// waitOn is the router's WaitFunc: WAIT_FOR_EXECUTED_GTID_SET (MariaDB:
// MASTER_GTID_WAIT, Config.flavor) on the
// session's own connection to the replica (live.WaitGTIDFunction; with
// live.WaitWatcher the router waits on the position source instead), with
// the remaining budget d as its timeout. The wait is bounded on the
// socket too: by d plus mysqlwire.WaitSlack, by ctx, and by the replica's health
// (watch). One that outlives its budget (a server busy with a huge
// token answers long after its timeout) is given up: the connection is
// cut, the wait killed on the server (KILL QUERY on a connection of its
// own) and the wait reported as timed out, which holds no replica down.
// One the watchdog cut is a node failure.
func (s *session) waitOn(ctx context.Context, t live.Target, need gtid.Set, d time.Duration) (bool, error) {
	use := s.use
	s.use = useWait
	bc, rerr := s.conn(t, time.Now())
	s.use = use
	if rerr != nil {
		return false, rerr
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	stop := context.AfterFunc(ctx, func() { bc.dc.Cut(ctx.Err()) })
	limit := time.Now().Add(d + mysqlwire.WaitSlack)
	bc.dc.Limit(limit)
	bc.watch(s.healthy(bc.b))
	ok, err := mysqlwire.WaitAnswer(bc.exec(ctx, s.srv.cfg.flavor().WaitQuery(need, d)))
	bc.unwatch()
	bc.dc.Limit(time.Time{})
	stop()
	switch {
	case err == nil:
		return ok, nil
	case bc.unresponsive():
		s.srv.m.backendErrors.WithLabelValues(bc.b.Name, "unresponsive").Inc()
		return false, backendErr(bc.b, "wait", errUnresponsive)
	case ctx.Err() != nil:
		s.killWait(bc)
		return false, ctx.Err()
	case !time.Now().Before(limit):
		// The socket's limit passed (go-mysql's error does not keep the
		// net.Error).
		s.srv.m.backendErrors.WithLabelValues(bc.b.Name, "wait-overran").Inc()
		s.killWait(bc)
		return false, nil
	}
	return false, backendErr(bc.b, "wait", err)
}

// killWait ends a wait the proxy gave up on: the connection is closed
// (out of step), and KILL QUERY runs on a connection of its own in the
// background (bounded by connect_timeout; at most maxKills at once, more
// are counted and left to the wait's own timeout).
func (s *session) killWait(bc *backendConn) {
	bc.broken = true
	id := bc.conn.GetConnectionID()
	b := bc.b
	// A pooled connection keeps its place in the pool until its wait is
	// killed (the server runs it until then), and the kill borrows there.
	home := bc.home
	free := home.keepPlace(bc)
	select {
	case s.srv.kills <- struct{}{}:
	default:
		free()
		s.srv.m.backendErrors.WithLabelValues(b.Name, "kill-skipped").Inc()
		return
	}
	s.srv.wg.Go(func() {
		defer func() { <-s.srv.kills }()
		defer free()
		// The kill outlives the session (bounded by connect_timeout).
		if err := killQuery(unpublished(context.WithoutCancel(s.ctx)), b, id, &s.srv.cfg, home); err != nil {
			s.srv.m.backendErrors.WithLabelValues(b.Name, "kill").Inc()
			s.srv.log.Debug("KILL QUERY of an overrun wait failed", "backend", b.Name, "err", err.Error())
		}
	})
}

// watchFor is the watchdog's health check for bc, replica index i (nil
// for the primary: a write is never cut for a health verdict).
func (s *session) watchFor(bc *backendConn, i int) func() bool {
	if i < 0 {
		return nil
	}
	if s.healthFns == nil {
		s.healthFns = make([]func() bool, len(s.topo.replicas))
	}
	if s.healthFns[i] == nil {
		s.healthFns[i] = s.healthy(bc.b)
	}
	return s.healthFns[i]
}

// healthy is b's health as the position source reports it (the
// watchdog's check).
func (s *session) healthy(b *Backend) func() bool {
	return func() bool {
		_, ok := s.srv.src.Position(b.Name)
		return ok
	}
}

// flush sends the client's buffered response now.
func (s *session) flush() error {
	return s.cc.Flush()
}

// fieldList handles COM_FIELD_LIST on the primary.
func (s *session) fieldList(table string, wildcard string) ([]*mysql.Field, error) {
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	var fs []*mysql.Field
	err := s.primary.do(s.ctx, func() (err error) {
		fs, err = s.primary.conn.FieldList(table, wildcard)
		return err
	})
	if err != nil {
		return nil, s.answerErr(err, s.primary)
	}
	return fs, nil
}

// resetSession is COM_RESET_CONNECTION: the session's state is cleared
// as MySQL clears it (sessionState.reset: variables, holds, transaction,
// prepared statements; the schema stays), its causal token and
// watermark are dropped (its affinity key kept), replica connections are
// closed and the primary connection replaced by a new one (which MySQL
// would have reset: the transaction rolled back, locks released).
func (s *session) resetSession() error {
	for i, r := range s.replicas {
		r.close()
		s.replicas[i] = nil
	}
	s.budget.give(s.state.reset())
	s.stmts.reset()
	s.cc.mirrorStatus(s.state.status) // autocommit on, no transaction
	key := s.ls.State().AffinityKey
	s.ls = newLiveSession(s.srv)
	s.ls.SetAffinityKey(key)
	s.tracked = ""
	s.primary.close()
	s.primary = nil
	return s.ensurePrimary()
}

// COM_SET_OPTION's options (MySQL's enum_mysql_set_option).
const (
	optionMultiStatementsOn  = 0
	optionMultiStatementsOff = 1
)

// setOption handles COM_SET_OPTION (answered with EOF when it returns
// nil, as MySQL answers it): CLIENT_MULTI_STATEMENTS on or off for the session, as MySQL does.
// The primary runs it first (its refusal is the answer); open replica
// connections follow, and connections opened later are dialled with the
// new flags. A replica connection that fails it is closed (counted as a
// replay failure).
func (s *session) setOption(data []byte) error {
	if len(data) != 2 {
		return mysql.NewError(mysql.ER_MALFORMED_PACKET, "Malformed communication packet.")
	}
	opt := binary.LittleEndian.Uint16(data)
	if opt != optionMultiStatementsOn && opt != optionMultiStatementsOff {
		return mysql.NewError(mysql.ER_UNKNOWN_COM_ERROR, "Unknown command")
	}
	if err := s.ensurePrimary(); err != nil {
		return err
	}
	if err := s.primary.setOption(s.ctx, opt); err != nil {
		return s.answerErr(err, s.primary)
	}
	if opt == optionMultiStatementsOn {
		s.state.flags |= mysql.CLIENT_MULTI_STATEMENTS
	} else {
		s.state.flags &^= mysql.CLIENT_MULTI_STATEMENTS
	}
	for i, r := range s.replicas {
		if r == nil || r.broken {
			continue
		}
		if err := r.setOption(s.ctx, opt); err != nil {
			s.srv.m.replayFailures.WithLabelValues(r.b.Name).Inc()
			r.close()
			s.replicas[i] = nil
		}
	}
	return nil
}
