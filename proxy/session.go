package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"github.com/causallab/causallab/router"
)

// Error codes the proxy itself returns (MySQL's own codes where one fits).
const (
	// codeProxy is ER_UNKNOWN_ERROR, SQLSTATE HY000, for proxy-side refusals.
	codeProxy = mysql.ER_UNKNOWN_ERROR
	// codeBackendLost is CR_SERVER_LOST, as a client library would report it.
	codeBackendLost = 2013
)

// session is the server.Handler of one client connection. The go-mysql
// server calls it from the connection's goroutine only, so it needs no
// locks; everything shared lives in *Server.
type session struct {
	srv *Server
	ctx context.Context
	id  uint32
	cc  *server.Conn

	// db is the current default schema (handshake or COM_INIT_DB).
	db string
	// collation is the client's handshake collation name.
	collation string
	// replay holds the session statements (SET ...) run so far, in order,
	// replayed on each backend connection the session opens.
	replay []string

	primary  *backendConn
	replicas []*backendConn // lazily opened, index = replica index

	// Pins: reads go to the primary while any is set.
	inTx, autocommitOff, tempTables, lockedTables, userVarsOnPrimary bool
	// closeAfter: close the client connection once the current response
	// is written (after an oversized packet, as MySQL does).
	closeAfter bool
	// wantGTIDs: the client asked for session-tracking GTIDs
	// (SET session_track_gtids = OWN_GTID through the proxy).
	wantGTIDs bool

	rs router.Session[gtid.Set]
	// view is reused per decision; proven holds, per replica index, what a
	// successful wait of the current read proved the replica holds.
	view   router.View[gtid.Set]
	proven map[int]gtid.Set

	stmts map[*stmt.PreparedStmt]*pstmt
	// prepares mirrors go-mysql's statement id counter (incremented before
	// every COM_STMT_PREPARE is handled, failed or not); params maps those
	// ids to parameter counts for execFixConn.
	prepares uint32
	params   map[uint32]*stmtParams
}

// pstmt is a client's prepared statement, prepared on each backend that
// runs it.
type pstmt struct {
	query string
	class Stmt
	// id is go-mysql's statement id (execFixConn's key).
	id uint32
	// onPrimary is prepared at COM_STMT_PREPARE; onReplica lazily.
	onPrimary *client.Stmt
	onReplica map[int]*client.Stmt
}

var _ server.Handler = (*session)(nil)

func newSession(ctx context.Context, srv *Server) *session {
	n := len(srv.cfg.Replicas)
	s := &session{
		srv:      srv,
		ctx:      ctx,
		replicas: make([]*backendConn, n),
		proven:   map[int]gtid.Set{},
		stmts:    map[*stmt.PreparedStmt]*pstmt{},
		params:   map[uint32]*stmtParams{},
	}
	s.view.Replicas = make([]router.Replica[gtid.Set], n)
	return s
}

