package mysqlwire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/packet"
)

// okPacket frames an OK packet payload with a session-tracking block.
func okPacket(status uint16, track []byte) []byte {
	p := []byte{mysql.OK_HEADER, 1, 0} // 1 row, insert id 0
	p = append(p, byte(status), byte(status>>8), 0, 0)
	p = append(p, 0) // empty info
	if status&mysql.SERVER_SESSION_STATE_CHANGED != 0 {
		p = append(p, mysql.PutLengthEncodedInt(uint64(len(track)))...)
		p = append(p, track...)
	}
	return frame(p)
}

func frame(p []byte) []byte {
	return append([]byte{byte(len(p)), byte(len(p) >> 8), byte(len(p) >> 16), 1}, p...)
}

func trackEntry(typ byte, data []byte) []byte {
	return append([]byte{typ}, mysql.PutLengthEncodedString(data)...)
}

func gtidEntry(g string) []byte {
	return trackEntry(mysql.SESSION_TRACK_GTIDS, append([]byte{0}, mysql.PutLengthEncodedString([]byte(g))...))
}

// resultEndOK is okPacket with the 0xFE header that ends a result set
// under CLIENT_DEPRECATE_EOF.
func resultEndOK(status uint16, track []byte) []byte {
	b := okPacket(status, track)
	b[4] = mysql.EOF_HEADER
	return b
}

// TestParseLastOKDeprecateEOF: the OK that ends a result set under
// CLIENT_DEPRECATE_EOF (header 0xFE) is parsed, an ordinary OK too, and a
// classic EOF packet is not an OK; ParseLastOK keeps refusing the 0xFE form.
func TestParseLastOKDeprecateEOF(t *testing.T) {
	g := "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23,b3c0ce6a-ecca-11f1-86a3-02fc00000001:1-7"
	changed := uint16(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_SESSION_STATE_CHANGED)
	rows := append(frame([]byte{1}), frame([]byte{1, '5'})...) // column count, a row (shape only)
	cases := []struct {
		name string
		resp []byte
		gtid string
		err  error
	}{
		{"result end with gtids", append(slices.Clone(rows), resultEndOK(changed, gtidEntry(g))...), g, nil},
		{"result end without tracking", append(slices.Clone(rows), resultEndOK(mysql.SERVER_STATUS_AUTOCOMMIT, nil)...), "", nil},
		{"plain ok", okPacket(changed, gtidEntry(g)), g, nil},
		{"classic eof", append(slices.Clone(rows), frame([]byte{mysql.EOF_HEADER, 0, 0, 2, 0})...), "", ErrNoOK},
		{"error packet", frame([]byte{0xff, 0x7a, 0x04, '#', 'H', 'Y', '0', '0', '0', 'x'}), "", ErrNoOK},
	}
	for _, c := range cases {
		in := slices.Clone(c.resp)
		tr, err := ParseLastOKDeprecateEOF(c.resp)
		if !bytes.Equal(in, c.resp) {
			t.Fatalf("%s: input modified", c.name)
		}
		if !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Fatalf("%s: err %v, want %v", c.name, err, c.err)
		}
		if tr.GTID != c.gtid {
			t.Fatalf("%s: GTID %q, want %q", c.name, tr.GTID, c.gtid)
		}
	}
	if _, err := ParseLastOK(resultEndOK(changed, gtidEntry(g))); !errors.Is(err, ErrNoOK) {
		t.Fatalf("ParseLastOK took a 0xFE packet: %v", err)
	}
	// A truncated 0xFE OK names what is wrong.
	short := resultEndOK(changed, gtidEntry(g))
	short = frame(short[4 : len(short)-5])
	if _, err := ParseLastOKDeprecateEOF(short); err == nil || errors.Is(err, ErrNoOK) {
		t.Fatalf("truncated session-tracking block: %v, want a malformed-packet error", err)
	}
}

