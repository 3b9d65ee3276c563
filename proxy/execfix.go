package proxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/internal/procs"
)

// execFixConn is the client connection as go-mysql's server sees it after
// the handshake: the gate every byte a logged-in client sends passes
// through. It does four things.
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
// handed on as MySQL's own safety value, COM_SLEEP, which is answered with
// ER_UNKNOWN_COM_ERROR like MySQL answers an empty packet. A client idle
// past idle_timeout, or silent past client_read_timeout inside a packet, is
// disconnected; every write has client_write_timeout.
//
// It hands go-mysql's packet reader nothing big: go-mysql allocates a
// packet's claimed length before reading it, and copies what it read
// twice. A COM_QUERY, COM_STMT_PREPARE or COM_STMT_EXECUTE reaches go-mysql
// as a substitute of a few bytes (the same command and statement id); the
// session takes the real one from the gate (command, execute) and sets the
// response's sequence number (seq). Other commands pass as they came.
//
// It coalesces writes: go-mysql writes every packet of a response with its
// own system call (five for a one-row result), which dominated the proxy's
// CPU profile under sysbench. Writes collect in a buffer that is flushed
// before the connection next blocks reading the client (a response is then
// complete), when it passes wbufMax, and on Close; a write error is kept and
// returned by every later Write and Read.
//
// And it works around go-mysql v1.16.0's server, which drops the parameter
// values of a COM_STMT_EXECUTE whose new-params-bound flag is 0 (the
// protocol lets a client send the parameter types only on the first
// execution; libmysqlclient and MariaDB's client, so sysbench, do): it
// remembers the types of each statement's last execution that carried them
// and puts them into a flag-0 execution. COM_STMT_SEND_LONG_DATA chunks are
// kept here (the command has no response; MySQL bounds each parameter by
// max_allowed_packet, the session's budget bounds them all) and put into
// the statement's next execution as ordinary values. Read by the
// connection's goroutine only (no locks).
type execFixConn struct {
	net.Conn
	r *bufio.Reader
	// params maps go-mysql's statement id to the statement's parameter
	// count and remembered types; the session fills counts at prepare.
	params map[uint32]*stmtParams
	lim    gateLimits
	// budget bounds the bytes a session holds between statements (long
	// data here; prepared statement texts and replayed statements in the
	// session): max_session_bytes.
	budget *byteBudget
	// count counts a refusal or a packet the gate could not fix, by kind
	// (a label of causallab_proxy_client_errors_total).
	count func(kind string)
	// done is closed when the server shuts down: an idle client is then
	// disconnected (Serve also wakes blocked reads with a deadline).
	done <-chan struct{}

	// out is the rest of the packet being handed to go-mysql; err is the
	// read error that ended the connection (returned from then on).
	out []byte
	err error
	// buf holds the current command's payload (command byte onward);
	// sub the packet go-mysql reads in its place; alt is a second buffer
	// for the type rewrite; stand builds the stand-in's payload and one
	// is exec's array for a payload in one piece (no allocation per
	// command).
	buf, sub, alt, stand []byte
	one                  [1][]byte
	// cmd is the command substituted for go-mysql (COM_QUERY,
	// COM_STMT_PREPARE, COM_STMT_EXECUTE) or 0 when go-mysql got the
	// client's own packet; seq is the sequence number its response starts
	// at (past the client's continuation packets).
	cmd byte
	seq uint8
	// exec is the COM_STMT_EXECUTE payload when cmd is COM_STMT_EXECUTE
	// (types filled in, long data inlined), in pieces that alias buf and
	// the long data (relayed without copying); valid until the next
	// command is read. The session relays it raw to the backend.
	exec [][]byte
	// longData holds the COM_STMT_SEND_LONG_DATA chunks of each statement
	// id, swallowed here (the command has no response) and put into the
	// next COM_STMT_EXECUTE of the statement as ordinary values:
	// go-mysql's server cannot bind an execution whose values were sent as
	// long data (it reports a malformed packet), and the backend that will
	// run the statement is chosen only at execution. Cleared at execution,
	// COM_STMT_RESET and (by the session) COM_STMT_CLOSE.
	longData map[uint32]*stmtLongData

	// file holds one packet of a LOAD DATA LOCAL INFILE file being
	// relayed (filePacket), apart from buf (the statement's text).
	file []byte

	// wbuf holds coalesced writes; werr is the first write error.
	wbuf []byte
	werr error
	// rdl and wdl are the read and write deadlines last set (moving one
	// costs a timer update, so it moves at most about once a second).
	rdl, wdl time.Time

	// meter counts the commands handed to go-mysql (nil: not counted);
	// busy is set from a command's hand-over until the session's
	// handler returns (finished): the gomaxprocs controller's signal.
	meter *procs.Meter
	busy  bool
}

