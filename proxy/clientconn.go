package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/procs"
)

// clientConn is the client's side of a session once it has logged in, in
// the manner of Vitess's mysql.Conn: the one owner of the client socket.
// It reads each command message (framing, limits, timeouts), and every
// byte the proxy sends the client goes through it (the buffered writer and
// the packet sequence number: writePacket, writeOK, writeErr,
// writeEOF, writeResultset, writeFieldList, writePrepare). The session's
// loop (session.handleNextCommand) reads a command with readCommand and
// dispatches on its first byte. Used by the session's goroutine only (no
// locks).
//
// It bounds what a client can make the proxy hold. Each command message
// (a packet and its continuation packets) is read into the connection's
// own buffer as its bytes arrive, never on the length a header claims; the
// running length is checked against max_allowed_packet at every header and
// a message past it is answered with ER_NET_PACKET_TOO_LARGE (the sequence
// number after the header that crossed the limit, as MySQL answers) and
// discarded unread, then the connection closes. Commands other than
// COM_QUERY, COM_STMT_PREPARE, COM_STMT_EXECUTE and COM_STMT_SEND_LONG_DATA
// carry a few names or ids: past maxOtherCommand bytes they are answered
// with an error and discarded, the connection stays. An empty packet is
// read as MySQL's own safety value, COM_SLEEP, which the session answers
// with ER_UNKNOWN_COM_ERROR as MySQL answers an empty packet. A client
// idle past idle_timeout (idle_in_transaction_timeout while its session
// holds an open transaction), or silent past client_read_timeout inside
// a packet, is disconnected; every write has client_write_timeout.
// COM_STMT_SEND_LONG_DATA has no response: its data is streamed into the
// session's statement memory as it arrives (stmtMemory.readLongData), and
// readCommand goes on to the next command.
//
// It coalesces writes: a response's packets collect in a buffer that is
// flushed before the connection next blocks reading the client (the
// response is then complete), when it passes wbufMax, and on Close; a
// write error is kept and returned by every later write and read.
type clientConn struct {
	conn net.Conn
	r    *bufio.Reader
	lim  gateLimits
	// caps are the capabilities the client and the proxy agreed on at the
	// handshake (the OK packet's format, CLIENT_SESSION_TRACK).
	caps uint32
	// status is the server status the proxy's own OK and EOF packets
	// carry: the primary's autocommit and in-transaction flags
	// (mirrorStatus, setInTransaction).
	status uint16
	// seq is the sequence number of the next packet written: the one
	// after the client's last packet of the command being answered.
	seq uint8
	// stmts is the session's prepared-statement memory: the long data a
	// COM_STMT_SEND_LONG_DATA streams into (nil: long data is dropped).
	stmts *stmtMemory
	// count counts a refusal or a packet the connection could not read,
	// by kind (a label of causallab_proxy_client_errors_total).
	count func(kind string)
	// done is closed when the server shuts down: an idle client is then
	// disconnected (Serve also wakes blocked reads with a deadline).
	done <-chan struct{}

	// err is the read error that ended the connection (returned from then
	// on); closed: Close was called (the session ends after the command).
	err    error
	closed bool
	// buf holds the current command's payload (command byte onward),
	// valid until the next command is read; file one packet of a LOAD
	// DATA LOCAL INFILE file or an authentication reply (readPacket).
	buf, file []byte

	// wbuf holds coalesced writes; werr is the first write error.
	wbuf []byte
	werr error
	// rdl and wdl are the read and write deadlines last set (moving one
	// costs a timer update, so it moves at most about once a second).
	rdl, wdl time.Time

	// inTx: the session holds an open transaction (set by the session
	// before each command is read): the wait for the next command is
	// then bounded by idle_in_transaction_timeout (idleBound).
	inTx bool

	// meter counts the commands read (nil: not counted); busy is set from
	// a command's reading until the next read begins: the gomaxprocs
	// controller's signal.
	meter *procs.Meter
	busy  bool
}

// gateLimits are the bounds clientConn enforces on one client.
type gateLimits struct {
	// maxPacket is max_allowed_packet: one command message, continuation
	// packets included, and one long-data parameter.
	maxPacket int
	// idle bounds the wait for a client's next command (idleTx instead,
	// when shorter, while its session holds an open transaction); read
	// the wait for the rest of a packet once it started; write every
	// write.
	idle, idleTx, read, write time.Duration
}

