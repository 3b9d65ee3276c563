package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// relayOut is what the proxy learnt from a relayed response.
type relayOut struct {
	// status is the server status of the last OK or EOF packet,
	// warnings its warning count.
	status   uint16
	warnings uint16
	// gtid is the session-tracking GTIDs of the response (cloned, joined
	// with commas when several results carried one), if any.
	gtid string
	// serverErr is true when the server answered with an ERR packet (already
	// forwarded to the client).
	serverErr bool
	// code is the ERR packet's error code.
	code uint16
	// readOnly: the response was the server's read-only refusal, held
	// back (relayReq.holdReadOnly).
	readOnly bool
	// watermark is the node's executed set read right after the command
	// (relayReq.watermark), unless wmErr says why it could not be read.
	watermark gtid.Set
	wmErr     error
	// tracked is the executed set the response's final OK packet carried
	// on an allGTIDs connection (session_track_gtids=ALL_GTIDS, cloned),
	// empty when it carried none; trackedInTrans: that OK's status said a
	// transaction was open.
	tracked        string
	trackedInTrans bool
	// wmFallback: the watermark was read with watermarkQuery after the
	// response because the final OK carried no usable set.
	wmFallback bool
	// stateChanged: an OK packet of the response carried
	// session_track_state_change's entry (a user or system variable, a
	// temporary table, a prepared statement, the schema changed, from a
	// stored program too).
	stateChanged bool
	// insertID: an OK packet of the response carried an insert id (the
	// statement may have changed the session's LAST_INSERT_ID()).
	insertID bool
	// recorded: relayReq.token recorded gtid as the session's write at
	// the final OK packet.
	recorded bool
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

// watermarkQuery reads a node's monotonic-reads watermark after a read
// (wmReader): gtid_executed joined with the replica's received set (mysqlwire.WatermarkQuery says why gtid_executed
// alone is not enough).
const watermarkQuery = mysqlwire.WatermarkQuery

// relayReq is one command relayed raw from a backend to the client.
type relayReq struct {
	// ctx is the client session's: its end cuts the backend socket
	// (backendConn.bind).
	ctx context.Context
	// sentAt is when the command is sent (backendConn.used): the caller's
	// clock reading when it has one, else (zero) the relay reads the clock.
	sentAt time.Time
	// op names the command in errors ("query", "execute").
	op string
	// cmd is the command's payload (command byte onward) in pieces, sent
	// without being copied together when it is big (send).
	cmd [][]byte
	// wantGTIDs: forward session-tracking GTIDs to the client.
	wantGTIDs bool
	// watermark: the node's watermark after the command (relayOut), read
	// by wmRead once the response was relayed and flushed to the client.
	watermark bool
	// flush sends the client's buffered response before the watermark's
	// answer is read (nil: nothing to flush).
	flush func() error
	// file reads the client's next LOAD DATA LOCAL INFILE packet
	// (clientConn.filePacket). Nil: the server's request for a local
	// file is answered with an empty file, the client never asked.
	file func() ([]byte, byte, error)
	// dropTracked: ignore the final OK's ALL_GTIDS set (Server.dropTracked).
	dropTracked bool
	// wmRead, with watermark, reads the watermark after the response:
	// the node's reader (wmReader), so nothing runs on the session's
	// connection after the read (on an allGTIDs connection, only when
	// the final OK carries no usable set).
	wmRead func(context.Context) (gtid.Set, error)
	// rename: column names to put CONNECTION_ID() back in
	// (withConnectionID).
	rename columnRename
	// holdReadOnly: a read on a replica; the server's read-only refusal
	// as the response's first packet (nothing ran: a stored function
	// that writes) is not written (relayOut.readOnly).
	holdReadOnly bool
	// token, when set (session.tokenTracker), is called at the final OK
	// packet of the response with its write GTIDs (relayOut.gtid): it
	// records them and returns the session's token when it changed,
	// which the OK then carries as the tracked system variable
	// causal_token.
	token func(gtids string) (string, bool)
}

// relay sends the session's statement query to bc as a COM_QUERY and
// streams the response to the client (see relayCmd).
func (s *session) relay(bc *backendConn, query string, file func() ([]byte, byte, error)) (relayOut, error) {
	return relayQuery(s.cc, bc, query, relayReq{ctx: s.ctx, op: "query", wantGTIDs: s.state.wantGTIDs, file: file, rename: s.rename, token: s.tokenTracker()})
}

// relayQuery relays the COM_QUERY of query with req's options.
func relayQuery(cc *clientConn, bc *backendConn, query string, req relayReq) (relayOut, error) {
	bc.head[0] = mysql.COM_QUERY
	bc.pieces = append(bc.pieces[:0], bc.head[:1], unsafe.Slice(unsafe.StringData(query), len(query)))
	req.cmd = bc.pieces
	out, err := relayCmd(cc, bc, req)
	clear(bc.pieces) // no reference to the query is kept
	return out, err
}

// relayCmd sends a command (COM_QUERY, or a COM_STMT_EXECUTE whose binary
// result has the same framing) to bc and streams the response packets to
// the client cc unchanged, except OK packets, which are re-encoded for the
// client's capabilities (the session-tracking block is forwarded only when
// the client negotiated CLIENT_SESSION_TRACK and asked for GTIDs). Several
// result sets (CALL) are relayed in turn. Rows are never buffered. With
// req.watermark, the node's executed set read right after the command is
// in relayOut.watermark (or the reason it is not, in relayOut.wmErr).
func relayCmd(cc *clientConn, bc *backendConn, req relayReq) (relayOut, error) {
	bc.used = req.sentAt
	if bc.used.IsZero() {
		bc.used = time.Now()
	}
	stop, err := bc.bind(req.ctx)
	if err != nil {
		return relayOut{}, err // a KILL QUERY reached the command: not sent
	}
	defer bc.unbind(stop)
	if err := bc.send(req.cmd); err != nil {
		bc.broken = true
		return relayOut{}, &relayError{err: backendErr(bc.b, req.op, err)}
	}
	out, err := relayResponse(cc, bc, req)
	if !req.watermark || bc.broken {
		return out, err
	}
	if bc.allGTIDs && out.tracked != "" && !out.trackedInTrans && !req.dropTracked {
		// The final OK's ALL_GTIDS set: the server fills it in after
		// the statement ran, when its autocommit transaction has ended,
		// so it contains everything the read saw. A set the proxy
		// cannot read falls through to the reader (counted as the
		// fallback).
		if set, perr := gtid.Parse(out.tracked); perr == nil {
			out.watermark = set
			return out, err
		}
	}
	// The command's response is complete: let the client have it while
	// the node's reader reads the watermark on its own connection.
	if req.flush != nil && err == nil {
		_ = req.flush() // a failure surfaces at the client's next read
	}
	out.wmFallback = bc.allGTIDs
	if req.wmRead == nil {
		out.wmErr = backendErr(bc.b, "watermark", errNoWatermarkReader)
		return out, err
	}
	out.watermark, out.wmErr = req.wmRead(req.ctx)
	return out, err
}

// errNoWatermarkReader: a read asked for a watermark on a node without a
// reader (Server.replicaWM is built for every watermark_source that reads
// one after a replica read).
var errNoWatermarkReader = errors.New("no watermark reader for this node")

// smallCommand is the size up to which a command's pieces are copied into
// one packet buffer and sent in one write.
const smallCommand = 64 << 10

// send writes the command whose payload is cmd's pieces (sequence 0): in
// one write when the command is small, else framed around its pieces
// without copying them (split into 16 MiB packets as the protocol does).
func (bc *backendConn) send(cmd [][]byte) error {
	c := bc.conn
	n := 0
	for _, p := range cmd {
		n += len(p)
	}
	if n >= smallCommand && c.Compression == mysql.MYSQL_COMPRESS_NONE {
		bufs, packets := framePackets(cmd, n)
		_, err := bufs.WriteTo(c.Conn)
		// The response continues the command's sequence (past its split
		// packets).
		c.Sequence = uint8(packets)
		return err
	}
	if c.Compression != mysql.MYSQL_COMPRESS_NONE {
		c.ResetSequence()
		data := append(bc.buf[:0], 0, 0, 0, 0)
		for _, p := range cmd {
			data = append(data, p...)
		}
		err := c.WritePacket(data)
		bc.keepBuf(data)
		return err
	}
	data := append(bc.buf[:0], byte(n), byte(n>>8), byte(n>>16), 0)
	for _, p := range cmd {
		data = append(data, p...)
	}
	_, err := c.Conn.Write(data)
	bc.keepBuf(data)
	c.Sequence = 1 // the response's first packet
	return err
}

// framePackets frames a payload of n bytes held in pieces as protocol
// packets (sequence 0 on): the 4-byte headers and the pieces' own bytes,
// sliced at every 0xffffff bytes, with the empty packet that ends a
// payload of an exact multiple. It returns the buffers and the number of
// packets.
func framePackets(pieces [][]byte, n int) (net.Buffers, int) {
	var bufs net.Buffers
	var cur []byte
	next, seq := 0, 0
	for {
		size := min(n, mysql.MaxPayloadLen)
		bufs = append(bufs, []byte{byte(size), byte(size >> 8), byte(size >> 16), byte(seq)})
		seq++
		for need := size; need > 0; {
			for len(cur) == 0 {
				cur = pieces[next]
				next++
			}
			k := min(need, len(cur))
			bufs = append(bufs, cur[:k])
			cur, need = cur[k:], need-k
		}
		n -= size
		if size < mysql.MaxPayloadLen {
			return bufs, seq
		}
	}
}

// appendPacket appends payload as one packet with sequence number 0.
func appendPacket(dst, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, byte(n), byte(n>>8), byte(n>>16), 0)
	return append(dst, payload...)
}

