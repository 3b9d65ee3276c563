package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
	"github.com/go-mysql-org/go-mysql/stmt"
	"github.com/pingcap/tidb/pkg/parser/charset"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router/live"
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

// session is the server.Handler of one client connection. The go-mysql
// server calls it from the connection's goroutine only, so it needs no
// locks; everything shared lives in *Server.
type session struct {
	srv *Server
	ctx context.Context
	id  uint32
	cc  *server.Conn
	// fc is cc's connection below go-mysql's packet layer (nil in tests
	// without a listener): buffered writes, the raw COM_STMT_EXECUTE.
	fc *execFixConn

	// db is the current default schema (handshake or COM_INIT_DB).
	db string
	// collation is the client's handshake collation name.
	collation string
	// replay holds the session statements (SET ...) run so far, in order,
	// replayed on each backend connection the session opens.
	replay []string

	primary  *backendConn
	replicas []*backendConn // lazily opened, index = replica index
	// replicaFails[i] is the router's failure count of replica i when
	// replicas[i] was opened (Router.Failures): a connection that
	// predates a later failure of its node is redialled, not tried.
	replicaFails []uint64

	// Pins: reads go to the primary while any is set.
	inTx, autocommitOff, tempTables, lockedTables, userVarsOnPrimary bool
	// closeAfter: close the client connection once the current response
	// is written (after an oversized packet, as MySQL does).
	closeAfter bool
	// flags are the capabilities the client negotiated that change what
	// a server does with its statements (passedFlags); every backend
	// connection is opened with them, so the server answers the client's
	// statements as it would answer the client. COM_SET_OPTION turns
	// CLIENT_MULTI_STATEMENTS on and off.
	flags uint32
	// sessionPinned: a statement changed session state the proxy could
	// not replay (a session statement inside a multi-statement query, a
	// system variable SET from a subquery):
	// reads stay on the primary (live.PinSessionState).
	sessionPinned bool
	// last is the backend connection that ran the session's previous
	// statement (ReasonPreviousStatement statements follow it).
	last *backendConn
	// tls is the client link's TLS state (nil: plain), for KindConnStatus.
	tls *tls.ConnectionState
	// wantGTIDs: the client asked for session-tracking GTIDs
	// (SET session_track_gtids = OWN_GTID through the proxy).
	wantGTIDs bool

	// ls is the session's causal state in the router (token, watermark,
	// affinity key); reads go through ls.QueryFunc.
	ls *live.LiveSession[gtid.Set]

	stmts map[*stmt.PreparedStmt]*pstmt
	// prepares mirrors go-mysql's statement id counter (incremented before
	// every COM_STMT_PREPARE is handled, failed or not); params maps those
	// ids to parameter counts for execFixConn.
	prepares uint32
	params   map[uint32]*stmtParams
	// budget is max_session_bytes: long data (execFixConn), prepared
	// statement texts (pstmt.cost) and remembered session statements
	// (replayBytes).
	budget      *byteBudget
	replayBytes int
	// healthFns[i] is replica i's health check for the watchdog (built
	// once: watchFor).
	healthFns []func() bool
}

// pstmt is a client's prepared statement, prepared on each backend that
// runs it.
type pstmt struct {
	query string
	class Stmt
	// id is go-mysql's statement id (execFixConn's key).
	id uint32
	// params is the statement's parameter count.
	params int
	// onPrimary is prepared at COM_STMT_PREPARE; onReplica lazily.
	onPrimary *client.Stmt
	onReplica map[int]*client.Stmt
	// cost is what the statement takes of the session's budget.
	cost int
}

var _ server.Handler = (*session)(nil)

func newSession(ctx context.Context, srv *Server) *session {
	n := len(srv.cfg.Replicas)
	s := &session{
		srv:          srv,
		ctx:          ctx,
		replicas:     make([]*backendConn, n),
		replicaFails: make([]uint64, n),
		ls:           srv.rt.NewSession(),
		stmts:        map[*stmt.PreparedStmt]*pstmt{},
		params:       map[uint32]*stmtParams{},
		budget:       &byteBudget{limit: srv.cfg.MaxSessionBytes},
	}
	return s
}

// start runs after authentication: pick up the client's collation and
// connect to the primary.
func (s *session) start(cc *server.Conn) error {
	s.cc = cc
	s.id = cc.ConnectionID()
	s.ls.SetAffinityKey(hashroute.Hash(strconv.FormatUint(uint64(s.id), 10)))
	if col, err := charset.GetCollationByID(int(cc.Charset())); err == nil {
		s.collation = col.Name
	}
	s.flags = cc.Capability() & passedFlags
	bc, err := s.dial(&s.srv.cfg.Primary)
	if err != nil {
		return err
	}
	s.primary = bc
	return nil
}

func (s *session) close() {
	s.primary.close()
	for _, r := range s.replicas {
		r.close()
	}
}