// idleBound is the wait for the client's next command: idle_timeout, or
// idle_in_transaction_timeout (tx) while the session holds an open
// transaction, when that is shorter.
func (c *clientConn) idleBound() (d time.Duration, tx bool) {
	if c.inTx && c.lim.idleTx > 0 && c.lim.idleTx < c.lim.idle {
		return c.lim.idleTx, true
	}
	return c.lim.idle, false
}

const (
	// wbufMax is the largest write buffer: bigger results stream in chunks.
	wbufMax = 64 << 10
	// keepMax is the largest command buffer kept between commands.
	keepMax = 64 << 10
	// maxOtherCommand bounds commands other than COM_QUERY,
	// COM_STMT_PREPARE, COM_STMT_EXECUTE and COM_STMT_SEND_LONG_DATA (a
	// schema or table name, a statement id, an option).
	maxOtherCommand = 16 << 10
	// maxDiscard bounds the bytes of a refused message read and dropped
	// before the connection closes (MySQL's largest max_allowed_packet).
	maxDiscard = 1 << 30
)

// errClosedAfterRefusal ends a connection after an oversized message was
// answered.
var errClosedAfterRefusal = errors.New("proxy: connection closed after a refused packet")

func newClientConn(c net.Conn, caps uint32, stmts *stmtMemory, lim gateLimits, done <-chan struct{}, count func(string)) *clientConn {
	return &clientConn{conn: c, r: bufio.NewReaderSize(c, 4<<10), caps: caps, status: mysql.SERVER_STATUS_AUTOCOMMIT,
		stmts: stmts, lim: lim, done: done, count: count, wbuf: make([]byte, 0, 4096)}
}

// hasCapability reports whether the client negotiated flag.
func (c *clientConn) hasCapability(flag uint32) bool { return c.caps&flag != 0 }

// mirrorStatus takes the primary's autocommit and in-transaction flags
// (its last OK or EOF) as the proxy's own status.
func (c *clientConn) mirrorStatus(primary uint16) {
	const kept = mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_IN_TRANS
	c.status = c.status&^kept | primary&kept
}

// setInTransaction sets the in-transaction flag of the proxy's own status.
func (c *clientConn) setInTransaction(in bool) {
	if in {
		c.status |= mysql.SERVER_STATUS_IN_TRANS
	} else {
		c.status &^= mysql.SERVER_STATUS_IN_TRANS
	}
}

// readCommand returns the client's next command message (command byte
// onward), valid until the next call. What the connection buffered for
// the client is flushed first: the previous response is complete. An
// error ends the connection (what it answered itself is flushed).
func (c *clientConn) readCommand() ([]byte, error) {
	c.finished()
	for {
		if err := c.Flush(); err != nil {
			return nil, err
		}
		if c.err != nil {
			return nil, c.err
		}
		payload, err := c.next()
		if err != nil {
			c.err = err
			_ = c.Flush() // the connection's own last answer, if any
			return nil, err
		}
		if payload != nil {
			if c.meter != nil {
				c.busy = true
				c.meter.Begin()
			}
			return payload, nil
		}
	}
}

// finished ends the command counted since readCommand returned it.
func (c *clientConn) finished() {
	if c.busy {
		c.busy = false
		c.meter.End()
	}
}

// next reads the client's next command message into buf and returns it,
// or nil when the connection handled it itself (long data, an oversized
// small command it answered); seq is set to the sequence number the
// response starts at.
func (c *clientConn) next() ([]byte, error) {
	if cap(c.buf) > keepMax {
		c.buf = nil
	}
	c.buf = c.buf[:0]
	hdr, err := c.header(true)
	if err != nil {
		return nil, err
	}
	length, seq := packetLen(hdr[:]), hdr[3]
	if length == 0 {
		// MySQL reads an empty packet as COM_SLEEP ("safety").
		c.seq = seq + 1
		return append(c.buf, mysql.COM_SLEEP), nil
	}
	first, err := c.peek(1, length)
	if err != nil {
		return nil, err
	}
	switch cmd := first[0]; cmd {
	case mysql.COM_STMT_SEND_LONG_DATA:
		return nil, c.stmts.readLongData(c, length, seq)
	case mysql.COM_QUERY, mysql.COM_STMT_PREPARE, mysql.COM_STMT_EXECUTE:
		last, err := c.message(length, seq, c.lim.maxPacket)
		if err != nil {
			return nil, err
		}
		c.seq = last + 1
		return c.buf, nil
	default:
		return c.smallCommand(cmd, length, seq)
	}
}

