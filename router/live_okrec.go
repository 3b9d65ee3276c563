package router

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// recConn records the bytes a go-mysql client connection reads while
// recording is on, so the router parses the OK packet's session tracking
// from its own copy.
//
// Why: go-mysql v1.16.0 reads a statement's response into a buffer from a
// process-wide sync.Pool (utils.ByteSliceGet in readResult) and returns it
// to the pool before Execute returns, while Result.SessionTracking's
// strings still alias it. Under concurrency another connection (any
// go-mysql user in the process) reuses the buffer before the caller can
// clone the GTID: TestLive/shared-pool (2,000 sessions) saw a session's
// GTID overwritten with another connection's "@@GLOBAL.gtid_executed"
// result. A corrupted GTID that still parsed would be a silent
// read-your-writes violation, so the token is never taken from go-mysql's
// result.
type recConn struct {
	net.Conn
	mu  sync.Mutex
	on  bool
	buf []byte
}

func (r *recConn) Read(p []byte) (int, error) {
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

// start begins recording (dropping what was recorded before).
func (r *recConn) start() {
	r.mu.Lock()
	r.on, r.buf = true, r.buf[:0]
	r.mu.Unlock()
}

// stop ends recording and returns the bytes read since start (valid until
// the next start).
func (r *recConn) stop() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.buf
}

// recorder installs a recConn under c (before any bufio reader sees
// bytes of a response it must record) and returns it.
func recorder(c *client.Conn) *recConn {
	if rc, ok := c.Conn.Conn.(*recConn); ok {
		return rc
	}
	rc := &recConn{Conn: c.Conn.Conn}
	c.Conn.Conn = rc
	return rc
}

// okTracking is what the router needs from the last OK packet of a
// response.
type okTracking struct {
	// gtid is the session-tracking GTID text ("" when none).
	gtid string
	// stateChanged: the server reported a session state change
	// (session_track_state_change).
	stateChanged bool
	// vars holds tracked system variables.
	vars map[string]string
}

var errNoOK = errors.New("router: response does not end with an OK packet")

// parseLastOK finds the last packet of a recorded response and parses it
// as an OK packet with session tracking (CLIENT_PROTOCOL_41 and
// CLIENT_SESSION_TRACK negotiated). A response that ends otherwise (a
// result set ends with EOF or 0xFE) returns errNoOK.
func parseLastOK(resp []byte) (okTracking, error) {
	var last []byte
	for len(resp) >= 4 {
		n := int(resp[0]) | int(resp[1])<<8 | int(resp[2])<<16
		if len(resp) < 4+n {
			return okTracking{}, errors.New("router: truncated packet in a recorded response")
		}
		last, resp = resp[4:4+n], resp[4+n:]
	}
	if len(resp) != 0 || len(last) < 7 || last[0] != mysql.OK_HEADER {
		return okTracking{}, errNoOK
	}
	var out okTracking
	bad := func(what string) (okTracking, error) {
		return okTracking{}, errors.New("router: malformed OK packet: " + what)
	}
	p := last[1:]
	for range 2 { // affected rows, last insert id
		_, n, ok := lenencInt(p)
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
	_, n, ok := lenencStr(p) // info
	if !ok {
		return bad("info")
	}
	p = p[n:]
	if status&mysql.SERVER_SESSION_STATE_CHANGED == 0 || len(p) == 0 {
		return out, nil
	}
	block, _, ok := lenencStr(p)
	if !ok {
		return bad("session-tracking block")
	}
	for p = block; len(p) > 0; {
		typ := p[0]
		data, n, ok := lenencStr(p[1:])
		if !ok {
			return bad("session-tracking entry")
		}
		p = p[1+n:]
		switch typ {
		case mysql.SESSION_TRACK_GTIDS:
			if len(data) < 1 || data[0] != 0 {
				return bad("unknown session-tracking GTID format")
			}
			g, _, ok := lenencStr(data[1:])
			if !ok {
				return bad("GTID")
			}
			out.gtid = string(g) // a copy
		case mysql.SESSION_TRACK_STATE_CHANGE:
			out.stateChanged = len(data) > 0 && data[len(data)-1] == '1'
		case mysql.SESSION_TRACK_SYSTEM_VARIABLES:
			name, n, ok := lenencStr(data)
			if !ok {
				return bad("variable name")
			}
			val, _, ok := lenencStr(data[n:])
			if !ok {
				return bad("variable value")
			}
			if out.vars == nil {
				out.vars = map[string]string{}
			}
			out.vars[string(name)] = string(val)
		}
	}
	return out, nil
}

// lenencInt reads a length-encoded integer (ok false when b is too short
// or starts with a NULL/ERR marker). go-mysql's own helpers index past the
// end of short input (found by FuzzParseLastOK).
func lenencInt(b []byte) (v uint64, n int, ok bool) {
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

// lenencStr reads a length-encoded string; n is the bytes consumed.
func lenencStr(b []byte) (s []byte, n int, ok bool) {
	l, n, ok := lenencInt(b)
	if !ok || uint64(len(b)-n) < l {
		return nil, 0, false
	}
	return b[n : n+int(l)], n + int(l), true
}

// ResponseRecorder records a go-mysql client connection's responses so
// the GTID of a write is read from a private copy of the OK packet rather
// than from Result.SessionTracking (which aliases a buffer go-mysql has
// already returned to a process-wide pool: see recConn). For callers that
// run writes on their own connections and report them with RecordAck.
type ResponseRecorder struct{ rc *recConn }

// RecordResponses installs a recorder under c (idempotent). Call it before
// the statement whose response is needed.
func RecordResponses(c *client.Conn) *ResponseRecorder { return &ResponseRecorder{rc: recorder(c)} }

// Start begins recording one statement's response.
func (r *ResponseRecorder) Start() { r.rc.start() }

// LastOK stops recording and returns the session-tracking GTID of the
// response's last OK packet ("" when it carried none or ended otherwise,
// e.g. a result set), and whether it reported a session state change.
func (r *ResponseRecorder) LastOK() (gtid string, stateChanged bool, err error) {
	tr, err := parseLastOK(r.rc.stop())
	if errors.Is(err, errNoOK) {
		return "", false, nil
	}
	return tr.gtid, tr.stateChanged, err
}
