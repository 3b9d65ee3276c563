package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// The session's command loop, bytes in and bytes out (issue 37, item 5):
// each test writes a client's packets into the client's end of a pipe,
// runs session.handleNextCommand once per command, scripts the in-memory
// backends (memRouted) where the command reaches one, and checks the
// exact packets the client gets, header sequence numbers included, and
// what each backend got. No MySQL: the one TCP server is memRouted's
// go-mysql fake primary (routerPrimary), which COM_CHANGE_USER and
// COM_RESET_CONNECTION dial when they reopen the primary connection.

// cmdWait bounds every wait of these tests: a command's answer, a
// backend's command, the client's packets.
const cmdWait = 5 * time.Second

// cmdPacket is one packet as the client got it.
type cmdPacket struct {
	seq     byte
	payload []byte
}

func (p cmdPacket) String() string { return fmt.Sprintf("seq %d %x", p.seq, p.payload) }

// cmdHarness is a routed session (memRouted) whose client connection is a
// fresh pipe: the test writes the client's packets to cl, a goroutine
// keeps every packet the proxy writes to it with its sequence number.
type cmdHarness struct {
	t         *testing.T
	s         *session
	prim, rep *memBackend
	cl        net.Conn
	mu        sync.Mutex
	pkts      []cmdPacket
	taken     int
	readDone  chan struct{}
	steps     sync.WaitGroup
}

// The client's capabilities in these tests (COM_CHANGE_USER's format).
const cmdCaps = mysql.CLIENT_PROTOCOL_41 | changeUserCaps

func newCmdHarness(t *testing.T) *cmdHarness {
	t.Helper()
	s, prim, rep, _ := memRouted(t, "token-ryw-mr")
	near, far := net.Pipe()
	// The client connection as login builds it: the session's statement
	// memory receives the long data.
	s.caps = cmdCaps
	s.cc = newClientConn(near, s.caps, s.stmts, testLimits, nil, s.countClientError)
	// Whatever fails, no pipe read or write outlives this.
	end := time.Now().Add(30 * time.Second)
	for _, c := range []net.Conn{far, prim.nc, rep.nc} {
		_ = c.SetDeadline(end)
	}
	h := &cmdHarness{t: t, s: s, prim: prim, rep: rep, cl: far, readDone: make(chan struct{})}
	go h.read()
	t.Cleanup(func() {
		near.Close()
		far.Close()
		prim.nc.Close()
		rep.nc.Close()
		stopped := make(chan struct{})
		go func() { h.steps.Wait(); close(stopped) }()
		select {
		case <-stopped:
			s.close() // the session's goroutine is done with it
		case <-time.After(cmdWait):
			t.Errorf("a command still runs after its pipes closed")
		}
	})
	return h
}

func (h *cmdHarness) read() {
	defer close(h.readDone)
	for {
		seq, p, err := readPacket(h.cl)
		if err != nil {
			return
		}
		h.mu.Lock()
		h.pkts = append(h.pkts, cmdPacket{seq, p})
		h.mu.Unlock()
	}
}

// start runs one turn of the session's loop in a goroutine:
// handleNextCommand, then the flush the loop's next read (or serveConn's
// end) does. The channel gets handleNextCommand's error.
func (h *cmdHarness) start() <-chan error {
	ch := make(chan error, 1)
	h.steps.Add(1)
	go func() {
		defer h.steps.Done()
		err := h.s.handleNextCommand()
		_ = h.s.cc.Flush()
		ch <- err
	}()
	return ch
}

// wait is the error of the turn started with start, within cmdWait.
func (h *cmdHarness) wait(ch <-chan error) error {
	h.t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(cmdWait):
		h.t.Fatalf("the command was not answered within %v", cmdWait)
	}
	return nil
}

// write sends the client's bytes (framed packets).
func (h *cmdHarness) write(in ...[]byte) {
	h.t.Helper()
	_ = h.cl.SetWriteDeadline(time.Now().Add(cmdWait))
	if _, err := h.cl.Write(bytes.Join(in, nil)); err != nil {
		h.t.Fatalf("client write: %v", err)
	}
}

// do runs one command that reaches no backend: the client's bytes in,
// handleNextCommand's error out.
func (h *cmdHarness) do(in ...[]byte) error {
	h.t.Helper()
	ch := h.start()
	h.write(in...)
	return h.wait(ch)
}

