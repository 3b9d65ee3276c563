package mysqlwire

import (
	"errors"
	"net"
	"testing"
	"time"
)

// A read that makes no progress fails with a timeout; a cut from another
// goroutine ends a blocked read with its reason, and every later call.
func TestDeadlineConn(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	dc := NewDeadlineConn(a, 50*time.Millisecond)
	defer dc.Close()
	buf := make([]byte, 1)
	_, err := dc.Read(buf)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read without progress: %v, want a timeout", err)
	}

	// Progress keeps it going: a write the peer reads.
	a2, b2 := net.Pipe()
	defer b2.Close()
	dc2 := NewDeadlineConn(a2, time.Hour)
	go func() { _, _ = b2.Read(make([]byte, 4)) }()
	if _, err := dc2.Write([]byte("ping")); err != nil {
		t.Fatalf("write: %v", err)
	}
	why := errors.New("replica unresponsive")
	done := make(chan error, 1)
	go func() {
		_, err := dc2.Read(buf)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	dc2.Cut(why)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cut read succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Cut did not end a blocked read")
	}
	if _, err := dc2.Write([]byte("x")); !errors.Is(err, why) {
		t.Fatalf("a write after Cut: %v, want %v", err, why)
	}
	if !errors.Is(dc2.CutReason(), why) {
		t.Fatalf("CutReason %v", dc2.CutReason())
	}
}

// Limit bounds the calls that follow below the rolling deadline; removing
// it restores the rolling one.
func TestDeadlineConnLimit(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	dc := NewDeadlineConn(a, time.Hour)
	defer dc.Close()
	dc.Limit(time.Now().Add(30 * time.Millisecond))
	_, err := dc.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read past the limit: %v, want a timeout", err)
	}
	dc.Limit(time.Time{})
	go func() { _, _ = b.Write([]byte("y")) }()
	if _, err := dc.Read(make([]byte, 1)); err != nil {
		t.Fatalf("a read after the limit was removed: %v", err)
	}
	// A past SetDeadline (WithCtx's expiry) is a cut.
	_ = dc.SetDeadline(time.Unix(1, 0))
	if _, err := dc.Read(make([]byte, 1)); !errors.Is(err, ErrCut) {
		t.Fatalf("a read after an expired SetDeadline: %v, want ErrCut", err)
	}
}
