package proxy

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	gmpacket "github.com/go-mysql-org/go-mysql/packet"
)

// TestCompressedConnInterop: go-mysql's own client side of the compressed
// protocol (packet.Conn, zlib) and compressedConn understand each other:
// a command of several frames' worth, a small one sent as it is, and the
// answers, with the frames' sequence continuing from the client's.
func TestCompressedConnInterop(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetDeadline(time.Now().Add(30 * time.Second))
	_ = b.SetDeadline(time.Now().Add(30 * time.Second))
	proxySide := newCompressedConn(a)
	client := gmpacket.NewConn(b)
	client.Compression = mysql.MYSQL_COMPRESS_ZLIB
	for _, payload := range [][]byte{
		append([]byte{mysql.COM_QUERY}, strings.Repeat("SELECT 1; ", 40000)...), // compressed
		{mysql.COM_PING}, // below minCompress: as it is
	} {
		client.ResetSequence()
		client.CompressedSequence = 0
		errc := make(chan error, 1)
		go func() { errc <- client.WritePacket(append(make([]byte, 4), payload...)) }()
		var h [4]byte
		if _, err := io.ReadFull(proxySide, h[:]); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, packetLen(h[:]))
		if _, err := io.ReadFull(proxySide, got); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if h[3] != 0 || !bytes.Equal(got, payload) {
			t.Fatalf("read %d bytes at sequence %d, want the client's %d at 0", len(got), h[3], len(payload))
		}
		// The answer: an OK, and a big row-like payload.
		for i, answer := range [][]byte{{0, 0, 0, 2, 0, 0, 0}, bytes.Repeat([]byte("row"), 30000)} {
			pkt := append([]byte{byte(len(answer)), byte(len(answer) >> 8), byte(len(answer) >> 16), byte(i + 1)}, answer...)
			go func() { _, err := proxySide.Write(pkt); errc <- err }()
			back, err := client.ReadPacket()
			if err != nil {
				t.Fatalf("the client reading the proxy's frame: %v", err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, answer) {
				t.Fatalf("the client read %d bytes, want %d", len(back), len(answer))
			}
		}
	}
}

// frameConn is a net.Conn reading from r (writes discarded).
type frameConn struct {
	net.Conn
	r io.Reader
}

func (f frameConn) Read(p []byte) (int, error)  { return f.r.Read(p) }
func (f frameConn) Write(p []byte) (int, error) { return len(p), nil }

// frame is one compressed-protocol frame: payload as it is (ulen 0) or a
// header claiming ulen.
func frame(seq byte, ulen int, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq, byte(ulen), byte(ulen >> 8), byte(ulen >> 16)}, payload...)
}

// TestCompressedConnRefuses: frames that break the protocol end the
// connection with an error naming it, never a read past what was sent.
func TestCompressedConnRefuses(t *testing.T) {
	var z bytes.Buffer
	w := newCompressedConn(frameConn{r: &z})
	w.out.Reset()
	if err := w.appendFrame(bytes.Repeat([]byte("a"), 1000)); err != nil {
		t.Fatal(err)
	}
	good := append([]byte(nil), w.out.Bytes()...) // seq 0, compressed 1000 bytes
	lying := append([]byte(nil), good...)
	lying[4] = 0xe9 // claims 1001 bytes
	for name, c := range map[string]struct {
		in   []byte
		want string
	}{
		"out of sequence":  {append(frame(0, 0, []byte("abc")), frame(5, 0, []byte("d"))...), "frame sequence 5, want 1"},
		"length lies":      {lying, "its header says 1001"},
		"not zlib":         {frame(0, 100, []byte("plain text, not zlib")), "compressed protocol"},
		"cut short":        {frame(0, 0, []byte("abc"))[:8], io.ErrUnexpectedEOF.Error()},
		"header cut short": {[]byte{1, 0, 0}, io.ErrUnexpectedEOF.Error()},
	} {
		c := c
		t.Run(name, func(t *testing.T) {
			r := newCompressedConn(frameConn{r: bytes.NewReader(c.in)})
			_, err := io.ReadAll(r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("read: %v, want an error with %q", err, c.want)
			}
		})
	}
	r := newCompressedConn(frameConn{r: bytes.NewReader(good)})
	got := make([]byte, 1000)
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, bytes.Repeat([]byte("a"), 1000)) {
		t.Fatalf("the good frame: %v", err)
	}
}

// FuzzCompressedConnRead: no frame stream panics the reader or makes it
// hold more than a frame's bound.
func FuzzCompressedConnRead(f *testing.F) {
	w := newCompressedConn(frameConn{r: bytes.NewReader(nil)})
	w.out.Reset()
	_ = w.appendFrame(bytes.Repeat([]byte("xyz"), 100))
	f.Add(append([]byte(nil), w.out.Bytes()...))
	f.Add(frame(0, 0, []byte{1, 0, 0, 0, 14}))
	f.Add(append(frame(0, 0, []byte("ab")), frame(1, 0, []byte("cd"))...))
	f.Add(frame(0, 0xffffff, []byte{0x78, 0x9c}))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newCompressedConn(frameConn{r: bytes.NewReader(in)})
		n, _ := io.Copy(io.Discard, r) // any end: EOF at a frame's end, or an error
		if n > int64(len(in))*1100+maxFrame {
			t.Fatalf("%d bytes out of %d in", n, len(in))
		}
	})
}
