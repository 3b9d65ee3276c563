package proxy

import (
	"encoding/binary"
	"errors"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/stmt"

	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router/live"
)

// Prepared statements: COM_STMT_PREPARE on the primary, executions routed
// like queries (raw relay, or go-mysql's decoded values), COM_STMT_CLOSE.

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
	var cs *client.Stmt
	err = s.primary.do(s.ctx, func() (err error) {
		cs, err = s.primary.conn.Prepare(q)
		return err
	})
	if err != nil {
		s.budget.give(cost)
		return 0, 0, nil, s.answerErr(err, s.primary)
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
	s.state.stmts[ctx] = p
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
	p := s.state.stmts[key]
	if p == nil {
		return nil, s.proxyErr("unknown-stmt", mysql.ER_UNKNOWN_STMT_HANDLER, "unknown prepared statement")
	}
	st := p.class
	if st.Kind != KindRead { // a read checks the primary only if routed there (conn)
		if err := s.ensurePrimary(); err != nil {
			return nil, err
		}
	}
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
		s.state.last = s.primary
		if err != nil {
			return nil, s.answerErr(err, s.primary)
		}
		return s.finishExecute(st, r, g, true), nil
	}
	o, err := s.readOptions(st)
	if err != nil {
		return nil, err
	}
	var (
		res  *mysql.Result
		resG string // the GTID of a pinned read-classified statement on the primary
		// stmtErr is the server's refusal of the statement.
		stmtErr *mysql.MyError
	)
	done, err := s.routeRelay(st, o, func(bc *backendConn, t live.Target, _ time.Time) (relayOut, error) {
		// The decoded result is buffered and written by go-mysql once the
		// read is over (nothing reaches the client before).
		r, g, err := s.executeOn(p, t.Replica, bc, args)
		if err != nil {
			if errors.As(err, &stmtErr) {
				// Served: the server refused the statement.
				return relayOut{serverErr: true, code: stmtErr.Code}, nil
			}
			// Nothing reached the client yet: the router may route around
			// the node (a pinned read is never retried).
			bc.broken = true
			op := "execute"
			if bc.unresponsive() {
				op, err = "unresponsive", errUnresponsive
			}
			s.srv.m.backendErrors.WithLabelValues(bc.b.Name, op).Inc()
			return relayOut{}, &live.RunError{Err: backendErr(bc.b, op, err), NodeFailed: true, Retry: true}
		}
		res, resG = r, g
		out := relayOut{status: r.Status, gtid: g}
		if t.Watermark {
			if out.watermark, out.wmErr = s.executed(bc); out.wmErr != nil {
				bc.broken = true
			}
		}
		return out, nil
	})
	switch {
	case err != nil || s.cc.Closed():
		return done, err
	case stmtErr != nil:
		return nil, stmtErr
	}
	// routeRelay mirrored the primary's state (afterPrimary).
	return s.finishExecute(st, res, resG, false), nil
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
	// PARAMETER_COUNT_AVAILABLE (0x08) says a parameter count follows only
	// when CLIENT_QUERY_ATTRIBUTES was negotiated; the proxy never offers it,
	// so the bit changes nothing in the layout (MySQL ignores it then too).
	// go-mysql's client sets it on every execute with parameters.
	// relayExecute clears it in what the backend gets. Any other bit is a
	// cursor.
	if payload[5]&^mysql.PARAMETER_COUNT_AVAILABLE != 0 {
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
	send := func(bc *backendConn, i int, watermark bool, at time.Time) (relayOut, error) {
		cs, err := s.prepareOn(p, i, bc)
		if err != nil {
			return relayOut{}, err
		}
		// The client's payload with the backend's statement id and flags
		// 0 (rawExecute let through only PARAMETER_COUNT_AVAILABLE, which
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
		out, err := relayCmd(s.cc, bc, relayReq{ctx: s.ctx, sentAt: at, op: "execute", cmd: bc.pieces, wantGTIDs: s.state.wantGTIDs, watermark: watermark, flush: s.flushFunc(), healthy: s.watchFor(bc, i), dropTracked: s.srv.dropTracked.Load()})
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

// executeOn runs prepared statement p on bc (replica index i, -1 for the
// primary), preparing it there first if needed. Errors are the backend's,
// unchanged (the caller decides what the client sees). On the primary it
// returns the write's session-tracking GTID read from the router's
// private copy of the OK packet: go-mysql's Result.SessionTracking aliases
// a buffer it has already returned to a process-wide pool, so under
// concurrency it can hold another connection's bytes (see
// package mysqlwire).
func (s *session) executeOn(p *pstmt, i int, bc *backendConn, args []any) (*mysql.Result, string, error) {
	cs, err := s.prepareOn(p, i, bc)
	if err != nil {
		return nil, "", err
	}
	role := rolePrimary
	if i >= 0 {
		role = roleReplica
	}
	s.srv.m.statement(true, p.class.Kind, role).Inc()
	var r *mysql.Result
	execute := func() (err error) {
		r, err = cs.Execute(args...)
		return err
	}
	if i >= 0 {
		err := bc.do(s.ctx, execute)
		return r, "", err
	}
	rec := mysqlwire.InstallRecorder(bc.conn)
	rec.Start()
	err = bc.do(s.ctx, execute)
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
	if g != "" && s.state.wantGTIDs && s.cc.HasCapability(mysql.CLIENT_SESSION_TRACK) {
		r.SessionTracking = &mysql.SessionTrackingInfo{GTID: g}
		r.Status |= mysql.SERVER_SESSION_STATE_CHANGED
	}
	return r
}

// HandleStmtClose closes the statement on every backend that prepared it.
func (s *session) HandleStmtClose(ctx any) error {
	key, _ := ctx.(*stmt.PreparedStmt)
	p := s.state.stmts[key]
	if p == nil {
		return nil
	}
	delete(s.state.stmts, key)
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
