package proxy

import (
	"encoding/binary"
	"errors"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
)

// relayOut is what the proxy learnt from a relayed response.
type relayOut struct {
	// status is the server status of the last OK or EOF packet.
	status uint16
	// gtid is the session-tracking GTID of the response (cloned), if any.
	gtid string
	// serverErr is true when the server answered with an ERR packet (already
	// forwarded to the client).
	serverErr bool
	// code is the ERR packet's error code.
	code uint16
}

// errClientGone: writing to the client failed; the backend response was
// drained, the client connection must be closed.
var errClientGone = errors.New("proxy: client connection lost mid-response")

// relayError is a backend failure during a relay. partial tells whether
// some of the response was already written to the client (then the client
// connection cannot be used any more).
type relayError struct {
	err     *BackendError
	partial bool
}

func (e *relayError) Error() string { return e.err.Error() }
func (e *relayError) Unwrap() error { return e.err }

// relay sends a COM_QUERY to bc and streams the response packets to the
// client cc unchanged, except OK packets, which are re-encoded for the
// client's capabilities (the session-tracking block is forwarded only when
// the client negotiated CLIENT_SESSION_TRACK and asked for GTIDs). Several
// result sets (CALL) are relayed in turn. Rows are never buffered.
func relay(cc *server.Conn, bc *backendConn, query string, wantGTIDs bool) (relayOut, error) {
	var out relayOut
	data := append(bc.buf[:0], 0, 0, 0, 0, mysql.COM_QUERY)
	data = append(data, query...)
	bc.conn.ResetSequence()
	if err := bc.conn.WritePacket(data); err != nil {
		bc.broken = true
		return out, &relayError{err: backendErr(bc.b, "query", err)}
	}
	if cap(data) > 1<<20 {
		data = make([]byte, 0, 4096)
	}
	bc.buf = data[:0]

	written := false
	clientOK := true
	// write forwards one packet (with its 4-byte header room) to the client.
	write := func(pkt []byte) {
		if !clientOK {
			return
		}
		if err := cc.WritePacket(pkt); err != nil {
			clientOK = false
			return
		}
		written = true
	}
	read := func() ([]byte, error) {
		pkt, err := bc.conn.ReadPacketReuseMem(bc.buf[:4])
		if err != nil {
			bc.broken = true
			return nil, &relayError{err: backendErr(bc.b, "query", err), partial: written}
		}
		if len(pkt) == 4 {
			bc.broken = true
			return nil, &relayError{err: &BackendError{Backend: bc.b.Name, Op: "query", Msg: "empty packet"}, partial: written}
		}
		if cap(pkt) <= 1<<20 {
			bc.buf = pkt[:0]
		}
		return pkt, nil
	}
	for {
		pkt, err := read()
		if err != nil {
			return out, err
		}
		switch pkt[4] {
		case mysql.OK_HEADER:
			if err := relayOK(cc, bc, pkt, wantGTIDs, &out, write); err != nil {
				return out, err
			}
			if out.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return out, finish(clientOK)
			}
			continue
		case mysql.ERR_HEADER:
			out.serverErr = true
			if len(pkt) >= 7 {
				out.code = binary.LittleEndian.Uint16(pkt[5:7])
			}
			write(pkt)
			return out, finish(clientOK)
		case mysql.LocalInFile_HEADER:
			// LOAD DATA LOCAL: send the empty packet that ends the file and
			// relay the server's answer; the client's file is never read.
			bc.conn.Sequence = pkt[3] + 1
			if err := bc.conn.WritePacket([]byte{0, 0, 0, 0}); err != nil {
				bc.broken = true
				return out, &relayError{err: backendErr(bc.b, "query", err), partial: written}
			}
			continue
		}
		// A result set: column count, column definitions, EOF, rows, EOF.
		n, _, _ := mysql.LengthEncodedInt(pkt[4:])
		write(pkt)
		for i := uint64(0); i < n; i++ {
			if pkt, err = read(); err != nil {
				return out, err
			}
			write(pkt)
		}
		if pkt, err = read(); err != nil { // EOF after the columns
			return out, err
		}
		write(pkt)
		for {
			if pkt, err = read(); err != nil {
				return out, err
			}
			if pkt[4] == mysql.EOF_HEADER && len(pkt) < 4+9 {
				if len(pkt) >= 9 {
					out.status = binary.LittleEndian.Uint16(pkt[7:9])
				}
				write(pkt)
				break
			}
			if pkt[4] == mysql.ERR_HEADER {
				out.serverErr = true
				write(pkt)
				return out, finish(clientOK)
			}
			write(pkt)
		}
		if out.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
			return out, finish(clientOK)
		}
	}
}

func finish(clientOK bool) error {
	if !clientOK {
		return errClientGone
	}
	return nil
}

// relayOK parses an OK packet (captures status and GTID) and forwards it in
// the client's format.
func relayOK(cc *server.Conn, bc *backendConn, pkt []byte, wantGTIDs bool, out *relayOut, write func([]byte)) error {
	r := bc.conn.HandleOKPacket(pkt[4:])
	if r == nil {
		bc.broken = true
		return &relayError{err: &BackendError{Backend: bc.b.Name, Op: "query", Msg: "malformed OK packet"}}
	}
	out.status = r.Status
	if r.SessionTracking != nil && r.SessionTracking.GTID != "" {
		out.gtid = strings.Clone(r.SessionTracking.GTID)
	}
	clientTrack := cc.HasCapability(mysql.CLIENT_SESSION_TRACK)
	if clientTrack && (wantGTIDs || r.Status&mysql.SERVER_SESSION_STATE_CHANGED == 0) {
		write(pkt) // same format on both sides
		return nil
	}
	b := make([]byte, 4, 32+len(r.StatusMessage))
	b = append(b, mysql.OK_HEADER)
	b = append(b, mysql.PutLengthEncodedInt(r.AffectedRows)...)
	b = append(b, mysql.PutLengthEncodedInt(r.InsertId)...)
	st := r.Status &^ mysql.SERVER_SESSION_STATE_CHANGED
	b = append(b, byte(st), byte(st>>8), byte(r.Warnings), byte(r.Warnings>>8))
	if clientTrack {
		b = append(b, mysql.PutLengthEncodedString([]byte(r.StatusMessage))...)
	} else {
		b = append(b, r.StatusMessage...)
	}
	write(b)
	return nil
}
