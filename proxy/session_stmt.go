package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router/live"
)

// Prepared statements: COM_STMT_PREPARE on the primary, executions routed
// like queries (the client's packet and the binary result relayed raw),
// COM_STMT_CLOSE and COM_STMT_RESET.

// handleStmtPrepare handles COM_STMT_PREPARE: the statement is prepared
// on the primary (always open) and the client gets the primary's
// parameter and column definitions under the session's own statement id;
// replicas prepare lazily at the first execution routed to them.
func (s *session) handleStmtPrepare(query string) (*mysql.Result, error) {
	s.prepares++
	id := s.prepares
	if limit := s.srv.cfg.MaxSessionPreparedStatements; len(s.state.stmts) >= limit {
		// The session's share of the server's max_prepared_stmt_count.
		return nil, s.proxyErr("prepared-statements", mysql.ER_MAX_PREPARED_STMT_COUNT_REACHED,
			"Can't create more than max_session_prepared_statements statements in one session (current value: %d); close statements it no longer uses", limit)
	}
	// Classify the copy: Stmt's Token and ReadID alias the text, and the
	// statement outlives the command's buffer.
	q, rename := withConnectionID(query, s.id)
	q = strings.Clone(q)
	if err := s.checkPreparePolicy(q); err != nil {
		return nil, err
	}
	st, err := s.classify(q)
	if err != nil {
		return nil, err
	}
	switch st.Kind {
	case KindConnStatus:
		// Prepared, it runs on the primary: the status of the proxy's
		// link to it (docs/proxy-limits.md, limits).
		st = primary(ReasonShow)
	case KindSetToken:
		if st.TokenForm == TokenParam {
			return s.prepareTokenParam(id, q, st)
		}
		return nil, s.proxyErr("unsupported", mysql.ER_UNSUPPORTED_PS, "SET @causal_token can be prepared only as SET @causal_token = ? (the token as the parameter); send a literal as a plain query")
	case KindGetToken, KindTrackGTIDs:
		return nil, s.proxyErr("unsupported", mysql.ER_UNSUPPORTED_PS, "causal token statements cannot be prepared; send them as plain queries")
	case KindKill, KindProcessList:
		return nil, s.proxyErr("unsupported", mysql.ER_UNSUPPORTED_PS, "KILL and SHOW PROCESSLIST are the proxy's own (its sessions' ids) and cannot be prepared; send them as plain queries")
	}
	if err := s.ensurePrimary(); err != nil {
		return nil, err
	}
	// The text is kept, with the backend's statement (an estimate of its
	// parameter and column definitions, go-mysql's argument slots).
	cost := len(q) + 512
	if !s.budget.take(cost) {
		return nil, s.overBudget("prepared statement")
	}
	var cs *client.Stmt
	err = s.primary.do(s.ctx, func() (err error) {
		cs, err = s.primary.conn.Prepare(q)
		return err
	})
	if err != nil {
		s.budget.give(cost)
		return nil, s.answerErr(err, s.primary)
	}
	more := 128 * (cs.Params + cs.Columns)
	if !s.budget.take(more) {
		s.budget.give(cost)
		_ = cs.Close()
		return nil, s.overBudget("prepared statement")
	}
	cost += more
	p := &pstmt{query: q, class: st, id: id, params: cs.Params, onPrimary: cs, onReplica: map[int]*client.Stmt{}, cost: cost, rename: rename}
	s.stmts.prepared(id, cs.Params)
	s.state.stmts[id] = p
	return done(), s.cc.writePrepare(id, defs(cs.RawParamFields, cs.Params), rename.applyAll(defs(cs.RawColumnFields, cs.Columns)))
}

// defs are n definitions as the backend sent them (raw), or n empty
// ones where it sent fewer (go-mysql's client keeps them as it read them).
func defs(raw [][]byte, n int) [][]byte {
	if len(raw) >= n {
		return raw[:n]
	}
	out := make([][]byte, n)
	copy(out, raw)
	for i := len(raw); i < n; i++ {
		out[i] = (&mysql.Field{Name: []byte("?")}).Dump()
	}
	return out
}

// overBudget is the error for what would take the session past
// max_session_bytes, or the sessions past max_total_session_bytes.
func (s *session) overBudget(what string) error {
	key, limit, kind := s.budget.exceeded()
	return s.proxyErr(kind, codeProxy,
		"%s refused: %s would hold more than %s (%d bytes) of prepared statements, session statements and long data; close statements it no longer uses",
		what, budgetHolder(key), key, limit)
}