// keepBuf keeps data's array as the connection's packet buffer unless it
// grew too big to keep.
func (bc *backendConn) keepBuf(data []byte) {
	if cap(data) <= 1<<20 {
		bc.buf = data[:0]
	} else {
		bc.buf = make([]byte, 0, 4096)
	}
}

// relayResponse streams one command's response from bc to the client:
// OK, ERR, a LOCAL INFILE request, or result sets (several, for CALL),
// each dispatched to the step that relays it.
func relayResponse(cc *clientConn, bc *backendConn, req relayReq) (relayOut, error) {
	r := responseRelay{cc: cc, bc: bc, req: &req, clientOK: true}
	for {
		pkt, err := r.read()
		if err != nil {
			return r.out, err
		}
		var last bool
		switch pkt[4] {
		case mysql.OK_HEADER:
			if err := relayOK(cc, bc, pkt, &req, &r.out, r.write); err != nil {
				return r.out, err
			}
			last = r.out.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0
		case mysql.ERR_HEADER:
			r.serverError(pkt)
			last = true
		case mysql.LocalInFile_HEADER:
			if err := r.localFile(pkt); err != nil {
				return r.out, err
			}
		default:
			if last, err = r.resultSet(pkt); err != nil {
				return r.out, err
			}
		}
		if last {
			return r.out, finish(r.clientOK)
		}
	}
}

