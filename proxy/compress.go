package proxy

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net"
)

// compressedConn is a client connection in MySQL's compressed protocol
// with zlib (CLIENT_COMPRESS), which a client asks for at the handshake
// and which begins after the login's OK. zstd
// (CLIENT_ZSTD_COMPRESSION_ALGORITHM) is not offered: go-mysql v1.16.0's
// server reads the handshake response's trailing zstd level byte as a
// truncated connection attribute and fails the login. Below clientConn
// it turns the compressed frames into the plain packet stream and back,
// so nothing above it changes.
//
// A frame is a 7-byte header (compressed length, 3 bytes; sequence, 1;
// uncompressed length, 3: 0 when the payload is sent as it is) and its
// payload; it carries at most 0xffffff bytes of the packet stream. The
// frames' sequence is their own, reset with each command: a frame the
// client sends with sequence 0 begins a command, any other continues the
// exchange (LOAD DATA LOCAL INFILE's file), and the proxy's frames
// continue from the client's last.
//
// Limits: a frame's payload is read as it arrives and decompressed
// whole, the buffers growing with what arrives and what decompression
// produces (never with what a header claims), checked to be exactly the
// stated length: one frame holds at most 16 MiB (its uncompressed
// length's bound) besides what the packets above hold
// (max_allowed_packet).
type compressedConn struct {
	net.Conn
	// seq is the next frame's sequence number.
	seq uint8
	// in is the current frame's decompressed bytes not yet read; raw the
	// frame as read, dec its decompression.
	in       []byte
	raw, dec bytes.Buffer
	// out is the frames being written.
	out bytes.Buffer
	zw  *zlib.Writer
	zr  io.ReadCloser
}

// minCompress is the payload size below which a frame is sent
// uncompressed (as MySQL does: MIN_COMPRESS_LENGTH).
const minCompress = 50

// maxFrame is a frame's largest payload, compressed or not.
const maxFrame = 0xffffff

// newCompressedConn wraps c, past the login's OK, in the compressed
// protocol.
func newCompressedConn(c net.Conn) *compressedConn { return &compressedConn{Conn: c} }

// errCompressedFrame: a frame broke the compressed protocol.
var errCompressedFrame = errors.New("compressed protocol")

// Read returns bytes of the packet stream, reading the next frame when
// the current one is used up.
func (c *compressedConn) Read(p []byte) (int, error) {
	for len(c.in) == 0 {
		if err := c.readFrame(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.in)
	c.in = c.in[n:]
	return n, nil
}

// readFrame reads one frame into c.in.
func (c *compressedConn) readFrame() error {
	var h [7]byte
	if _, err := io.ReadFull(c.Conn, h[:]); err != nil {
		return err
	}
	clen := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	seq := h[3]
	ulen := int(h[4]) | int(h[5])<<8 | int(h[6])<<16
	if seq != 0 && seq != c.seq {
		return fmt.Errorf("%w: frame sequence %d, want %d", errCompressedFrame, seq, c.seq)
	}
	c.seq = seq + 1
	if c.raw.Cap() > 1<<20 || c.dec.Cap() > 1<<20 {
		c.raw, c.dec = bytes.Buffer{}, bytes.Buffer{} // not kept past a large frame
	}
	c.raw.Reset()
	if n, err := c.raw.ReadFrom(io.LimitReader(c.Conn, int64(clen))); err != nil {
		return err
	} else if int(n) != clen {
		return io.ErrUnexpectedEOF
	}
	if ulen == 0 {
		c.in = c.raw.Bytes()
		return nil
	}
	out, err := c.decompress(c.raw.Bytes(), ulen)
	if err != nil {
		return fmt.Errorf("%w: %v", errCompressedFrame, err)
	}
	c.in = out
	return nil
}

// decompress returns payload decompressed, which must be exactly ulen
// bytes (at most one more is produced); valid until the next frame.
func (c *compressedConn) decompress(payload []byte, ulen int) ([]byte, error) {
	var err error
	if c.zr == nil {
		c.zr, err = zlib.NewReader(bytes.NewReader(payload))
	} else {
		err = c.zr.(zlib.Resetter).Reset(bytes.NewReader(payload), nil)
	}
	if err != nil {
		return nil, err
	}
	c.dec.Reset()
	n, err := c.dec.ReadFrom(io.LimitReader(c.zr, int64(ulen)+1))
	switch {
	case err != nil:
		return nil, err
	case int(n) != ulen:
		return nil, fmt.Errorf("frame of %d bytes, its header says %d", n, ulen)
	}
	return c.dec.Bytes(), nil
}

// Write sends p, bytes of the packet stream, as frames.
func (c *compressedConn) Write(p []byte) (int, error) {
	c.out.Reset()
	for rest := p; len(rest) > 0; {
		chunk := rest[:min(len(rest), maxFrame)]
		rest = rest[len(chunk):]
		if err := c.appendFrame(chunk); err != nil {
			return 0, err
		}
	}
	if _, err := c.Conn.Write(c.out.Bytes()); err != nil {
		return 0, err
	}
	if c.out.Cap() > 1<<20 {
		c.out = bytes.Buffer{} // not kept past a large result
	}
	return len(p), nil
}

// appendFrame appends chunk as one frame to c.out: compressed when that is
// smaller, else as it is.
func (c *compressedConn) appendFrame(chunk []byte) error {
	start := c.out.Len()
	c.out.Write([]byte{0, 0, 0, c.seq, 0, 0, 0})
	c.seq++
	ulen := 0
	if len(chunk) >= minCompress {
		if err := c.compress(chunk); err != nil {
			return err
		}
		if clen := c.out.Len() - start - 7; clen < len(chunk) && clen <= maxFrame {
			ulen = len(chunk)
		} else {
			c.out.Truncate(start + 7)
		}
	}
	if ulen == 0 {
		c.out.Write(chunk)
	}
	b := c.out.Bytes()[start:]
	clen := len(b) - 7
	b[0], b[1], b[2] = byte(clen), byte(clen>>8), byte(clen>>16)
	b[4], b[5], b[6] = byte(ulen), byte(ulen>>8), byte(ulen>>16)
	return nil
}

// compress appends chunk compressed (zlib) to c.out.
func (c *compressedConn) compress(chunk []byte) error {
	if c.zw == nil {
		c.zw = zlib.NewWriter(&c.out)
	} else {
		c.zw.Reset(&c.out)
	}
	if _, err := c.zw.Write(chunk); err != nil {
		return err
	}
	return c.zw.Close()
}