// recv returns the next n packets the client got, within cmdWait.
func (h *cmdHarness) recv(n int) []cmdPacket {
	h.t.Helper()
	deadline := time.Now().Add(cmdWait)
	for {
		h.mu.Lock()
		have := len(h.pkts) - h.taken
		if have >= n {
			got := append([]cmdPacket(nil), h.pkts[h.taken:h.taken+n]...)
			h.taken += n
			h.mu.Unlock()
			return got
		}
		h.mu.Unlock()
		if time.Now().After(deadline) {
			h.t.Fatalf("the client got %d packets, want %d", have, n)
		}
		select {
		case <-h.readDone:
			h.mu.Lock()
			have = len(h.pkts) - h.taken
			h.mu.Unlock()
			if have < n {
				h.t.Fatalf("the client's connection closed after %d packets, want %d", have, n)
			}
		case <-time.After(time.Millisecond):
		}
	}
}

// expect checks that the client's next packets are want, exactly.
func (h *cmdHarness) expect(want ...cmdPacket) {
	h.t.Helper()
	got := h.recv(len(want))
	for i := range want {
		if got[i].seq != want[i].seq || !bytes.Equal(got[i].payload, want[i].payload) {
			h.t.Fatalf("client packet %d: %v\nwant %v", i, got[i], want[i])
		}
	}
}

// expectErr checks that the client's next packet is an ERR with code at
// sequence number seq, and returns its message.
func (h *cmdHarness) expectErr(seq byte, code uint16) string {
	h.t.Helper()
	p := h.recv(1)[0]
	if p.seq != seq || len(p.payload) < 9 || p.payload[0] != mysql.ERR_HEADER || binary.LittleEndian.Uint16(p.payload[1:]) != code {
		h.t.Fatalf("client got %v (%q), want ERR %d at seq %d", p, p.payload, code, seq)
	}
	return string(p.payload[9:])
}

