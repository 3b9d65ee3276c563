package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"bytes"
	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router/live"
)

// In-memory tests of the session's relay and error mapping: the client
// and the backend are the far ends of net.Pipe connections, scripted
// packet by packet (the model: Vitess go/mysql's conn tests). No MySQL.

// memBackend is a scripted backend: the far end of bc's connection.
type memBackend struct {
	t  *testing.T
	nc net.Conn
	// hook is the proxy's end of the pipe (hookConn).
	hook *hookConn
}

// memClient is the far end of the session's client connection: it keeps
// every packet the proxy writes to the client, until the pipe closes.
type memClient struct {
	nc   net.Conn
	mu   sync.Mutex
	pkts [][]byte
	done chan struct{}
}

func (c *memClient) read() {
	defer close(c.done)
	for {
		_, p, err := readPacket(c.nc)
		if err != nil {
			return
		}
		c.mu.Lock()
		c.pkts = append(c.pkts, p)
		c.mu.Unlock()
	}
}

// packets returns what the client got (after the proxy side closed, or
// when n packets arrived).
func (c *memClient) packets(t *testing.T, n int) [][]byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		got := len(c.pkts)
		c.mu.Unlock()
		if got >= n {
			break
		}
		select {
		case <-c.done:
			deadline = time.Now()
		case <-time.After(time.Millisecond):
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.pkts...)
}