// gateLimits are the bounds execFixConn enforces on one client.
type gateLimits struct {
	// maxPacket is max_allowed_packet: one command message, continuation
	// packets included, and one long-data parameter.
	maxPacket int
	// idle bounds the wait for a client's next command; read the wait for
	// the rest of a packet once it started; write every write.
	idle, read, write time.Duration
}

// stmtLongData is one statement's long data, by parameter, as the chunks
// arrived; refused is the error its next execution fails with (a chunk was
// refused: its data was dropped).
type stmtLongData struct {
	params  map[uint16]*paramData
	size    int // bytes held, all parameters
	refused *mysql.MyError
}

// byteBudget counts bytes against a limit. One goroutine uses it (the
// connection's), so it needs no lock.
type byteBudget struct {
	limit, used int
}

// take reserves n bytes; false (nothing reserved) if the limit would be
// passed.
func (b *byteBudget) take(n int) bool {
	if b == nil {
		return true
	}
	if n > b.limit-b.used {
		return false
	}
	b.used += n
	return true
}

// give returns n bytes taken before.
func (b *byteBudget) give(n int) {
	if b != nil {
		b.used -= n
	}
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
	// chunkMax is the largest block a long-data chunk is read into (a
	// block is allocated once bytes of it arrived).
	chunkMax = 64 << 10
	// maxDiscard bounds the bytes of a refused message read and dropped
	// before the connection closes (MySQL's largest max_allowed_packet).
	maxDiscard = 1 << 30
)

// errClosedAfterRefusal ends a connection after the gate answered an
// oversized message.
var errClosedAfterRefusal = errors.New("proxy: connection closed after a refused packet")

func newExecFixConn(c net.Conn, params map[uint32]*stmtParams, lim gateLimits, budget *byteBudget, done <-chan struct{}, count func(string)) *execFixConn {
	return &execFixConn{Conn: c, r: bufio.NewReaderSize(c, 4<<10), params: params, lim: lim, budget: budget,
		done: done, count: count, wbuf: make([]byte, 0, 4096)}
}

// Write buffers p (see execFixConn).
func (c *execFixConn) Write(p []byte) (int, error) {
	if c.werr != nil {
		return 0, c.werr
	}
	if len(c.wbuf)+len(p) > wbufMax {
		if err := c.Flush(); err != nil {
			return 0, err
		}
		if len(p) >= wbufMax {
			c.writeDeadline()
			n, err := c.Conn.Write(p)
			if err != nil {
				c.werr = err
			}
			return n, err
		}
	}
	c.wbuf = append(c.wbuf, p...)
	return len(p), nil
}

// Flush writes the buffered bytes.
func (c *execFixConn) Flush() error {
	if c.werr != nil {
		return c.werr
	}
	if len(c.wbuf) == 0 {
		return nil
	}
	c.writeDeadline()
	_, err := c.Conn.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	if err != nil {
		c.werr = err
	}
	return err
}

