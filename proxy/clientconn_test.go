package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/procs"
)

// execPacket builds a COM_STMT_EXECUTE packet for a statement with n
// parameters: with types when bound, values as given.
func execPacket(seq byte, id uint32, n int, bound bool, types, values []byte) []byte {
	return packet(seq, execPayload(id, n, bound, types, values))
}

func execPayload(id uint32, n int, bound bool, types, values []byte) []byte {
	p := []byte{mysql.COM_STMT_EXECUTE}
	p = binary.LittleEndian.AppendUint32(p, id)
	p = append(p, 0, 1, 0, 0, 0)
	p = append(p, make([]byte, (n+7)/8)...)
	if bound {
		p = append(p, 1)
		p = append(p, types...)
	} else {
		p = append(p, 0)
	}
	return append(p, values...)
}

// packet frames a payload shorter than 16 MiB.
func packet(seq byte, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

// fakeConn is a client connection reading from a byte stream and keeping
// what is written to it.
type fakeConn struct {
	net.Conn
	r io.Reader
	w bytes.Buffer
}

func (f *fakeConn) Read(p []byte) (int, error)       { return f.r.Read(p) }
func (f *fakeConn) Write(p []byte) (int, error)      { return f.w.Write(p) }
func (f *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fakeConn) SetWriteDeadline(time.Time) error { return nil }
func (f *fakeConn) Close() error                     { return nil }

// seen is one command as the session's loop reads it from the client
// connection: its payload (an execution's as the statement memory fixed
// it: the pieces joined) and the sequence number its response starts at.
type seen struct {
	payload []byte
	seq     uint8
}

var testLimits = gateLimits{maxPacket: 64 << 20, idle: time.Hour, read: time.Hour, write: time.Hour}

// runGate reads input's commands through a clientConn as the session's
// loop does (readCommand; an execution through the statement memory,
// whose refusal it answers as the session would) and returns them, what
// the connection wrote (its own answers), the kinds it counted and the
// error that ended the stream (nil for a clean end).
func runGate(params map[uint32]*stmtParams, lim gateLimits, budget *byteBudget, input io.Reader) ([]seen, []byte, []string, error) {
	fc := &fakeConn{r: input}
	var counted []string
	count := func(k string) { counted = append(counted, k) }
	m := newStmtMemory(budget, lim.maxPacket, count)
	if params != nil {
		m.params = params
	}
	c := newClientConn(fc, 0, m, lim, nil, count)
	var out []seen
	for {
		p, err := c.readCommand()
		if err != nil {
			_ = c.Flush()
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return out, fc.w.Bytes(), counted, err
		}
		sn := seen{payload: bytes.Clone(p), seq: c.seq}
		switch {
		case p[0] == mysql.COM_STMT_EXECUTE && len(p) >= 10:
			pieces, refused := m.fix(p)
			if refused != nil {
				_ = c.writeErr(refused)
				continue
			}
			sn.payload = bytes.Join(pieces, nil)
		case p[0] == mysql.COM_STMT_RESET && len(p) >= 5:
			m.dropLongData(binary.LittleEndian.Uint32(p[1:5]))
		}
		out = append(out, sn)
	}
}

func mustRunGate(t *testing.T, params map[uint32]*stmtParams, in []byte) []seen {
	t.Helper()
	got, written, counted, err := runGate(params, testLimits, nil, bytes.NewReader(in))
	if err != nil || len(written) != 0 || len(counted) != 0 {
		t.Fatalf("err %v, written %x, counted %v", err, written, counted)
	}
	return got
}

func TestGateRewritesUnboundExecute(t *testing.T) {
	types := []byte{mysql.MYSQL_TYPE_LONG, 0, mysql.MYSQL_TYPE_VAR_STRING, 0}
	v1 := []byte{42, 0, 0, 0, 3, 'a', 'b', 'c'}
	v2 := []byte{7, 0, 0, 0, 1, 'z'}
	var in []byte
	in = append(in, execPacket(0, 3, 2, true, types, v1)...)
	in = append(in, packet(0, []byte("\x03SEL "))...)
	in = append(in, execPacket(0, 3, 2, false, nil, v2)...)
	got := mustRunGate(t, map[uint32]*stmtParams{3: {n: 2}}, in)
	want := [][]byte{execPayload(3, 2, true, types, v1), []byte("\x03SEL "), execPayload(3, 2, true, types, v2)}
	if len(got) != 3 {
		t.Fatalf("%d commands", len(got))
	}
	for i, g := range got {
		if !bytes.Equal(g.payload, want[i]) || g.seq != 1 {
			t.Errorf("command %d: payload %x seq %d, want %x seq 1", i, g.payload, g.seq, want[i])
		}
	}
}

func TestGateCountsWhatItCannotFix(t *testing.T) {
	v := []byte{1, 0, 0, 0}
	// Statement 9 never sent its types; statement 4 is unknown: both pass
	// unchanged, only the first is counted.
	in := append(execPacket(1, 9, 1, false, nil, v), execPacket(2, 4, 1, false, nil, v)...)
	got, _, counted, err := runGate(map[uint32]*stmtParams{9: {n: 1}}, testLimits, nil, bytes.NewReader(in))
	if err != nil || len(got) != 2 {
		t.Fatal(err, len(got))
	}
	if !bytes.Equal(got[0].payload, execPayload(9, 1, false, nil, v)) || !bytes.Equal(got[1].payload, execPayload(4, 1, false, nil, v)) {
		t.Fatalf("payloads changed: %x %x", got[0].payload, got[1].payload)
	}
	if got[0].seq != 2 || got[1].seq != 3 {
		t.Fatalf("response sequence numbers %d %d, want 2 3", got[0].seq, got[1].seq)
	}
	if len(counted) != 1 || counted[0] != "stmt-execute-unfixable-types-never-sent" {
		t.Fatalf("counted %v", counted)
	}
}

func TestGateJoinsContinuationPackets(t *testing.T) {
	// A 0xffffff-byte packet is continued by the next one, whose first byte
	// is data, not a command, even when it equals COM_STMT_EXECUTE.
	first := bytes.Repeat([]byte{'x'}, 0xffffff)
	first[0] = mysql.COM_QUERY
	cont := execPayload(3, 1, false, nil, []byte{1, 0, 0, 0})
	in := append(append([]byte{0xff, 0xff, 0xff, 0}, first...), packet(1, cont)...)
	got := mustRunGate(t, map[uint32]*stmtParams{3: {n: 1, types: []byte{mysql.MYSQL_TYPE_LONG, 0}}}, in)
	if len(got) != 1 || !bytes.Equal(got[0].payload, append(first, cont...)) || got[0].seq != 2 {
		t.Fatalf("%d commands; payload length %d, seq %d", len(got), len(got[0].payload), got[0].seq)
	}
}

// longDataPacket builds a COM_STMT_SEND_LONG_DATA packet.
func longDataPacket(id uint32, param uint16, data []byte) []byte {
	p := []byte{mysql.COM_STMT_SEND_LONG_DATA}
	p = binary.LittleEndian.AppendUint32(p, id)
	p = binary.LittleEndian.AppendUint16(p, param)
	return packet(0, append(p, data...))
}

func TestGateInlinesLongData(t *testing.T) {
	types := []byte{mysql.MYSQL_TYPE_LONG, 0, mysql.MYSQL_TYPE_BLOB, 0, mysql.MYSQL_TYPE_VAR_STRING, 0}
	// Parameter 1 arrives as long data in two chunks; the execution then
	// carries only parameters 0 and 2.
	sent := []byte{42, 0, 0, 0, 2, 'x', 'y'}
	var in []byte
	in = append(in, longDataPacket(5, 1, []byte("hello, "))...)
	in = append(in, longDataPacket(5, 1, []byte("world"))...)
	in = append(in, execPacket(0, 5, 3, true, types, sent)...)
	// The next execution has no long data: passed unchanged.
	again := []byte{7, 0, 0, 0, 1, 'b', 1, 'c'}
	in = append(in, execPacket(0, 5, 3, true, types, again)...)
	// Long data cleared by COM_STMT_RESET never reaches an execution.
	reset := packet(0, []byte{mysql.COM_STMT_RESET, 5, 0, 0, 0})
	in = append(in, longDataPacket(5, 1, []byte("dropped"))...)
	in = append(in, reset...)
	in = append(in, execPacket(0, 5, 3, true, types, again)...)
	// Long data for an unknown statement is swallowed (no answer, as in
	// MySQL).
	in = append(in, longDataPacket(6, 0, []byte("z"))...)
	budget := &byteBudget{limit: 1 << 20}
	got, written, counted, err := runGate(map[uint32]*stmtParams{5: {n: 3}}, testLimits, budget, bytes.NewReader(in))
	if err != nil || len(written) != 0 || len(counted) != 0 {
		t.Fatalf("err %v, written %x, counted %v", err, written, counted)
	}
	want := [][]byte{
		execPayload(5, 3, true, types, []byte{42, 0, 0, 0, 12, 'h', 'e', 'l', 'l', 'o', ',', ' ', 'w', 'o', 'r', 'l', 'd', 2, 'x', 'y'}),
		execPayload(5, 3, true, types, again),
		reset[4:], // COM_STMT_RESET, read as it came
		execPayload(5, 3, true, types, again),
	}
	if len(got) != len(want) {
		t.Fatalf("%d commands, want %d", len(got), len(want))
	}
	for i, w := range want {
		if !bytes.Equal(got[i].payload, w) {
			t.Errorf("command %d: %x, want %x", i, got[i].payload, w)
		}
	}
	if budget.used != 0 {
		t.Errorf("%d bytes still counted against the session after the executions", budget.used)
	}
	// An execution whose other values cannot be parsed passes unchanged
	// and is counted.
	bad := execPacket(0, 5, 3, true, types, []byte{1, 0})
	got, _, counted, _ = runGate(map[uint32]*stmtParams{5: {n: 3}}, testLimits, nil, bytes.NewReader(append(longDataPacket(5, 1, []byte("v")), bad...)))
	if len(got) != 1 || !bytes.Equal(got[0].payload, bad[4:]) || len(counted) != 1 || counted[0] != "stmt-execute-unfixable-long-data-unparsable" {
		t.Fatalf("unparsable execution: %v, counted %v", got, counted)
	}
}

// errAnswers parses the ERR packets the gate wrote.
func errAnswers(t *testing.T, b []byte) []answer {
	t.Helper()
	var as []answer
	for len(b) > 0 {
		seq, p, err := readPacket(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("gate wrote %x: %v", b, err)
		}
		as = append(as, classifyAnswer(seq, p))
		b = b[4+len(p):]
	}
	return as
}

func TestGateEmptyPacketIsCOMSleep(t *testing.T) {
	got := mustRunGate(t, nil, []byte{0, 0, 0, 0, 1, 0, 0, 0, mysql.COM_PING})
	if len(got) != 2 || !bytes.Equal(got[0].payload, []byte{mysql.COM_SLEEP}) || !bytes.Equal(got[1].payload, []byte{mysql.COM_PING}) {
		t.Fatalf("%v", got)
	}
}

// TestGateRefusesOversizedMessage: the running length is checked at every
// header; the message is answered with 1153 (the sequence number after the
// header that crossed the limit) and dropped unread, and the stream ends.
func TestGateRefusesOversizedMessage(t *testing.T) {
	lim := testLimits
	lim.maxPacket = 20 << 20
	big := bytes.Repeat([]byte{'a'}, 0xffffff)
	big[0] = mysql.COM_QUERY
	var in []byte
	in = append(in, 0xff, 0xff, 0xff, 0)
	in = append(in, big...)
	in = append(in, 0xff, 0xff, 0xff, 1) // 32 MiB so far: past 20 MiB
	in = append(in, big...)
	in = append(in, 5, 0, 0, 2, 'a', 'b', 'c', 'd', 'e')
	in = append(in, 1, 0, 0, 0, mysql.COM_PING) // never read
	var got []seen
	var written []byte
	var err error
	n := allocated(func() { got, written, _, err = runGate(nil, lim, nil, bytes.NewReader(in)) })
	if len(got) != 0 || !errors.Is(err, errClosedAfterRefusal) {
		t.Fatalf("commands %v, err %v", got, err)
	}
	as := errAnswers(t, written)
	if len(as) != 1 || as[0].code != mysql.ER_NET_PACKET_TOO_LARGE || as[0].seq != 2 {
		t.Fatalf("answers %v, want one 1153 with sequence 2", as)
	}
	// The first packet (16 MiB, under the limit) is read, into a buffer
	// doubled as bytes arrive (32 MiB allocated in all); the rest never.
	if n > 36<<20 {
		t.Fatalf("%d MiB allocated", n>>20)
	}
}

func TestGateRefusesLargeOtherCommands(t *testing.T) {
	name := bytes.Repeat([]byte{'d'}, 20<<10)
	in := append(packet(0, append([]byte{mysql.COM_INIT_DB}, name...)), 1, 0, 0, 0, mysql.COM_PING)
	got, written, counted, err := runGate(nil, testLimits, nil, bytes.NewReader(in))
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].payload, []byte{mysql.COM_PING}) {
		t.Fatalf("err %v, commands %v", err, got)
	}
	if as := errAnswers(t, written); len(as) != 1 || as[0].code != mysql.ER_NET_PACKET_TOO_LARGE || as[0].seq != 1 {
		t.Fatalf("answers %v", as)
	}
	if len(counted) != 1 || counted[0] != "command-too-large" {
		t.Fatalf("counted %v", counted)
	}
}