// smallCommand reads a command other than COM_QUERY, COM_STMT_PREPARE,
// COM_STMT_EXECUTE and COM_STMT_SEND_LONG_DATA: one packet of at most
// maxOtherCommand bytes (a longer one is answered and dropped, the
// connection stays).
func (c *clientConn) smallCommand(cmd byte, length int, seq byte) ([]byte, error) {
	last, err := c.message(length, seq, maxOtherCommand)
	if errors.Is(err, errTooLarge) {
		c.count("command-too-large")
		c.seq = last + 1
		c.writeErr(mysql.NewError(mysql.ER_NET_PACKET_TOO_LARGE, fmt.Sprintf(
			"causallab proxy: command 0x%02x of more than %d bytes refused: the proxy takes at most %d bytes for commands other than COM_QUERY, COM_STMT_PREPARE, COM_STMT_EXECUTE and COM_STMT_SEND_LONG_DATA", cmd, maxOtherCommand, maxOtherCommand)))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if last != seq {
		// A message of at most maxOtherCommand bytes has one packet.
		return nil, c.protocolError("continuation packets in a small command")
	}
	c.seq = seq + 1
	return c.buf, nil
}

// readPacket reads one packet the client sends inside a command's
// exchange, not a command: a LOAD DATA LOCAL INFILE file's packet, or an
// authentication reply (COM_CHANGE_USER). It returns its payload, valid
// until the next call; the response continues past its sequence number.
// What the proxy buffered for the client (the request) is flushed first.
// A packet longer than max_allowed_packet ends the connection (MySQL
// refuses it the same way, 1153).
func (c *clientConn) readPacket() ([]byte, error) {
	if err := c.Flush(); err != nil {
		return nil, err
	}
	if cap(c.file) > keepMax {
		c.file = nil
	}
	hdr, err := c.header(false)
	if err != nil {
		return nil, err
	}
	length := packetLen(hdr[:])
	c.seq = hdr[3] + 1
	if length > c.lim.maxPacket {
		c.count("packet-too-large")
		return nil, fmt.Errorf("proxy: a client packet of %d bytes exceeds max_allowed_packet (%d)", length, c.lim.maxPacket)
	}
	c.file, err = c.appendArrived(c.file[:0], length)
	return c.file, err
}

// filePacket is readPacket with the packet's sequence number, as the LOAD
// DATA LOCAL INFILE relay reads the file (relayLocalFile).
func (c *clientConn) filePacket() ([]byte, byte, error) {
	p, err := c.readPacket()
	return p, c.seq - 1, err
}

// packetLen is a packet header's payload length.
func packetLen(hdr []byte) int { return int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16 }

// payloadText is a command payload as the statement text (no copy).
func payloadText(payload []byte) string {
	if len(payload) < 2 {
		return ""
	}
	return unsafe.String(&payload[1], len(payload)-1)
}

// header reads a packet header; first: it starts a command (the wait may
// last idle_timeout; otherwise client_read_timeout).
func (c *clientConn) header(first bool) (h [4]byte, err error) {
	if first && c.r.Buffered() == 0 {
		idle, _ := c.idleBound()
		c.readDeadline(idle)
		select {
		case <-c.done:
			return h, io.EOF
		default:
		}
		if _, err := c.r.Peek(1); err != nil {
			return h, c.readErr(err, true)
		}
	}
	if c.r.Buffered() < 4 {
		c.readDeadline(c.lim.read)
	}
	hdr, err := c.r.Peek(4)
	if err != nil {
		return h, c.readErr(err, false)
	}
	copy(h[:], hdr) // by value: a slice of it would be allocated
	_, _ = c.r.Discard(4)
	return h, nil
}

// peek returns the next n bytes of a packet of length bytes (n <= length,
// n <= 4096) without consuming them.
func (c *clientConn) peek(n, length int) ([]byte, error) {
	n = min(n, length)
	if c.r.Buffered() < n {
		c.readDeadline(c.lim.read)
	}
	b, err := c.r.Peek(n)
	if err != nil {
		return nil, c.readErr(err, false)
	}
	return b, nil
}

// readErr is the error that ends the connection after a failed read;
// idle: the client was between commands.
func (c *clientConn) readErr(err error, idle bool) error {
	var ne net.Error
	if errors.Is(err, errCompressedFrame) {
		c.count("protocol-error")
		return err
	}
	if !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	select {
	case <-c.done:
		return io.EOF // Serve woke the reader to shut down
	default:
	}
	if idle {
		// MySQL 8.0.24+ says why before closing (sequence 0: no command).
		c.seq = 0
		if d, tx := c.idleBound(); tx {
			// The session's end rolls the transaction back (its
			// backend connection closed, or reset back into its pool).
			c.count("idle-in-transaction-timeout")
			c.writeErr(mysql.NewError(codeClientTimeout, fmt.Sprintf("causallab proxy: the client was disconnected because of inactivity in an open transaction, which is rolled back (idle_in_transaction_timeout %v)", d)))
		} else {
			c.count("idle-timeout")
			c.writeErr(mysql.NewError(codeClientTimeout, fmt.Sprintf("causallab proxy: the client was disconnected because of inactivity (idle_timeout %v)", d)))
		}
	} else {
		c.count("read-timeout")
	}
	return err
}

// errTooLarge: a message passed its limit; it was read and dropped.
var errTooLarge = errors.New("proxy: message too large")

// message reads the rest of a command message whose first packet (seq,
// length bytes) has begun, and its continuation packets, into buf as the
// bytes arrive; it returns the last packet's sequence number. A message
// whose running length passes limit is read and dropped (errTooLarge,
// with the sequence number of the header that crossed it); a COM_QUERY,
// COM_STMT_PREPARE or COM_STMT_EXECUTE past max_allowed_packet is answered
// here, and the connection then closes.
func (c *clientConn) message(length int, seq byte, limit int) (byte, error) {
	total := 0
	for {
		total += length
		if total > limit {
			return c.refuse(length, seq, limit)
		}
		if err := c.readInto(length); err != nil {
			return seq, err
		}
		if length < mysql.MaxPayloadLen {
			return seq, nil
		}
		hdr, err := c.header(false)
		if err != nil {
			return seq, err
		}
		if hdr[3] != seq+1 {
			return seq, c.protocolError("out-of-order continuation packet")
		}
		length, seq = packetLen(hdr[:]), hdr[3]
	}
}

// refuse drops the rest of a message past its limit (length bytes of the
// packet with sequence number seq remain, continuation packets may
// follow). For max_allowed_packet (limit == maxPacket) the answer is
// MySQL's ER_NET_PACKET_TOO_LARGE with the sequence number after seq,
// written before dropping (a client blocked writing reads it when it is
// done) and the connection closes.
func (c *clientConn) refuse(length int, seq byte, limit int) (byte, error) {
	c.buf = c.buf[:0]
	closing := limit == c.lim.maxPacket
	if closing {
		c.count("packet-too-large")
		c.seq = seq + 1
		c.writeErr(mysql.NewError(mysql.ER_NET_PACKET_TOO_LARGE, fmt.Sprintf(
			"causallab proxy: Got a packet bigger than 'max_allowed_packet' bytes (max_allowed_packet %d)", limit)))
		_ = c.Flush()
	}
	crossed := seq
	dropped := 0
	for {
		if dropped += length; dropped > maxDiscard {
			return crossed, errClosedAfterRefusal
		}
		if err := c.discard(length); err != nil {
			return crossed, err
		}
		if length < mysql.MaxPayloadLen {
			break
		}
		hdr, err := c.header(false)
		if err != nil {
			return crossed, err
		}
		length = packetLen(hdr[:])
	}
	if closing {
		return crossed, errClosedAfterRefusal
	}
	return crossed, errTooLarge
}

// discard reads and drops n bytes, each read within client_read_timeout.
func (c *clientConn) discard(n int) error {
	for n > 0 {
		if c.r.Buffered() == 0 {
			c.readDeadline(c.lim.read)
			if _, err := c.r.Peek(1); err != nil {
				return c.readErr(err, false)
			}
		}
		k, _ := c.r.Discard(min(n, c.r.Buffered()))
		n -= k
	}
	return nil
}

// readInto appends n bytes of the client's stream to buf (appendArrived).
func (c *clientConn) readInto(n int) error {
	var err error
	c.buf, err = c.appendArrived(c.buf, n)
	return err
}

// appendArrived appends n bytes of the client's stream to dst, growing it
// only once bytes arrived (by at most what is held or arrived, never past
// n): memory follows what the client sent, not what it claimed.
func (c *clientConn) appendArrived(dst []byte, n int) ([]byte, error) {
	for n > 0 {
		if c.r.Buffered() == 0 {
			c.readDeadline(c.lim.read)
			if _, err := c.r.Peek(1); err != nil {
				return dst, c.readErr(err, false)
			}
		}
		if len(dst) == cap(dst) {
			// Exactly: append's growth could round past what is left.
			grown := make([]byte, len(dst), len(dst)+min(n, max(cap(dst), c.r.Buffered(), 4096)))
			dst = grown[:copy(grown, dst)]
		}
		k, err := c.r.Read(dst[len(dst):min(cap(dst), len(dst)+n)])
		dst = dst[:len(dst)+k]
		n -= k
		if err != nil {
			return dst, c.readErr(err, false)
		}
	}
	return dst, nil
}

// protocolError ends a connection that broke the protocol's framing.
func (c *clientConn) protocolError(what string) error {
	c.count("protocol-error")
	return fmt.Errorf("proxy: client protocol error: %s", what)
}

// moveDeadline sets a deadline d from now through set unless the one set
// last (*last) is already within a second (or d/16) before it.
func moveDeadline(last *time.Time, d time.Duration, set func(time.Time) error) {
	if d <= 0 {
		return
	}
	want := time.Now().Add(d)
	if !last.After(want) && want.Sub(*last) < min(time.Second, d/16) {
		return
	}
	*last = want
	_ = set(want)
}

func (c *clientConn) writeDeadline() { moveDeadline(&c.wdl, c.lim.write, c.conn.SetWriteDeadline) }
func (c *clientConn) readDeadline(d time.Duration) {
	moveDeadline(&c.rdl, d, c.conn.SetReadDeadline)
}

// write buffers p (raw bytes, framed already).
func (c *clientConn) write(p []byte) error {
	if c.werr != nil {
		return c.werr
	}
	if len(c.wbuf)+len(p) > wbufMax {
		if err := c.Flush(); err != nil {
			return err
		}
		if len(p) >= wbufMax {
			c.writeDeadline()
			if _, err := c.conn.Write(p); err != nil {
				c.werr = err
				return err
			}
			return nil
		}
	}
	c.wbuf = append(c.wbuf, p...)
	return nil
}

// Flush writes the buffered bytes.
func (c *clientConn) Flush() error {
	if c.werr != nil {
		return c.werr
	}
	if len(c.wbuf) == 0 {
		return nil
	}
	c.writeDeadline()
	_, err := c.conn.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	if err != nil {
		c.werr = err
	}
	return err
}

// Close flushes, then closes the connection: the session ends once the
// current command returns (a response cut short cannot be continued).
func (c *clientConn) Close() error {
	c.closed = true
	ferr := c.Flush()
	if err := c.conn.Close(); err != nil {
		return err
	}
	return ferr
}

// writePacket writes a payload with 4 bytes of header room in front (as
// a backend connection reads it, or as the proxy builds it), split into
// packets of at most 0xffffff bytes as the protocol does (an empty packet
// ends a payload of an exact multiple), each with the next sequence
// number. The header room of each packet after the first is the last 4
// bytes of the one before, already written.
func (c *clientConn) writePacket(data []byte) error {
	for len(data)-4 >= mysql.MaxPayloadLen {
		if err := c.writeFrame(data[:4+mysql.MaxPayloadLen]); err != nil {
			return err
		}
		data = data[mysql.MaxPayloadLen:]
	}
	return c.writeFrame(data)
}

// writeFrame writes one packet whose payload follows 4 bytes of header
// room.
func (c *clientConn) writeFrame(pkt []byte) error {
	n := len(pkt) - 4
	pkt[0], pkt[1], pkt[2], pkt[3] = byte(n), byte(n>>8), byte(n>>16), c.seq
	c.seq++
	return c.write(pkt)
}

// writeOK writes an OK packet for r (nil: no rows affected) with the
// proxy's status, in the client's format; a session-tracking block only
// when the client negotiated CLIENT_SESSION_TRACK and r carries one.
func (c *clientConn) writeOK(r *mysql.Result) error {
	if r == nil {
		r = &mysql.Result{}
	}
	status := r.Status | c.status
	data := make([]byte, 4, 32)
	data = append(data, mysql.OK_HEADER)
	data = mysql.AppendLengthEncodedInteger(data, r.AffectedRows)
	data = mysql.AppendLengthEncodedInteger(data, r.InsertId)
	data = append(data, byte(status), byte(status>>8), byte(r.Warnings), byte(r.Warnings>>8))
	if c.hasCapability(mysql.CLIENT_SESSION_TRACK) {
		rr := *r
		rr.Status = status
		data = mysql.AppendOKSessionTrackSuffix(data, &rr)
	}
	return c.writePacket(data)
}

// writeErr writes an ERR packet for err: a *mysql.MyError as it is, any
// other error as ER_UNKNOWN_ERROR with its text.
func (c *clientConn) writeErr(err error) error {
	var m *mysql.MyError
	if !errors.As(err, &m) {
		m = mysql.NewError(mysql.ER_UNKNOWN_ERROR, err.Error())
	}
	state := m.State
	if state == "" {
		state = mysql.DEFAULT_MYSQL_STATE
	}
	data := make([]byte, 4, 13+len(m.Message))
	data = append(data, mysql.ERR_HEADER, byte(m.Code), byte(m.Code>>8), '#')
	data = append(data, state...)
	data = append(data, m.Message...)
	return c.writePacket(data)
}

// writeEOF writes a classic EOF packet with the proxy's status.
func (c *clientConn) writeEOF() error {
	return c.writePacket([]byte{0, 0, 0, 0, mysql.EOF_HEADER, 0, 0, byte(c.status), byte(c.status >> 8)})
}

// writeFields writes column definitions, then an EOF packet.
func (c *clientConn) writeFields(fs []*mysql.Field) error {
	for _, f := range fs {
		if err := c.writePacket(append(make([]byte, 4, 64), f.Dump()...)); err != nil {
			return err
		}
	}
	return c.writeEOF()
}

// writeResultset writes a text result set the proxy built: the column
// count, the columns, EOF, the rows, EOF.
func (c *clientConn) writeResultset(rs *mysql.Resultset) error {
	if err := c.writePacket(mysql.AppendLengthEncodedInteger(make([]byte, 4, 16), uint64(len(rs.Fields)))); err != nil {
		return err
	}
	if err := c.writeFields(rs.Fields); err != nil {
		return err
	}
	for _, row := range rs.RowDatas {
		if err := c.writePacket(append(make([]byte, 4, 4+len(row)), row...)); err != nil {
			return err
		}
	}
	return c.writeEOF()
}

// writePrepare writes COM_STMT_PREPARE's answer: the statement id, its
// column and parameter counts, then its parameter and column definitions
// as the backend sent them (each list followed by EOF).
func (c *clientConn) writePrepare(id uint32, params, columns [][]byte) error {
	data := make([]byte, 4, 16)
	data = append(data, 0)
	data = append(data, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	data = append(data, byte(len(columns)), byte(len(columns)>>8), byte(len(params)), byte(len(params)>>8), 0, 0, 0)
	if err := c.writePacket(data); err != nil {
		return err
	}
	for _, defs := range [][][]byte{params, columns} {
		if len(defs) == 0 {
			continue
		}
		for _, d := range defs {
			if err := c.writePacket(append(make([]byte, 4, 4+len(d)), d...)); err != nil {
				return err
			}
		}
		if err := c.writeEOF(); err != nil {
			return err
		}
	}
	return nil
}