// responseRelay is one response being relayed from bc to the client cc.
type responseRelay struct {
	cc  *clientConn
	bc  *backendConn
	req *relayReq
	out relayOut
	// written: some of the response went to the client; clientOK: no
	// write to the client failed (the rest is read and dropped).
	written, clientOK bool
}

// write forwards one packet (with its 4-byte header room) to the client.
func (r *responseRelay) write(pkt []byte) {
	if !r.clientOK {
		return
	}
	if err := r.cc.writePacket(pkt); err != nil {
		r.clientOK = false
		return
	}
	r.written = true
}

// read reads the backend's next packet (4 bytes of header room first),
// in place: valid until the next read (write copies it).
func (r *responseRelay) read() ([]byte, error) {
	bc := r.bc
	var (
		pkt []byte
		err error
	)
	if bc.frames != nil {
		pkt, err = bc.frames.Next(&bc.conn.Sequence)
	} else {
		pkt, err = bc.conn.ReadPacketReuseMem(bc.buf[:4])
	}
	if err != nil {
		bc.broken = true
		return nil, &relayError{err: backendErr(bc.b, r.req.op, err), partial: r.written}
	}
	if bc.watched {
		// The replica answers: from here on only backend_timeout
		// bounds it (a cut would close the client mid-result).
		bc.unwatch()
		if bc.unresponsive() {
			// The watchdog cut the connection as the answer arrived
			// (after this packet, before the unwatch): the rest of the
			// answer is lost, but nothing was written to the client,
			// so the read is decided again elsewhere (runFailed).
			bc.broken = true
			return nil, &relayError{err: backendErr(bc.b, r.req.op, errUnresponsive), partial: r.written}
		}
	}
	if len(pkt) == 4 {
		bc.broken = true
		return nil, &relayError{err: &BackendError{Backend: bc.b.Name, Op: r.req.op, Msg: "empty packet"}, partial: r.written}
	}
	if bc.frames == nil && cap(pkt) <= 1<<20 {
		bc.buf = pkt[:0]
	}
	return pkt, nil
}