func TestParseLastOK(t *testing.T) {
	g := "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
	state := trackEntry(mysql.SESSION_TRACK_STATE_CHANGE, mysql.PutLengthEncodedString([]byte("1")))
	vars := trackEntry(mysql.SESSION_TRACK_SYSTEM_VARIABLES,
		append(mysql.PutLengthEncodedString([]byte("session_track_gtids")), mysql.PutLengthEncodedString([]byte("OWN_GTID"))...))
	changed := uint16(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_SESSION_STATE_CHANGED)
	eof := frame([]byte{mysql.EOF_HEADER, 0, 0, 2, 0})
	withGTID := okPacket(changed, gtidEntry(g))
	// The OK payload of withGTID cut 5 bytes short, re-framed: the
	// session-tracking block's length runs past the packet.
	shortBlock := frame(withGTID[4 : len(withGTID)-5])
	cases := []struct {
		name  string
		resp  []byte
		gtid  string
		state bool
		vars  bool
		err   bool
		noOK  bool
	}{
		{name: "gtid", resp: withGTID, gtid: g},
		{name: "gtid and state", resp: okPacket(changed, append(gtidEntry(g), state...)), gtid: g, state: true},
		{name: "variables", resp: okPacket(changed, vars), vars: true},
		{name: "no tracking", resp: okPacket(mysql.SERVER_STATUS_AUTOCOMMIT, nil)},
		{name: "no state-change flag: block ignored", resp: frame(slices.Concat(withGTID[4:7], []byte{2, 0}, withGTID[9:]))},
		{name: "unknown entry type skipped", resp: okPacket(changed, append(trackEntry(0x7f, []byte("x")), gtidEntry(g)...)), gtid: g},
		{name: "last of several (prepare then execute)", resp: append(append(frame([]byte{0, 1, 0, 0, 0, 0}), eof...), withGTID...), gtid: g},
		{name: "result set ends with EOF", resp: slices.Concat(withGTID, eof), noOK: true},
		{name: "error packet", resp: frame([]byte{mysql.ERR_HEADER, 0x15, 0x04, '#', '2', '8', '0', '0', '0', 'x'}), noOK: true},
		{name: "empty", resp: nil, noOK: true},
		{name: "truncated", resp: withGTID[:10], err: true},
		{name: "trailing partial header", resp: slices.Concat(withGTID, []byte{1, 0}), err: true},
		{name: "short block", resp: shortBlock, err: true},
		{name: "block longer than packet", resp: frame(append([]byte{0, 0, 0, byte(changed), byte(changed >> 8), 0, 0, 0}, 0x40, 3)), err: true},
		{name: "unknown gtid format", resp: okPacket(changed, trackEntry(mysql.SESSION_TRACK_GTIDS, []byte{1, 0})), err: true},
		{name: "NULL affected rows", resp: frame([]byte{0, 0xfb, 0, 2, 0, 0, 0}), err: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := ParseLastOK(c.resp)
			switch {
			case c.noOK:
				if !errors.Is(err, ErrNoOK) {
					t.Fatalf("err = %v, want ErrNoOK", err)
				}
				return
			case c.err:
				if err == nil || errors.Is(err, ErrNoOK) {
					t.Fatalf("err = %v, want a parse error", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if tr.GTID != c.gtid || tr.StateChanged != c.state || (tr.Vars["session_track_gtids"] == "OWN_GTID") != c.vars {
				t.Errorf("got %+v", tr)
			}
		})
	}
}

// TestParseLastOKCopies: the parsed strings do not alias the recorded
// bytes (the recorder's buffer is reused by the next Start).
func TestParseLastOKCopies(t *testing.T) {
	g := "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
	resp := okPacket(mysql.SERVER_SESSION_STATE_CHANGED, gtidEntry(g))
	tr, err := ParseLastOK(resp)
	if err != nil {
		t.Fatal(err)
	}
	for i := range resp {
		resp[i] = 'X'
	}
	if tr.GTID != g {
		t.Fatalf("GTID = %q after overwriting the input, want %q", tr.GTID, g)
	}
}

func TestLenenc(t *testing.T) {
	for _, v := range []uint64{0, 250, 251, 0xffff, 0x10000, 0xffffff, 0x1000000, 1 << 62} {
		b := mysql.PutLengthEncodedInt(v)
		got, n, ok := LenencInt(b)
		if !ok || got != v || n != len(b) {
			t.Errorf("LenencInt(%x) = %d, %d, %v; want %d, %d, true", b, got, n, ok, v, len(b))
		}
		if _, _, ok := LenencInt(b[:len(b)-1]); len(b) > 1 && ok {
			t.Errorf("LenencInt(%x) accepted a short integer", b[:len(b)-1])
		}
	}
	for _, b := range [][]byte{nil, {0xfb}, {0xff}} {
		if _, _, ok := LenencInt(b); ok {
			t.Errorf("LenencInt(%x) ok, want not", b)
		}
	}
	s, n, ok := LenencStr([]byte{3, 'a', 'b', 'c', 'd'})
	if !ok || string(s) != "abc" || n != 4 {
		t.Errorf("LenencStr = %q, %d, %v", s, n, ok)
	}
	if _, _, ok := LenencStr([]byte{4, 'a', 'b', 'c'}); ok {
		t.Error("LenencStr accepted a string longer than its input")
	}
}

// TestRecorder: only bytes read between Start and Stop are kept, Start
// drops the previous recording, and InstallRecorder is idempotent.
func TestRecorder(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &client.Conn{Conn: packet.NewConn(a)}
	rec := InstallRecorder(c)
	if InstallRecorder(c) != rec {
		t.Fatal("InstallRecorder is not idempotent")
	}
	if c.Conn.Conn != net.Conn(rec) {
		t.Fatal("InstallRecorder did not put the recorder under the connection")
	}
	send := func(s string) {
		go func() { _, _ = b.Write([]byte(s)) }()
		buf := make([]byte, len(s))
		if _, err := io.ReadFull(rec, buf); err != nil {
			t.Fatal(err)
		}
	}
	send("before")
	rec.Start()
	send("one")
	if got := rec.Stop(); string(got) != "one" {
		t.Fatalf("recorded %q, want %q", got, "one")
	}
	send("between")
	rec.Start()
	send("two")
	send("three")
	if got := rec.Stop(); !bytes.Equal(got, []byte("twothree")) {
		t.Fatalf("recorded %q, want %q", got, "twothree")
	}
	ok := okPacket(mysql.SERVER_SESSION_STATE_CHANGED, gtidEntry("3e11fa47-71ca-11e1-9e33-c80aa9429562:7"))
	rec.Start()
	send(string(ok))
	tr, err := rec.LastOK()
	if err != nil || tr.GTID != "3e11fa47-71ca-11e1-9e33-c80aa9429562:7" {
		t.Fatalf("LastOK = %+v, %v", tr, err)
	}
	send("after")
	if got := rec.Stop(); len(got) != len(ok) {
		t.Fatalf("recording went on after LastOK: %d bytes, want %d", len(got), len(ok))
	}
}

// FuzzParseLastOK: no input panics the parser or is modified by it, and a
// parse either fails or yields copies. The seed corpus in testdata keeps
// the input that crashed the first version (go-mysql's length-encoded
// helpers indexed past short input).
func FuzzParseLastOK(f *testing.F) {
	changed := uint16(mysql.SERVER_SESSION_STATE_CHANGED)
	f.Add(okPacket(changed, gtidEntry("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")))
	f.Add(okPacket(changed, append(gtidEntry("3e11fa47-71ca-11e1-9e33-c80aa9429562:1"),
		trackEntry(mysql.SESSION_TRACK_STATE_CHANGE, mysql.PutLengthEncodedString([]byte("1")))...)))
	f.Add(okPacket(0, nil))
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Add(resultEndOK(changed, gtidEntry("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9")))
	f.Add(frame([]byte{mysql.EOF_HEADER, 0, 0, 2, 0}))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		_, _ = ParseLastOK(b) // must not panic
		_, _ = ParseLastOKDeprecateEOF(b)
		if !bytes.Equal(in, b) {
			t.Fatal("input modified")
		}
	})
}