// TestGateAllocatesAsBytesArrive: a header claiming 16 MiB followed by 10
// bytes costs what arrived, not what was claimed.
func TestGateAllocatesAsBytesArrive(t *testing.T) {
	for _, cmd := range []byte{mysql.COM_QUERY, mysql.COM_STMT_EXECUTE, mysql.COM_STMT_SEND_LONG_DATA, mysql.COM_STMT_PREPARE} {
		in := []byte{0xfe, 0xff, 0xff, 0, cmd, 1, 0, 0, 0, 0, 1, 0, 0, 0}
		var err error
		n := allocated(func() {
			_, _, _, err = runGate(map[uint32]*stmtParams{1: {n: 1}}, testLimits, &byteBudget{limit: 64 << 20}, bytes.NewReader(in))
		})
		if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) && err != nil {
			t.Fatalf("command %#x: %v", cmd, err)
		}
		if n > 64<<10 {
			t.Errorf("command %#x: 16 MiB claimed, 10 bytes sent: %d KiB allocated", cmd, n>>10)
		}
	}
}

func TestGateBoundsLongData(t *testing.T) {
	lim := testLimits
	lim.maxPacket = 1 << 20
	chunk := bytes.Repeat([]byte{'x'}, 400<<10)
	types := []byte{mysql.MYSQL_TYPE_BLOB, 0}
	exec := execPacket(0, 1, 1, true, types, nil)
	// Per parameter: three chunks of 400 KiB pass 1 MiB.
	var in []byte
	for range 3 {
		in = append(in, longDataPacket(1, 0, chunk)...)
	}
	in = append(in, exec...)
	in = append(in, longDataPacket(1, 0, []byte("ok"))...)
	in = append(in, exec...)
	budget := &byteBudget{limit: 64 << 20}
	got, written, _, err := runGate(map[uint32]*stmtParams{1: {n: 1}}, lim, budget, bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if as := errAnswers(t, written); len(as) != 1 || as[0].code != mysql.ER_UNKNOWN_ERROR || as[0].seq != 1 ||
		!bytes.Contains([]byte(as[0].msg), []byte("longer than 'max_allowed_packet'")) {
		t.Fatalf("answers %v", as)
	}
	if len(got) != 1 || !bytes.Equal(got[0].payload, execPayload(1, 1, true, types, []byte{2, 'o', 'k'})) {
		t.Fatalf("the execution after the refusal: %v", got)
	}
	if budget.used != 0 {
		t.Fatalf("budget used %d", budget.used)
	}
	// Per session: two statements' long data past the budget.
	in = nil
	in = append(in, longDataPacket(1, 0, chunk)...)
	in = append(in, longDataPacket(2, 0, chunk)...) // past 600 KiB
	in = append(in, exec...)
	in = append(in, execPacket(0, 2, 1, true, types, nil)...)
	budget = &byteBudget{limit: 600 << 10}
	got, written, counted, err := runGate(map[uint32]*stmtParams{1: {n: 1}, 2: {n: 1}}, lim, budget, bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].payload) != len(exec)-4+4+len(chunk) {
		t.Fatalf("statement 1 within the budget: %d commands", len(got))
	}
	as := errAnswers(t, written)
	if len(as) != 1 || !bytes.Contains([]byte(as[0].msg), []byte("max_session_bytes")) || len(counted) != 1 || counted[0] != "session-bytes" {
		t.Fatalf("answers %v, counted %v", as, counted)
	}
}

