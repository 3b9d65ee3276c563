package proxy

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// execPacket builds a COM_STMT_EXECUTE packet for a statement with n
// parameters: with types when bound, values as given.
func execPacket(seq byte, id uint32, n int, bound bool, types, values []byte) []byte {
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
	p = append(p, values...)
	return append([]byte{byte(len(p)), byte(len(p) >> 8), byte(len(p) >> 16), seq}, p...)
}

// readAllFrom reads what execFixConn passes on for input.
func readAllFrom(t *testing.T, params map[uint32]*stmtParams, input []byte, counted *[]string) []byte {
	t.Helper()
	out, err := readAll(params, input, counted)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readAll is readAllFrom returning the error that ended the stream (nil for
// a clean EOF).
func readAll(params map[uint32]*stmtParams, input []byte, counted *[]string) ([]byte, error) {
	a, b := net.Pipe()
	go func() {
		_, _ = a.Write(input)
		a.Close()
	}()
	defer b.Close() // unblocks the writer when reading stopped early
	c := newExecFixConn(b, true, params, func(r string) { *counted = append(*counted, r) })
	var out bytes.Buffer
	buf := make([]byte, 7) // small reads exercise the partial-copy paths
	for {
		n, err := c.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}

func TestExecFixRewritesUnboundExecute(t *testing.T) {
	types := []byte{mysql.MYSQL_TYPE_LONG, 0, mysql.MYSQL_TYPE_VAR_STRING, 0}
	v1 := []byte{42, 0, 0, 0, 3, 'a', 'b', 'c'}
	v2 := []byte{7, 0, 0, 0, 1, 'z'}
	query := []byte{5, 0, 0, 0, mysql.COM_QUERY, 'S', 'E', 'L', ' '}
	var in []byte
	in = append(in, execPacket(0, 3, 2, true, types, v1)...)
	in = append(in, query...)
	in = append(in, execPacket(0, 3, 2, false, nil, v2)...)
	params := map[uint32]*stmtParams{3: {n: 2}}
	var counted []string
	got := readAllFrom(t, params, in, &counted)
	var want []byte
	want = append(want, execPacket(0, 3, 2, true, types, v1)...)
	want = append(want, query...)
	want = append(want, execPacket(0, 3, 2, true, types, v2)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("rewritten stream\n got %x\nwant %x", got, want)
	}
	if len(counted) != 0 {
		t.Fatalf("counted %v", counted)
	}
}

func TestExecFixPassesAndCountsWhatItCannotFix(t *testing.T) {
	v := []byte{1, 0, 0, 0}
	// Statement 9 never sent its types; statement 4 is unknown (no params
	// recorded): both pass unchanged, only the first is counted.
	in := append(execPacket(1, 9, 1, false, nil, v), execPacket(2, 4, 1, false, nil, v)...)
	params := map[uint32]*stmtParams{9: {n: 1}}
	var counted []string
	got := readAllFrom(t, params, in, &counted)
	if !bytes.Equal(got, in) {
		t.Fatalf("stream changed\n got %x\nwant %x", got, in)
	}
	if len(counted) != 1 || counted[0] != "types_never_sent" {
		t.Fatalf("counted %v, want [types_never_sent]", counted)
	}
}

func TestExecFixLeavesContinuationPacketsAlone(t *testing.T) {
	// A 0xffffff-byte packet is continued by the next one, whose first byte
	// is data, not a command, even when it equals COM_STMT_EXECUTE.
	big := make([]byte, 4+0xffffff)
	big[0], big[1], big[2], big[3] = 0xff, 0xff, 0xff, 0
	big[4] = mysql.COM_QUERY
	cont := execPacket(1, 3, 1, false, nil, []byte{1, 0, 0, 0})
	in := append(big, cont...)
	params := map[uint32]*stmtParams{3: {n: 1, types: []byte{mysql.MYSQL_TYPE_LONG, 0}}}
	var counted []string
	got := readAllFrom(t, params, in, &counted)
	if !bytes.Equal(got, in) {
		t.Fatalf("continuation rewritten (len %d vs %d)", len(got), len(in))
	}
}

// longDataPacket builds a COM_STMT_SEND_LONG_DATA packet.
func longDataPacket(id uint32, param uint16, data []byte) []byte {
	p := []byte{mysql.COM_STMT_SEND_LONG_DATA}
	p = binary.LittleEndian.AppendUint32(p, id)
	p = binary.LittleEndian.AppendUint16(p, param)
	p = append(p, data...)
	return append([]byte{byte(len(p)), byte(len(p) >> 8), byte(len(p) >> 16), 0}, p...)
}

func TestExecFixInlinesLongData(t *testing.T) {
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
	reset := []byte{5, 0, 0, 0, mysql.COM_STMT_RESET, 5, 0, 0, 0}
	in = append(in, longDataPacket(5, 1, []byte("dropped"))...)
	in = append(in, reset...)
	in = append(in, execPacket(0, 5, 3, true, types, again)...)
	params := map[uint32]*stmtParams{5: {n: 3}}
	var counted []string
	got := readAllFrom(t, params, in, &counted)
	var want []byte
	want = append(want, execPacket(0, 5, 3, true, types, []byte{42, 0, 0, 0, 12, 'h', 'e', 'l', 'l', 'o', ',', ' ', 'w', 'o', 'r', 'l', 'd', 2, 'x', 'y'})...)
	want = append(want, execPacket(0, 5, 3, true, types, again)...)
	want = append(want, reset...)
	want = append(want, execPacket(0, 5, 3, true, types, again)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("stream\n got %x\nwant %x", got, want)
	}
	if len(counted) != 0 {
		t.Fatalf("counted %v", counted)
	}
	// Long data for an unknown statement passes to go-mysql unchanged.
	unknown := longDataPacket(6, 0, []byte("z"))
	if got := readAllFrom(t, params, unknown, &counted); !bytes.Equal(got, unknown) {
		t.Fatalf("unknown statement's long data changed: %x", got)
	}
	// An execution whose other values cannot be parsed passes unchanged
	// and is counted.
	bad := execPacket(0, 5, 3, true, types, []byte{1, 0})
	in = append(longDataPacket(5, 1, []byte("v")), bad...)
	if got := readAllFrom(t, params, in, &counted); !bytes.Equal(got, bad) || len(counted) != 1 || counted[0] != "long_data_unparsable" {
		t.Fatalf("unparsable execution: %x, counted %v", got, counted)
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

// framed reports whether b is a whole sequence of MySQL packets.
func framed(b []byte) bool {
	for len(b) > 0 {
		if len(b) < 4 {
			return false
		}
		n := 4 + (int(b[0]) | int(b[1])<<8 | int(b[2])<<16)
		if len(b) < n {
			return false
		}
		b = b[n:]
	}
	return true
}

// FuzzExecFix feeds arbitrary client byte streams through execFixConn: it
// must never panic or lose bytes; with no statement known it must pass the
// stream unchanged, and with one known statement it may rewrite it (types
// put in, long data moved into executions) but must keep it well framed.
func FuzzExecFix(f *testing.F) {
	types := []byte{mysql.MYSQL_TYPE_LONG, 0}
	f.Add(execPacket(0, 1, 1, false, nil, []byte{1, 0, 0, 0}), uint8(1))
	f.Add(append(execPacket(0, 1, 1, true, types, []byte{1, 0, 0, 0}), execPacket(0, 1, 1, false, nil, []byte{2, 0, 0, 0})...), uint8(1))
	f.Add([]byte{1, 0, 0, 0, mysql.COM_QUIT}, uint8(0))
	f.Add([]byte{3, 0, 0, 0, mysql.COM_STMT_EXECUTE, 1}, uint8(3))
	f.Add(append(longDataPacket(1, 0, []byte("abc")), execPacket(0, 1, 2, true, []byte{mysql.MYSQL_TYPE_BLOB, 0, mysql.MYSQL_TYPE_LONG, 0}, []byte{1, 0, 0, 0})...), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, n uint8) {
		// A stream cut inside a packet ends with io.ErrUnexpectedEOF (as
		// go-mysql's own reader would), having passed a prefix of it.
		var counted []string
		plain, err := readAll(map[uint32]*stmtParams{}, in, &counted)
		if err != nil && err != io.ErrUnexpectedEOF {
			t.Fatal(err)
		}
		if err == nil && !bytes.Equal(plain, in) || err != nil && !bytes.HasPrefix(in, plain) {
			t.Fatalf("stream changed with no statement known (err %v):\n in %x\nout %x", err, in, plain)
		}
		params := map[uint32]*stmtParams{1: {n: int(n%9) + 1}}
		got, err2 := readAll(params, in, &counted)
		// A cut stream may end with io.EOF on one path and
		// io.ErrUnexpectedEOF on the other (a swallowed long-data packet
		// is read whole); a whole one must end cleanly on both.
		if framed(in) && (err2 == nil) != (err == nil) {
			t.Fatalf("errors differ: %v vs %v", err, err2)
		}
		if err == nil && framed(in) && !framed(got) {
			t.Fatalf("framing lost:\n in %x\nout %x", in, got)
		}
	})
}
