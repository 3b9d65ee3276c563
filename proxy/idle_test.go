package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/causallab/causallab/internal/mysqlwire"
)

// TestClosedWhileIdleSeesReadAhead: bytes the server sent past a
// response, already read off the socket into the connection's
// FrameReader, make an idle connection count as closed (the socket's peek
// cannot see them), as bytes still on the socket do; a connection used
// within idleCheckAfter is not checked.
func TestClosedWhileIdleSeesReadAhead(t *testing.T) {
	near, far := net.Pipe()
	defer near.Close()
	defer far.Close()
	fr := mysqlwire.NewFrameReader(near, 256)
	// One packet (sequence 1) and, in the same write, the start of a
	// packet nobody asked for.
	go func() {
		_, _ = far.Write([]byte{1, 0, 0, 1, 0xfe, 9, 0, 0, 0})
	}()
	seq := uint8(1)
	if _, err := fr.Next(&seq); err != nil {
		t.Fatal(err)
	}
	// net.Pipe hands one write to one read that has room for it.
	if fr.Buffered() != 4 {
		t.Fatalf("%d bytes read ahead, want the 4 past the packet", fr.Buffered())
	}
	now := time.Now()
	bc := &backendConn{frames: fr, used: now.Add(-2 * idleCheckAfter)}
	if !bc.closedWhileIdle(now) {
		t.Fatal("an idle connection holding unrequested bytes counted as open")
	}
	bc.used = now
	if bc.closedWhileIdle(now) {
		t.Fatal("a connection used just now was checked")
	}
}
