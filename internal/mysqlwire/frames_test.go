package mysqlwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// chunkConn is a net.Conn whose Read hands out data in chunks of the
// given sizes (cycled; 0 or none: everything asked for), then io.EOF.
type chunkConn struct {
	net.Conn
	data   []byte
	chunks []int
	i      int
	reads  int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	c.reads++
	n := len(p)
	if len(c.chunks) > 0 {
		if k := c.chunks[c.i%len(c.chunks)]; k > 0 {
			n = min(n, k)
		}
		c.i++
	}
	n = copy(p, c.data[:min(n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

// wireFrame is one packet on the wire: header (length, sequence) and payload.
func wireFrame(seq byte, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

// readLikeGoMySQL reads one packet's payload as go-mysql does: the header
// and then the body through a bufio.Reader over f.
func readLikeGoMySQL(t *testing.T, br *bufio.Reader, seq *uint8) []byte {
	t.Helper()
	var h [4]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		t.Fatalf("header: %v", err)
	}
	if h[3] != *seq {
		t.Fatalf("sequence %d, want %d", h[3], *seq)
	}
	*seq++
	body := make([]byte, frameLen(h[:]))
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatalf("body: %v", err)
	}
	return body
}

// TestFrameReaderTakesTurns: a relay (Next) and go-mysql (a bufio.Reader
// over Read) read one stream in turns, packet by packet, in chunks of
// every size; each gets exactly its packets and go-mysql's buffer never
// holds a byte past the packet it read.
func TestFrameReaderTakesTurns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var (
			wire     []byte
			payloads [][]byte
		)
		for i := range 20 {
			p := make([]byte, rng.IntN(300))
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			payloads = append(payloads, p)
			wire = append(wire, wireFrame(byte(i), p)...)
		}
		size := 64 + rng.IntN(200) // some packets do not fit
		chunks := []int{1 + rng.IntN(7), 1 + rng.IntN(500), 0}
		f := NewFrameReader(&chunkConn{data: wire, chunks: chunks}, size)
		br := bufio.NewReaderSize(f, 16+rng.IntN(4096))
		var seq uint8
		for i, want := range payloads {
			var got []byte
			if rng.IntN(2) == 0 {
				pkt, err := f.Next(&seq)
				if err != nil {
					t.Fatalf("trial %d packet %d: Next: %v", trial, i, err)
				}
				got = pkt[4:]
			} else {
				got = readLikeGoMySQL(t, br, &seq)
				if br.Buffered() != 0 {
					t.Fatalf("trial %d packet %d: go-mysql's buffer holds %d bytes past its packet", trial, i, br.Buffered())
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("trial %d packet %d: got %d bytes, want %d (%x...)", trial, i, len(got), len(want), want[:min(8, len(want))])
			}
		}
		if _, err := f.Next(&seq); !errors.Is(err, io.EOF) {
			t.Fatalf("trial %d: after the last packet Next = %v, want io.EOF", trial, err)
		}
	}
}

// TestFrameReaderContinuation: a payload of 0xffffff bytes and its
// continuation come back joined (as go-mysql's ReadPacket joins them),
// the sequence advanced past both.
func TestFrameReaderContinuation(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, mysql.MaxPayloadLen)
	big[0], big[len(big)-1] = 'a', 'z'
	tail := []byte("tail")
	wire := append(wireFrame(0, big), wireFrame(1, tail)...)
	wire = append(wire, wireFrame(2, []byte("next"))...)
	f := NewFrameReader(&chunkConn{data: wire, chunks: []int{70000}}, 16<<10)
	var seq uint8
	pkt, err := f.Next(&seq)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(pkt)-4, mysql.MaxPayloadLen+len(tail); got != want {
		t.Fatalf("joined payload %d bytes, want %d", got, want)
	}
	if pkt[4] != 'a' || pkt[4+mysql.MaxPayloadLen-1] != 'z' || string(pkt[4+mysql.MaxPayloadLen:]) != "tail" {
		t.Fatal("joined payload corrupted")
	}
	if seq != 2 {
		t.Fatalf("sequence %d after a packet and its continuation, want 2", seq)
	}
	if pkt, err = f.Next(&seq); err != nil || string(pkt[4:]) != "next" {
		t.Fatalf("packet after the continuation: %q, %v", pkt, err)
	}
	if cap(f.big) > keepBig {
		t.Fatalf("assembly buffer of %d bytes kept (at most %d)", cap(f.big), keepBig)
	}
}

// TestFrameReaderFaults: each malformed stream gets an error naming it.
func TestFrameReaderFaults(t *testing.T) {
	t.Run("sequence", func(t *testing.T) {
		f := NewFrameReader(&chunkConn{data: wireFrame(3, []byte("x"))}, 64)
		var seq uint8 = 1
		if _, err := f.Next(&seq); err == nil || !bytes.Contains([]byte(err.Error()), []byte("invalid packet sequence 3, want 1")) {
			t.Fatalf("Next = %v, want the sequence named", err)
		}
	})
	// A packet cut short, one that fits the buffer and one that does not.
	for _, c := range []struct {
		name       string
		size, sent int
	}{{"truncated", 40, 20}, {"truncated big", 400, 300}} {
		t.Run(c.name, func(t *testing.T) {
			wire := wireFrame(0, bytes.Repeat([]byte{1}, c.size))
			f := NewFrameReader(&chunkConn{data: wire[:c.sent]}, 64)
			var seq uint8
			if _, err := f.Next(&seq); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Next = %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}
	t.Run("next inside go-mysql's packet", func(t *testing.T) {
		f := NewFrameReader(&chunkConn{data: wireFrame(0, []byte("hello"))}, 64)
		var b [2]byte
		if _, err := f.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		var seq uint8
		if _, err := f.Next(&seq); err == nil {
			t.Fatal("Next inside a packet go-mysql is reading succeeded")
		}
	})
	t.Run("clean end", func(t *testing.T) {
		f := NewFrameReader(&chunkConn{}, 64)
		var seq uint8
		if _, err := f.Next(&seq); !errors.Is(err, io.EOF) {
			t.Fatalf("Next on a closed stream = %v, want io.EOF", err)
		}
		var b [8]byte
		if _, err := f.Read(b[:]); !errors.Is(err, io.EOF) {
			t.Fatalf("Read on a closed stream = %v, want io.EOF", err)
		}
	})
}

// FuzzFrameReader: any stream, any buffer size, any turns: no panic, no
// hang, and the packets both readers return are the stream's, in order,
// as a plain parser splits it (until the first error).
func FuzzFrameReader(f *testing.F) {
	f.Add(append(wireFrame(0, []byte("abc")), wireFrame(1, nil)...), uint16(64), uint8(1), uint64(0))
	f.Add(wireFrame(0, bytes.Repeat([]byte{7}, 300)), uint16(64), uint8(3), uint64(5))
	f.Add([]byte{0xff, 0xff, 0xff, 0, 1, 2}, uint16(100), uint8(0), uint64(1))
	f.Add([]byte{5, 0, 0, 0, 1}, uint16(64), uint8(2), uint64(2))
	f.Fuzz(func(t *testing.T, wire []byte, size uint16, chunk uint8, turns uint64) {
		// The reference: the stream split into packets (a declared length
		// past the end stops it; lengths are capped so a fuzzed header
		// cannot ask for 16 MiB).
		var want [][]byte
		for rest := wire; len(rest) >= 4; {
			n := frameLen(rest)
			if n >= 1<<16 || len(rest) < 4+n {
				break
			}
			want = append(want, rest[4:4+n])
			rest = rest[4+n:]
		}
		fr := NewFrameReader(&chunkConn{data: bytes.Clone(wire), chunks: []int{int(chunk)}}, int(size))
		br := bufio.NewReaderSize(fr, 16)
		for i, w := range want {
			var got []byte
			if turns>>(i%64)&1 == 0 {
				s := packetSeq(wire, i)
				pkt, err := fr.Next(&s)
				if err != nil {
					t.Fatalf("packet %d: Next: %v", i, err)
				}
				got = pkt[4:]
			} else {
				var h [4]byte
				if _, err := io.ReadFull(br, h[:]); err != nil {
					t.Fatalf("packet %d: header: %v", i, err)
				}
				got = make([]byte, frameLen(h[:]))
				if _, err := io.ReadFull(br, got); err != nil {
					t.Fatalf("packet %d: body: %v", i, err)
				}
				if br.Buffered() != 0 {
					t.Fatalf("packet %d: %d bytes buffered past it", i, br.Buffered())
				}
			}
			if !bytes.Equal(got, w) {
				t.Fatalf("packet %d: got %x, want %x", i, got, w)
			}
		}
	})
}

// packetSeq is the sequence byte of the i-th packet of wire.
func packetSeq(wire []byte, i int) uint8 {
	for ; i > 0; i-- {
		wire = wire[4+frameLen(wire):]
	}
	return wire[3]
}