// quiet checks, after the client's end was closed, that the client got
// no packet it was not expected to.
func (h *cmdHarness) quiet() {
	h.t.Helper()
	select {
	case <-h.readDone:
	case <-time.After(cmdWait):
		h.t.Fatal("the client's reader did not end")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if extra := h.pkts[h.taken:]; len(extra) > 0 {
		h.t.Fatalf("the client got %d unexpected packets: %v", len(extra), extra)
	}
}

// ping is a COM_PING after a command: its OK, at sequence 1, is the next
// packet the client gets (so the command left nothing behind it) and no
// backend is touched.
// pingMirroring is ping where the primary's last OK carried status: the
// proxy's own OK mirrors its autocommit flag.
func (h *cmdHarness) pingMirroring(status uint16) {
	h.t.Helper()
	if err := h.do(packet(0, []byte{mysql.COM_PING})); err != nil {
		h.t.Fatalf("COM_PING: %v", err)
	}
	h.expect(cmdPacket{1, okPayload(0, status)})
}

func (h *cmdHarness) ping() {
	h.t.Helper()
	if err := h.do(packet(0, []byte{mysql.COM_PING})); err != nil {
		h.t.Fatalf("COM_PING: %v", err)
	}
	h.expect(cmdPacket{1, proxyOK})
}

// command reads the next command the proxy sent backend b, within cmdWait.
func (h *cmdHarness) command(b *memBackend) []byte {
	h.t.Helper()
	_ = b.nc.SetReadDeadline(time.Now().Add(cmdWait))
	seq, p, err := readPacket(b.nc)
	if err != nil {
		h.t.Fatalf("backend: reading a command: %v", err)
	}
	if seq != 0 {
		h.t.Fatalf("backend: a command at sequence %d", seq)
	}
	return p
}

// expectCommand checks the next command b got.
func (h *cmdHarness) expectCommand(b *memBackend, want []byte) {
	h.t.Helper()
	if got := h.command(b); !bytes.Equal(got, want) {
		h.t.Fatalf("backend got %q\nwant %q", got, want)
	}
}

// answer writes payloads to the proxy from b, numbered from seq.
func (h *cmdHarness) answer(b *memBackend, seq byte, payloads ...[]byte) {
	h.t.Helper()
	_ = b.nc.SetWriteDeadline(time.Now().Add(cmdWait))
	for _, p := range payloads {
		if err := writePackets(b.nc, seq, p); err != nil {
			h.t.Fatalf("backend write: %v", err)
		}
		seq++
	}
}

// closedByProxy checks that the proxy closed its connection to b (the
// far end reads EOF, nothing before it).
func (h *cmdHarness) closedByProxy(b *memBackend, name string) {
	h.t.Helper()
	_ = b.nc.SetReadDeadline(time.Now().Add(cmdWait))
	if _, p, err := readPacket(b.nc); !errors.Is(err, io.EOF) {
		h.t.Fatalf("%s connection: read %q, %v; want it closed by the proxy", name, p, err)
	}
}

// proxyOK is the proxy's own OK packet (no rows, autocommit).
var proxyOK = okPayload(0, mysql.SERVER_STATUS_AUTOCOMMIT)

// cmd is a command payload: the command byte, then its data.
func cmd(c byte, data ...[]byte) []byte {
	return append([]byte{c}, bytes.Join(data, nil)...)
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// prepare runs COM_STMT_PREPARE of q (seq 0) with the primary answering
// under its own statement id backendID, the definitions of params
// parameters and columns columns; it checks the client got the session's
// id want and the definitions as the primary sent them.
func (h *cmdHarness) prepare(q string, backendID, want uint32, params, columns []string) {
	h.t.Helper()
	ch := h.start()
	h.write(packet(0, cmd(mysql.COM_STMT_PREPARE, []byte(q))))
	h.expectCommand(h.prim, cmd(mysql.COM_STMT_PREPARE, []byte(q)))
	ans := [][]byte{prepareOK(backendID, uint16(len(columns)), uint16(len(params)))}
	wantPkts := []cmdPacket{{1, prepareOK(want, uint16(len(columns)), uint16(len(params)))}}
	for _, defs := range [][]string{params, columns} {
		if len(defs) == 0 {
			continue
		}
		for _, d := range defs {
			ans = append(ans, columnDef(d))
			wantPkts = append(wantPkts, cmdPacket{byte(len(wantPkts) + 1), columnDef(d)})
		}
		ans = append(ans, eofPayload(mysql.SERVER_STATUS_AUTOCOMMIT))
		wantPkts = append(wantPkts, cmdPacket{byte(len(wantPkts) + 1), eofPayload(mysql.SERVER_STATUS_AUTOCOMMIT)})
	}
	h.answer(h.prim, 1, ans...)
	if err := h.wait(ch); err != nil {
		h.t.Fatalf("COM_STMT_PREPARE: %v", err)
	}
	h.expect(wantPkts...)
}

// TestCommandQueryWrite: COM_QUERY of a write goes to the primary as the
// client sent it; the primary's OK reaches the client at sequence 1.
func TestCommandQueryWrite(t *testing.T) {
	h := newCmdHarness(t)
	h.writeToPrimary("INSERT INTO t VALUES (1)")
	h.ping()
}

// writeToPrimary sends COM_QUERY q, checks that the primary gets it as
// sent, answers with an OK of one affected row and checks that the
// client gets that OK at sequence 1.
func (h *cmdHarness) writeToPrimary(q string) {
	h.t.Helper()
	ch := h.start()
	h.write(packet(0, cmd(mysql.COM_QUERY, []byte(q))))
	h.expectCommand(h.prim, cmd(mysql.COM_QUERY, []byte(q)))
	h.answer(h.prim, 1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT))
	if err := h.wait(ch); err != nil {
		h.t.Fatal(err)
	}
	h.expect(cmdPacket{1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT)})
}

// TestCommandQueryRead: COM_QUERY of a read (no token) goes to the
// replica, alone (its watermark is the replica's reader's); the rows
// reach the client numbered from 1, the primary sees nothing.
func TestCommandQueryRead(t *testing.T) {
	h := newCmdHarness(t)
	const q = "SELECT a FROM t"
	ch := h.start()
	h.write(packet(0, cmd(mysql.COM_QUERY, []byte(q))))
	h.expectCommand(h.rep, cmd(mysql.COM_QUERY, []byte(q)))
	rows := [][]byte{{1}, columnDef("a"), eofPayload(2), textRow("x"), textRow("y"), eofPayload(2)}
	h.answer(h.rep, 1, rows...)
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	var want []cmdPacket
	for i, r := range rows {
		want = append(want, cmdPacket{byte(i + 1), r})
	}
	h.expect(want...)
	if h.s.state.last != h.s.replicas[0] {
		t.Fatal("the read's backend is not the replica")
	}
	h.ping()
}