func TestBinaryValueSize(t *testing.T) {
	for _, c := range []struct {
		typ  byte
		b    []byte
		want int
		ok   bool
	}{
		{mysql.MYSQL_TYPE_TINY, []byte{1}, 1, true},
		{mysql.MYSQL_TYPE_SHORT, []byte{1, 2}, 2, true},
		{mysql.MYSQL_TYPE_LONGLONG, make([]byte, 8), 8, true},
		{mysql.MYSQL_TYPE_DOUBLE, make([]byte, 7), 0, false},
		{mysql.MYSQL_TYPE_DATETIME, []byte{4, 1, 2, 3, 4}, 5, true},
		{mysql.MYSQL_TYPE_DATETIME, []byte{7, 1}, 0, false},
		{mysql.MYSQL_TYPE_DATE, nil, 0, false},
		{mysql.MYSQL_TYPE_VAR_STRING, []byte{2, 'a', 'b', 'c'}, 3, true},
		{mysql.MYSQL_TYPE_BLOB, []byte{0xfc, 2, 0, 'a', 'b'}, 5, true},
		{mysql.MYSQL_TYPE_BLOB, []byte{0xfc, 9}, 0, false},
		{mysql.MYSQL_TYPE_BLOB, []byte{0xfb}, 0, false},
		{mysql.MYSQL_TYPE_NULL, nil, 0, true},
	} {
		got, ok := binaryValueSize(c.typ, c.b)
		if got != c.want || ok != c.ok {
			t.Errorf("binaryValueSize(%d, %x) = %d, %v; want %d, %v", c.typ, c.b, got, ok, c.want, c.ok)
		}
	}
}