// start runs after authentication: pick up the client's collation and
// connect to the primary.
func (s *session) start(cc *server.Conn) error {
	s.cc = cc
	s.id = cc.ConnectionID()
	s.rs.AffinityKey = hashroute.Hash(strconv.FormatUint(uint64(s.id), 10))
	if col, err := charset.GetCollationByID(int(cc.Charset())); err == nil {
		s.collation = col.Name
	}
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
	bc, err := dialBackend(s.ctx, b, s.db, s.collation, &s.srv.cfg)
	if err != nil {
		s.srv.m.backendErrors.WithLabelValues(b.Name, "connect").Inc()
		return nil, err
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

// proxyErr is an error the proxy returns to the client itself.
func (s *session) proxyErr(kind string, code uint16, format string, args ...any) error {
	s.srv.m.clientErrors.WithLabelValues(kind).Inc()
	return mysql.NewError(code, "causallab proxy: "+fmt.Sprintf(format, args...))
}

// ensurePrimary reconnects the primary after a loss (outside transactions).
func (s *session) ensurePrimary() error {
	if s.primary != nil && !s.primary.broken {
		return nil
	}
	s.primary.close()
	s.primary = nil
	bc, err := s.dial(&s.srv.cfg.Primary)
	if err != nil {
		return s.proxyErr("backend_lost", codeBackendLost, "%v", err)
	}
	s.primary = bc
	// Prepared statements of the old connection are gone.
	for _, p := range s.stmts {
		p.onPrimary = nil
	}
	return nil
}

// replica returns the session's connection to replica i, opening it.
func (s *session) replica(i int) (*backendConn, error) {
	if bc := s.replicas[i]; bc != nil && !bc.broken {
		return bc, nil
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
	s.replicas[i] = bc
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
		return s.proxyErr("backend_lost", codeBackendLost,
			"lost the connection to %s inside a transaction: the transaction is rolled back and was not retried", bc.b.Name)
	}
	return s.proxyErr("backend_lost", codeBackendLost,
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

// HandleQuery handles COM_QUERY.
func (s *session) HandleQuery(query string) (*mysql.Result, error) {
	if len(query) > s.srv.cfg.MaxAllowedPacket {
		s.closeAfter = true
		return nil, s.proxyErr("packet_too_large", mysql.ER_NET_PACKET_TOO_LARGE,
			"statement of %d bytes exceeds max_allowed_packet (%d)", len(query), s.srv.cfg.MaxAllowedPacket)
	}
	st, err := Classify(query)
	if err != nil {
		return nil, s.proxyErr("bad_annotation", codeProxy, "%v", err)
	}
	switch st.Kind {
	case KindSetToken:
		s.srv.m.statements.WithLabelValues(st.Kind.String(), "proxy").Inc()
		if st.Token == "" {
			s.rs.HasToken = false
			s.rs.Token = gtid.Set{}
			return nil, nil
		}
		tok, err := s.parseToken(st.Token, st.TokenForm)
		if err != nil {
			return nil, err
		}
		s.rs.Token, s.rs.HasToken, s.rs.Epoch = tok.GTIDs, true, tok.Epoch
		return nil, nil
	case KindGetToken:
		s.srv.m.statements.WithLabelValues(st.Kind.String(), "proxy").Inc()
		var v *string
		if s.rs.HasToken {
			tok := gtid.Token{Epoch: s.rs.Epoch, GTIDs: s.rs.Token}.String()
			v = &tok
		}
		rs := oneValueResultset("@causal_token", v)
		return mysql.NewResult(rs), nil
	case KindTrackGTIDs:
		s.srv.m.statements.WithLabelValues(st.Kind.String(), "proxy").Inc()
		s.wantGTIDs = st.TrackGTIDs
		return nil, nil
	}
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	var target *backendConn
	replicaIdx := -1
	isRead := st.Kind == KindRead
	var rt routed
	switch {
	case isRead:
		if pin := s.pin(st); pin != "" {
			s.srv.m.primaryReasons.WithLabelValues(pin).Inc()
			rt = pinned(pin)
			target = s.primary
			break
		}
		if rt, err = s.route(st); err != nil {
			return nil, err
		}
		if rt.replica < 0 {
			target = s.primary
		} else if target, err = s.replica(rt.replica); err != nil {
			// Availability, not freshness: the replica could not be
			// reached on this session. Served by the primary, counted.
			rt = routed{replica: -1, out: router.OutPrimary, reason: "replica-connect-failed", waited: rt.waited}
			target = s.primary
		} else {
			replicaIdx = rt.replica
		}
	default:
		if st.Kind == KindPrimary {
			s.srv.m.primaryReasons.WithLabelValues(st.Reason.String()).Inc()
		}
		target = s.primary
	}
	role := "primary"
	if replicaIdx >= 0 {
		role = "replica"
	}
	s.srv.m.statements.WithLabelValues(st.Kind.String(), role).Inc()

	out, err := relay(s.cc, target, query, s.wantGTIDs)
	if isRead {
		s.countRead(rt, err == nil, out.serverErr)
	}
	if err != nil {
		return s.relayFailed(target, err)
	}
	if target == s.primary {
		s.afterPrimary(st, out)
	} else if s.srv.monotonic && !out.serverErr {
		s.observe(target)
	}
	if st.Kind == KindSession && !out.serverErr {
		s.replayEverywhere(query)
	}
	return done(), nil
}

// relayFailed handles a relay error: the client connection is closed when
// part of the response was already written (its protocol state is lost).
func (s *session) relayFailed(bc *backendConn, err error) (*mysql.Result, error) {
	if errors.Is(err, errClientGone) {
		s.srv.m.clientErrors.WithLabelValues("client_gone").Inc()
		s.cc.Close()
		return done(), nil
	}
	var re *relayError
	if errors.As(err, &re) {
		s.srv.m.backendErrors.WithLabelValues(bc.b.Name, re.err.Op).Inc()
		if re.partial {
			s.srv.m.clientErrors.WithLabelValues("backend_lost_mid_result").Inc()
			s.cc.Close()
			return done(), nil
		}
		return nil, s.lostErr(bc)
	}
	return nil, err
}

// pin returns why a read must stay on the primary for session reasons, or "".
func (s *session) pin(st Stmt) string {
	switch {
	case s.inTx:
		return "in_transaction"
	case s.autocommitOff:
		return "autocommit_off"
	case s.tempTables:
		return "temp_table_session"
	case s.lockedTables:
		return "locked_tables"
	case s.userVarsOnPrimary && st.UsesUserVar:
		return "user_variables"
	case len(s.srv.cfg.Replicas) == 0:
		return "no_replicas"
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
	if out.gtid != "" {
		s.recordWrite(out.gtid)
	}
}

func (s *session) recordWrite(g string) {
	set, err := gtid.Parse(g)
	if err != nil {
		// The server's own text: a parse failure is a bug, never silently
		// ignored: count it and drop the session's token guarantee loudly.
		s.srv.m.clientErrors.WithLabelValues("unparsable_session_gtid").Inc()
		s.srv.log.Error("unparsable session-tracking GTID from the primary", "session", s.id, "err", err)
		return
	}
	router.RecordWrite(&s.rs, set, s.srv.cfg.Epoch, s.srv.now())
	s.srv.prim.raise(set)
}

// replayEverywhere runs a session statement (already run on the primary)
// on every open replica connection and remembers it for later ones.
func (s *session) replayEverywhere(query string) {
	if len(s.replay) >= s.srv.cfg.MaxReplay {
		// Too many to remember: close replica connections so they are not
		// left with a different session state, and pin reads to the primary.
		s.srv.m.primaryReasons.WithLabelValues("replay_overflow").Inc()
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
	if strings.HasPrefix(text, "g1.") {
		tok, err := gtid.ParseToken(text)
		if err != nil {
			return gtid.Token{}, s.proxyErr("bad_token", codeProxy, "bad causal token: %v", err)
		}
		if tok.Epoch > s.srv.cfg.Epoch {
			return gtid.Token{}, s.proxyErr("bad_token", codeProxy,
				"causal token from epoch %d, but the topology is at epoch %d", tok.Epoch, s.srv.cfg.Epoch)
		}
		return tok, nil
	}
	set, err := gtid.Parse(text)
	if err != nil {
		return gtid.Token{}, s.proxyErr("bad_token", codeProxy,
			"unknown causal token format (want g1.<epoch>.<gtid set> or a GTID set): %v", err)
	}
	return gtid.Token{Epoch: s.srv.cfg.Epoch, GTIDs: set}, nil
}

// routed is where one read goes and how the router's outcome is labelled.
type routed struct {
	// replica is the replica index, or -1 for the primary.
	replica int
	// out and reason label causallab_router_reads_total once the read is
	// served (countRead); a failure to serve it becomes OutError.
	out    router.Outcome
	reason string
	// fallback marks a freshness fallback (counted in
	// causallab_router_freshness_fallbacks_total when served).
	fallback bool
	// waited: the read waited for a replica.
	waited bool
}

// pinned is a read kept on the primary for a session reason (no decision).
func pinned(reason string) routed { return routed{replica: -1, out: router.OutPrimary, reason: reason} }

// countRead counts a read that reached a backend, like the live router:
// served with the decision's outcome, or OutError (statement: the server
// refused it; node: the backend failed).
func (s *session) countRead(r routed, served bool, serverErr bool) {
	m, pol := s.srv.m, s.srv.policy.Kind.String()
	switch {
	case !served:
		m.reads.WithLabelValues(pol, router.OutError.String(), "node").Inc()
	case serverErr:
		m.reads.WithLabelValues(pol, router.OutError.String(), "statement").Inc()
	default:
		m.reads.WithLabelValues(pol, r.out.String(), r.reason).Inc()
		if r.fallback {
			m.fallbacks.WithLabelValues(r.reason).Inc()
		}
	}
	if r.waited {
		m.waited.WithLabelValues(pol).Inc()
	}
}

// route decides where a read goes, calling the router's decision core
// (router.Decide, the code the live router and the simulator run) with the
// position source's view. A refused read is counted here with the router's
// outcome (failed-fast or timed-out) and returns the client's error.
func (s *session) route(st Stmt) (routed, error) {
	// The statement's own token counts for this read only (a pooled
	// connection must not keep another request's token).
	rs := s.rs
	if st.Token != "" {
		tok, err := s.parseToken(st.Token, st.TokenForm)
		if err != nil {
			return routed{}, err
		}
		if rs.HasToken {
			rs.Token = rs.Token.Union(tok.GTIDs)
			rs.Epoch = min(rs.Epoch, tok.Epoch)
		} else {
			rs.Token, rs.HasToken, rs.Epoch = tok.GTIDs, true, tok.Epoch
		}
	}
	if st.ReadID != "" {
		rs.AffinityKey = hashroute.Hash(st.ReadID)
	}
	in := router.Input[gtid.Set]{
		Policy:  &s.srv.policy,
		Cap:     &s.srv.capCfg,
		Session: &rs,
		View:    &s.view,
	}
	clear(s.proven)
	refreshed := false
	pol := s.srv.policy.Kind.String()
	for {
		s.fillView()
		in.Now = s.srv.now()
		in.Rand = rand.Uint64()
		d := s.srv.decide(&in)
		s.srv.m.decisions.WithLabelValues(d.Action.String(), d.Reason.String()).Inc()
		if d.Reanchor {
			rs.Reanchor(s.view.Epoch)
			if s.rs.HasToken && s.rs.Epoch < s.view.Epoch && rs.Token.Contains(s.rs.Token) {
				s.rs.Reanchor(s.view.Epoch)
			}
		}
		waited := in.Waited > 0
		switch d.Action {
		case router.ActReplica:
			return routed{replica: d.Replica, out: router.OutReplica, reason: d.Reason.String(), waited: waited}, nil
		case router.ActStale:
			return routed{replica: d.Replica, out: router.OutStale, reason: d.Reason.String(), waited: waited}, nil
		case router.ActPrimary:
			out := router.OutPrimary
			if d.Fallback {
				out = router.OutFallback
			}
			return routed{replica: -1, out: out, reason: d.Reason.String(), fallback: d.Fallback, waited: waited}, nil
		case router.ActWait:
			start := time.Now()
			s.wait(d.Replica, s.need(&rs), d.WaitFor)
			in.Waited += max(time.Since(start), time.Millisecond)
			continue
		case router.ActFail:
			if !refreshed && (d.Reason == router.ReasonTimedOut || d.Reason == router.ReasonWriteLost) {
				// The primary's position may trail a token issued through
				// another proxy: read it now, decide again.
				refreshed = true
				if r, err := s.primary.exec("SELECT @@GLOBAL.gtid_executed"); err == nil {
					txt, _ := r.GetString(0, 0)
					if set, err := gtid.Parse(strings.Clone(txt)); err == nil {
						s.srv.prim.raise(set)
					}
				}
				continue
			}
			out := router.OutFailedFast
			if d.Reason == router.ReasonTimedOut {
				out = router.OutTimedOut
			}
			if d.Reason == router.ReasonSeenLost {
				s.rs.DropSeen()
			}
			s.srv.m.reads.WithLabelValues(pol, out.String(), d.Reason.String()).Inc()
			if waited {
				s.srv.m.waited.WithLabelValues(pol).Inc()
			}
			return routed{}, s.proxyErr("route_"+d.Reason.String(), codeProxy,
				"cannot serve this read consistently: %s (token epoch %d, topology epoch %d)", d.Reason, rs.Epoch, s.srv.cfg.Epoch)
		}
		return routed{}, s.proxyErr("route_unknown", codeProxy, "router returned action %v", d.Action)
	}
}

// need is what a replica must contain for the read under the policy (as
// router.LiveSession.need).
func (s *session) need(rs *router.Session[gtid.Set]) gtid.Set {
	var n gtid.Set
	if rs.HasToken {
		n = rs.Token
	}
	if rs.HasSeen && s.srv.policy.Kind != router.PolicyTokenRYW {
		n = n.Union(rs.Seen)
	}
	return n
}

// fillView loads the position source's view into the session's View:
// replica positions raised by what this read's waits proved, the primary's
// lower bound raised by acknowledged GTIDs.
func (s *session) fillView() {
	src := s.srv.src
	ps, healthy := src.Position(s.srv.cfg.Primary.Name)
	s.view.Primary, s.view.PrimaryKnown = s.srv.prim.get(ps, healthy)
	s.view.Epoch = s.srv.cfg.Epoch
	pc := int64(s.view.Primary.Count())
	for i := range s.view.Replicas {
		r := &s.view.Replicas[i]
		set, up := src.Position(s.srv.cfg.Replicas[i].Name)
		if k, ok := s.proven[i]; ok && !set.Contains(k) {
			set = set.Union(k)
		}
		r.Applied, r.Up = set, up
		r.Behind = max(pc-int64(set.Count()), 0)
	}
}

// wait waits at most d for replica i to contain need, by the configured
// method: WAIT_FOR_EXECUTED_GTID_SET on the session's replica connection,
// or the position source's WaitFor. A success proven by the function is fed
// back into this read's view (s.proven); the watcher's view already has it.
func (s *session) wait(i int, need gtid.Set, d time.Duration) {
	t0 := time.Now()
	method := s.srv.cfg.Wait
	result := "timeout"
	defer func() {
		s.srv.m.waitSecs.WithLabelValues(method, result).Observe(time.Since(t0).Seconds())
	}()
	if method == router.WaitWatcher.String() {
		ctx, cancel := context.WithTimeout(s.ctx, max(d, time.Millisecond))
		defer cancel()
		if err := s.srv.src.WaitFor(ctx, s.srv.cfg.Replicas[i].Name, need); err == nil {
			result = "caught-up"
		} else if ctx.Err() == nil {
			result = "error"
		}
		return
	}
	bc, err := s.replica(i)
	if err != nil {
		result = "error"
		return
	}
	secs := max(d.Seconds(), 0.001)
	q := "SELECT WAIT_FOR_EXECUTED_GTID_SET('" + need.CompactString() + "', " + strconv.FormatFloat(secs, 'f', 3, 64) + ")"
	r, err := bc.exec(q)
	if err != nil {
		result = "error"
		return
	}
	if v, _ := r.GetInt(0, 0); v == 0 {
		result = "caught-up"
		s.proven[i] = need
	}
}

// observe raises the monotonic-reads watermark after a replica read with
// the replica's executed set read on the same connection.
func (s *session) observe(bc *backendConn) {
	r, err := bc.exec("SELECT @@GLOBAL.gtid_executed")
	if err != nil {
		return
	}
	txt, _ := r.GetString(0, 0)
	if set, err := gtid.Parse(strings.Clone(txt)); err == nil {
		router.Observe(&s.rs, set, s.srv.cfg.Epoch)
	}
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
	if len(query) > s.srv.cfg.MaxAllowedPacket {
		return 0, 0, nil, s.proxyErr("packet_too_large", mysql.ER_NET_PACKET_TOO_LARGE, "statement exceeds max_allowed_packet")
	}
	// Classify the copy: Stmt's Token and ReadID alias the text, and the
	// statement outlives go-mysql's packet buffer.
	q := strings.Clone(query)
	st, err := Classify(q)
	if err != nil {
		return 0, 0, nil, s.proxyErr("bad_annotation", codeProxy, "%v", err)
	}
	switch st.Kind {
	case KindSetToken, KindGetToken, KindTrackGTIDs:
		return 0, 0, nil, s.proxyErr("unsupported", mysql.ER_UNSUPPORTED_PS, "causal token statements cannot be prepared; send them as plain queries")
	}
	if err := s.ensurePrimary(); err != nil {
		return 0, 0, nil, err
	}
	cs, err := s.primary.conn.Prepare(q)
	if err != nil {
		return 0, 0, nil, s.backendFailure(s.primary, err)
	}
	p := &pstmt{query: q, class: st, id: id, onPrimary: cs, onReplica: map[int]*client.Stmt{}}
	s.params[id] = &stmtParams{n: cs.Params}
	ctx := &cs.PreparedStmt
	s.stmts[ctx] = p
	return cs.Params, cs.Columns, ctx, nil
}

// HandleStmtExecute routes an execution like a query with the same text.
// Errors are written to the client here: go-mysql v1.16.0 wraps an error
// returned from this handler (errors.Trace), which turns every server error
// into 1105 and loses its code and SQLSTATE.
func (s *session) HandleStmtExecute(ctx any, q string, args []any) (*mysql.Result, error) {
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
		return nil, s.proxyErr("unknown_stmt", mysql.ER_UNKNOWN_STMT_HANDLER, "unknown prepared statement")
	}
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	st := p.class
	var bc *backendConn
	var cs *client.Stmt
	idx := -1
	isRead := st.Kind == KindRead
	var rt routed
	switch {
	case isRead && s.pin(st) != "":
		pin := s.pin(st)
		s.srv.m.primaryReasons.WithLabelValues(pin).Inc()
		rt = pinned(pin)
	case isRead:
		var err error
		if rt, err = s.route(st); err != nil {
			return nil, err
		}
		if i := rt.replica; i >= 0 {
			if rbc, err := s.replica(i); err == nil {
				if cs = p.onReplica[i]; cs == nil {
					if cs, err = rbc.conn.Prepare(p.query); err != nil {
						s.countRead(rt, true, true)
						return nil, s.backendFailure(rbc, err)
					}
					p.onReplica[i] = cs
				}
				bc, idx = rbc, i
			} else {
				rt = routed{replica: -1, out: router.OutPrimary, reason: "replica-connect-failed", waited: rt.waited}
			}
		}
	case st.Kind == KindPrimary:
		s.srv.m.primaryReasons.WithLabelValues(st.Reason.String()).Inc()
	}
	if bc == nil {
		bc = s.primary
		if p.onPrimary == nil {
			var err error
			if p.onPrimary, err = bc.conn.Prepare(p.query); err != nil {
				return nil, s.backendFailure(bc, err)
			}
		}
		cs = p.onPrimary
	}
	role := "primary"
	if idx >= 0 {
		role = "replica"
	}
	s.srv.m.statements.WithLabelValues("execute_"+st.Kind.String(), role).Inc()
	r, err := cs.Execute(args...)
	if isRead {
		var me *mysql.MyError
		s.countRead(rt, err == nil || errors.As(err, &me), err != nil)
	}
	if err != nil {
		return nil, s.backendFailure(bc, err)
	}
	if bc != s.primary && s.srv.monotonic {
		s.observe(bc)
	}
	if bc == s.primary {
		out := relayOut{status: r.Status}
		if r.SessionTracking != nil && r.SessionTracking.GTID != "" {
			out.gtid = strings.Clone(r.SessionTracking.GTID)
		}
		s.afterPrimary(st, out)
	}
	if !s.wantGTIDs || !s.cc.HasCapability(mysql.CLIENT_SESSION_TRACK) {
		r.SessionTracking = nil
		r.Status &^= mysql.SERVER_SESSION_STATE_CHANGED
	}
	return r, nil
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
func (s *session) HandleOtherCommand(cmd byte, _ []byte) error {
	switch cmd {
	case mysql.COM_RESET_CONNECTION:
		for i, r := range s.replicas {
			r.close()
			s.replicas[i] = nil
		}
		s.replay = nil
		s.stmts = map[*stmt.PreparedStmt]*pstmt{}
		s.inTx, s.autocommitOff, s.tempTables, s.lockedTables, s.userVarsOnPrimary = false, false, false, false, false
		s.cc.ClearInTransaction()
		s.wantGTIDs = false
		s.rs = router.Session[gtid.Set]{AffinityKey: s.rs.AffinityKey}
		s.primary.close()
		s.primary = nil
		return s.ensurePrimary()
	case mysql.COM_SET_OPTION:
		return s.proxyErr("unsupported", mysql.ER_NOT_SUPPORTED_YET, "multi-statements are not supported through the proxy")
	}
	return s.proxyErr("unsupported", mysql.ER_UNKNOWN_COM_ERROR, "command 0x%02x is not supported by the proxy", cmd)
}