// TestCommandStmtPrepare: COM_STMT_PREPARE runs on the primary; the
// client gets the session's own statement ids (1, then 2), not the
// primary's, and the parameter and column definitions as the primary
// sent them, each list closed by EOF.
func TestCommandStmtPrepare(t *testing.T) {
	h := newCmdHarness(t)
	h.prepare("SELECT a, b FROM t WHERE k = ?", 7, 1, []string{"?"}, []string{"a", "b"})
	h.prepare("DO 1", 8, 2, nil, nil)
	if h.s.state.stmts[1] == nil || h.s.state.stmts[1].onPrimary.ID != 7 || h.s.state.stmts[2].onPrimary.ID != 8 {
		t.Fatal("the session's statements do not map to the primary's ids")
	}
	h.ping()
}

// TestCommandStmtExecute: COM_STMT_EXECUTE of a prepared read is routed
// to the replica (prepared there first), relayed under the replica's
// statement id, and its binary result relayed to the client numbered
// from 1; a prepared write runs on the primary under the primary's id.
func TestCommandStmtExecute(t *testing.T) {
	h := newCmdHarness(t)
	const q = "SELECT a FROM t WHERE k = ?"
	h.prepare(q, 7, 1, []string{"?"}, []string{"a"})
	types := []byte{mysql.MYSQL_TYPE_LONGLONG, 0}
	value := binary.LittleEndian.AppendUint64(nil, 42)
	exec := execPayload(1, 1, true, types, value)

	ch := h.start()
	h.write(packet(0, exec))
	h.expectCommand(h.rep, cmd(mysql.COM_STMT_PREPARE, []byte(q)))
	h.answer(h.rep, 1, prepareOK(9, 1, 1), columnDef("?"), eofPayload(2), columnDef("a"), eofPayload(2))
	h.expectCommand(h.rep, execPayload(9, 1, true, types, value))
	row := append([]byte{0, 0}, mysql.PutLengthEncodedString([]byte("x"))...)
	result := [][]byte{{1}, columnDef("a"), eofPayload(2), row, eofPayload(2)}
	h.answer(h.rep, 1, result...)
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	var want []cmdPacket
	for i, r := range result {
		want = append(want, cmdPacket{byte(i + 1), r})
	}
	h.expect(want...)

	// A write: on the primary, prepared there at COM_STMT_PREPARE.
	h.prepare("UPDATE t SET a = ? WHERE k = 1", 8, 2, []string{"?"}, nil)
	upd := execPayload(2, 1, true, types, value)
	ch = h.start()
	h.write(packet(0, upd))
	h.expectCommand(h.prim, execPayload(8, 1, true, types, value))
	h.answer(h.prim, 1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT))
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT)})
	h.ping()
}

// TestCommandStmtSendLongData: COM_STMT_SEND_LONG_DATA has no response;
// the statement's next COM_STMT_EXECUTE carries the chunks, joined, inline
// as the parameter's value, and its answer is the client's first packet
// (sequence 1, after the execution's 0).
func TestCommandStmtSendLongData(t *testing.T) {
	h := newCmdHarness(t)
	h.prepare("UPDATE t SET b = ? WHERE k = 1", 8, 1, []string{"?"}, nil)
	types := []byte{mysql.MYSQL_TYPE_BLOB, 0}
	ch := h.start()
	h.write(longDataPacket(1, 0, []byte("hello, ")))
	h.write(longDataPacket(1, 0, []byte("world")))
	h.write(packet(0, execPayload(1, 1, true, types, nil)))
	h.expectCommand(h.prim, execPayload(8, 1, true, types, mysql.PutLengthEncodedString([]byte("hello, world"))))
	h.answer(h.prim, 1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT))
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT)})
	if len(h.s.stmts.longData) != 0 || h.s.budget.used != h.s.state.stmts[1].cost {
		t.Fatalf("long data kept after the execution: %d statements, budget %d", len(h.s.stmts.longData), h.s.budget.used)
	}
	h.ping()
}