// Close flushes, then closes the connection.
func (c *execFixConn) Close() error {
	ferr := c.Flush()
	if err := c.Conn.Close(); err != nil {
		return err
	}
	return ferr
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

func (c *execFixConn) writeDeadline() { moveDeadline(&c.wdl, c.lim.write, c.Conn.SetWriteDeadline) }
func (c *execFixConn) readDeadline(d time.Duration) {
	moveDeadline(&c.rdl, d, c.Conn.SetReadDeadline)
}

// stmtParams is one prepared statement's parameter count and the types
// (2 bytes each) of its last execution that sent them.
type stmtParams struct {
	n     int
	types []byte
}

// Read hands go-mysql the next command (see execFixConn).
func (c *execFixConn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		// The server reads the client only between responses (or when a
		// response asks the client for more), and the gate may have
		// answered a command itself: send what is buffered first.
		if err := c.Flush(); err != nil {
			return 0, err
		}
		if c.err != nil {
			return 0, c.err
		}
		if err := c.next(); err != nil {
			c.err = err
			_ = c.Flush() // the gate's own last answer, if any
		}
	}
	if err := c.Flush(); err != nil {
		return 0, err
	}
	if c.meter != nil && !c.busy {
		c.busy = true
		c.meter.Begin()
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// finished ends the command counted since go-mysql read it (Read).
func (c *execFixConn) finished() {
	if c.busy {
		c.busy = false
		c.meter.End()
	}
}

// command returns the payload (command byte onward) of the command
// substituted for go-mysql when it is cmd, and the sequence number its
// response starts at; ok is false when go-mysql got the client's packet
// itself. The payload is valid until the next command is read.
func (c *execFixConn) command(cmd byte) (payload []byte, seq uint8, ok bool) {
	if c == nil || c.cmd == 0 || c.cmd != cmd {
		return nil, 0, false
	}
	return c.buf, c.seq, true
}

// execFlags is the flags byte of the current COM_STMT_EXECUTE, or 0.
func (c *execFixConn) execFlags() byte {
	if len(c.exec) == 0 || len(c.exec[0]) < 6 {
		return 0
	}
	return c.exec[0][5]
}

// payloadText is a command payload as the statement text (no copy).
func payloadText(payload []byte) string {
	if len(payload) < 2 {
		return ""
	}
	return unsafe.String(&payload[1], len(payload)-1)
}

// next reads the client's next command and sets out to what go-mysql is
// to read (see execFixConn). It returns nil without setting out when the
// gate answered the command itself.
func (c *execFixConn) next() error {
	c.cmd, c.exec = 0, nil
	if cap(c.buf) > keepMax {
		c.buf = nil
	}
	if cap(c.alt) > keepMax {
		c.alt = nil
	}
	c.buf = c.buf[:0]
	hdr, err := c.header(true)
	if err != nil {
		return err
	}
	length, seq := packetLen(hdr[:]), hdr[3]
	if length == 0 {
		// MySQL reads an empty packet as COM_SLEEP ("safety") and answers
		// ER_UNKNOWN_COM_ERROR; go-mysql's dispatch would index it.
		c.deliver(seq, []byte{mysql.COM_SLEEP})
		return nil
	}
	first, err := c.peek(1, length)
	if err != nil {
		return err
	}
	cmd := first[0]
	switch cmd {
	case mysql.COM_STMT_SEND_LONG_DATA:
		return c.longDataCommand(length, seq)
	case mysql.COM_QUERY, mysql.COM_STMT_PREPARE, mysql.COM_STMT_EXECUTE:
		last, err := c.message(length, seq, c.lim.maxPacket)
		if err != nil {
			return err
		}
		return c.substitute(cmd, seq, last)
	}
	last, err := c.message(length, seq, maxOtherCommand)
	if errors.Is(err, errTooLarge) {
		// Fully read and dropped: answer, keep the connection.
		c.count("command-too-large")
		c.writeErr(last+1, mysql.ER_NET_PACKET_TOO_LARGE, fmt.Sprintf(
			"causallab proxy: command 0x%02x of more than %d bytes refused: the proxy takes at most %d bytes for commands other than COM_QUERY, COM_STMT_PREPARE, COM_STMT_EXECUTE and COM_STMT_SEND_LONG_DATA", cmd, maxOtherCommand, maxOtherCommand))
		return nil
	}
	if err != nil {
		return err
	}
	if last != seq {
		// A multi-packet message go-mysql would have to reassemble: it is
		// at most maxOtherCommand long, so it cannot be one.
		return c.protocolError("continuation packets in a small command")
	}
	c.deliver(seq, c.buf)
	if cmd == mysql.COM_STMT_RESET && len(c.buf) >= 5 {
		c.dropLongData(binary.LittleEndian.Uint32(c.buf[1:5]))
	}
	return nil
}

// deliver hands go-mysql one packet (sequence seq) of payload.
func (c *execFixConn) deliver(seq byte, payload []byte) {
	n := len(payload)
	c.sub = append(append(c.sub[:0], byte(n), byte(n>>8), byte(n>>16), seq), payload...)
	c.out = c.sub
}

// substitute hands go-mysql a few-byte stand-in for the command in buf
// (see execFixConn); last is the sequence number of its last packet.
func (c *execFixConn) substitute(cmd, seq, last byte) error {
	stand := append(c.stand[:0], cmd)
	if cmd == mysql.COM_STMT_EXECUTE {
		if len(c.buf) < 10 {
			c.deliver(seq, c.buf) // malformed: go-mysql says so
			return nil
		}
		pieces, refused := c.fix(c.buf)
		if refused != nil {
			c.writeErr(last+1, refused.Code, refused.Message)
			return nil
		}
		c.exec = pieces
		// cmd, statement id, flags, iteration count, then (a statement
		// with parameters) a NULL bitmap and new-params-bound 0: go-mysql
		// finds the statement and checks the flags, binds nothing.
		stand = append(stand, c.buf[1:10]...)
		if sp := c.params[binary.LittleEndian.Uint32(c.buf[1:5])]; sp != nil && sp.n > 0 {
			stand = append(stand, make([]byte, (sp.n+7)>>3+1)...)
		}
	}
	c.cmd, c.seq = cmd, last+1
	c.deliver(seq, stand) // copied: stand is free again
	c.stand = stand
	return nil
}

// filePacket reads one packet of the file a client sends in answer to
// LOAD DATA LOCAL INFILE's request (not a command): its payload, valid
// until the next call, and its sequence number. An empty payload ends the
// file. What the proxy buffered for the client (the request) is flushed
// first. A packet longer than max_allowed_packet ends the connection
// (MySQL refuses it the same way, 1153).
func (c *execFixConn) filePacket() ([]byte, byte, error) {
	if err := c.Flush(); err != nil {
		return nil, 0, err
	}
	if cap(c.file) > keepMax {
		c.file = nil
	}
	hdr, err := c.header(false)
	if err != nil {
		return nil, 0, err
	}
	length, seq := packetLen(hdr[:]), hdr[3]
	if length > c.lim.maxPacket {
		c.count("packet-too-large")
		return nil, seq, fmt.Errorf("proxy: a LOAD DATA LOCAL packet of %d bytes exceeds max_allowed_packet (%d)", length, c.lim.maxPacket)
	}
	c.file, err = c.appendArrived(c.file[:0], length)
	return c.file, seq, err
}

// packetLen is a packet header's payload length.
func packetLen(hdr []byte) int { return int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16 }

// header reads a packet header; first: it starts a command (the wait may
// last idle_timeout; otherwise client_read_timeout).
func (c *execFixConn) header(first bool) (h [4]byte, err error) {
	if first && c.r.Buffered() == 0 {
		c.readDeadline(c.lim.idle)
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
func (c *execFixConn) peek(n, length int) ([]byte, error) {
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
func (c *execFixConn) readErr(err error, idle bool) error {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return err
	}
	select {
	case <-c.done:
		return io.EOF // Serve woke the reader to shut down
	default:
	}
	if idle {
		// MySQL 8.0.24+ says why before closing.
		c.count("idle-timeout")
		c.writeErr(0, 4031, fmt.Sprintf("causallab proxy: the client was disconnected because of inactivity (idle_timeout %v)", c.lim.idle))
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
func (c *execFixConn) message(length int, seq byte, limit int) (byte, error) {
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
func (c *execFixConn) refuse(length int, seq byte, limit int) (byte, error) {
	c.buf = c.buf[:0]
	closing := limit == c.lim.maxPacket
	if closing {
		c.count("packet-too-large")
		c.writeErr(seq+1, mysql.ER_NET_PACKET_TOO_LARGE, fmt.Sprintf(
			"causallab proxy: Got a packet bigger than 'max_allowed_packet' bytes (max_allowed_packet %d)", limit))
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
func (c *execFixConn) discard(n int) error {
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
func (c *execFixConn) readInto(n int) error {
	var err error
	c.buf, err = c.appendArrived(c.buf, n)
	return err
}

// appendArrived appends n bytes of the client's stream to dst, growing it
// only once bytes arrived (by at most what is held or arrived, never past
// n): memory follows what the client sent, not what it claimed.
func (c *execFixConn) appendArrived(dst []byte, n int) ([]byte, error) {
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
func (c *execFixConn) protocolError(what string) error {
	c.count("protocol-error")
	return fmt.Errorf("proxy: client protocol error: %s", what)
}

// writeErr queues an ERR packet (sequence seq) in the write buffer.
func (c *execFixConn) writeErr(seq byte, code uint16, msg string) {
	state := mysql.DEFAULT_MYSQL_STATE
	if s, ok := mysql.MySQLState[code]; ok {
		state = s
	}
	payload := []byte{mysql.ERR_HEADER, byte(code), byte(code >> 8), '#'}
	payload = append(payload, state...)
	payload = append(payload, msg...)
	n := len(payload)
	_, _ = c.Write(append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...))
}

// paramData is one parameter's long data, in the blocks it arrived in.
type paramData struct {
	chunks [][]byte
	size   int
}

// longDataCommand keeps (or drops) one COM_STMT_SEND_LONG_DATA message
// whose first packet (seq, length bytes) has begun. It has no answer, in
// MySQL too: a refused chunk fails the statement's next execution.
func (c *execFixConn) longDataCommand(length int, seq byte) error {
	if length < 7 { // malformed: MySQL ignores it
		return c.discard(length)
	}
	b, err := c.peek(7, length)
	if err != nil {
		return err
	}
	id, param := binary.LittleEndian.Uint32(b[1:5]), binary.LittleEndian.Uint16(b[5:7])
	_, _ = c.r.Discard(7)
	var ld *stmtLongData
	if sp := c.params[id]; sp != nil && int(param) < sp.n {
		// An unknown statement or parameter is ignored, as MySQL does.
		if ld = c.longData[id]; ld == nil {
			if c.longData == nil {
				c.longData = map[uint32]*stmtLongData{}
			}
			ld = &stmtLongData{params: map[uint16]*paramData{}}
			c.longData[id] = ld
		}
	}
	n := length - 7
	for {
		if err := c.keepChunk(ld, param, n); err != nil {
			return err
		}
		if length < mysql.MaxPayloadLen {
			return nil
		}
		hdr, err := c.header(false)
		if err != nil {
			return err
		}
		if hdr[3] != seq+1 {
			return c.protocolError("out-of-order continuation packet")
		}
		length, seq = packetLen(hdr[:]), hdr[3]
		n = length
	}
}

// keepChunk reads n bytes of long data for parameter param of ld (nil:
// dropped), within max_allowed_packet per parameter and the session's
// budget.
func (c *execFixConn) keepChunk(ld *stmtLongData, param uint16, n int) error {
	if ld == nil || ld.refused != nil {
		return c.discard(n)
	}
	pd := ld.params[param]
	if pd == nil {
		pd = &paramData{}
		ld.params[param] = pd
	}
	switch {
	case pd.size+n > c.lim.maxPacket:
		c.count("long-data-too-large")
		c.refuseLongData(ld, mysql.NewError(mysql.ER_UNKNOWN_ERROR, fmt.Sprintf(
			"causallab proxy: Parameter of prepared statement which is set through mysql_send_long_data() is longer than 'max_allowed_packet' bytes (max_allowed_packet %d)", c.lim.maxPacket)))
		return c.discard(n)
	case !c.budget.take(n):
		c.count("session-bytes")
		c.refuseLongData(ld, mysql.NewError(mysql.ER_UNKNOWN_ERROR, fmt.Sprintf(
			"causallab proxy: long data refused: the session would hold more than max_session_bytes (%d) of long data, prepared statements and session statements", c.budget.limit)))
		return c.discard(n)
	}
	for n > 0 {
		block, err := c.appendArrived(nil, min(n, chunkMax))
		pd.chunks = append(pd.chunks, block)
		pd.size += len(block)
		ld.size += len(block)
		n -= len(block)
		if err != nil {
			c.budget.give(n)
			return err
		}
	}
	return nil
}

// refuseLongData drops ld's data: its next execution fails with err.
func (c *execFixConn) refuseLongData(ld *stmtLongData, err *mysql.MyError) {
	c.budget.give(ld.size)
	ld.params, ld.size, ld.refused = nil, 0, err
}

// dropLongData forgets statement id's long data (COM_STMT_RESET,
// COM_STMT_CLOSE).
func (c *execFixConn) dropLongData(id uint32) {
	if ld := c.longData[id]; ld != nil {
		c.budget.give(ld.size)
		delete(c.longData, id)
	}
}

// dropAllLongData forgets every statement's long data
// (COM_RESET_CONNECTION).
func (c *execFixConn) dropAllLongData() {
	for id := range c.longData {
		c.dropLongData(id)
	}
}

// fix returns the COM_STMT_EXECUTE payload to relay for the one in buf:
// the parameter types put in when it omits them (remembered when it
// carries them), values sent before as long data put in; or the error the
// execution fails with (its long data was refused).
func (c *execFixConn) fix(payload []byte) ([][]byte, *mysql.MyError) {
	id := binary.LittleEndian.Uint32(payload[1:5])
	ld := c.longData[id]
	if ld != nil {
		c.dropLongData(id) // MySQL forgets long data at execution
		if ld.refused != nil {
			return nil, ld.refused
		}
	}
	out := c.fixTypes(payload)
	c.one[0] = out
	if ld == nil || len(ld.params) == 0 {
		return c.one[:], nil
	}
	sp := c.params[id]
	if sp == nil {
		return c.one[:], nil
	}
	return c.inline(out, sp.n, ld)
}

// inline returns the COM_STMT_EXECUTE payload (with types) with the long
// data values of ld written in as ordinary values, in pieces (no copy). A
// payload it cannot parse passes unchanged and is counted.
func (c *execFixConn) inline(payload []byte, n int, ld *stmtLongData) ([][]byte, *mysql.MyError) {
	nb := (n + 7) >> 3
	flagAt := 10 + nb
	if n == 0 || len(payload) < flagAt+1+2*n || payload[flagAt] != 1 {
		c.count("stmt-execute-unfixable-long-data-unbound")
		return [][]byte{payload}, nil
	}
	nulls := payload[10:flagAt]
	types := payload[flagAt+1 : flagAt+1+2*n]
	head := flagAt + 1 + 2*n
	values := payload[head:]
	pieces := [][]byte{payload[:head]}
	total := head
	run, pos := 0, 0 // values[run:pos] are ordinary values not yet in pieces
	for i := range n {
		if nulls[i>>3]&(1<<(i&7)) != 0 {
			continue
		}
		if pd, ok := ld.params[uint16(i)]; ok {
			if run < pos {
				pieces = append(pieces, values[run:pos])
			}
			l := mysql.PutLengthEncodedInt(uint64(pd.size))
			pieces = append(append(pieces, l), pd.chunks...)
			total += len(l) + pd.size
			run = pos
			continue
		}
		size, ok := binaryValueSize(types[2*i], values[pos:])
		if !ok {
			c.count("stmt-execute-unfixable-long-data-unparsable")
			return [][]byte{payload}, nil
		}
		pos += size
		total += size
	}
	if run < pos {
		pieces = append(pieces, values[run:pos])
	}
	if total > c.lim.maxPacket {
		c.count("packet-too-large")
		return nil, mysql.NewError(mysql.ER_NET_PACKET_TOO_LARGE, fmt.Sprintf(
			"causallab proxy: the execution with its long data put in is %d bytes, over max_allowed_packet (%d): the proxy sends long data inline", total, c.lim.maxPacket))
	}
	return pieces, nil
}

// binaryValueSize is the length of the first value in b, a parameter of
// MySQL type typ in the binary protocol; false if b is too short.
func binaryValueSize(typ byte, b []byte) (int, bool) {
	size := 0
	switch typ {
	case mysql.MYSQL_TYPE_NULL:
		size = 0
	case mysql.MYSQL_TYPE_TINY:
		size = 1
	case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
		size = 2
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_FLOAT:
		size = 4
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE:
		size = 8
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIME:
		if len(b) < 1 {
			return 0, false
		}
		size = 1 + int(b[0])
	default: // strings, decimals, blobs, JSON, BIT, ENUM, SET, geometry
		l, hdr, ok := mysqlwire.LenencInt(b)
		if !ok || l > uint64(len(b)) {
			return 0, false
		}
		size = hdr + int(l)
	}
	if size > len(b) {
		return 0, false
	}
	return size, true
}

// fixTypes is fix's type rewrite of the payload in buf: a flag-0
// execution of a statement whose types it remembers gets them (the new
// payload, in the connection's second buffer, becomes buf).
func (c *execFixConn) fixTypes(payload []byte) []byte {
	// cmd(1) stmt_id(4) flags(1) iteration_count(4) null_bitmap new_params_bound(1) [types] values
	if len(payload) < 10 {
		return payload
	}
	id := binary.LittleEndian.Uint32(payload[1:5])
	sp := c.params[id]
	if sp == nil || sp.n == 0 {
		return payload
	}
	nb := (sp.n + 7) >> 3
	flagAt := 10 + nb
	if len(payload) <= flagAt {
		return payload
	}
	switch payload[flagAt] {
	case 1:
		if len(payload) >= flagAt+1+2*sp.n {
			sp.types = append(sp.types[:0], payload[flagAt+1:flagAt+1+2*sp.n]...)
		}
	case 0:
		if len(sp.types) != 2*sp.n {
			c.count("stmt-execute-unfixable-types-never-sent")
			return payload
		}
		out := c.alt[:0]
		if cap(out) < len(payload)+len(sp.types) {
			out = make([]byte, 0, len(payload)+len(sp.types))
		}
		out = append(out, payload[:flagAt]...)
		out = append(out, 1)
		out = append(out, sp.types...)
		out = append(out, payload[flagAt+1:]...)
		c.alt, c.buf = c.buf, out // swap: no allocation once both are big enough
		return out
	}
	return payload
}