func (s *session) dial(b *Backend) (*backendConn, error) {
	var healthy func() bool
	if b != &s.srv.cfg.Primary {
		healthy = s.healthy(b)
	}
	allGTIDs := healthy != nil && s.srv.cfg.WatermarkSource == "all-gtids"
	bc, err := dialBackend(s.ctx, b, s.db, s.collation, s.flags, &s.srv.cfg, healthy, allGTIDs)
	if err != nil {
		s.srv.m.backendErrors.WithLabelValues(b.Name, "connect").Inc()
		return nil, err
	}
	if healthy != nil && len(s.replay) > 0 {
		bc.watch(healthy)
		defer bc.unwatch()
	}
	for _, q := range s.replay {
		if _, err := bc.exec(q); err != nil {
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
	if s.fc == nil || s.flags&mysql.CLIENT_LOCAL_FILES == 0 {
		return nil
	}
	return s.fc.filePacket
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
// connection cannot restore (reconnectUnsafe) the proxy reconnects, as a
// driver's pool would; otherwise the client gets MySQL's own 4031 and its
// connection closes, as MySQL's would have.
func (s *session) ensurePrimary() error {
	if s.primary.closedWhileIdle(time.Now()) {
		s.primary.broken = true
		if why := s.reconnectUnsafe(); why != "" {
			s.srv.m.idleClosed.WithLabelValues(s.primary.b.Name, "client-closed").Inc()
			s.closeAfter = true
			return s.proxyErr("backend-closed-idle-session", codeClientTimeout,
				"the primary closed this session's connection while it was idle (wait_timeout): the session's %s cannot be restored on a new one; this connection closes", why)
		}
		s.srv.m.idleClosed.WithLabelValues(s.primary.b.Name, "reconnected").Inc()
	}
	if s.primary != nil && !s.primary.broken {
		return nil
	}
	s.primary.close()
	s.primary = nil
	bc, err := s.dial(&s.srv.cfg.Primary)
	if err != nil {
		return s.proxyErr("backend-lost", codeBackendLost, "%v", err)
	}
	s.primary = bc
	// Prepared statements of the old connection are gone.
	for _, p := range s.stmts {
		p.onPrimary = nil
	}
	return nil
}

// reconnectUnsafe says what of the session a new primary connection
// would lose (an open transaction, temporary tables, table locks, user
// variables, session state run only there), or "" when replaying the
// session statements restores it all.
func (s *session) reconnectUnsafe() string {
	switch {
	case s.inTx:
		return "open transaction"
	case s.tempTables:
		return "temporary tables"
	case s.lockedTables:
		return "table locks"
	case s.userVarsOnPrimary:
		return "user variables"
	case s.sessionPinned:
		return "session state set on the primary only (a multi-statement query, a SET from a subquery)"
	}
	return ""
}

// replica returns the session's connection to replica i, opening it. A
// connection the replica closed while it was idle (wait_timeout) is
// redialled: it holds only replayed state.
func (s *session) replica(i int) (*backendConn, error) {
	fails := s.srv.rt.Failures(s.srv.cfg.Replicas[i].Name)
	if bc := s.replicas[i]; bc != nil && !bc.broken && s.replicaFails[i] == fails {
		if s.srv.skipIdlePeek.Load() || !bc.closedWhileIdle(time.Now()) {
			return bc, nil
		}
		s.srv.m.idleClosed.WithLabelValues(bc.b.Name, "reconnected").Inc()
	}
	s.replicas[i].close()
	s.replicas[i] = nil
	for _, p := range s.stmts {
		delete(p.onReplica, i)
	}
	bc, err := s.dial(&s.srv.cfg.Replicas[i])
	if err != nil {
		return nil, err
	}
	s.replicas[i], s.replicaFails[i] = bc, fails
	return bc, nil
}

// UseDB handles COM_INIT_DB (and the handshake's database).
func (s *session) UseDB(db string) error {
	if s.primary == nil { // during the handshake
		s.db = strings.Clone(db)
		return nil
	}
	if err := s.ensurePrimary(); err != nil {
		return err
	}
	if err := s.primary.conn.UseDB(db); err != nil {
		return s.backendFailure(s.primary, err)
	}
	s.db = strings.Clone(db)
	for i, r := range s.replicas {
		if r != nil && !r.broken {
			if err := r.conn.UseDB(db); err != nil {
				s.srv.m.replayFailures.WithLabelValues(r.b.Name).Inc()
				r.close()
				s.replicas[i] = nil
			}
		}
	}
	return nil
}

// backendFailure turns a backend error into the client's error: the
// server's own error unchanged, or a lost-connection error.
func (s *session) backendFailure(bc *backendConn, err error) error {
	var me *mysql.MyError
	if errors.As(err, &me) {
		return me
	}
	bc.broken = true
	s.srv.m.backendErrors.WithLabelValues(bc.b.Name, "query").Inc()
	return s.lostErr(bc)
}

func (s *session) lostErr(bc *backendConn) error {
	if bc == s.primary && s.inTx {
		s.inTx = false
		s.cc.ClearInTransaction()
		return s.proxyErr("backend-lost", codeBackendLost,
			"lost the connection to %s inside a transaction: the transaction is rolled back and was not retried", bc.b.Name)
	}
	return s.proxyErr("backend-lost", codeBackendLost,
		"lost the connection to %s; the statement may or may not have run and was not retried", bc.b.Name)
}

// done is the result the go-mysql server writes nothing for: the response
// was already relayed.
func done() *mysql.Result {
	rs := mysql.NewResultset(1)
	rs.Fields = append(rs.Fields[:0], &mysql.Field{})
	rs.Streaming = mysql.StreamingMultiple
	rs.StreamingDone = true
	return mysql.NewResult(rs)
}

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
// empty without TLS. Cipher names are Go's (IANA's); for TLS 1.3 they are
// the names MySQL reports.
func (s *session) connStatus(name string) string {
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
	row := append(mysql.PutLengthEncodedString([]byte(name)), mysql.PutLengthEncodedString([]byte(value))...)
	return &mysql.Resultset{Fields: fs, FieldNames: map[string]int{"Variable_name": 0, "Value": 1}, RowDatas: []mysql.RowData{row}}
}

// takeCommand returns the client's own command when execFixConn handed
// go-mysql a stand-in for it (it always does for COM_QUERY,
// COM_STMT_PREPARE and COM_STMT_EXECUTE), and sets the response's
// sequence number past the client's packets.
func (s *session) takeCommand(cmd byte) ([]byte, bool) {
	payload, seq, ok := s.fc.command(cmd)
	if ok {
		s.cc.Sequence = seq
	}
	return payload, ok
}

// HandleQuery handles COM_QUERY.
func (s *session) HandleQuery(query string) (*mysql.Result, error) {
	if payload, ok := s.takeCommand(mysql.COM_QUERY); ok {
		query = payloadText(payload) // valid during this command
	}
	if len(query) > s.srv.cfg.MaxAllowedPacket {
		s.closeAfter = true
		return nil, s.proxyErr("packet-too-large", mysql.ER_NET_PACKET_TOO_LARGE,
			"statement of %d bytes exceeds max_allowed_packet (%d)", len(query), s.srv.cfg.MaxAllowedPacket)
	}
	if handled, res, restore, err := s.selectPolicy(query); handled || err != nil {
		return res, err // SET / SELECT @causal_policy (policyselect.go)
	} else if restore != nil {
		defer restore() // a /* causal_policy=... */ statement
	}
	st, err := Classify(query)
	if err != nil {
		return nil, s.proxyErr("bad-annotation", codeProxy, "%s", strings.TrimPrefix(err.Error(), "proxy: "))
	}
	switch st.Kind {
	case KindSetToken:
		s.srv.m.statements.WithLabelValues(st.Kind.String(), "proxy").Inc()
		if st.Token == "" {
			s.ls.SetToken(gtid.Set{}, 0)
			return nil, nil
		}
		tok, err := s.parseToken(st.Token, st.TokenForm)
		if err != nil {
			return nil, err
		}
		s.ls.SetToken(tok.GTIDs, tok.Epoch)
		return nil, nil
	case KindGetToken:
		s.srv.m.statements.WithLabelValues(st.Kind.String(), "proxy").Inc()
		var v *string
		if set, epoch := s.ls.Token(); !set.IsEmpty() {
			txt := gtid.Token{Epoch: epoch, GTIDs: set}.String()
			v = &txt
		}
		rs := oneValueResultset("@causal_token", v)
		return mysql.NewResult(rs), nil
	case KindTrackGTIDs:
		s.srv.m.statements.WithLabelValues(st.Kind.String(), "proxy").Inc()
		s.wantGTIDs = st.TrackGTIDs
		return nil, nil
	case KindConnStatus:
		s.srv.m.statements.WithLabelValues(st.Kind.String(), "proxy").Inc()
		return mysql.NewResult(statusResultset(st.Status, s.connStatus(st.Status))), nil
	}
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	if st.Kind == KindRead {
		return s.readQuery(query, st)
	}
	if st.Reason == ReasonPreviousStatement {
		if bc := s.previous(); bc != nil {
			s.srv.m.statements.WithLabelValues(st.Kind.String(), "replica").Inc()
			if _, err := relay(s.cc, bc, query, s.wantGTIDs, nil); err != nil {
				return s.relayFailed(bc, err)
			}
			return done(), nil
		}
	}
	if st.Kind == KindPrimary {
		s.srv.m.primaryReasons.WithLabelValues(st.Reason.String()).Inc()
	}
	s.srv.m.statements.WithLabelValues(st.Kind.String(), "primary").Inc()
	out, err := relay(s.cc, s.primary, query, s.wantGTIDs, s.localFile())
	s.last = s.primary
	if err != nil {
		return s.relayFailed(s.primary, err)
	}
	s.afterPrimary(st, out)
	if st.Kind == KindSession && !out.serverErr {
		s.replayEverywhere(query)
	}
	if s.flags&mysql.CLIENT_MULTI_STATEMENTS != 0 && strings.IndexByte(query, ';') >= 0 {
		s.afterMulti(query)
	}
	return done(), nil
}

// previous returns the replica connection that ran the session's
// previous statement, for a statement that reads what it left there
// (ReasonPreviousStatement: warnings, FOUND_ROWS): nil when that was the
// primary, or when the connection is gone (closed, redialled, or closed
// by the server while idle: what it held is lost, the primary answers).
func (s *session) previous() *backendConn {
	if s.last == nil || s.last == s.primary || s.last.broken {
		return nil
	}
	for _, r := range s.replicas {
		if r == s.last {
			if r.closedWhileIdle(time.Now()) {
				return nil
			}
			return r
		}
	}
	return nil
}

// afterMulti mirrors what a multi-statement query run on the primary left
// in the session (ClassifyMulti), whether or not all of it ran: its
// session statements ran on the primary only, so reads stay there.
func (s *session) afterMulti(query string) {
	e, ok := ClassifyMulti(query)
	if !ok {
		return
	}
	if e.Session {
		s.sessionPinned = true
	}
	s.tempTables = s.tempTables || e.TempTable
	if e.LocksTables {
		s.lockedTables = true
	} else if e.UnlocksTables {
		s.lockedTables = false
	}
	s.userVarsOnPrimary = s.userVarsOnPrimary || e.SetsUserVar
}

// readOptions builds the router's per-read options from the statement:
// its own token (this read only), its consistent_read_id, a session pin,
// and the wait run on the session's replica connection.
func (s *session) readOptions(st Stmt) (live.ReadOptions[gtid.Set], error) {
	o := live.ReadOptions[gtid.Set]{Wait: s.waitOn}
	if pin := s.pin(st); pin != "" {
		s.srv.m.primaryReasons.WithLabelValues(string(pin)).Inc()
		o.Pin = pin
		return o, nil
	}
	if st.Token != "" {
		tok, err := s.parseToken(st.Token, st.TokenForm)
		if err != nil {
			return o, err
		}
		o.Token, o.TokenEpoch = tok.GTIDs, tok.Epoch
	}
	if st.ReadID != "" {
		o.AffinityKey = hashroute.Hash(st.ReadID)
	}
	return o, nil
}

// conn returns the session's connection for a router target: the primary
// (reconnected outside transactions) or replica i (opened lazily). A
// connection that cannot be opened is a node failure the router may route
// around (marked down, decided again).
func (s *session) conn(t live.Target) (*backendConn, error) {
	if t.Replica < 0 {
		if err := s.ensurePrimary(); err != nil {
			return nil, &live.RunError{Err: err, NodeFailed: true}
		}
		return s.primary, nil
	}
	bc, err := s.replica(t.Replica)
	if err != nil {
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
	return s.routeRelay(st, o, func(bc *backendConn, t live.Target) (relayOut, error) {
		role := "primary"
		if t.Replica >= 0 {
			role = "replica"
		}
		s.srv.m.statements.WithLabelValues(st.Kind.String(), role).Inc()
		return relayQuery(s.cc, bc, query, relayReq{op: "query", wantGTIDs: s.wantGTIDs, watermark: t.Watermark, flush: s.flush, healthy: s.watchFor(bc, t.Replica), dropTracked: s.srv.dropTracked.Load()})
	})
}

// routeRelay routes one read through the router (ls.QueryFunc: decision,
// wait, cap, counting) and runs relayOne on the session's connection to
// the chosen node. relayOne's relay errors are never retried (the client
// may have part of the response, or nobody is left to answer); any other
// error it returns means nothing reached the client and goes to the
// router as is. The server's ERR packet, already relayed, counts as a
// statement error; the watermark read behind the read is the router's.
func (s *session) routeRelay(st Stmt, o live.ReadOptions[gtid.Set], relayOne func(bc *backendConn, t live.Target) (relayOut, error)) (*mysql.Result, error) {
	var (
		served  *backendConn
		out     relayOut
		relayed bool // the response reached the client
	)
	_, err := s.ls.QueryFunc(s.ctx, s.ls.Policy(), o, func(_ context.Context, t live.Target) (gtid.Set, error) {
		bc, err := s.conn(t)
		if err != nil {
			return gtid.Set{}, err
		}
		if on := s.srv.cfg.OnRead; on != nil {
			on(ReadRoute{Conn: s.id, Node: t.Node.Name, Replica: t.Replica, Reason: t.Reason, HashReason: t.HashReason})
		}
		served, s.last = bc, bc
		idleFor := time.Since(bc.used) // before this command (closedWhileIdle's race)
		if h := s.watchFor(bc, t.Replica); h != nil {
			bc.watch(h)
		}
		out, err = relayOne(bc, t)
		bc.unwatch()
		if err != nil {
			var re *relayError
			if !errors.As(err, &re) && !errors.Is(err, errClientGone) {
				return gtid.Set{}, err
			}
			if re != nil && !re.partial && bc.unresponsive() {
				// Nothing reached the client: the read is decided again
				// (another replica, or the primary as a fallback the cap
				// counts), the replica held down.
				s.srv.m.backendErrors.WithLabelValues(bc.b.Name, "unresponsive").Inc()
				return gtid.Set{}, &live.RunError{Err: backendErr(bc.b, "unresponsive", errUnresponsive), NodeFailed: true, Retry: true}
			}
			if re != nil && !re.partial && bc != s.primary && idleFor >= idleCheckAfter {
				// The server closed a connection idle past its wait_timeout
				// as the read was sent (after the peek found it open):
				// nothing reached the client, and a replica read is sent
				// again on a new connection. Not a node fault.
				s.srv.m.idleClosed.WithLabelValues(bc.b.Name, "resent").Inc()
				return gtid.Set{}, &live.RunError{Err: err, Retry: true}
			}
			return gtid.Set{}, &live.RunError{Err: err, NodeFailed: re != nil}
		}
		relayed = true
		if out.serverErr {
			// The node served the read; its answer was the server's
			// refusal of the statement (already with the client). That is
			// the statement's outcome, not the router's: counted here,
			// and the read counts where it was served.
			s.srv.m.serverErrors.WithLabelValues(t.Outcome.String()).Inc()
		}
		if f := s.srv.wmFault.Load(); f != nil && t.Watermark && out.wmErr == nil && bc != s.primary {
			if err := (*f)(bc.b.Name); err != nil {
				out.wmErr, bc.broken = err, true
			}
		}
		if t.Watermark {
			if out.wmFallback {
				s.srv.m.watermarkFallbacks.WithLabelValues("replica-query").Inc()
			}
			if out.wmErr != nil {
				return s.watermarkFromPrimary(bc, out.wmErr)
			}
			return out.watermark, nil
		}
		return gtid.Set{}, nil
	})
	if relayed && served == s.primary {
		s.afterPrimary(st, out)
	}
	if err == nil {
		return done(), nil
	}
	var sre *sessionRefusedError
	if !relayed && o.Pin == "" && errors.As(err, &sre) {
		// Nothing reached the client: run it where the session's state
		// is, once (counted by the router as pinned, session-state).
		s.srv.m.primaryReasons.WithLabelValues("replica-refused-session").Inc()
		o.Pin = live.PinSessionState
		return s.routeRelay(st, o, relayOne)
	}
	return s.readFailed(err, served, relayed, o)
}

// watermarkFromPrimary stands in for a replica's watermark that could not
// be read after its result reached the client (wmErr): the primary's
// @@GLOBAL.gtid_executed, read now. Within one topology epoch a replica
// applies only what the primary committed, so what the replica had when it
// answered is contained in what the primary has afterwards: a sound (more
// cautious) watermark, and the client keeps its connection. Counted as
// watermark_fallbacks_total{source="primary"}; when the primary cannot
// answer either, the read fails with wmErr (the client is then closed,
// counted as watermark-read-failed).
func (s *session) watermarkFromPrimary(bc *backendConn, wmErr error) (gtid.Set, error) {
	if bc == s.primary {
		return gtid.Set{}, &live.RunError{Err: wmErr, NodeFailed: true}
	}
	if err := s.ensurePrimary(); err != nil {
		return gtid.Set{}, &live.RunError{Err: errors.Join(wmErr, err), NodeFailed: true}
	}
	set, err := s.executed(s.primary)
	if err != nil {
		return gtid.Set{}, &live.RunError{Err: errors.Join(wmErr, err), NodeFailed: true}
	}
	s.srv.m.watermarkFallbacks.WithLabelValues("primary").Inc()
	return set, nil
}

// readFailed turns a read the router did not serve into the client's
// answer.
func (s *session) readFailed(err error, served *backendConn, relayed bool, o live.ReadOptions[gtid.Set]) (*mysql.Result, error) {
	var rde *live.ReadError
	switch {
	case errors.As(err, &rde):
		return nil, s.refused(rde, o)
	case relayed:
		// The result reached the client but the watermark could not be
		// read: the session's monotonic-reads state is unknown. Closing
		// the client is the explicit, counted way out.
		s.srv.m.clientErrors.WithLabelValues("watermark-read-failed").Inc()
		s.cc.Close()
		return done(), nil
	case served != nil && (errors.Is(err, errClientGone) || isRelayError(err)):
		return s.relayFailed(served, err)
	}
	var be *BackendError
	if errors.As(err, &be) {
		return nil, s.proxyErr("backend-lost", codeBackendLost, "%v", be)
	}
	var me *mysql.MyError
	if errors.As(err, &me) {
		return nil, me
	}
	return nil, s.proxyErr("backend-lost", codeBackendLost, "%v", err)
}

func isRelayError(err error) bool {
	var re *relayError
	return errors.As(err, &re)
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

// relayFailed handles a relay error: the client connection is closed when
// part of the response was already written (its protocol state is lost).
func (s *session) relayFailed(bc *backendConn, err error) (*mysql.Result, error) {
	if errors.Is(err, errClientGone) {
		s.srv.m.clientErrors.WithLabelValues("client-gone").Inc()
		s.cc.Close()
		return done(), nil
	}
	var re *relayError
	if errors.As(err, &re) {
		s.srv.m.backendErrors.WithLabelValues(bc.b.Name, re.err.Op).Inc()
		if re.partial {
			s.srv.m.clientErrors.WithLabelValues("backend-lost-mid-result").Inc()
			s.cc.Close()
			return done(), nil
		}
		return nil, s.lostErr(bc)
	}
	return nil, err
}

// pin returns why a read must stay on the primary for session reasons, or "".
func (s *session) pin(st Stmt) live.Pin {
	switch {
	case s.inTx:
		return live.PinTransaction
	case s.autocommitOff:
		return live.PinAutocommitOff
	case s.tempTables:
		return live.PinTempTable
	case s.lockedTables:
		return live.PinLockedTables
	case s.sessionPinned:
		return live.PinSessionState
	case s.userVarsOnPrimary && st.UsesUserVar:
		return live.PinUserVariables
	case len(s.srv.cfg.Replicas) == 0:
		return live.PinNoReplicas
	}
	return ""
}

// afterPrimary mirrors the primary's transaction state and records the
// write's GTID.
func (s *session) afterPrimary(st Stmt, out relayOut) {
	if out.status != 0 || !out.serverErr {
		s.inTx = out.status&mysql.SERVER_STATUS_IN_TRANS != 0
		s.autocommitOff = out.status&mysql.SERVER_STATUS_AUTOCOMMIT == 0
		if s.inTx {
			s.cc.SetInTransaction()
		} else {
			s.cc.ClearInTransaction()
		}
	}
	if out.serverErr {
		return
	}
	if st.TempTable {
		s.tempTables = true
	}
	if st.LocksTables {
		s.lockedTables = true
	}
	if st.UnlocksTables {
		s.lockedTables = false
	}
	if st.SetsUserVar {
		s.userVarsOnPrimary = true
	}
	if st.PinsSession {
		s.sessionPinned = true
	}
	if out.gtid != "" {
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
	if len(s.replay) >= s.srv.cfg.MaxReplay || !s.budget.take(len(query)) {
		// Too many to remember: close replica connections so they are not
		// left with a different session state, and pin reads to the primary.
		s.srv.m.primaryReasons.WithLabelValues("replay-overflow").Inc()
		s.userVarsOnPrimary = true
		for i, r := range s.replicas {
			r.close()
			s.replicas[i] = nil
		}
		s.tempTables = true // pins every later read
		return
	}
	q := strings.Clone(query)
	s.replay = append(s.replay, q)
	s.replayBytes += len(q)
	for i, r := range s.replicas {
		if r == nil || r.broken {
			continue
		}
		if _, err := r.exec(q); err != nil {
			s.srv.m.replayFailures.WithLabelValues(r.b.Name).Inc()
			r.close()
			s.replicas[i] = nil
		}
	}
}

// parseToken parses a token from a client: the g1.<epoch>.<set> text form,
// or a bare GTID set (session-tracking text, ProxySQL's min_gtid), taken as
// issued in the current epoch.
func (s *session) parseToken(text string, form TokenForm) (gtid.Token, error) {
	if len(text) > s.srv.cfg.MaxTokenBytes {
		// Parsing is linear, but the wait on a replica and every set
		// operation grow with the token: bound it before any of them.
		return gtid.Token{}, s.proxyErr("token-too-large", codeProxy,
			"causal token of %d bytes refused: longer than max_token_bytes (%d); compact_tokens keeps the proxy's own tokens to one interval per source",
			len(text), s.srv.cfg.MaxTokenBytes)
	}
	if strings.HasPrefix(text, "g1.") {
		tok, err := gtid.ParseToken(text)
		if err != nil {
			return gtid.Token{}, s.proxyErr("bad-token", codeProxy, "bad causal token: %v", err)
		}
		if tok.Epoch > s.srv.cfg.Epoch {
			return gtid.Token{}, s.proxyErr("bad-token", codeProxy,
				"causal token from epoch %d, but the topology is at epoch %d", tok.Epoch, s.srv.cfg.Epoch)
		}
		return tok, nil
	}
	set, err := gtid.Parse(text)
	if err != nil {
		return gtid.Token{}, s.proxyErr("bad-token", codeProxy,
			"unknown causal token format (want g1.<epoch>.<gtid set> or a GTID set): %v", err)
	}
	return gtid.Token{Epoch: s.srv.cfg.Epoch, GTIDs: set}, nil
}

// waitOn is the router's WaitFunc: WAIT_FOR_EXECUTED_GTID_SET on the
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
	bc, err := s.conn(t)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	stop := context.AfterFunc(ctx, func() { bc.dc.Cut(ctx.Err()) })
	limit := time.Now().Add(d + mysqlwire.WaitSlack)
	bc.dc.Limit(limit)
	bc.watch(s.healthy(bc.b))
	ok, err := mysqlwire.WaitAnswer(bc.exec(mysqlwire.WaitForExecutedQuery(need, d)))
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
	bc.close()
	select {
	case s.srv.kills <- struct{}{}:
	default:
		s.srv.m.backendErrors.WithLabelValues(b.Name, "kill-skipped").Inc()
		return
	}
	s.srv.wg.Go(func() {
		defer func() { <-s.srv.kills }()
		if err := killQuery(s.ctx, b, id, &s.srv.cfg); err != nil {
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
		s.healthFns = make([]func() bool, len(s.srv.cfg.Replicas))
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
	if s.fc == nil {
		return nil
	}
	return s.fc.Flush()
}

// executed reads the node's @@GLOBAL.gtid_executed on the session's
// connection right after a read (the router's sound watermark).
func (s *session) executed(bc *backendConn) (gtid.Set, error) {
	r, err := bc.exec(watermarkQuery)
	if err != nil {
		return gtid.Set{}, backendErr(bc.b, "watermark", err)
	}
	txt, err := r.GetString(0, 0)
	if err != nil {
		return gtid.Set{}, backendErr(bc.b, "watermark", err)
	}
	set, err := gtid.Parse(strings.Clone(txt))
	if err != nil {
		return gtid.Set{}, backendErr(bc.b, "watermark", err)
	}
	return set, nil
}

// HandleFieldList handles COM_FIELD_LIST on the primary.
func (s *session) HandleFieldList(table string, wildcard string) ([]*mysql.Field, error) {
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	fs, err := s.primary.conn.FieldList(table, wildcard)
	if err != nil {
		return nil, s.backendFailure(s.primary, err)
	}
	return fs, nil
}

// HandleStmtPrepare prepares on the primary (always open); replicas prepare
// lazily at the first execution routed to them.
func (s *session) HandleStmtPrepare(query string) (int, int, any, error) {
	s.prepares++
	id := s.prepares
	if payload, ok := s.takeCommand(mysql.COM_STMT_PREPARE); ok {
		query = payloadText(payload)
	}
	if len(query) > s.srv.cfg.MaxAllowedPacket {
		return 0, 0, nil, s.proxyErr("packet-too-large", mysql.ER_NET_PACKET_TOO_LARGE, "statement exceeds max_allowed_packet")
	}
	// Classify the copy: Stmt's Token and ReadID alias the text, and the
	// statement outlives go-mysql's packet buffer.
	q := strings.Clone(query)
	if err := s.checkPreparePolicy(q); err != nil {
		return 0, 0, nil, err
	}
	st, err := Classify(q)
	if err != nil {
		return 0, 0, nil, s.proxyErr("bad-annotation", codeProxy, "%s", strings.TrimPrefix(err.Error(), "proxy: "))
	}
	switch st.Kind {
	case KindConnStatus:
		// Prepared, it runs on the primary: the status of the proxy's
		// link to it (docs/proxy.md, limits).
		st = primary(ReasonShow)
	case KindSetToken, KindGetToken, KindTrackGTIDs:
		return 0, 0, nil, s.proxyErr("unsupported", mysql.ER_UNSUPPORTED_PS, "causal token statements cannot be prepared; send them as plain queries")
	}
	if err := s.ensurePrimary(); err != nil {
		return 0, 0, nil, err
	}
	// The text is kept, with the backend's statement (an estimate of its
	// parameter and column definitions, go-mysql's argument slots).
	cost := len(q) + 512
	if !s.budget.take(cost) {
		return 0, 0, nil, s.overBudget("prepared statement")
	}
	cs, err := s.primary.conn.Prepare(q)
	if err != nil {
		s.budget.give(cost)
		return 0, 0, nil, s.backendFailure(s.primary, err)
	}
	more := 128 * (cs.Params + cs.Columns)
	if !s.budget.take(more) {
		s.budget.give(cost)
		_ = cs.Close()
		return 0, 0, nil, s.overBudget("prepared statement")
	}
	cost += more
	p := &pstmt{query: q, class: st, id: id, params: cs.Params, onPrimary: cs, onReplica: map[int]*client.Stmt{}, cost: cost}
	s.params[id] = &stmtParams{n: cs.Params}
	ctx := &cs.PreparedStmt
	s.stmts[ctx] = p
	return cs.Params, cs.Columns, ctx, nil
}

// overBudget is the error for what would take the session past
// max_session_bytes.
func (s *session) overBudget(what string) error {
	return s.proxyErr("session-bytes", codeProxy,
		"%s refused: the session would hold more than max_session_bytes (%d bytes) of prepared statements, session statements and long data; close statements it no longer uses",
		what, s.budget.limit)
}

// HandleStmtExecute routes an execution like a query with the same text.
// Errors are written to the client here: go-mysql v1.16.0 wraps an error
// returned from this handler (errors.Trace), which turns every server error
// into 1105 and loses its code and SQLSTATE.
func (s *session) HandleStmtExecute(ctx any, q string, args []any) (*mysql.Result, error) {
	s.takeCommand(mysql.COM_STMT_EXECUTE) // the payload is execFixConn's exec
	r, err := s.stmtExecute(ctx, q, args)
	if err == nil {
		return r, nil
	}
	var me *mysql.MyError
	if !errors.As(err, &me) {
		me = mysql.NewError(mysql.ER_UNKNOWN_ERROR, err.Error())
	}
	if werr := s.cc.WriteValue(me); werr != nil {
		return nil, werr
	}
	return done(), nil
}

func (s *session) stmtExecute(ctx any, _ string, args []any) (*mysql.Result, error) {
	key, _ := ctx.(*stmt.PreparedStmt)
	p := s.stmts[key]
	if p == nil {
		return nil, s.proxyErr("unknown-stmt", mysql.ER_UNKNOWN_STMT_HANDLER, "unknown prepared statement")
	}
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	st := p.class
	raw, why := s.rawExecute(p)
	if raw != nil {
		return s.relayExecute(p, raw)
	}
	if s.fc != nil && why != "types-never-sent" {
		// go-mysql decoded execFixConn's stand-in, not the client's values.
		return nil, s.proxyErr("unsupported", mysql.ER_UNKNOWN_ERROR,
			"COM_STMT_EXECUTE not supported by the proxy (%s: flags 0x%02x; query attributes are not offered)", why, s.fc.execFlags())
	}
	s.srv.m.executes.WithLabelValues("decoded", why).Inc()
	if st.Kind != KindRead {
		if st.Kind == KindPrimary {
			s.srv.m.primaryReasons.WithLabelValues(st.Reason.String()).Inc()
		}
		r, g, err := s.executeOn(p, -1, s.primary, args)
		s.last = s.primary
		if err != nil {
			return nil, s.backendFailure(s.primary, err)
		}
		return s.finishExecute(st, r, g, true), nil
	}
	o, err := s.readOptions(st)
	if err != nil {
		return nil, err
	}
	var (
		res    *mysql.Result
		resG   string // the GTID of a pinned read-classified statement on the primary
		onPrim bool
		failed *backendConn // the connection a node error came from
		// stmtErr is the server's refusal of the statement.
		stmtErr *mysql.MyError
	)
	_, err = s.ls.QueryFunc(s.ctx, s.ls.Policy(), o, func(_ context.Context, t live.Target) (gtid.Set, error) {
		bc, err := s.conn(t)
		if err != nil {
			return gtid.Set{}, err
		}
		if h := s.watchFor(bc, t.Replica); h != nil {
			// The decoded result is buffered: the whole exchange is
			// watched (nothing reaches the client before it ends).
			bc.watch(h)
			defer bc.unwatch()
		}
		r, g, err := s.executeOn(p, t.Replica, bc, args)
		s.last = bc
		if err != nil {
			if errors.As(err, &stmtErr) {
				// Served: the server refused the statement (see routeRelay).
				s.srv.m.serverErrors.WithLabelValues(t.Outcome.String()).Inc()
				return gtid.Set{}, nil
			}
			// Nothing reached the client yet: the router may route around
			// the node (a pinned read is never retried).
			bc.broken, failed = true, bc
			op := "execute"
			if bc.unresponsive() {
				op, err = "unresponsive", errUnresponsive
			}
			s.srv.m.backendErrors.WithLabelValues(bc.b.Name, op).Inc()
			return gtid.Set{}, &live.RunError{Err: backendErr(bc.b, op, err), NodeFailed: true, Retry: true}
		}
		res, resG, onPrim = r, g, bc == s.primary
		if t.Watermark {
			wm, err := s.executed(bc)
			if err != nil {
				bc.broken, failed = true, bc
				return gtid.Set{}, &live.RunError{Err: err, NodeFailed: true, Retry: true}
			}
			return wm, nil
		}
		return gtid.Set{}, nil
	})
	if err != nil {
		var (
			rde *live.ReadError
			me  *mysql.MyError
		)
		switch {
		case errors.As(err, &rde):
			return nil, s.refused(rde, o)
		case errors.As(err, &me):
			return nil, me
		case failed != nil:
			return nil, s.lostErr(failed)
		}
		return nil, s.proxyErr("backend-lost", codeBackendLost, "%v", err)
	}
	if stmtErr != nil {
		return nil, stmtErr
	}
	return s.finishExecute(st, res, resG, onPrim), nil
}

// rawExecute returns the client's COM_STMT_EXECUTE payload for p when it
// can be relayed raw (the same bytes, with the backend's statement id):
// the packet was read by execFixConn (not compressed), belongs to p,
// carries its parameter types (execFixConn adds them to re-executions,
// and puts in values sent as COM_STMT_SEND_LONG_DATA) and asks for no
// cursor and no query attributes (flags 0: the backends negotiate no
// query attributes, and go-mysql's server refuses cursors before this).
// Otherwise nil and the reason: the statement runs through go-mysql's
// client (decoded and re-encoded).
func (s *session) rawExecute(p *pstmt) ([][]byte, string) {
	switch {
	case s.fc == nil:
		return nil, "no-gate"
	case s.fc.exec == nil:
		return nil, "packet-mismatch"
	}
	payload := s.fc.exec[0] // the head: command byte to types
	// cmd(1) stmt_id(4) flags(1) iteration_count(4) [null_bitmap new_params_bound(1) types values]
	if len(payload) < 10 || payload[0] != mysql.COM_STMT_EXECUTE || binary.LittleEndian.Uint32(payload[1:5]) != p.id {
		return nil, "packet-mismatch"
	}
	if payload[5] != 0 { // a cursor, or query attributes (never offered)
		return nil, "flags"
	}
	if n := p.params; n > 0 {
		flagAt := 10 + (n+7)>>3
		if len(payload) <= flagAt || payload[flagAt] != 1 {
			return nil, "types-never-sent"
		}
	}
	return s.fc.exec, ""
}

// relayExecute routes a prepared statement's execution like
// readQuery/HandleQuery route a query, relaying the client's own packet
// (statement id replaced) and the binary result raw.
func (s *session) relayExecute(p *pstmt, payload [][]byte) (*mysql.Result, error) {
	st := p.class
	s.srv.m.executesRaw.Inc()
	send := func(bc *backendConn, i int, watermark bool) (relayOut, error) {
		cs, err := s.prepareOn(p, i, bc)
		if err != nil {
			return relayOut{}, err
		}
		// The client's payload with the backend's statement id: its first
		// five bytes in a copy, the rest relayed as it came.
		bc.head[0] = mysql.COM_STMT_EXECUTE
		binary.LittleEndian.PutUint32(bc.head[1:5], cs.ID)
		bc.pieces = append(append(bc.pieces[:0], bc.head[:5], payload[0][5:]), payload[1:]...)
		role := "primary"
		if i >= 0 {
			role = "replica"
		}
		s.srv.m.statements.WithLabelValues("execute-"+st.Kind.String(), role).Inc()
		out, err := relayCmd(s.cc, bc, relayReq{op: "execute", cmd: bc.pieces, wantGTIDs: s.wantGTIDs, watermark: watermark, flush: s.flush, healthy: s.watchFor(bc, i), dropTracked: s.srv.dropTracked.Load()})
		clear(bc.pieces)
		return out, err
	}
	if st.Kind != KindRead {
		if st.Kind == KindPrimary {
			s.srv.m.primaryReasons.WithLabelValues(st.Reason.String()).Inc()
		}
		out, err := send(s.primary, -1, false)
		s.last = s.primary
		if err != nil {
			var me *mysql.MyError
			if errors.As(err, &me) { // the prepare on a reconnected primary failed
				return nil, me
			}
			if isRelayError(err) || errors.Is(err, errClientGone) {
				return s.relayFailed(s.primary, err)
			}
			return nil, s.backendFailure(s.primary, err)
		}
		s.afterPrimary(st, out)
		return done(), nil
	}
	o, err := s.readOptions(st)
	if err != nil {
		return nil, err
	}
	return s.routeRelay(st, o, func(bc *backendConn, t live.Target) (relayOut, error) {
		out, err := send(bc, t.Replica, t.Watermark)
		var me *mysql.MyError
		if err == nil || errors.As(err, &me) || isRelayError(err) || errors.Is(err, errClientGone) {
			// A MyError: the statement could not be prepared there;
			// nothing reached the client, the server's error is the answer.
			return out, err
		}
		// The prepare failed on I/O: nothing reached the client, the
		// router may route around the node.
		bc.broken = true
		s.srv.m.backendErrors.WithLabelValues(bc.b.Name, "prepare").Inc()
		return out, &live.RunError{Err: backendErr(bc.b, "prepare", err), NodeFailed: true, Retry: true}
	})
}

// prepareOn returns p prepared on bc (replica index i, -1 for the
// primary), preparing it there first if needed.
func (s *session) prepareOn(p *pstmt, i int, bc *backendConn) (*client.Stmt, error) {
	cs := p.onPrimary
	if i >= 0 {
		cs = p.onReplica[i]
	}
	if cs != nil {
		return cs, nil
	}
	cs, err := bc.conn.Prepare(p.query)
	if err != nil {
		return nil, err
	}
	if i >= 0 {
		p.onReplica[i] = cs
	} else {
		p.onPrimary = cs
	}
	return cs, nil
}

// executeOn runs prepared statement p on bc (replica index i, -1 for the
// primary), preparing it there first if needed. Errors are the backend's,
// unchanged (the caller decides what the client sees). On the primary it
// returns the write's session-tracking GTID read from the router's
// private copy of the OK packet: go-mysql's Result.SessionTracking aliases
// a buffer it has already returned to a process-wide pool, so under
// concurrency it can hold another connection's bytes (see
// package mysqlwire).
func (s *session) executeOn(p *pstmt, i int, bc *backendConn, args []any) (*mysql.Result, string, error) {
	role := "primary"
	cs := p.onPrimary
	if i >= 0 {
		role, cs = "replica", p.onReplica[i]
	}
	if cs == nil {
		var err error
		if cs, err = bc.conn.Prepare(p.query); err != nil {
			return nil, "", err
		}
		if i >= 0 {
			p.onReplica[i] = cs
		} else {
			p.onPrimary = cs
		}
	}
	s.srv.m.statements.WithLabelValues("execute-"+p.class.Kind.String(), role).Inc()
	if i >= 0 {
		r, err := cs.Execute(args...)
		return r, "", err
	}
	rec := mysqlwire.InstallRecorder(bc.conn)
	rec.Start()
	r, err := cs.Execute(args...)
	tr, perr := rec.LastOK()
	if errors.Is(perr, mysqlwire.ErrNoOK) {
		perr = nil // a response without an OK packet carries no GTID
	}
	if err != nil {
		return nil, "", err
	}
	if perr != nil {
		// The write is acknowledged but its GTID unreadable: the session's
		// token would be wrong. Loud, counted, never silent.
		s.srv.m.clientErrors.WithLabelValues("unparsable-session-gtid").Inc()
		return nil, "", mysql.NewError(codeProxy, "causallab proxy: the primary's OK packet could not be read for the write's GTID: "+perr.Error())
	}
	return r, tr.GTID, nil
}

// finishExecute mirrors the primary's state after a prepared statement
// ran there and strips session tracking the client did not ask for.
func (s *session) finishExecute(st Stmt, r *mysql.Result, g string, onPrimary bool) *mysql.Result {
	if onPrimary {
		s.afterPrimary(st, relayOut{status: r.Status, gtid: g})
	}
	// go-mysql's SessionTracking strings alias a pooled buffer: never
	// forward them; the client gets the GTID from the private copy only.
	r.SessionTracking = nil
	r.Status &^= mysql.SERVER_SESSION_STATE_CHANGED
	if g != "" && s.wantGTIDs && s.cc.HasCapability(mysql.CLIENT_SESSION_TRACK) {
		r.SessionTracking = &mysql.SessionTrackingInfo{GTID: g}
		r.Status |= mysql.SERVER_SESSION_STATE_CHANGED
	}
	return r
}

// HandleStmtClose closes the statement on every backend that prepared it.
func (s *session) HandleStmtClose(ctx any) error {
	key, _ := ctx.(*stmt.PreparedStmt)
	p := s.stmts[key]
	if p == nil {
		return nil
	}
	delete(s.stmts, key)
	delete(s.params, p.id)
	s.budget.give(p.cost)
	if s.fc != nil {
		s.fc.dropLongData(p.id)
	}
	if p.onPrimary != nil && s.primary != nil && !s.primary.broken {
		_ = p.onPrimary.Close()
	}
	for i, cs := range p.onReplica {
		if r := s.replicas[i]; r != nil && !r.broken {
			_ = cs.Close()
		}
	}
	return nil
}

// HandleOtherCommand handles COM_RESET_CONNECTION (session state cleared
// everywhere) and refuses the rest with a clear error.
func (s *session) HandleOtherCommand(cmd byte, data []byte) error {
	switch cmd {
	case mysql.COM_RESET_CONNECTION:
		for i, r := range s.replicas {
			r.close()
			s.replicas[i] = nil
		}
		s.replay = nil
		s.budget.give(s.replayBytes)
		s.replayBytes = 0
		for _, p := range s.stmts {
			s.budget.give(p.cost)
		}
		s.stmts = map[*stmt.PreparedStmt]*pstmt{}
		if s.fc != nil {
			s.fc.dropAllLongData()
		}
		s.inTx, s.autocommitOff, s.tempTables, s.lockedTables, s.userVarsOnPrimary = false, false, false, false, false
		s.sessionPinned = false
		s.cc.ClearInTransaction()
		s.wantGTIDs = false
		key := s.ls.State().AffinityKey
		s.ls = s.srv.rt.NewSession()
		s.ls.SetAffinityKey(key)
		s.primary.close()
		s.primary = nil
		return s.ensurePrimary()
	case mysql.COM_SET_OPTION:
		return s.setOption(data)
	}
	return s.proxyErr("unsupported", mysql.ER_UNKNOWN_COM_ERROR, "command 0x%02x is not supported by the proxy", cmd)
}

// COM_SET_OPTION's options (MySQL's enum_mysql_set_option).
const (
	optionMultiStatementsOn  = 0
	optionMultiStatementsOff = 1
)

// setOption handles COM_SET_OPTION (go-mysql answers EOF when it returns
// nil): CLIENT_MULTI_STATEMENTS on or off for the session, as MySQL does.
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
	if err := s.primary.setOption(opt); err != nil {
		return s.backendFailure(s.primary, err)
	}
	if opt == optionMultiStatementsOn {
		s.flags |= mysql.CLIENT_MULTI_STATEMENTS
	} else {
		s.flags &^= mysql.CLIENT_MULTI_STATEMENTS
	}
	for i, r := range s.replicas {
		if r == nil || r.broken {
			continue
		}
		if err := r.setOption(opt); err != nil {
			s.srv.m.replayFailures.WithLabelValues(r.b.Name).Inc()
			r.close()
			s.replicas[i] = nil
		}
	}
	return nil
}