// serverError relays the server's ERR packet, which ends the response.
func (r *responseRelay) serverError(pkt []byte) {
	if len(pkt) >= 7 {
		r.out.code = binary.LittleEndian.Uint16(pkt[5:7])
	}
	if r.req.holdReadOnly && !r.written && readOnlyRefusal(r.out.code, pkt) {
		r.out.readOnly = true
		return
	}
	r.out.serverErr = true
	r.write(pkt)
}

// readOnlyRefusal: ERR packet pkt (code its code) is a server's refusal
// to write because it is read-only: 1290 naming read_only or
// super_read_only (1290 names other options too), 1792 (a read-only
// transaction), 1836 (innodb_read_only).
func readOnlyRefusal(code uint16, pkt []byte) bool {
	switch code {
	case mysql.ER_OPTION_PREVENTS_STATEMENT:
		return bytes.Contains(pkt, []byte("read-only")) || bytes.Contains(pkt, []byte("read_only"))
	case mysql.ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION, mysql.ER_READ_ONLY_MODE:
		return true
	}
	return false
}

// localFile relays a LOAD DATA LOCAL INFILE exchange (relayLocalFile); the
// server's answer follows.
func (r *responseRelay) localFile(pkt []byte) error {
	if err := relayLocalFile(r.cc, r.bc, pkt, *r.req, r.write); err != nil {
		if errors.Is(err, errClientGone) {
			return err
		}
		return &relayError{err: backendErr(r.bc.b, r.req.op, err), partial: r.written}
	}
	r.written = r.written || r.req.file != nil
	return nil
}

// resultSet relays a result set whose first packet (the column count) is
// pkt: column definitions, EOF, rows, EOF (on an okEOF connection: no
// EOF after the columns and an OK packet with the 0xfe header at the end,
// each rewritten to the classic EOF packet for the client, eofFromOK).
// last: no more results follow.
func (r *responseRelay) resultSet(pkt []byte) (last bool, err error) {
	bc := r.bc
	n, _, _ := mysql.LengthEncodedInt(pkt[4:])
	r.write(pkt)
	for i := uint64(0); i < n; i++ {
		if pkt, err = r.read(); err != nil {
			return false, err
		}
		r.write(r.req.rename.apply(pkt))
	}
	if bc.okEOF {
		r.write(eofPacket(0, bc.status&^mysql.SERVER_SESSION_STATE_CHANGED))
	} else {
		if pkt, err = r.read(); err != nil { // EOF after the columns
			return false, err
		}
		r.write(pkt)
	}
	return r.rows()
}