// messages splits a client stream into command messages (continuation
// packets joined): the reference the fuzz test compares the gate with.
// It stops at a cut packet.
func messages(in []byte) [][]byte {
	var out [][]byte
	var cur []byte
	for len(in) >= 4 {
		n := packetLen(in)
		if len(in) < 4+n {
			break
		}
		cur = append(cur, in[4:4+n]...)
		in = in[4+n:]
		if n < 0xffffff {
			out = append(out, cur)
			cur = nil
		}
	}
	return out
}

// FuzzExecFix feeds arbitrary client byte streams through the gate, as
// go-mysql reads it. It must never panic, hand go-mysql only packets it
// can frame and small, and allocate in proportion to what arrived. With no
// statement known it must hand on every command unchanged: COM_QUERY,
// COM_STMT_PREPARE and COM_STMT_EXECUTE through the session (command,
// exec), the rest as they came, an empty packet as COM_SLEEP, long data
// swallowed.
func FuzzClientConn(f *testing.F) {
	types := []byte{mysql.MYSQL_TYPE_LONG, 0}
	f.Add(execPacket(0, 1, 1, false, nil, []byte{1, 0, 0, 0}), uint8(1))
	f.Add(append(execPacket(0, 1, 1, true, types, []byte{1, 0, 0, 0}), execPacket(0, 1, 1, false, nil, []byte{2, 0, 0, 0})...), uint8(1))
	f.Add([]byte{1, 0, 0, 0, mysql.COM_QUIT}, uint8(0))
	f.Add([]byte{0, 0, 0, 0, 3, 0, 0, 0, mysql.COM_QUERY, 'a', 'b'}, uint8(0))
	f.Add([]byte{3, 0, 0, 0, mysql.COM_STMT_EXECUTE, 1}, uint8(3))
	f.Add(append(longDataPacket(1, 0, []byte("abc")), execPacket(0, 1, 2, true, []byte{mysql.MYSQL_TYPE_BLOB, 0, mysql.MYSQL_TYPE_LONG, 0}, []byte{1, 0, 0, 0})...), uint8(1))
	f.Add([]byte{0xfe, 0xff, 0xff, 0, mysql.COM_QUERY, 1, 2}, uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, n uint8) {
		lim := testLimits
		lim.maxPacket = 1 << 20
		var got []seen
		var err error
		alloc := allocated(func() {
			got, _, _, err = runGate(map[uint32]*stmtParams{}, lim, &byteBudget{limit: 1 << 20}, bytes.NewReader(in))
		})
		if alloc > uint64(8*len(in))+256<<10 {
			t.Fatalf("%d bytes in, %d allocated", len(in), alloc)
		}
		for _, g := range got {
			switch g.payload[0] {
			case mysql.COM_QUERY, mysql.COM_STMT_PREPARE, mysql.COM_STMT_EXECUTE:
			default:
				if len(g.payload) > maxOtherCommand {
					t.Fatalf("a %d-byte command 0x%02x was read", len(g.payload), g.payload[0])
				}
			}
		}
		if err == nil {
			var want [][]byte
			for _, m := range messages(in) {
				switch {
				case len(m) == 0:
					want = append(want, []byte{mysql.COM_SLEEP})
				case m[0] == mysql.COM_STMT_SEND_LONG_DATA:
				case len(m) > maxOtherCommand && m[0] != mysql.COM_QUERY && m[0] != mysql.COM_STMT_PREPARE && m[0] != mysql.COM_STMT_EXECUTE:
					// answered by the gate, dropped
				default:
					want = append(want, m)
				}
			}
			if len(want) != len(got) {
				t.Fatalf("%d commands handed on, %d sent", len(got), len(want))
			}
			for i, g := range got {
				if hand := g.payload; !bytes.Equal(hand, want[i]) {
					t.Fatalf("command %d handed on as %x, sent %x", i, hand, want[i])
				}
			}
		}
		params := map[uint32]*stmtParams{1: {n: int(n%9) + 1}}
		_, _, _, _ = runGate(params, lim, &byteBudget{limit: 1 << 20}, bytes.NewReader(in))
	})
}

