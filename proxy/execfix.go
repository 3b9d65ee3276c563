package proxy

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/okpacket"
)

// execFixConn is the client connection as go-mysql's server sees it after
// the handshake. It does two things.
//
// It coalesces writes: go-mysql writes every packet of a response with its
// own system call (five for a one-row result), which dominated the proxy's
// CPU profile under sysbench. Writes collect in a buffer that is flushed
// before the connection next blocks reading the client (a response is then
// complete), when it passes wbufMax, and on Close; a write error is kept and
// returned by every later Write and Read.
//
// And it works around go-mysql v1.16.0's server, which drops the
// parameter values of a COM_STMT_EXECUTE whose new-params-bound flag is 0
// (the protocol lets a client send the parameter types only on the first
// execution; libmysqlclient and MariaDB's client, so sysbench, do): every
// parameter then arrives as NULL. It sits between the client's (possibly
// TLS) connection and go-mysql's packet reader, remembers the types of each
// statement's last execution that carried them, and rewrites a flag-0
// execution into a flag-1 one with those types. Installed after the
// handshake, read by the connection's goroutine only (no locks).
//
// Packets it cannot rewrite pass unchanged and are counted: a flag-0
// execution of a statement whose types it never saw, or one of 16 MiB or
// more (split packets).
type execFixConn struct {
	net.Conn
	r *bufio.Reader
	// params maps go-mysql's statement id to the statement's parameter
	// count and remembered types; the session fills counts at prepare.
	params map[uint32]*stmtParams
	// out is the rest of the packet being returned; remaining counts
	// payload bytes of a passed-through packet still to be read from r.
	out       []byte
	remaining int
	// continued: the previous packet was 0xffffff bytes long, so the next
	// one continues it (not a command).
	continued bool
	buf, alt  []byte
	// unfixable counts flag-0 executions passed through unchanged.
	unfixable func(reason string)
	// fixExec enables the COM_STMT_EXECUTE rewrite (off for compressed
	// protocol, whose frames it cannot parse).
	fixExec bool
	// wbuf holds coalesced writes; werr is the first write error.
	wbuf []byte
	werr error
	// exec is the last packet read (header included, after the rewrite)
	// when it was a COM_STMT_EXECUTE, else nil; valid until the next
	// packet is read, so during the handler's call: the session relays it
	// raw to the backend.
	exec []byte
	// longData holds the COM_STMT_SEND_LONG_DATA chunks of each statement
	// id by parameter, swallowed here (the command has no response) and
	// put into the next COM_STMT_EXECUTE of the statement as ordinary
	// values: go-mysql's server cannot bind an execution whose values were
	// sent as long data (it reports a malformed packet), and the backend
	// that will run the statement is chosen only at execution. Cleared at
	// execution, COM_STMT_RESET and (by the session) COM_STMT_CLOSE.
	longData map[uint32]map[uint16][]byte
}

// wbufMax is the largest write buffer: bigger results stream in chunks.
const wbufMax = 64 << 10

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

// stmtParams is one prepared statement's parameter count and the types
// (2 bytes each) of its last execution that sent them.
type stmtParams struct {
	n     int
	types []byte
}

// maxFixPacket bounds the COM_STMT_EXECUTE packets buffered for rewriting.
const maxFixPacket = 0xffffff - 1

func newExecFixConn(c net.Conn, fixExec bool, params map[uint32]*stmtParams, unfixable func(string)) *execFixConn {
	return &execFixConn{Conn: c, r: bufio.NewReaderSize(c, 4<<10), params: params, unfixable: unfixable,
		fixExec: fixExec, wbuf: make([]byte, 0, 4096)}
}

func (c *execFixConn) Read(p []byte) (int, error) {
	// The server reads the client only between responses (or when a
	// response asks the client for more): send what is buffered first.
	if err := c.Flush(); err != nil {
		return 0, err
	}
	if !c.fixExec {
		return c.r.Read(p)
	}
	if len(c.out) > 0 {
		n := copy(p, c.out)
		c.out = c.out[n:]
		return n, nil
	}
	if c.remaining > 0 {
		n, err := c.r.Read(p[:min(len(p), c.remaining)])
		c.remaining -= n
		return n, err
	}
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, err
	}
	length := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	continuation := c.continued
	c.continued = length == 0xffffff
	c.exec = nil
	if !continuation && length > 0 && length <= maxFixPacket {
		first, err := c.r.Peek(1)
		if err == nil && first[0] == mysql.COM_STMT_EXECUTE {
			c.buf = append(c.buf[:0], hdr[:]...)
			c.buf = append(c.buf, make([]byte, length)...)
			if _, err := io.ReadFull(c.r, c.buf[4:]); err != nil {
				return 0, err
			}
			c.buf = c.fix(c.buf)
			c.out = c.buf
			c.exec = c.buf
			return c.Read(p)
		}
		if err == nil && first[0] == mysql.COM_STMT_SEND_LONG_DATA && length >= 7 {
			if b, err := c.r.Peek(7); err == nil {
				id, param := binary.LittleEndian.Uint32(b[1:5]), binary.LittleEndian.Uint16(b[5:7])
				if sp := c.params[id]; sp != nil && int(param) < sp.n {
					if _, err := c.r.Discard(7); err != nil {
						return 0, err
					}
					if err := c.keepLongData(id, param, length-7); err != nil {
						return 0, err
					}
					return c.Read(p) // no response: go on with the next packet
				}
			}
		}
		if err == nil && first[0] == mysql.COM_STMT_RESET && length >= 5 {
			if b, err := c.r.Peek(5); err == nil {
				delete(c.longData, binary.LittleEndian.Uint32(b[1:5]))
			}
		}
	} else if !continuation && length > maxFixPacket {
		if first, err := c.r.Peek(1); err == nil && first[0] == mysql.COM_STMT_EXECUTE {
			c.unfixable("split_packet")
		}
	}
	c.out = append(c.buf[:0], hdr[:]...)
	c.buf = c.out
	c.remaining = length
	return c.Read(p)
}

