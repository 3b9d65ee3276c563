package router

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
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

func TestParseLastOK(t *testing.T) {
	g := "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
	state := trackEntry(mysql.SESSION_TRACK_STATE_CHANGE, mysql.PutLengthEncodedString([]byte("1")))
	vars := trackEntry(mysql.SESSION_TRACK_SYSTEM_VARIABLES,
		append(mysql.PutLengthEncodedString([]byte("session_track_gtids")), mysql.PutLengthEncodedString([]byte("OWN_GTID"))...))
	changed := uint16(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_SESSION_STATE_CHANGED)
	eof := frame([]byte{mysql.EOF_HEADER, 0, 0, 2, 0})
	cases := []struct {
		name  string
		resp  []byte
		gtid  string
		state bool
		vars  bool
		err   bool
		noOK  bool
	}{
		{name: "gtid", resp: okPacket(changed, gtidEntry(g)), gtid: g},
		{name: "gtid and state", resp: okPacket(changed, append(gtidEntry(g), state...)), gtid: g, state: true},
		{name: "variables", resp: okPacket(changed, vars), vars: true},
		{name: "no tracking", resp: okPacket(mysql.SERVER_STATUS_AUTOCOMMIT, nil)},
		{name: "last of several (prepare then execute)", resp: append(append(frame([]byte{0, 1, 0, 0, 0, 0}), eof...), okPacket(changed, gtidEntry(g))...), gtid: g},
		{name: "result set ends with EOF", resp: append(okPacket(changed, gtidEntry(g)), eof...), noOK: true},
		{name: "empty", resp: nil, noOK: true},
		{name: "truncated", resp: okPacket(changed, gtidEntry(g))[:10], err: true},
		{name: "block longer than packet", resp: frame(append([]byte{0, 0, 0, byte(changed), byte(changed >> 8), 0, 0, 0}, 0x40, 3)), err: true},
		{name: "unknown gtid format", resp: okPacket(changed, trackEntry(mysql.SESSION_TRACK_GTIDS, []byte{1, 0})), err: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := parseLastOK(c.resp)
			switch {
			case c.noOK:
				if err != errNoOK {
					t.Fatalf("err = %v, want errNoOK", err)
				}
				return
			case c.err:
				if err == nil || err == errNoOK {
					t.Fatalf("err = %v, want a parse error", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if tr.gtid != c.gtid || tr.stateChanged != c.state || (tr.vars["session_track_gtids"] == "OWN_GTID") != c.vars {
				t.Errorf("got %+v", tr)
			}
		})
	}
}

func FuzzParseLastOK(f *testing.F) {
	changed := uint16(mysql.SERVER_SESSION_STATE_CHANGED)
	f.Add(okPacket(changed, gtidEntry("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")))
	f.Add(okPacket(0, nil))
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		_, _ = parseLastOK(b) // must not panic
		if string(in) != string(b) {
			t.Fatal("input modified")
		}
	})
}
