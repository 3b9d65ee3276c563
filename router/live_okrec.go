package router

import (
	"errors"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/causallab/causallab/internal/okpacket"
)

// The router parses a write's GTID and session state changes from its own
// copy of the OK packet (package okpacket), never from go-mysql's
// Result.SessionTracking: go-mysql v1.16.0 returns the response buffer to a
// process-wide pool before Execute returns, so under concurrency those
// strings can hold another connection's bytes (TestLive/shared-pool saw
// it). The names below are thin adapters over okpacket for the router's
// own code.

// recConn is the router's handle on a connection's okpacket.Recorder.
type recConn struct{ r *okpacket.Recorder }

// recorder installs (idempotently) a recorder under c.
func recorder(c *client.Conn) recConn { return recConn{okpacket.Install(c)} }

// start begins recording (dropping what was recorded before).
func (r recConn) start() { r.r.Start() }

// stop ends recording and returns the bytes read since start (valid until
// the next start).
func (r recConn) stop() []byte { return r.r.Stop() }

// okTracking is what the router needs from the last OK packet of a
// response.
type okTracking struct {
	// gtid is the session-tracking GTID text ("" when none).
	gtid string
	// stateChanged: the server reported a session state change.
	stateChanged bool
	// vars holds tracked system variables.
	vars map[string]string
}

// errNoOK: the response did not end with an OK packet (okpacket.ErrNoOK).
var errNoOK = okpacket.ErrNoOK

// parseLastOK is okpacket.ParseLastOK.
func parseLastOK(resp []byte) (okTracking, error) {
	tr, err := okpacket.ParseLastOK(resp)
	return okTracking{gtid: tr.GTID, stateChanged: tr.StateChanged, vars: tr.Vars}, err
}

// ResponseRecorder records a go-mysql client connection's responses so
// the GTID of a write is read from a private copy of the OK packet rather
// than from Result.SessionTracking (see package okpacket). For callers
// that run writes on their own connections and report them with
// RecordAck (the proxy).
type ResponseRecorder struct{ r *okpacket.Recorder }

// RecordResponses installs a recorder under c (idempotent). Call it before
// the statement whose response is needed.
func RecordResponses(c *client.Conn) *ResponseRecorder {
	return &ResponseRecorder{okpacket.Install(c)}
}

// Start begins recording one statement's response.
func (r *ResponseRecorder) Start() { r.r.Start() }

// LastOK stops recording and returns the session-tracking GTID of the
// response's last OK packet ("" when it carried none or ended otherwise,
// e.g. a result set), and whether it reported a session state change.
func (r *ResponseRecorder) LastOK() (gtid string, stateChanged bool, err error) {
	tr, err := r.r.LastOK()
	if errors.Is(err, okpacket.ErrNoOK) {
		return "", false, nil
	}
	return tr.GTID, tr.StateChanged, err
}