// TestCommandStmtClose: COM_STMT_CLOSE has no response; the primary gets
// COM_STMT_CLOSE of its own statement id, and a later COM_STMT_EXECUTE of
// the closed id gets ER_UNKNOWN_STMT_HANDLER (1243). Closing an unknown id
// is ignored, as MySQL does.
func TestCommandStmtClose(t *testing.T) {
	h := newCmdHarness(t)
	h.prepare("UPDATE t SET a = ? WHERE k = 1", 7, 1, []string{"?"}, nil)
	ch := h.start()
	h.write(packet(0, cmd(mysql.COM_STMT_CLOSE, u32(1))))
	h.expectCommand(h.prim, cmd(mysql.COM_STMT_CLOSE, u32(7)))
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	if err := h.do(packet(0, cmd(mysql.COM_STMT_CLOSE, u32(99)))); err != nil {
		t.Fatal(err)
	}
	if h.s.budget.used != 0 {
		t.Fatalf("the closed statement still holds %d bytes of the budget", h.s.budget.used)
	}
	value := binary.LittleEndian.AppendUint64(nil, 1)
	if err := h.do(packet(0, execPayload(1, 1, true, []byte{mysql.MYSQL_TYPE_LONGLONG, 0}, value))); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, errPayload(mysql.ER_UNKNOWN_STMT_HANDLER, "HY000", "Unknown prepared statement handler (1) given to mysqld_stmt_execute")})
	h.ping()
}

// TestCommandStmtReset: COM_STMT_RESET is answered with OK and drops the
// statement's long data (the next execution carries only its own
// value); an unknown id gets ER_UNKNOWN_STMT_HANDLER (1243).
func TestCommandStmtReset(t *testing.T) {
	h := newCmdHarness(t)
	h.prepare("UPDATE t SET b = ? WHERE k = 1", 8, 1, []string{"?"}, nil)
	before := h.s.budget.used
	if err := h.do(longDataPacket(1, 0, []byte("dropped")), packet(0, cmd(mysql.COM_STMT_RESET, u32(1)))); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, proxyOK})
	if len(h.s.stmts.longData) != 0 || h.s.budget.used != before {
		t.Fatalf("long data kept after COM_STMT_RESET: %d statements, budget %d (was %d)", len(h.s.stmts.longData), h.s.budget.used, before)
	}
	types := []byte{mysql.MYSQL_TYPE_VAR_STRING, 0}
	v := mysql.PutLengthEncodedString([]byte("v"))
	ch := h.start()
	h.write(packet(0, execPayload(1, 1, true, types, v)))
	h.expectCommand(h.prim, execPayload(8, 1, true, types, v))
	h.answer(h.prim, 1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT))
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, okPayload(1, mysql.SERVER_STATUS_AUTOCOMMIT)})

	if err := h.do(packet(0, cmd(mysql.COM_STMT_RESET, u32(99)))); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, errPayload(mysql.ER_UNKNOWN_STMT_HANDLER, "HY000", "Unknown prepared statement handler (99) given to mysqld_stmt_reset")})
	h.ping()
}

// TestCommandInitDB: COM_INIT_DB runs on the primary, then on the open
// replica connection; the client gets OK. The primary's refusal is the
// client's answer, and the replica is not asked.
func TestCommandInitDB(t *testing.T) {
	h := newCmdHarness(t)
	ch := h.start()
	h.write(packet(0, cmd(mysql.COM_INIT_DB, []byte("shop"))))
	h.expectCommand(h.prim, cmd(mysql.COM_INIT_DB, []byte("shop")))
	h.answer(h.prim, 1, okPayload(0, mysql.SERVER_STATUS_AUTOCOMMIT))
	h.expectCommand(h.rep, cmd(mysql.COM_INIT_DB, []byte("shop")))
	h.answer(h.rep, 1, okPayload(0, mysql.SERVER_STATUS_AUTOCOMMIT))
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, proxyOK})
	if h.s.state.db != "shop" || h.s.replicas[0] == nil {
		t.Fatalf("after COM_INIT_DB: db %q, replica connection kept %v", h.s.state.db, h.s.replicas[0] != nil)
	}

	refusal := errPayload(1049, "42000", "Unknown database 'nope'")
	ch = h.start()
	h.write(packet(0, cmd(mysql.COM_INIT_DB, []byte("nope"))))
	h.expectCommand(h.prim, cmd(mysql.COM_INIT_DB, []byte("nope")))
	h.answer(h.prim, 1, refusal)
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, refusal})
	if h.s.state.db != "shop" {
		t.Fatalf("after a refused COM_INIT_DB: db %q", h.s.state.db)
	}
	h.ping()
}