// keepLongData reads n bytes of a COM_STMT_SEND_LONG_DATA chunk for
// statement id's parameter param. Chunks past maxFixPacket in all are
// dropped and counted (the execution then fails in go-mysql's server).
func (c *execFixConn) keepLongData(id uint32, param uint16, n int) error {
	if c.longData == nil {
		c.longData = map[uint32]map[uint16][]byte{}
	}
	ps := c.longData[id]
	if ps == nil {
		ps = map[uint16][]byte{}
		c.longData[id] = ps
	}
	total := n
	for _, v := range ps {
		total += len(v)
	}
	if total > maxFixPacket-64 {
		c.unfixable("long_data_too_large")
		_, err := c.r.Discard(n)
		return err
	}
	v := ps[param]
	start := len(v)
	v = append(v, make([]byte, n)...)
	if _, err := io.ReadFull(c.r, v[start:]); err != nil {
		return err
	}
	ps[param] = v
	return nil
}

// fix rewrites one buffered COM_STMT_EXECUTE packet (header included)
// when it omits the parameter types, and remembers the types when it
// carries them; values sent before as long data are put in (inline). It
// returns the packet to pass on.
func (c *execFixConn) fix(pkt []byte) []byte {
	out := c.fixTypes(pkt)
	if len(pkt) < 9 {
		return out
	}
	id := binary.LittleEndian.Uint32(pkt[5:9])
	if ld := c.longData[id]; ld != nil {
		delete(c.longData, id) // MySQL forgets long data at execution
		if sp := c.params[id]; sp != nil {
			out = c.inline(out, sp.n, ld)
		}
	}
	return out
}

// inline returns the COM_STMT_EXECUTE packet pkt (header included, with
// types) with the long-data values of ld written in as ordinary values.
// A packet it cannot parse passes unchanged and is counted.
func (c *execFixConn) inline(pkt []byte, n int, ld map[uint16][]byte) []byte {
	payload := pkt[4:]
	nb := (n + 7) >> 3
	flagAt := 10 + nb
	if n == 0 || len(payload) < flagAt+1+2*n || payload[flagAt] != 1 {
		c.unfixable("long_data_unbound")
		return pkt
	}
	nulls := payload[10:flagAt]
	types := payload[flagAt+1 : flagAt+1+2*n]
	values := payload[flagAt+1+2*n:]
	out := make([]byte, 4, len(pkt)+64)
	out = append(out, payload[:flagAt+1+2*n]...)
	pos := 0
	for i := range n {
		if nulls[i>>3]&(1<<(i&7)) != 0 {
			continue
		}
		if v, ok := ld[uint16(i)]; ok {
			out = append(out, mysql.PutLengthEncodedInt(uint64(len(v)))...)
			out = append(out, v...)
			continue
		}
		size, ok := binaryValueSize(types[2*i], values[pos:])
		if !ok {
			c.unfixable("long_data_unparsable")
			return pkt
		}
		out = append(out, values[pos:pos+size]...)
		pos += size
	}
	l := len(out) - 4
	if l > maxFixPacket {
		c.unfixable("split_packet")
		return pkt
	}
	out[0], out[1], out[2], out[3] = byte(l), byte(l>>8), byte(l>>16), pkt[3]
	return out
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
		l, hdr, ok := okpacket.LenencInt(b)
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

// fixTypes is fix's type rewrite.
func (c *execFixConn) fixTypes(pkt []byte) []byte {
	payload := pkt[4:]
	// cmd(1) stmt_id(4) flags(1) iteration_count(4) null_bitmap new_params_bound(1) [types] values
	if len(payload) < 10 {
		return pkt
	}
	id := binary.LittleEndian.Uint32(payload[1:5])
	sp := c.params[id]
	if sp == nil || sp.n == 0 {
		return pkt
	}
	nb := (sp.n + 7) >> 3
	flagAt := 10 + nb
	if len(payload) <= flagAt {
		return pkt
	}
	switch payload[flagAt] {
	case 1:
		if len(payload) >= flagAt+1+2*sp.n {
			sp.types = append(sp.types[:0], payload[flagAt+1:flagAt+1+2*sp.n]...)
		}
		return pkt
	case 0:
		if len(sp.types) != 2*sp.n {
			c.unfixable("types_never_sent")
			return pkt
		}
		newLen := len(payload) + len(sp.types)
		if newLen > maxFixPacket {
			c.unfixable("split_packet")
			return pkt
		}
		out := c.alt[:0]
		c.alt = pkt // swap buffers: no allocation once both are big enough
		out = append(out, byte(newLen), byte(newLen>>8), byte(newLen>>16), pkt[3])
		out = append(out, payload[:flagAt]...)
		out = append(out, 1)
		out = append(out, sp.types...)
		out = append(out, payload[flagAt+1:]...)
		return out
	}
	return pkt
}