// TestGateMetersCommands: a command counts in the gomaxprocs meter from
// go-mysql's reading it until the handler finished it; the wait for the
// next command does not; a second client's command begun meanwhile counts
// as overlapped.
func TestGateMetersCommands(t *testing.T) {
	var m procs.Meter
	gate := func(in []byte) *clientConn {
		g := newClientConn(&fakeConn{r: bytes.NewReader(in)}, 0, nil, testLimits, nil, func(string) {})
		g.meter = &m
		return g
	}
	a := gate(append(packet(0, []byte("\x03SELECT 1")), packet(0, []byte("\x03SELECT 2"))...))
	b := gate(packet(0, []byte("\x03SELECT 3")))
	if w := m.Read(); w != (procs.Window{}) {
		t.Fatalf("before any command: %+v", w)
	}
	if _, _, err := readCmd(a); err != nil {
		t.Fatal(err)
	}
	if w := m.Read(); w != (procs.Window{Commands: 1}) {
		t.Fatalf("a's first command read: %+v, want 1 command, none overlapped", w)
	}
	if _, _, err := readCmd(b); err != nil { // while a's runs
		t.Fatal(err)
	}
	if w := m.Read(); w != (procs.Window{Commands: 2, Overlapped: 1}) {
		t.Fatalf("b's command during a's: %+v, want 2 commands, 1 overlapped", w)
	}
	a.finished()
	b.finished()
	b.finished() // a second call ends nothing
	if _, _, err := readCmd(a); err != nil {
		t.Fatal(err)
	}
	if w := m.Read(); w != (procs.Window{Commands: 3, Overlapped: 1}) {
		t.Fatalf("a's second command alone: %+v, want 3 commands, 1 overlapped", w)
	}
	a.finished()
	if _, _, err := readCmd(a); !errors.Is(err, io.EOF) {
		t.Fatalf("end of a's stream: %v", err)
	}
	a.finished()
	if w := m.Read(); w.Commands != 3 {
		t.Fatalf("the end of the stream counted as a command: %+v", w)
	}
	m.Begin() // a command alone again: nothing was left active
	m.End()
	if w := m.Read(); w != (procs.Window{Commands: 4, Overlapped: 1}) {
		t.Fatalf("a command after all finished: %+v, want it alone", w)
	}
}