// rows relays a result set's rows up to the EOF (or OK) that ends them,
// or the ERR that cuts them short; last: no more results follow.
func (r *responseRelay) rows() (last bool, err error) {
	bc := r.bc
	for {
		pkt, err := r.read()
		if err != nil {
			return false, err
		}
		switch {
		case bc.okEOF && pkt[4] == mysql.EOF_HEADER && len(pkt)-4 < mysql.MaxPayloadLen:
			// The OK that ends the result (a row starting with 0xfe
			// fills a whole packet).
			eof, err := eofFromOK(bc, pkt, &r.out)
			if err != nil {
				return false, err
			}
			r.write(eof)
			return r.out.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0, nil
		case !bc.okEOF && pkt[4] == mysql.EOF_HEADER && len(pkt) < 4+9:
			if len(pkt) >= 9 {
				r.out.warnings = binary.LittleEndian.Uint16(pkt[5:7])
				r.out.status = binary.LittleEndian.Uint16(pkt[7:9])
			}
			r.write(pkt)
			return r.out.status&mysql.SERVER_MORE_RESULTS_EXISTS == 0, nil
		case pkt[4] == mysql.ERR_HEADER:
			r.out.serverErr = true
			r.write(pkt)
			return true, nil
		}
		r.write(pkt)
	}
}

// relayLocalFile answers the server's LOCAL INFILE request pkt: with
// req.file, the request goes to the client and the file's packets, as the
// client sends them (each one read whole, at most max_allowed_packet),
// go to the server unchanged until the empty packet that ends it; without,
// the server gets an empty file. The server's answer follows (relayed by
// the caller). Sequence numbers continue on each side as MySQL's do.
func relayLocalFile(cc *clientConn, bc *backendConn, pkt []byte, req relayReq, write func([]byte)) error {
	// pkt's header bytes are room for the client's header; the backend
	// connection counts the sequence.
	seq := bc.conn.Sequence
	if req.file == nil {
		if err := bc.conn.WritePacket([]byte{0, 0, 0, 0}); err != nil {
			bc.broken = true
			return err
		}
		return nil
	}
	write(pkt)
	var hdr [4]byte
	for {
		data, cseq, err := req.file()
		if err != nil {
			// The client is gone or broke the protocol mid-file: the
			// server is waiting for the rest, so the backend connection
			// is abandoned too.
			bc.broken = true
			return errClientGone
		}
		n := len(data)
		hdr = [4]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}
		if _, err := (&net.Buffers{hdr[:], data}).WriteTo(bc.conn.Conn); err != nil {
			bc.broken = true
			return err
		}
		seq++
		cc.seq = cseq + 1
		if n == 0 {
			bc.conn.Sequence = seq
			return nil
		}
	}
}

// eofPacket is a classic EOF packet (with 4 bytes of header room).
func eofPacket(warnings, status uint16) []byte {
	return []byte{0, 0, 0, 0, mysql.EOF_HEADER, byte(warnings), byte(warnings >> 8), byte(status), byte(status >> 8)}
}