// handleStmtExecute handles COM_STMT_EXECUTE, routed like a query with
// the same text: the client's own packet is relayed (its statement id
// replaced by the backend's, parameter types and long data put in by the
// statement memory) and the binary result relayed raw. An execution that
// asks for a cursor is refused (the proxy offers none); one whose
// parameter types were never sent is relayed as it came and gets MySQL's
// own error.
func (s *session) handleStmtExecute(payload []byte) (*mysql.Result, error) {
	// cmd(1) stmt_id(4) flags(1) iteration_count(4) [null_bitmap new_params_bound(1) types values]
	if len(payload) < 10 {
		return nil, mysql.ErrMalformPacket
	}
	id := binary.LittleEndian.Uint32(payload[1:5])
	p := s.state.stmts[id]
	if p == nil {
		return nil, unknownStmt(id, "mysqld_stmt_execute")
	}
	// PARAMETER_COUNT_AVAILABLE (0x08) says a parameter count follows only
	// when CLIENT_QUERY_ATTRIBUTES was negotiated; the proxy never offers it,
	// so the bit changes nothing in the layout (MySQL ignores it then too).
	// go-mysql's client sets it on every execute with parameters.
	// relayExecute clears it in what the backend gets. Any other bit is a
	// cursor.
	if flags := payload[5]; flags&^mysql.PARAMETER_COUNT_AVAILABLE != 0 {
		return nil, s.proxyErr("unsupported", mysql.ER_UNKNOWN_ERROR,
			"COM_STMT_EXECUTE not supported by the proxy (flags 0x%02x: cursors are not offered)", flags)
	}
	if p.class.Kind == KindSetToken {
		return s.executeTokenParam(payload)
	}
	if p.class.Kind != KindRead { // a read checks the primary only if routed there (conn)
		if err := s.ensurePrimary(); err != nil {
			return nil, err
		}
	}
	pieces, refused := s.stmts.fix(payload)
	if refused != nil {
		return nil, refused
	}
	return s.relayExecute(p, pieces)
}