// readCmd reads c's next command as the session's loop does.
func readCmd(c *clientConn) (uint8, []byte, error) {
	p, err := c.readCommand()
	return c.seq, p, err
}

// TestWritePacketSplitsLargePayload: a payload of 0xffffff bytes or more
// (a backend's joined packet, FrameReader.Next) goes to the client as
// protocol packets of at most 0xffffff bytes with consecutive sequence
// numbers, an exact multiple ended by an empty packet.
func TestWritePacketSplitsLargePayload(t *testing.T) {
	for _, n := range []int{mysql.MaxPayloadLen - 1, mysql.MaxPayloadLen, mysql.MaxPayloadLen + 10} {
		fc := &fakeConn{r: bytes.NewReader(nil)}
		c := newClientConn(fc, 0, nil, testLimits, nil, func(string) {})
		c.seq = 3
		data := make([]byte, 4+n)
		for i := range n {
			data[4+i] = byte(i)
		}
		if err := c.writePacket(data); err != nil || c.Flush() != nil {
			t.Fatal(err)
		}
		out := fc.w.Bytes()
		var got []byte
		seq := byte(3)
		for len(out) > 0 {
			l := packetLen(out)
			if out[3] != seq {
				t.Fatalf("n=%d: packet seq %d, want %d", n, out[3], seq)
			}
			got = append(got, out[4:4+l]...)
			out = out[4+l:]
			seq++
			if l < mysql.MaxPayloadLen {
				break
			}
		}
		if len(out) != 0 || len(got) != n || got[n-1] != byte(n-1) {
			t.Fatalf("n=%d: %d payload bytes read back, %d left over", n, len(got), len(out))
		}
		if want := byte(3 + 1 + n/mysql.MaxPayloadLen); seq != want || c.seq != want {
			t.Fatalf("n=%d: next seq %d (conn %d), want %d", n, seq, c.seq, want)
		}
	}
}