// eofFromOK parses the OK packet (0xfe header) that ends a result on an
// okEOF connection and returns the classic EOF packet with its
// warnings and status (session-state flag cleared: the client gets no
// tracking block). The status, and the tracked GTIDs when the status says
// the session state changed, go to out (noteTracked); the common OK
// without a tracking block is read without go-mysql's parser (okStatus).
func eofFromOK(bc *backendConn, pkt []byte, out *relayOut) ([]byte, error) {
	if !bc.allGTIDs {
		// The common end of a read: no tracking block to parse (no
		// state change, no GTID), read without allocating.
		if status, warnings, ok := okStatus(pkt[4:]); ok && status&mysql.SERVER_SESSION_STATE_CHANGED == 0 {
			out.status, bc.status, out.warnings = status, status, warnings
			return eofPacket(warnings, status), nil
		}
	}
	if p := pkt[4:]; len(p) == 5 {
		// The classic EOF (warnings, status) where an OK was due: MySQL
		// 9.7 sends one ending a stored procedure's result that a
		// RESIGNAL cut short (main.signal).
		warnings, status := binary.LittleEndian.Uint16(p[1:]), binary.LittleEndian.Uint16(p[3:])
		out.status, bc.status, out.warnings = status, status, warnings
		return eofPacket(warnings, status&^mysql.SERVER_SESSION_STATE_CHANGED), nil
	}
	r := handleOK(bc, pkt[4:])
	if r == nil {
		bc.broken = true
		return nil, &relayError{err: &BackendError{Backend: bc.b.Name, Op: "query", Msg: "malformed OK packet ending a result"}, partial: true}
	}
	noteTracked(bc, r, out)
	return eofPacket(r.Warnings, r.Status&^mysql.SERVER_SESSION_STATE_CHANGED), nil
}

// okStatus reads the status and warnings of OK packet payload p (header,
// affected rows, insert id, status, warnings); ok is false when p is too
// short for them.
func okStatus(p []byte) (status, warnings uint16, ok bool) {
	pos := 1
	for range 2 {
		_, n := lenencInt(p[min(pos, len(p)):])
		if n == 0 {
			return 0, 0, false
		}
		pos += n
	}
	if len(p) < pos+4 {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint16(p[pos:]), binary.LittleEndian.Uint16(p[pos+2:]), true
}

// noteTracked records an OK packet's status in out (and in bc), a
// session state change it reports, and its tracked GTIDs: on an allGTIDs
// connection the executed set (out.tracked), else the statement's own
// (OWN_GTID), added to out.gtid (a response of several results, CALL or
// several statements, can carry several).
func noteTracked(bc *backendConn, r *mysql.Result, out *relayOut) {
	out.status, bc.status = r.Status, r.Status
	out.warnings = r.Warnings
	if r.InsertId != 0 {
		out.insertID = true
	}
	if r.SessionTracking != nil && r.SessionTracking.State != "" {
		// session_track_state_change's entry: the statement (or a
		// stored program it ran) changed the session's state. Any OK
		// of the response counts (a CALL's results each end with one).
		out.stateChanged, bc.changed = true, true
	}
	if !bc.allGTIDs {
		if own := ownGTIDs(bc.mariaDB, r.SessionTracking); own != "" {
			if out.gtid == "" {
				out.gtid = strings.Clone(own)
			} else {
				out.gtid += "," + own
			}
		}
		return
	}
	out.tracked, out.trackedInTrans = "", r.Status&mysql.SERVER_STATUS_IN_TRANS != 0
	if r.SessionTracking != nil && r.SessionTracking.GTID != "" {
		out.tracked = strings.Clone(r.SessionTracking.GTID)
	}
}

// handleOK is go-mysql's HandleOKPacket on bc, which indexes past the
// end of a short or inconsistent packet: a malformed OK from a server is
// nil (the caller's error), never a panic.
func handleOK(bc *backendConn, p []byte) (r *mysql.Result) {
	defer func() {
		if recover() != nil {
			r = nil
		}
	}()
	return bc.conn.HandleOKPacket(p)
}

func finish(clientOK bool) error {
	if !clientOK {
		return errClientGone
	}
	return nil
}

// relayOK parses an OK packet (captures status and GTID) and forwards it in
// the client's format: the backend's session-state block only when the
// client asked for GTIDs (the proxy's own trackers are not the client's),
// the session's token when it changed (req.token).
func relayOK(cc *clientConn, bc *backendConn, pkt []byte, req *relayReq, out *relayOut, write func([]byte)) error {
	r := handleOK(bc, pkt[4:])
	if r == nil {
		bc.broken = true
		return &relayError{err: &BackendError{Backend: bc.b.Name, Op: "query", Msg: "malformed OK packet"}}
	}
	noteTracked(bc, r, out)
	// ALL_GTIDS is not what the client asked to track (OWN_GTID): that
	// block is never forwarded.
	wantGTIDs := req.wantGTIDs && !bc.allGTIDs
	clientTrack := cc.hasCapability(mysql.CLIENT_SESSION_TRACK)
	var entry []byte
	if clientTrack && req.token != nil && r.Status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
		out.recorded = true
		if tok, changed := req.token(out.gtid); changed {
			entry = tokenEntry(tok)
		}
	}
	if clientTrack && entry == nil && (wantGTIDs || r.Status&mysql.SERVER_SESSION_STATE_CHANGED == 0) {
		write(pkt) // same format on both sides
		return nil
	}
	var block []byte
	if clientTrack && wantGTIDs && r.Status&mysql.SERVER_SESSION_STATE_CHANGED != 0 {
		block = okStateBlock(pkt[4:])
	}
	block = slices.Concat(block, entry)
	b := make([]byte, 4, 32+len(r.StatusMessage)+len(block))
	b = append(b, mysql.OK_HEADER)
	b = append(b, mysql.PutLengthEncodedInt(r.AffectedRows)...)
	b = append(b, mysql.PutLengthEncodedInt(r.InsertId)...)
	st := r.Status &^ mysql.SERVER_SESSION_STATE_CHANGED
	if len(block) > 0 {
		st |= mysql.SERVER_SESSION_STATE_CHANGED
	}
	b = append(b, byte(st), byte(st>>8), byte(r.Warnings), byte(r.Warnings>>8))
	switch {
	case !clientTrack:
		b = append(b, r.StatusMessage...)
	default:
		b = append(b, mysql.PutLengthEncodedString([]byte(r.StatusMessage))...)
		if len(block) > 0 {
			b = append(b, mysql.PutLengthEncodedString(block)...)
		}
	}
	write(b)
	return nil
}