// TestCommandFieldList: COM_FIELD_LIST (table, NUL, wildcard) runs on the
// primary; the client gets its column definitions, then EOF.
func TestCommandFieldList(t *testing.T) {
	h := newCmdHarness(t)
	ch := h.start()
	h.write(packet(0, cmd(mysql.COM_FIELD_LIST, []byte("t\x00a%"))))
	h.expectCommand(h.prim, cmd(mysql.COM_FIELD_LIST, []byte("t\x00a%")))
	h.answer(h.prim, 1, columnDef("a"), columnDef("ab"), eofPayload(mysql.SERVER_STATUS_AUTOCOMMIT))
	if err := h.wait(ch); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, columnDef("a")}, cmdPacket{2, columnDef("ab")}, cmdPacket{3, eofPayload(mysql.SERVER_STATUS_AUTOCOMMIT)})
	h.ping()
}

// TestCommandPing: COM_PING is answered with the proxy's OK at sequence
// 1; no backend is touched (the backends are never read: a write to one
// would block the command on its pipe).
func TestCommandPing(t *testing.T) {
	h := newCmdHarness(t)
	h.ping()
	h.ping()
}

// TestCommandQuit: COM_QUIT ends the loop with errQuit and nothing is
// written to the client.
func TestCommandQuit(t *testing.T) {
	h := newCmdHarness(t)
	if err := h.do(packet(0, []byte{mysql.COM_QUIT})); !errors.Is(err, errQuit) {
		t.Fatalf("handleNextCommand = %v, want errQuit", err)
	}
	h.s.cc.Close() // as serveConn does when the loop ends
	h.quiet()
}

// changeUser runs COM_CHANGE_USER (seq 0) as user, naming plugin and
// db: it checks the proxy's authentication switch request (seq 1), answers
// it with the scramble of password (seq 2), checks the
// caching_sha2_password fast-auth packet (seq 3) when the password is
// right, and returns handleNextCommand's error. The final OK or ERR is
// left to the caller.
func (h *cmdHarness) changeUser(user, password, plugin, db string, right bool) error {
	h.t.Helper()
	ch := h.start()
	h.write(packet(0, cmd(mysql.COM_CHANGE_USER, changeUserPayload(user, []byte{1, 2, 3}, db, 255, plugin))))
	sw := h.recv(1)[0]
	want := mysql.AUTH_CACHING_SHA2_PASSWORD
	if plugin == mysql.AUTH_NATIVE_PASSWORD {
		want = plugin
	}
	prefix := append([]byte{mysql.EOF_HEADER}, want...)
	prefix = append(prefix, 0)
	if sw.seq != 1 || !bytes.HasPrefix(sw.payload, prefix) || len(sw.payload) != len(prefix)+21 || sw.payload[len(sw.payload)-1] != 0 {
		h.t.Fatalf("authentication switch request %v (%q), want %s with a 20-byte scramble at seq 1", sw, sw.payload, want)
	}
	salt := sw.payload[len(prefix) : len(sw.payload)-1]
	reply := mysql.CalcCachingSha2Password(salt, []byte(password))
	if want == mysql.AUTH_NATIVE_PASSWORD {
		reply = mysql.CalcNativePassword(salt, []byte(password))
	}
	h.write(packet(2, reply))
	if right && want == mysql.AUTH_CACHING_SHA2_PASSWORD {
		h.expect(cmdPacket{3, []byte{mysql.MORE_DATE_HEADER, mysql.CACHE_SHA2_FAST_AUTH}})
	}
	return h.wait(ch)
}