// memConns returns a backend connection and a client connection over
// pipes, with the far ends. The backend connection's handshake is real
// (go-mysql's server side answers it on the far end, then the test
// scripts the far end's packets); the client side needs none.
func memConns(t *testing.T) (*backendConn, *memBackend, *clientConn, *memClient) {
	t.Helper()
	bNear, bFar := net.Pipe()
	cNear, cFar := net.Pipe()
	t.Cleanup(func() { bNear.Close(); bFar.Close(); cNear.Close(); cFar.Close() })
	srv := server.NewServer("8.0.40", mysql.DEFAULT_COLLATION_ID, mysql.AUTH_NATIVE_PASSWORD, nil, nil)
	hs := make(chan error, 1)
	go func() {
		_, err := srv.NewConn(bFar, "u", "", server.EmptyHandler{})
		hs <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := &hookConn{Conn: bNear}
	dc := mysqlwire.NewDeadlineConn(hc, time.Minute)
	c, err := client.ConnectWithDialer(ctx, "tcp", "mem", "u", "", "", func(context.Context, string, string) (net.Conn, error) {
		return dc, nil
	}, func(c *client.Conn) error {
		c.UnsetCapability(mysql.CLIENT_DEPRECATE_EOF | mysql.CLIENT_QUERY_ATTRIBUTES)
		return c.SetCapability(mysql.CLIENT_SESSION_TRACK)
	})
	if err != nil {
		t.Fatalf("in-memory handshake: %v", err)
	}
	if err := <-hs; err != nil {
		t.Fatalf("in-memory handshake, server side: %v", err)
	}
	bc := &backendConn{
		b:      &Backend{Name: "replica1"},
		conn:   c,
		dc:     dc,
		frames: mysqlwire.InstallFrames(c, backendReadBuffer), // as dialBackend
		buf:    make([]byte, 0, 4096),
		used:   time.Now(),
		status: mysql.SERVER_STATUS_AUTOCOMMIT,
	}
	mc := &memClient{nc: cFar, done: make(chan struct{})}
	go mc.read()
	return bc, &memBackend{t: t, nc: bFar, hook: hc}, newClientConn(cNear, 0, nil, testLimits, nil, func(string) {}), mc
}

// hookConn is the proxy's end of a backend pipe, with a hook run right
// after each write (nil: none).
type hookConn struct {
	net.Conn
	afterWrite func()
}

func (h *hookConn) Write(p []byte) (int, error) {
	n, err := h.Conn.Write(p)
	if h.afterWrite != nil {
		h.afterWrite()
	}
	return n, err
}

// command reads the command the proxy sent.
func (b *memBackend) command() []byte {
	_, p, err := readPacket(b.nc)
	if err != nil {
		b.t.Errorf("backend: reading the command: %v", err)
	}
	return p
}

// send writes payloads as packets numbered from seq.
func (b *memBackend) send(seq byte, payloads ...[]byte) {
	for _, p := range payloads {
		if err := writePackets(b.nc, seq, p); err != nil {
			b.t.Errorf("backend: write: %v", err)
			return
		}
		seq++
	}
}

func okPayload(affected uint64, status uint16) []byte {
	p := []byte{mysql.OK_HEADER}
	p = append(p, mysql.PutLengthEncodedInt(affected)...)
	p = append(p, 0) // insert id
	return append(p, byte(status), byte(status>>8), 0, 0)
}

func eofPayload(status uint16) []byte {
	return []byte{mysql.EOF_HEADER, 0, 0, byte(status), byte(status >> 8)}
}

func errPayload(code uint16, state, msg string) []byte {
	p := []byte{mysql.ERR_HEADER, byte(code), byte(code >> 8), '#'}
	return append(append(p, state...), msg...)
}

func columnDef(name string) []byte {
	var p []byte
	for _, s := range []string{"def", "", "t", "t", name, name} {
		p = append(p, mysql.PutLengthEncodedString([]byte(s))...)
	}
	p = append(p, 0x0c, 33, 0, 255, 0, 0, 0, mysql.MYSQL_TYPE_VAR_STRING, 0, 0, 0, 0, 0)
	return p
}

func textRow(vals ...string) []byte {
	var p []byte
	for _, v := range vals {
		p = append(p, mysql.PutLengthEncodedString([]byte(v))...)
	}
	return p
}

// TestRelayResultSetInMemory: a result set goes to the client packet for
// packet, in order, and the relay learns the final EOF's status.
func TestRelayResultSetInMemory(t *testing.T) {
	bc, be, cc, mc := memConns(t)
	status := uint16(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_IN_TRANS)
	want := [][]byte{{1}, columnDef("a"), eofPayload(status), textRow("x"), textRow("y"), eofPayload(status)}
	go func() {
		if cmd := be.command(); string(cmd) != "\x03SELECT a FROM t" {
			t.Errorf("backend got %q", cmd)
		}
		be.send(1, want...)
	}()
	out, err := relayQuery(cc, bc, "SELECT a FROM t", relayReq{op: "query"})
	_ = cc.Flush() // the response is complete: the client gets it
	if err != nil {
		t.Fatal(err)
	}
	if out.serverErr || out.status != status {
		t.Fatalf("relayOut %+v, want status %#x and no server error", out, status)
	}
	got := mc.packets(t, len(want))
	if len(got) != len(want) {
		t.Fatalf("client got %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Fatalf("packet %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// TestRelayServerErrorInMemory: the server's ERR is the client's answer
// as it came; the relay reports it (code) and the connection stays usable.
func TestRelayServerErrorInMemory(t *testing.T) {
	bc, be, cc, mc := memConns(t)
	erp := errPayload(1146, "42S02", "Table 'app.t' doesn't exist")
	go func() { be.command(); be.send(1, erp) }()
	out, err := relayQuery(cc, bc, "SELECT * FROM t", relayReq{op: "query"})
	_ = cc.Flush() // the response is complete: the client gets it
	if err != nil {
		t.Fatal(err)
	}
	if !out.serverErr || out.code != 1146 || bc.broken {
		t.Fatalf("relayOut %+v broken %v, want server error 1146 on a usable connection", out, bc.broken)
	}
	if got := mc.packets(t, 1); len(got) != 1 || string(got[0]) != string(erp) {
		t.Fatalf("client got %q", got)
	}
}

// TestRelayBackendLostInMemory: a backend that closes before answering is
// a relay error with nothing written; one that closes mid-result is a
// partial one. Both leave the connection broken.
func TestRelayBackendLostInMemory(t *testing.T) {
	for _, mid := range []bool{false, true} {
		bc, be, cc, mc := memConns(t)
		go func() {
			be.command()
			if mid {
				be.send(1, []byte{1}, columnDef("a"))
			}
			be.nc.Close()
		}()
		_, err := relayQuery(cc, bc, "SELECT a FROM t", relayReq{op: "query"})
		_ = cc.Flush() // the response is complete: the client gets it
		var re *relayError
		if !errors.As(err, &re) {
			t.Fatalf("mid=%v: error %v, want a relay error", mid, err)
		}
		if re.partial != mid || !bc.broken {
			t.Fatalf("mid=%v: partial %v broken %v", mid, re.partial, bc.broken)
		}
		if n := len(mc.packets(t, 0)); mid && n == 0 {
			t.Fatalf("mid-result: the client got nothing of the result")
		}
	}
}

// TestRelayClientGoneInMemory: a client that vanished mid-response is
// errClientGone once the client connection's write buffer is written (a
// row past wbufMax); the backend's response is read to its end, so the
// backend connection is left in step.
func TestRelayClientGoneInMemory(t *testing.T) {
	bc, be, cc, mc := memConns(t)
	mc.nc.Close()
	<-mc.done
	go func() {
		be.command()
		be.send(1, []byte{1}, columnDef("a"), eofPayload(2), textRow(strings.Repeat("x", wbufMax)), eofPayload(2))
	}()
	_, err := relayQuery(cc, bc, "SELECT a FROM t", relayReq{op: "query"})
	_ = cc.Flush() // the response is complete: the client gets it
	if !errors.Is(err, errClientGone) {
		t.Fatalf("error %v, want errClientGone", err)
	}
	if bc.broken {
		t.Fatal("the backend connection was given up although its response was read whole")
	}
}

// TestRelayOKWithoutTrackingInMemory: an OK with a session-state block
// goes to a client that did not negotiate CLIENT_SESSION_TRACK without
// the SERVER_SESSION_STATE_CHANGED flag; affected rows and status pass.
func TestRelayOKWithoutTrackingInMemory(t *testing.T) {
	bc, be, cc, mc := memConns(t)
	status := uint16(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_SESSION_STATE_CHANGED)
	go func() { be.command(); be.send(1, okPayload(3, status)) }()
	out, err := relayQuery(cc, bc, "UPDATE t SET a = 1", relayReq{op: "query"})
	_ = cc.Flush() // the response is complete: the client gets it
	if err != nil {
		t.Fatal(err)
	}
	if out.status != status {
		t.Fatalf("status %#x, want %#x", out.status, status)
	}
	got := mc.packets(t, 1)
	if len(got) != 1 || got[0][0] != mysql.OK_HEADER || got[0][1] != 3 {
		t.Fatalf("client got %q, want an OK with 3 affected rows", got)
	}
	if st := binary.LittleEndian.Uint16(got[0][3:5]); st != mysql.SERVER_STATUS_AUTOCOMMIT {
		t.Fatalf("client's OK status %#x, want autocommit only", st)
	}
}

// memSession is a session with a client connection over a pipe and
// metrics, for the error mapping (no router, no backends).
func memSession(t *testing.T) (*session, *memClient) {
	t.Helper()
	cNear, cFar := net.Pipe()
	t.Cleanup(func() { cNear.Close(); cFar.Close() })
	mc := &memClient{nc: cFar, done: make(chan struct{})}
	go mc.read()
	srv := &Server{m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s := &session{srv: srv, state: newSessionState(), cc: newClientConn(cNear, 0, nil, testLimits, nil, func(string) {}), budget: &byteBudget{limit: 1 << 20}}
	return s, mc
}

// TestAnswerMapsEveryError: the session's one error mapping, error kind
// by error kind.
func TestAnswerMapsEveryError(t *testing.T) {
	b := &Backend{Name: "replica1"}
	serverErr := mysql.NewError(1146, "Table 'app.t' doesn't exist")
	cases := []struct {
		name   string
		err    error
		noConn bool
		// want: the client's error code (0: none, the client is closed).
		want    uint16
		msg     string
		closed  bool
		broken  bool
		primary bool
		inTx    bool
	}{
		{name: "server refusal as it is", err: serverErr, want: 1146, msg: "doesn't exist"},
		{name: "wrapped server refusal", err: errors.Join(errors.New("prepare"), serverErr), want: 1146},
		{name: "relay error before any byte", err: &relayError{err: backendErr(b, "query", io.EOF)}, want: codeBackendLost, msg: "lost the connection to replica1"},
		{name: "relay error mid-result", err: &relayError{err: backendErr(b, "query", io.EOF), partial: true}, closed: true},
		{name: "client gone", err: errClientGone, closed: true},
		{name: "backend error", err: backendErr(b, "connect", errors.New("connection refused")), noConn: true, want: codeBackendLost, msg: "backend replica1: connect"},
		{name: "socket error on a connection", err: io.ErrUnexpectedEOF, want: codeBackendLost, broken: true, msg: "may or may not have run"},
		{name: "socket error, no connection", err: io.ErrUnexpectedEOF, noConn: true, want: codeBackendLost},
		{name: "lost primary in a transaction", err: io.ErrUnexpectedEOF, primary: true, inTx: true, want: codeBackendLost, broken: true, msg: "transaction is rolled back"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _ := memSession(t)
			var bc *backendConn
			if !c.noConn {
				bc = &backendConn{b: b}
			}
			if c.primary {
				s.primary = bc
			}
			if c.inTx {
				s.state.observeStatus(mysql.SERVER_STATUS_AUTOCOMMIT|mysql.SERVER_STATUS_IN_TRANS, false)
			}
			res, err := s.answer(c.err, bc)
			if c.closed {
				if err != nil || res == nil || !s.cc.closed {
					t.Fatalf("answer = %v, %v, closed %v; want the client closed", res, err, s.cc.closed)
				}
				return
			}
			var me *mysql.MyError
			if !errors.As(err, &me) || me.Code != c.want {
				t.Fatalf("answer error %v, want code %d", err, c.want)
			}
			if !strings.Contains(me.Message, c.msg) {
				t.Fatalf("message %q does not say %q", me.Message, c.msg)
			}
			if s.cc.closed {
				t.Fatal("the client was closed for an error it can be told")
			}
			if bc != nil && bc.broken != c.broken {
				t.Fatalf("broken %v, want %v", bc.broken, c.broken)
			}
			if c.inTx && s.state.inTx() {
				t.Fatal("the mirror still has the lost transaction open")
			}
		})
	}
}

// TestAnswerNil: no error, nothing to write.
func TestAnswerNil(t *testing.T) {
	s, _ := memSession(t)
	if res, err := s.answer(nil, nil); err != nil || res == nil {
		t.Fatalf("answer(nil) = %v, %v", res, err)
	}
}

// memSource is a position source that reports every node healthy at one
// executed set.
type memSource struct{ set gtid.Set }

func (m memSource) Position(string) (gtid.Set, bool)                { return m.set, true }
func (m memSource) WaitFor(context.Context, string, gtid.Set) error { return nil }

var _ live.PositionSource[gtid.Set] = memSource{}

const memUUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

// memRouted is a session routed by a real router (positions from
// memSource) over in-memory connections to a primary and one replica.
func memRouted(t *testing.T, policy string) (s *session, prim, rep *memBackend, mc *memClient) {
	t.Helper()
	set, err := gtid.Parse(memUUID + ":1-5")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{
		Listen:   "127.0.0.1:0",
		Users:    []User{{Name: "app", Password: "apppw"}},
		Primary:  Backend{Name: "primary", Addr: routerPrimary(t, set.String()), User: "u"},
		Replicas: []Backend{{Name: "replica1", Addr: "127.0.0.1:2", User: "u"}},
		Source:   memSource{set},
		Policy:   policy,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := srv.newRouter(ctx); err != nil {
		t.Fatal(err)
	}
	// The replica's watermark reader answers without a server: the
	// replica's executed set after the read.
	srv.topo.Load().replicaWM[0].queryFn = func(context.Context) (gtid.Set, error) { return gtid.Parse(memUUID + ":1-9") }
	srv.topo.Load().replicaWM[0].start(ctx)
	s = newSession(ctx, srv)
	pc, pb, _, _ := memConns(t)
	pc.b = &srv.cfg.Primary
	rc, rb, cc, mc := memConns(t)
	rc.b = &srv.cfg.Replicas[0]
	s.cc, s.primary, s.replicas[0] = cc, pc, rc
	return s, pb, rb, mc
}

// TestRouteRelayReadInMemory: a read with no token goes to the replica,
// its rows reach the client, nothing follows it on the session's
// connection (the watermark is the replica's reader's) and the replica is
// the previous statement's backend.
func TestRouteRelayReadInMemory(t *testing.T) {
	s, _, rep, mc := memRouted(t, "token-ryw-mr")
	rows := [][]byte{{1}, columnDef("a"), eofPayload(2), textRow("x"), eofPayload(2)}
	go func() {
		if cmd := rep.command(); string(cmd) != "\x03SELECT a FROM t" {
			t.Errorf("replica got %q", cmd)
		}
		rep.send(1, rows...)
	}()
	st := mustClassify(t, "SELECT a FROM t")
	if _, err := s.readQuery("SELECT a FROM t", st); err != nil {
		t.Fatal(err)
	}
	if got := mc.packets(t, len(rows)); len(got) != len(rows) || string(got[3]) != string(textRow("x")) {
		t.Fatalf("client got %q", got)
	}
	if s.state.last != s.replicas[0] {
		t.Fatal("the previous statement's backend is not the replica that ran it")
	}
	if wm := s.ls.State().Seen; wm.String() != memUUID+":1-9" {
		t.Fatalf("session watermark %q, want the replica's executed set", wm)
	}
}

// TestRouteRelayPinnedInMemory: in a transaction (the mirror's status),
// a read goes to the primary and its status is mirrored back.
func TestRouteRelayPinnedInMemory(t *testing.T) {
	s, prim, _, mc := memRouted(t, "token-ryw-mr")
	inTx := uint16(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_IN_TRANS)
	s.state.observeStatus(inTx, false)
	rows := [][]byte{{1}, columnDef("a"), eofPayload(inTx), textRow("p"), eofPayload(inTx)}
	go func() {
		if cmd := prim.command(); string(cmd) != "\x03SELECT a FROM t" {
			t.Errorf("primary got %q", cmd)
		}
		prim.send(1, rows...)
	}()
	if _, err := s.readQuery("SELECT a FROM t", mustClassify(t, "SELECT a FROM t")); err != nil {
		t.Fatal(err)
	}
	_ = s.cc.Flush()
	if got := mc.packets(t, len(rows)); len(got) != len(rows) || string(got[3]) != string(textRow("p")) {
		t.Fatalf("client got %q", got)
	}
	if !s.state.inTx() || s.state.last != s.primary {
		t.Fatalf("after a pinned read: in transaction %v, last is primary %v", s.state.inTx(), s.state.last == s.primary)
	}
}

// TestRouteRelayReplicaLostInMemory: a replica that closes before it
// answers ends the read with a lost-connection error naming it (nothing
// reached the client, which keeps its connection); the replica is held
// down.
func TestRouteRelayReplicaLostInMemory(t *testing.T) {
	s, _, rep, _ := memRouted(t, "token-ryw-mr")
	go func() {
		rep.command()
		rep.nc.Close()
	}()
	_, err := s.readQuery("SELECT a FROM t", mustClassify(t, "SELECT a FROM t"))
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != codeBackendLost || !strings.Contains(me.Message, "replica1") {
		t.Fatalf("error %v, want 2013 naming replica1", err)
	}
	if s.cc.closed {
		t.Fatal("the client was closed although nothing reached it")
	}
	if s.srv.rt.Failures("replica1") == 0 {
		t.Fatal("the replica that closed mid-read was not counted as failed")
	}
}

// TestRouteRelayServerErrorInMemory: the replica's ERR reaches the client
// as the read's answer; the session keeps both connections.
func TestRouteRelayServerErrorInMemory(t *testing.T) {
	s, _, rep, mc := memRouted(t, "token-ryw-mr")
	erp := errPayload(1146, "42S02", "Table 'app.t' doesn't exist")
	go func() {
		rep.command()
		rep.send(1, erp)
	}()
	if _, err := s.readQuery("SELECT a FROM t", mustClassify(t, "SELECT a FROM t")); err != nil {
		t.Fatalf("a relayed server error is the client's answer, not the session's: %v", err)
	}
	if got := mc.packets(t, 1); len(got) != 1 || string(got[0]) != string(erp) {
		t.Fatalf("client got %q", got)
	}
	if s.replicas[0].broken || s.srv.rt.Failures("replica1") != 0 {
		t.Fatal("a statement error was taken for a node fault")
	}
}

// routerPrimary is what the router itself reads of the primary (its
// position, at start): go-mysql's server side on a loopback listener,
// answering every query with the executed set. The session's own
// connections stay in memory.
func routerPrimary(t testing.TB, executed string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	srv := server.NewServer("8.0.40", mysql.DEFAULT_COLLATION_ID, mysql.AUTH_NATIVE_PASSWORD, nil, nil)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				sc, err := srv.NewConn(c, "u", "", positionHandler{executed: executed})
				if err != nil {
					return
				}
				for !sc.Closed() {
					if sc.HandleCommand() != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// positionHandler answers what the router's primary connections ask: the
// session-tracking set-up (its OK reports the variable), gtid_mode, and
// every other SELECT with the executed set.
type positionHandler struct {
	server.EmptyHandler
	executed string
}

func (h positionHandler) HandleQuery(q string) (*mysql.Result, error) {
	u := strings.ToUpper(strings.TrimSpace(q))
	switch {
	case strings.Contains(u, "SESSION_TRACK_GTIDS = OWN_GTID"):
		r := mysql.NewResultReserveResultset(0)
		r.Status |= mysql.SERVER_SESSION_STATE_CHANGED
		r.SessionTracking = &mysql.SessionTrackingInfo{Variables: map[string]string{"session_track_gtids": "OWN_GTID"}}
		return r, nil
	case strings.Contains(u, "GTID_MODE"):
		on := "ON"
		return mysql.NewResult(oneValueResultset("v", &on)), nil
	case strings.HasPrefix(u, "SELECT"):
		return mysql.NewResult(oneValueResultset("v", &h.executed)), nil
	}
	return nil, nil
}

// TestSessionContextCutsBackendCallInMemory: a backend call waiting for
// an answer that never comes ends when the session's context ends, and
// the connection is given up.
func TestSessionContextCutsBackendCallInMemory(t *testing.T) {
	bc, be, _, _ := memConns(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		be.command() // and never answer
		cancel()
	}()
	_, err := bc.exec(ctx, "SELECT SLEEP(1000)")
	if err == nil || !errors.Is(bc.dc.CutReason(), context.Canceled) {
		t.Fatalf("exec = %v (cut %v), want the call cut by the context", err, bc.dc.CutReason())
	}
	if !bc.broken {
		t.Fatal("a connection cut mid-answer is not broken")
	}
}

// prepareOK is COM_STMT_PREPARE's first answer packet.
func prepareOK(id uint32, columns, params uint16) []byte {
	p := []byte{0}
	p = binary.LittleEndian.AppendUint32(p, id)
	p = binary.LittleEndian.AppendUint16(p, columns)
	p = binary.LittleEndian.AppendUint16(p, params)
	return append(p, 0, 0, 0)
}

// TestRawExecuteRoutedInMemory: a prepared execution (COM_STMT_EXECUTE)
// takes the same route as every read: prepared lazily on the replica the
// router chose, the client's packet relayed there under the replica's
// statement id, the binary result relayed raw to the client, its
// watermark read, the replica the previous statement's backend; the
// server's refusal of the execution is the client's answer and no node
// fault.
func TestRawExecuteRoutedInMemory(t *testing.T) {
	for _, refused := range []bool{false, true} {
		s, _, rep, mc := memRouted(t, "token-ryw-mr")
		const q = "SELECT a FROM t WHERE k = ?"
		s.state.stmts[1] = &pstmt{query: q, class: mustClassify(t, q), id: 1, params: 1, onReplica: map[int]*client.Stmt{}}
		s.stmts.prepared(1, 1)
		value := binary.LittleEndian.AppendUint64(nil, 1)
		payload := execPayload(1, 1, true, []byte{mysql.MYSQL_TYPE_LONGLONG, 0}, value)
		erp := errPayload(1146, "42S02", "Table 'app.t' doesn't exist")
		row := append([]byte{0, 0}, mysql.PutLengthEncodedString([]byte("x"))...)
		go func() {
			if cmd := rep.command(); len(cmd) < 1 || cmd[0] != mysql.COM_STMT_PREPARE || string(cmd[1:]) != q {
				t.Errorf("replica got %q, want the prepare", cmd)
				return
			}
			rep.send(1, prepareOK(7, 1, 1), columnDef("?"), eofPayload(2), columnDef("a"), eofPayload(2))
			cmd := rep.command()
			if want := append([]byte{mysql.COM_STMT_EXECUTE, 7, 0, 0, 0}, payload[5:]...); !bytes.Equal(cmd, want) {
				t.Errorf("replica got %x, want the client's execution under statement 7: %x", cmd, want)
				return
			}
			// Nothing follows the execution on the session's
			// connection: the watermark is the replica's reader's.
			if refused {
				rep.send(1, erp)
				return
			}
			rep.send(1, []byte{1}, columnDef("a"), eofPayload(2), row, eofPayload(2))
		}()
		res, err := s.handleStmtExecute(payload)
		if err != nil || res != done() {
			t.Fatalf("execution: %v, %v; want it relayed", res, err)
		}
		_ = s.cc.Flush()
		if refused {
			got := mc.packets(t, 1)
			if len(got) != 1 || !bytes.Equal(got[0], erp) {
				t.Fatalf("client got %x, want the server's 1146", got)
			}
			if s.replicas[0].broken || s.srv.rt.Failures("replica1") != 0 {
				t.Fatal("the server's refusal was taken for a node fault")
			}
			continue
		}
		if got := mc.packets(t, 5); len(got) != 5 || !bytes.Equal(got[3], row) {
			t.Fatalf("client got %x, want the binary row %x", got, row)
		}
		if s.state.last != s.replicas[0] {
			t.Fatal("the previous statement's backend is not the replica that ran it")
		}
		if wm := s.ls.State().Seen; wm.String() != memUUID+":1-9" {
			t.Fatalf("session watermark %q, want the replica's executed set", wm)
		}
	}
}

// TestRelayWatchdogCutAsAnswerArrivesInMemory: the watchdog cuts a
// replica's connection just as its answer arrives (the command sent, the
// answer's first packet already read into the buffer, the unwatch not yet
// done). Nothing was written to the client, so the relay reports a
// failure with nothing written (the read is decided again elsewhere), not
// one mid-result that would close the client.
func TestRelayWatchdogCutAsAnswerArrivesInMemory(t *testing.T) {
	bc, be, cc, mc := memConns(t)
	go func() {
		be.command()
		// One write: the first answer and the first packet of the next,
		// both in the connection's read buffer after the first relay.
		b := append(packet(1, okPayload(0, 2)), packet(1, []byte{1})...)
		if _, err := be.nc.Write(b); err != nil {
			t.Errorf("backend: %v", err)
		}
		be.command() // the second command; the rest never comes
	}()
	if _, err := relayQuery(cc, bc, "DO 1", relayReq{op: "query"}); err != nil {
		t.Fatal(err)
	}
	_ = cc.Flush()
	before := len(mc.packets(t, 1))
	bc.watch(func() bool { return true })
	be.hook.afterWrite = func() { bc.dc.Cut(errUnresponsive) } // the cut lands as the command is out
	_, err := relayQuery(cc, bc, "SELECT a FROM t", relayReq{op: "query"})
	_ = cc.Flush() // the response is complete: the client gets it
	var re *relayError
	if !errors.As(err, &re) || re.partial || !bc.broken || !bc.unresponsive() {
		t.Fatalf("error %v (relay error %+v), broken %v: want a failure with nothing written", err, re, bc.broken)
	}
	if after := len(mc.packets(t, 0)); after != before {
		t.Fatalf("the client got %d packets of an answer the relay gave up", after-before)
	}
}