// tokenVariable is the tracked system variable the proxy reports the
// session's token as (Config.TrackToken).
const tokenVariable = "causal_token"

// tokenEntry is a session-state entry of type SESSION_TRACK_SYSTEM_VARIABLES
// naming tokenVariable with value tok: the type byte, the entry's length,
// then the name and the value, each length-encoded.
func tokenEntry(tok string) []byte {
	payload := mysql.PutLengthEncodedString([]byte(tokenVariable))
	payload = append(payload, mysql.PutLengthEncodedString([]byte(tok))...)
	e := append([]byte{mysql.SESSION_TRACK_SYSTEM_VARIABLES}, mysql.PutLengthEncodedInt(uint64(len(payload)))...)
	return append(e, payload...)
}

// okStateBlock is the session-state block of OK payload p (header byte
// onward) from a connection that negotiated CLIENT_SESSION_TRACK, whose
// status says SERVER_SESSION_STATE_CHANGED: the entries after the
// length-encoded info string, without their total length (nil when p is
// shorter than it says). It aliases p.
func okStateBlock(p []byte) []byte {
	pos := 1
	for range 2 { // affected rows, insert id
		_, n := lenencInt(p[min(pos, len(p)):])
		if n == 0 {
			return nil
		}
		pos += n
	}
	pos += 4 // status, warnings
	info, n := lenencInt(p[min(pos, len(p)):])
	if n == 0 || uint64(len(p)-pos-n) < info {
		return nil
	}
	pos += n + int(info)
	l, n := lenencInt(p[min(pos, len(p)):])
	if n == 0 || uint64(len(p)-pos-n) < l {
		return nil
	}
	pos += n
	return p[pos : pos+int(l)]
}