// TestCommandChangeUser: COM_CHANGE_USER answers with an authentication
// switch to a fresh scramble (caching_sha2_password, or
// mysql_native_password when the client names it); the configured
// user's scramble passes (fast-auth success for sha2) and the client gets
// OK after it, the session starting over: the old primary and replica
// connections are closed and a new primary connection is dialled (to
// memRouted's go-mysql primary, which then answers the session's write).
// A wrong password, or an unknown user, gets 1045 and the session closes
// after it (closeAfter), keeping its connections.
func TestCommandChangeUser(t *testing.T) {
	for _, plugin := range []string{mysql.AUTH_CACHING_SHA2_PASSWORD, mysql.AUTH_NATIVE_PASSWORD, ""} {
		t.Run("ok "+plugin, func(t *testing.T) {
			h := newCmdHarness(t)
			oldPrim := h.s.primary
			if err := h.changeUser("app", "apppw", plugin, "shop", true); err != nil {
				t.Fatal(err)
			}
			seq := byte(4)
			if plugin == mysql.AUTH_NATIVE_PASSWORD {
				seq = 3
			}
			h.expect(cmdPacket{seq, proxyOK})
			if h.s.closeAfter || h.s.primary == oldPrim || h.s.primary == nil || h.s.replicas[0] != nil || h.s.state.db != "shop" {
				t.Fatalf("after COM_CHANGE_USER: closeAfter %v, primary replaced %v, replica closed %v, db %q",
					h.s.closeAfter, h.s.primary != oldPrim, h.s.replicas[0] == nil, h.s.state.db)
			}
			h.closedByProxy(h.prim, "old primary")
			h.closedByProxy(h.rep, "old replica")
			// The new primary connection works: go-mysql's fake primary
			// answers a write with OK.
			if err := h.do(packet(0, cmd(mysql.COM_QUERY, []byte("INSERT INTO t VALUES (1)")))); err != nil {
				t.Fatal(err)
			}
			if p := h.recv(1)[0]; p.seq != 1 || p.payload[0] != mysql.OK_HEADER {
				t.Fatalf("a write after COM_CHANGE_USER: client got %v, want OK at seq 1", p)
			}
			h.pingMirroring(0) // go-mysql's fake primary sends status 0
		})
	}
	for _, c := range []struct{ name, user, password string }{
		{"wrong password", "app", "wrong"},
		{"unknown user", "nobody", "apppw"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newCmdHarness(t)
			oldPrim := h.s.primary
			if err := h.changeUser(c.user, c.password, mysql.AUTH_CACHING_SHA2_PASSWORD, "", false); err != nil {
				t.Fatal(err)
			}
			msg := h.expectErr(3, mysql.ER_ACCESS_DENIED_ERROR)
			if want := "Access denied for user '" + c.user + "'"; !strings.HasPrefix(msg, want) {
				t.Fatalf("message %q, want %q...", msg, want)
			}
			if !h.s.closeAfter || h.s.primary != oldPrim {
				t.Fatalf("closeAfter %v, primary kept %v: want the session closed after the answer, unchanged", h.s.closeAfter, h.s.primary == oldPrim)
			}
		})
	}
}

// TestCommandResetConnection: COM_RESET_CONNECTION is answered with OK;
// the session's causal token is dropped (SELECT @causal_token, answered
// by the proxy, is NULL after it), the old backend connections are closed
// and a new primary connection is dialled (memRouted's go-mysql primary),
// which answers the session's next write.
func TestCommandResetConnection(t *testing.T) {
	h := newCmdHarness(t)
	set := memUUID + ":1-5"
	if err := h.do(packet(0, cmd(mysql.COM_QUERY, []byte("SET @causal_token = '"+set+"'")))); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, proxyOK})
	token := func() []byte {
		t.Helper()
		if err := h.do(packet(0, cmd(mysql.COM_QUERY, []byte("SELECT @causal_token")))); err != nil {
			t.Fatal(err)
		}
		got := h.recv(5)
		for i, p := range got {
			if p.seq != byte(i+1) {
				t.Fatalf("SELECT @causal_token: packet %d at seq %d", i, p.seq)
			}
		}
		if !bytes.Equal(got[0].payload, []byte{1}) || got[2].payload[0] != mysql.EOF_HEADER || got[4].payload[0] != mysql.EOF_HEADER {
			t.Fatalf("SELECT @causal_token: %v, want a one-column, one-row result", got)
		}
		return got[3].payload
	}
	if row := token(); !bytes.Contains(row, []byte(set)) {
		t.Fatalf("token row %q before the reset, want it to hold %s", row, set)
	}
	oldPrim := h.s.primary
	if err := h.do(packet(0, []byte{mysql.COM_RESET_CONNECTION})); err != nil {
		t.Fatal(err)
	}
	h.expect(cmdPacket{1, proxyOK})
	if row := token(); !bytes.Equal(row, []byte{0xfb}) {
		t.Fatalf("token row %q after the reset, want NULL", row)
	}
	if h.s.primary == oldPrim || h.s.primary == nil || h.s.replicas[0] != nil {
		t.Fatalf("after the reset: primary replaced %v, replica closed %v", h.s.primary != oldPrim, h.s.replicas[0] == nil)
	}
	h.closedByProxy(h.prim, "old primary")
	h.closedByProxy(h.rep, "old replica")
	if err := h.do(packet(0, cmd(mysql.COM_QUERY, []byte("INSERT INTO t VALUES (1)")))); err != nil {
		t.Fatal(err)
	}
	if p := h.recv(1)[0]; p.seq != 1 || p.payload[0] != mysql.OK_HEADER {
		t.Fatalf("a write after the reset: client got %v, want OK at seq 1", p)
	}
	h.pingMirroring(0) // go-mysql's fake primary sends status 0
}

