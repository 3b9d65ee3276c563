package mysqlwire

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// Recorder is a net.Conn that records the bytes read through it while
// recording is on (between Start and Stop or LastOK). It is safe for one
// statement at a time on its connection; its lock only orders Start/Stop
// against the reads of that statement.
type Recorder struct {
	net.Conn
	mu  sync.Mutex
	on  bool
	buf []byte
}

var _ net.Conn = (*Recorder)(nil)

// InstallRecorder puts a Recorder under c's packet connection, before any buffered
// reader sees the bytes of a response it must record, and returns it. It is
// idempotent: a connection that already has one gets the same Recorder.
func InstallRecorder(c *client.Conn) *Recorder {
	if r, ok := c.Conn.Conn.(*Recorder); ok {
		return r
	}
	r := WrapRecorder(c.Conn.Conn)
	c.Conn.Conn = r
	return r
}

// WrapRecorder returns a Recorder reading from conn (InstallRecorder for a go-mysql
// client connection).
func WrapRecorder(conn net.Conn) *Recorder { return &Recorder{Conn: conn} }

// Read implements net.Conn, keeping a copy of what it reads while on.
func (r *Recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if n > 0 {
		r.mu.Lock()
		if r.on {
			r.buf = append(r.buf, p[:n]...)
		}
		r.mu.Unlock()
	}
	return n, err
}

// Start begins recording one statement's response, dropping what was
// recorded before.
func (r *Recorder) Start() {
	r.mu.Lock()
	r.on, r.buf = true, r.buf[:0]
	r.mu.Unlock()
}

// Stop ends recording and returns the bytes read since Start. They are
// the Recorder's own buffer: valid until the next Start.
func (r *Recorder) Stop() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.buf
}

// LastOK stops recording and parses the recorded response's last packet
// (ParseLastOK): ErrNoOK when the response ended otherwise (a result set,
// an error, nothing recorded).
func (r *Recorder) LastOK() (Tracking, error) { return ParseLastOK(r.Stop()) }

// Tracking is the session tracking of an OK packet. Its strings are copies:
// they never alias the recorded bytes.
type Tracking struct {
	// GTID is the session-tracking GTID text ("" when none).
	GTID string
	// StateChanged: the server reported a session state change
	// (session_track_state_change).
	StateChanged bool
	// Vars holds tracked system variables (nil when none).
	Vars map[string]string
}

// ErrNoOK: the recorded response does not end with an OK packet (a result
// set ends with EOF or 0xFE, an error with 0xFF; or nothing was recorded).
// It is not a malformed packet: callers decide whether an OK was required.
var ErrNoOK = errors.New("mysqlwire: response does not end with an OK packet")

// ParseLastOK splits a recorded response into packets and parses the last
// one as an OK packet with session tracking (CLIENT_PROTOCOL_41 and
// CLIENT_SESSION_TRACK negotiated). A response that ends with another
// packet returns ErrNoOK; a truncated packet or a malformed OK packet
// returns an error naming the part that was wrong. resp is not modified.
func ParseLastOK(resp []byte) (Tracking, error) {
	last, err := lastPacket(resp)
	if err != nil {
		return Tracking{}, err
	}
	if len(last) < 7 || last[0] != mysql.OK_HEADER {
		return Tracking{}, ErrNoOK
	}
	return parseOK(last)
}

// ParseLastOKDeprecateEOF is ParseLastOK for a connection that negotiated
// CLIENT_DEPRECATE_EOF, where a result set ends with an OK packet whose
// header byte is 0xFE instead of an EOF packet: the last packet is parsed
// as an OK packet when its header is 0x00, or 0xFE with at least the 7
// bytes of an OK packet (a classic 5-byte EOF packet gives ErrNoOK). So
// the session tracking that ends a result set (with session_track_gtids
// set to ALL_GTIDS: the server's gtid_executed as the statement ended) can
// be read. resp is not modified.
func ParseLastOKDeprecateEOF(resp []byte) (Tracking, error) {
	last, err := lastPacket(resp)
	if err != nil {
		return Tracking{}, err
	}
	if len(last) < 7 || (last[0] != mysql.OK_HEADER && last[0] != mysql.EOF_HEADER) {
		return Tracking{}, ErrNoOK
	}
	return parseOK(last)
}

