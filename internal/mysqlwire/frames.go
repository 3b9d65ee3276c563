package mysqlwire

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// FrameReader sits under a go-mysql client connection's packet reader and
// lets a relay read the server's packets in place, without go-mysql's
// per-packet work (a pooled buffer, two copies through its bufio.Reader
// and a bytes.Buffer for every packet).
//
// Invariants:
//   - buf[r:w] are bytes read from the socket and not yet consumed, in
//     order; nothing else is read ahead.
//   - Read (go-mysql's bufio.Reader above it) is never given more than the
//     rest of the packet it is in: left counts the bytes of the current
//     packet, header included, that Read has still to hand out (0: at a
//     packet boundary). So go-mysql's buffer never holds bytes past the end
//     of the packet it is reading, and once it has read a packet whole, the
//     next packet is still here for Next.
//   - Next is called only at a packet boundary (left == 0) and consumes
//     whole packets (a payload of 0xffffff bytes and its continuations
//     together, as go-mysql reads them).
//
// It only frames plain packets: InstallFrames puts it under a connection
// after the handshake, and only one that reads plain packets (no TLS, no
// compression).
//
// One goroutine at a time reads (the connection's owner), as with go-mysql.
type FrameReader struct {
	net.Conn
	buf  []byte
	r, w int
	left int
	// big assembles a packet that does not fit buf (kept for reuse up to
	// keepBig bytes).
	big []byte
}

// keepBig is the largest assembly buffer kept between packets.
const keepBig = 1 << 20

var _ net.Conn = (*FrameReader)(nil)

// NewFrameReader returns a FrameReader over c with a buffer of size bytes
// (at least 64).
func NewFrameReader(c net.Conn, size int) *FrameReader {
	return &FrameReader{Conn: c, buf: make([]byte, max(size, 64))}
}

// Buffered is the number of bytes read from the socket and not yet
// consumed.
func (f *FrameReader) Buffered() int { return f.w - f.r }

// fill reads until at least n (at most len(buf)) unconsumed bytes are
// buffered, moving them to the front of buf when the room after them is
// short. A read error is returned only when fewer than n bytes arrived.
func (f *FrameReader) fill(n int) error {
	if f.w-f.r >= n {
		return nil
	}
	if len(f.buf)-f.r < n {
		f.w = copy(f.buf, f.buf[f.r:f.w])
		f.r = 0
	}
	for f.w-f.r < n {
		m, err := f.Conn.Read(f.buf[f.w:])
		f.w += m
		if err != nil {
			if f.w-f.r >= n {
				return nil
			}
			if errors.Is(err, io.EOF) && f.w > f.r {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// frameLen is the payload length in a packet header.
func frameLen(h []byte) int { return int(h[0]) | int(h[1])<<8 | int(h[2])<<16 }

// Read implements net.Conn for go-mysql: at most the rest of the current
// packet (see FrameReader).
func (f *FrameReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if f.left == 0 {
		if err := f.fill(4); err != nil {
			return 0, err
		}
		f.left = 4 + frameLen(f.buf[f.r:])
	}
	if f.r == f.w {
		if err := f.fill(1); err != nil {
			return 0, err
		}
	}
	n := copy(p, f.buf[f.r:min(f.w, f.r+f.left)])
	f.r += n
	f.left -= n
	return n, nil
}

// Next reads the next packet and returns it with 4 bytes of header room
// before its payload (the shape of go-mysql's ReadPacketReuseMem, so
// server.Conn.WritePacket can forward it): a payload of 0xffffff bytes is
// joined with its continuation packets. seq is the sequence number the
// packet must carry (go-mysql's packet.Conn.Sequence); it is advanced past
// every packet read. The slice is valid until the next call of Next or
// Read; the caller may overwrite its header room.
func (f *FrameReader) Next(seq *uint8) ([]byte, error) {
	if f.left != 0 {
		return nil, fmt.Errorf("mysqlwire: FrameReader.Next inside a packet go-mysql is reading (%d bytes left)", f.left)
	}
	n, err := f.header(*seq)
	if err != nil {
		return nil, err
	}
	if n < mysql.MaxPayloadLen && 4+n <= len(f.buf) {
		// The common case: the whole packet in buf, no copy.
		if err := f.fill(4 + n); err != nil {
			return nil, err
		}
		pkt := f.buf[f.r : f.r+4+n]
		f.r += 4 + n
		*seq++
		return pkt, nil
	}
	// A packet larger than buf, or split into continuation packets:
	// assembled in big.
	out := append(f.big[:0], 0, 0, 0, 0)
	for {
		if n, err = f.header(*seq); err != nil {
			return nil, err
		}
		f.r += 4
		*seq++
		if out, err = f.appendN(out, n); err != nil {
			return nil, err
		}
		if n < mysql.MaxPayloadLen {
			f.big = nil
			if cap(out) <= keepBig {
				f.big = out[:0] // reused by the next big packet
			}
			return out, nil
		}
	}
}

// header waits for the next packet's header (not consumed) and returns
// its payload length; an error when its sequence number is not seq.
func (f *FrameReader) header(seq uint8) (int, error) {
	if err := f.fill(4); err != nil {
		return 0, err
	}
	h := f.buf[f.r : f.r+4]
	if h[3] != seq {
		return 0, fmt.Errorf("mysqlwire: invalid packet sequence %d, want %d", h[3], seq)
	}
	return frameLen(h), nil
}

// appendN appends the next n bytes of the stream to dst: what is buffered
// first, the rest read from the socket straight into dst.
func (f *FrameReader) appendN(dst []byte, n int) ([]byte, error) {
	k := min(n, f.w-f.r)
	dst = append(dst, f.buf[f.r:f.r+k]...)
	f.r += k
	n -= k
	if n == 0 {
		return dst, nil
	}
	at := len(dst)
	dst = slices.Grow(dst, n)[:at+n]
	if _, err := io.ReadFull(f.Conn, dst[at:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return dst, nil
}

// InstallFrames puts a FrameReader (buffer of size bytes) under c's packet
// connection and returns it, or nil when c's packets are not plain on the
// socket (TLS, compression) or c already has one. Call it right after a
// command's response was read whole (after the handshake), when go-mysql's
// own buffer is empty: the server sends nothing unasked then.
func InstallFrames(c *client.Conn, size int) *FrameReader {
	if c.Compression != mysql.MYSQL_COMPRESS_NONE {
		return nil
	}
	switch c.Conn.Conn.(type) {
	case *FrameReader:
		return nil
	case *DeadlineConn, *net.TCPConn, *net.UnixConn:
	default:
		return nil // TLS, or a wrapper whose bytes are not the socket's
	}
	f := NewFrameReader(c.Conn.Conn, size)
	c.Conn.Conn = f
	return f
}