// TestCommandUnknown: a command the proxy does not serve (COM_STATISTICS,
// COM_DAEMON, 0x20 COM_CLONE, 0xff, and COM_SLEEP sent as a command
// byte) gets ER_UNKNOWN_COM_ERROR (1047) at sequence 1; the session goes
// on. (0x1f is COM_RESET_CONNECTION, not an unknown command.)
func TestCommandUnknown(t *testing.T) {
	h := newCmdHarness(t)
	for _, c := range []byte{mysql.COM_STATISTICS, mysql.COM_DAEMON, 0x20, 0xff, mysql.COM_SLEEP} {
		if err := h.do(packet(0, []byte{c, 'x'})); err != nil {
			t.Fatalf("command 0x%02x: %v", c, err)
		}
		want := fmt.Sprintf("causallab proxy: command 0x%02x is not supported by the proxy", c)
		h.expect(cmdPacket{1, errPayload(mysql.ER_UNKNOWN_COM_ERROR, "08S01", want)})
	}
	h.ping()
}

// TestCommandEmptyPacket: an empty packet is read as COM_SLEEP, as MySQL
// reads it, and answered with ER_UNKNOWN_COM_ERROR (1047) at the sequence
// number after the client's.
func TestCommandEmptyPacket(t *testing.T) {
	h := newCmdHarness(t)
	for _, seq := range []byte{0, 5} {
		if err := h.do([]byte{0, 0, 0, seq}); err != nil {
			t.Fatal(err)
		}
		h.expect(cmdPacket{seq + 1, errPayload(mysql.ER_UNKNOWN_COM_ERROR, "08S01", "causallab proxy: command 0x00 is not supported by the proxy")})
	}
	h.ping()
}

// TestCommandTruncated: a packet shorter than its header claims, after
// which the client closes, ends handleNextCommand with an error (and the
// next call with the same one); nothing is written and no backend is
// touched.
func TestCommandTruncated(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
	}{
		{"COM_QUERY", []byte{100, 0, 0, 0, mysql.COM_QUERY, 'S', 'E', 'L', 'E', 'C', 'T'}},
		{"COM_STMT_EXECUTE", []byte{40, 0, 0, 0, mysql.COM_STMT_EXECUTE, 1, 0, 0}},
		{"COM_INIT_DB", []byte{20, 0, 0, 0, mysql.COM_INIT_DB, 's', 'h'}},
		{"COM_STMT_SEND_LONG_DATA", append([]byte{100, 0, 0, 0, mysql.COM_STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0, 0}, "part"...)},
		{"header", []byte{100, 0}},
		{"nothing", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newCmdHarness(t)
			if c.name == "COM_STMT_SEND_LONG_DATA" {
				h.prepare("UPDATE t SET b = ?", 8, 1, []string{"?"}, nil)
			}
			ch := h.start()
			if len(c.in) > 0 {
				h.write(c.in)
			}
			h.cl.Close()
			err := h.wait(ch)
			if err == nil {
				t.Fatal("handleNextCommand returned no error for a truncated packet")
			}
			t.Logf("handleNextCommand: %v", err)
			if again := h.wait(h.start()); again == nil {
				t.Fatal("the next handleNextCommand returned no error")
			}
			if h.s.cc.werr != nil || len(h.s.cc.wbuf) != 0 {
				t.Fatalf("the proxy wrote to the client (write error %v, %d bytes buffered)", h.s.cc.werr, len(h.s.cc.wbuf))
			}
			h.quiet()
		})
	}
}