// lastPacket returns the payload of the last packet of a recorded
// response.
func lastPacket(resp []byte) ([]byte, error) {
	var last []byte
	for len(resp) >= 4 {
		n := int(resp[0]) | int(resp[1])<<8 | int(resp[2])<<16
		if len(resp) < 4+n {
			return nil, errors.New("mysqlwire: truncated packet in a recorded response")
		}
		last, resp = resp[4:4+n], resp[4+n:]
	}
	if len(resp) != 0 {
		return nil, errors.New("mysqlwire: truncated packet header in a recorded response")
	}
	return last, nil
}

// parseOK parses an OK packet's payload (header byte first).
func parseOK(last []byte) (Tracking, error) {
	var out Tracking
	bad := func(what string) (Tracking, error) {
		return Tracking{}, errors.New("mysqlwire: malformed OK packet: " + what)
	}
	p := last[1:]
	for range 2 { // affected rows, last insert id
		_, n, ok := LenencInt(p)
		if !ok {
			return bad("lengths")
		}
		p = p[n:]
	}
	if len(p) < 4 {
		return bad("status")
	}
	status := binary.LittleEndian.Uint16(p)
	p = p[4:] // status, warnings
	if len(p) == 0 {
		return out, nil
	}
	_, n, ok := LenencStr(p) // info
	if !ok {
		return bad("info")
	}
	p = p[n:]
	if status&mysql.SERVER_SESSION_STATE_CHANGED == 0 || len(p) == 0 {
		return out, nil
	}
	block, _, ok := LenencStr(p)
	if !ok {
		return bad("session-tracking block")
	}
	for p = block; len(p) > 0; {
		typ := p[0]
		data, n, ok := LenencStr(p[1:])
		if !ok {
			return bad("session-tracking entry")
		}
		p = p[1+n:]
		switch typ {
		case mysql.SESSION_TRACK_GTIDS:
			if len(data) < 1 || data[0] != 0 {
				return bad("unknown session-tracking GTID format")
			}
			g, _, ok := LenencStr(data[1:])
			if !ok {
				return bad("GTID")
			}
			out.GTID = string(g) // a copy
		case mysql.SESSION_TRACK_STATE_CHANGE:
			out.StateChanged = len(data) > 0 && data[len(data)-1] == '1'
		case mysql.SESSION_TRACK_SYSTEM_VARIABLES:
			name, n, ok := LenencStr(data)
			if !ok {
				return bad("variable name")
			}
			val, _, ok := LenencStr(data[n:])
			if !ok {
				return bad("variable value")
			}
			if out.Vars == nil {
				out.Vars = map[string]string{}
			}
			out.Vars[string(name)] = string(val)
		}
	}
	return out, nil
}

// LenencInt reads a length-encoded integer; n is the bytes consumed, ok is
// false when b is too short or starts with a NULL (0xfb) or ERR (0xff)
// marker. go-mysql's own helpers index past the end of short input (found
// by FuzzParseLastOK), hence these.
func LenencInt(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch b[0] {
	case 0xfc:
		n = 3
	case 0xfd:
		n = 4
	case 0xfe:
		n = 9
	case 0xfb, 0xff:
		return 0, 0, false
	default:
		return uint64(b[0]), 1, true
	}
	if len(b) < n {
		return 0, 0, false
	}
	for i := n - 1; i >= 1; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, n, true
}

// LenencStr reads a length-encoded string; s aliases b, n is the bytes
// consumed, ok is false when b is too short or the length is NULL/ERR.
func LenencStr(b []byte) (s []byte, n int, ok bool) {
	l, n, ok := LenencInt(b)
	if !ok || uint64(len(b)-n) < l {
		return nil, 0, false
	}
	return b[n : n+int(l)], n + int(l), true
}