// relayExecute routes a prepared statement's execution like
// readQuery/handleQuery route a query, relaying the client's own packet
// (statement id replaced) and the binary result raw.
func (s *session) relayExecute(p *pstmt, payload [][]byte) (*mysql.Result, error) {
	st := s.state.withAutoIsNull(p.class)
	s.srv.m.executesRaw.Inc()
	send := func(bc *backendConn, i int, watermark bool, at time.Time) (relayOut, error) {
		cs, err := s.prepareOn(p, i, bc)
		if err != nil {
			return relayOut{}, err
		}
		// The client's payload with the backend's statement id and flags
		// 0 (handleStmtExecute let through only PARAMETER_COUNT_AVAILABLE, which
		// a backend that negotiated query attributes would read as "a
		// count follows"): its first six bytes in a copy, the rest
		// relayed as it came.
		bc.head[0] = mysql.COM_STMT_EXECUTE
		binary.LittleEndian.PutUint32(bc.head[1:5], cs.ID)
		bc.head[5] = 0
		bc.pieces = append(append(bc.pieces[:0], bc.head[:6], payload[0][6:]), payload[1:]...)
		role := rolePrimary
		if i >= 0 {
			role = roleReplica
		}
		s.srv.m.statement(true, st.Kind, role).Inc()
		out, err := relayCmd(s.cc, bc, relayReq{ctx: s.ctx, sentAt: at, op: "execute", cmd: bc.pieces, wantGTIDs: s.state.wantGTIDs, watermark: watermark, wmRead: s.wmRead(i), flush: s.flushFunc(), dropTracked: s.srv.dropTracked.Load(), rename: p.rename, token: s.tokenTracker()})
		clear(bc.pieces)
		return out, err
	}
	if st.Kind != KindRead {
		if st.Kind == KindPrimary {
			s.srv.m.primaryReasons.WithLabelValues(st.Reason.String()).Inc()
		}
		out, err := send(s.primary, -1, false, time.Time{})
		s.state.last = s.primary
		if err != nil {
			// The server's refusal (of the prepare on a reconnected
			// primary), a relay failure or the prepare's I/O failure.
			return s.answer(err, s.primary)
		}
		if st.Kind == KindSession {
			// A prepared SET is not replayed: the state it made is the
			// primary connection's alone (HoldStateChanged when the
			// server reports it).
			st.Kind, st.Reason = KindPrimary, ReasonUnclassified
		}
		s.afterPrimary(st, out)
		return done(), nil
	}
	o, err := s.readOptions(st)
	if err != nil {
		return nil, err
	}
	return s.routeRelay(st, o, func(bc *backendConn, t live.Target, at time.Time) (relayOut, error) {
		out, err := send(bc, t.Replica, t.Watermark, at)
		if err == nil {
			return out, nil
		}
		var (
			me *mysql.MyError
			re *relayError
		)
		if errors.As(err, &me) || errors.As(err, &re) || errors.Is(err, errClientGone) {
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
	err := bc.do(s.ctx, func() (err error) {
		cs, err = bc.conn.Prepare(p.query)
		return err
	})
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

// handleStmtClose handles COM_STMT_CLOSE: the statement is closed on
// every backend that prepared it. It has no response; an unknown id is
// ignored, as MySQL does.
func (s *session) handleStmtClose(data []byte) {
	id, ok := stmtID(data)
	p := s.state.stmts[id]
	if !ok || p == nil {
		return
	}
	delete(s.state.stmts, id)
	s.stmts.closed(id)
	s.budget.give(p.cost)
	if p.onPrimary != nil && s.primary != nil && !s.primary.broken {
		_ = p.onPrimary.Close()
	}
	for i, cs := range p.onReplica {
		if r := s.replicas[i]; r != nil && !r.broken {
			_ = cs.Close()
		}
	}
}

// handleStmtReset handles COM_STMT_RESET: the statement's long data is
// dropped (the proxy holds it until execution; a backend holds none).
func (s *session) handleStmtReset(data []byte) error {
	id, ok := stmtID(data)
	if !ok {
		return mysql.ErrMalformPacket
	}
	if s.state.stmts[id] == nil {
		return unknownStmt(id, "mysqld_stmt_reset")
	}
	s.stmts.dropLongData(id)
	return nil
}

// prepareTokenParam prepares SET @causal_token = ? in the proxy alone (no
// backend runs it): one parameter, no columns. Its executions set the
// session's token from the parameter (executeTokenParam), so a token from
// untrusted input travels as data, never as SQL text.
func (s *session) prepareTokenParam(id uint32, q string, st Stmt) (*mysql.Result, error) {
	cost := len(q) + 512
	if !s.budget.take(cost) {
		return nil, s.overBudget("prepared statement")
	}
	s.state.stmts[id] = &pstmt{query: q, class: st, id: id, params: 1, onReplica: map[int]*client.Stmt{}, cost: cost}
	s.stmts.prepared(id, 1)
	param := (&mysql.Field{Name: []byte("?"), Charset: 63, Type: mysql.MYSQL_TYPE_VAR_STRING}).Dump()
	return done(), s.cc.writePrepare(id, [][]byte{param}, nil)
}

// executeTokenParam executes SET @causal_token = ?: the parameter (its
// types and long data put in by the statement memory) is the token, a
// string; NULL or an empty string clears it, as an empty literal does.
func (s *session) executeTokenParam(payload []byte) (*mysql.Result, error) {
	s.srv.m.statement(true, KindSetToken, roleProxy).Inc()
	pieces, refused := s.stmts.fix(payload)
	if refused != nil {
		return nil, refused
	}
	text, null, err := stringParam(bytes.Join(pieces, nil))
	if err != nil {
		return nil, s.proxyErr("bad-token", mysql.ER_WRONG_ARGUMENTS, "%v", err)
	}
	if null || text == "" {
		s.ls.SetToken(gtid.Set{}, 0)
		return nil, nil
	}
	c, err := s.parseToken(text, TokenSet)
	if err != nil {
		return nil, err
	}
	s.setCarried(c)
	return nil, nil
}

// stringParam reads the one parameter of a COM_STMT_EXECUTE payload
// (command byte onward) as a string: NULL, or a value of a string or
// blob type. Anything else is an error naming what was wrong.
func stringParam(p []byte) (text string, null bool, err error) {
	// cmd(1) stmt_id(4) flags(1) iteration_count(4) null_bitmap(1) new_params_bound(1) type(2) value
	switch {
	case len(p) < 12:
		return "", false, errors.New("Incorrect arguments to mysqld_stmt_execute: the execution carries no parameter")
	case p[10]&1 != 0:
		return "", true, nil
	case p[11] != 1 || len(p) < 14:
		return "", false, errors.New("Incorrect arguments to mysqld_stmt_execute: the parameter's type was never sent")
	}
	switch p[12] {
	case mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_VARCHAR,
		mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB:
	default:
		return "", false, fmt.Errorf("the causal token must be a string parameter, not MySQL type 0x%02x", p[12])
	}
	n, hdr, ok := mysqlwire.LenencInt(p[14:])
	if !ok || n != uint64(len(p)-14-hdr) {
		return "", false, errors.New("Incorrect arguments to mysqld_stmt_execute: the string parameter is malformed")
	}
	return string(p[14+hdr:]), false, nil
}
