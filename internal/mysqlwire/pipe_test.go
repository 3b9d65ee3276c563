package mysqlwire

import (
	"errors"
	"net"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/packet"
)

// answer frames payloads as the packets of a response (sequence 1 on).
func answer(payloads ...[]byte) []byte {
	var b []byte
	for i, p := range payloads {
		b = append(b, byte(len(p)), byte(len(p)>>8), byte(len(p)>>16), byte(i+1))
		b = append(b, p...)
	}
	return b
}

// readAnswer runs ReadExecutedAnswer on a connection that receives in.
func readAnswer(in []byte, caps Caps) (string, error) {
	a, b := net.Pipe()
	go func() {
		_, _ = a.Write(in)
		a.Close()
	}()
	defer b.Close()
	c := &client.Conn{Conn: packet.NewConn(b)}
	set, err := ReadExecutedAnswer(c, caps)
	if err != nil {
		return "", err
	}
	return set.String(), nil
}

func TestReadExecutedAnswer(t *testing.T) {
	const uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	row := append([]byte{byte(len(uuid + ":1-5"))}, uuid+":1-5"...)
	col := []byte("\x03def\x00\x00\x00\x1c@@GLOBAL.gtid_executed\x00\x0c\x21\x00\x00\x00\x00\x00\xfd\x00\x00\x1f\x00\x00")
	eof := []byte{0xfe, 0, 0, 2, 0}
	okEnd := []byte{0xfe, 0, 0, 2, 0, 0, 0}
	errPkt := append([]byte{0xff, 0x2f, 0x04, '#', 'H', 'Y', '0', '0', '0'}, "boom"...)
	for _, c := range []struct {
		name string
		in   []byte
		caps Caps
		want string
		code uint16 // a server error
		fail bool   // another error
	}{
		{name: "classic", in: answer([]byte{1}, col, eof, row, eof), want: uuid + ":1-5"},
		{name: "deprecate-eof", in: answer([]byte{1}, col, row, okEnd), caps: Caps{DeprecateEOF: true}, want: uuid + ":1-5"},
		{name: "empty set", in: answer([]byte{1}, col, eof, []byte{0}, eof), want: ""},
		{name: "server error", in: answer(errPkt), code: 1071},
		{name: "error after columns", in: answer([]byte{1}, col, eof, errPkt), code: 1071},
		{name: "no row", in: answer([]byte{1}, col, eof, eof), fail: true},
		{name: "bad set", in: answer([]byte{1}, col, eof, []byte{3, 'x', 'y', 'z'}, eof), fail: true},
		{name: "cut", in: answer([]byte{1}, col, eof)[:20], fail: true},
		{name: "bad count", in: answer([]byte{0xfc}), fail: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := readAnswer(c.in, c.caps)
			var me *mysql.MyError
			switch {
			case c.code != 0:
				if !errors.As(err, &me) || me.Code != c.code {
					t.Fatalf("err %v, want server error %d", err, c.code)
				}
			case c.fail:
				if err == nil || errors.As(err, &me) {
					t.Fatalf("got %q, %v; want a non-server error", got, err)
				}
			case err != nil || got != c.want:
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestQueryPacket(t *testing.T) {
	p := QueryPacket(Caps{}, ExecutedQuery)
	if n := int(p[0]) | int(p[1])<<8 | int(p[2])<<16; n != len(p)-4 || p[3] != 0 || p[4] != mysql.COM_QUERY || string(p[5:]) != ExecutedQuery {
		t.Fatalf("plain packet %q", p)
	}
	q := QueryPacket(Caps{QueryAttributes: true}, ExecutedQuery)
	if n := int(q[0]); n != len(q)-4 || q[5] != 0 || q[6] != 1 || string(q[7:]) != ExecutedQuery {
		t.Fatalf("query-attributes packet %q", q)
	}
}

// FuzzReadExecutedAnswer: any bytes from the server give a set or an
// error, never a panic.
func FuzzReadExecutedAnswer(f *testing.F) {
	const set = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"
	f.Add(answer([]byte{1}, []byte("\x03def"), []byte{0xfe, 0, 0, 2, 0}, append([]byte{byte(len(set))}, set...), []byte{0xfe, 0, 0, 2, 0}), false)
	f.Add(answer([]byte{1}, []byte("\x03def"), append([]byte{byte(len(set))}, set...), []byte{0xfe, 0, 0, 2, 0, 0, 0}), true)
	f.Add(answer([]byte{0xff, 1, 2}), false)
	f.Fuzz(func(t *testing.T, in []byte, deprecateEOF bool) {
		_, _ = readAnswer(in, Caps{DeprecateEOF: deprecateEOF})
	})
}

// recordConn records writes.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (r *recordConn) Write(b []byte) (int, error) {
	r.writes = append(r.writes, append([]byte(nil), b...))
	return len(b), nil
}

func TestPipeConnAppendsAfterTheLastPacket(t *testing.T) {
	rec := &recordConn{}
	p := &PipeConn{Conn: rec}
	wm := QueryPacket(Caps{}, ExecutedQuery)
	p.next = wm
	full := make([]byte, 4+0xffffff)
	full[0], full[1], full[2] = 0xff, 0xff, 0xff
	last := []byte{1, 0, 0, 1, 'x'}
	for _, b := range [][]byte{full, last} {
		if n, err := p.Write(b); n != len(b) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if len(rec.writes) != 2 || len(rec.writes[0]) != len(full) || string(rec.writes[1]) != string(append(last, wm...)) || p.next != nil {
		t.Fatalf("writes %d, second %q, next %q", len(rec.writes), rec.writes[len(rec.writes)-1], p.next)
	}
	// Nothing pending: writes pass unchanged.
	if _, err := p.Write(last); err != nil || string(rec.writes[2]) != string(last) {
		t.Fatalf("plain write %q, %v", rec.writes[2], err)
	}
}
