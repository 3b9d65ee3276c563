package connpass

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pair is a supervisor end and the worker's Listener over it.
func pair(t *testing.T) (*net.UnixConn, *Listener) {
	t.Helper()
	u, f, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	l, err := FileListener(f, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6033})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close(); l.Close() })
	return u, l
}

// tcpPair is an accepted server-side TCP connection and its client.
func tcpPair(t *testing.T) (server *net.TCPConn, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), client
}

// TestHandOff: connections sent over the pair are accepted whole: bytes
// flow both ways on the received one, the sender's copy is closed, and
// the listener reports the address it was given.
func TestHandOff(t *testing.T) {
	u, l := pair(t)
	if got := l.Addr().String(); got != "127.0.0.1:6033" {
		t.Errorf("Addr = %s", got)
	}
	for i := range 3 {
		srv, client := tcpPair(t)
		if err := Send(u, srv); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Write([]byte("x")); err == nil {
			t.Fatal("Send left the sender's copy open")
		}
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.(*net.TCPConn); !ok {
			t.Fatalf("accepted a %T", c)
		}
		msg := []byte{'a' + byte(i)}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 1)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || got[0] != msg[0] {
			t.Fatalf("read %q, %v; want %q", got, err, msg)
		}
		if _, err := c.Write([]byte("ok")); err != nil {
			t.Fatal(err)
		}
		client.SetDeadline(time.Now().Add(10 * time.Second))
		back := make([]byte, 2)
		if _, err := io.ReadFull(client, back); err != nil || string(back) != "ok" {
			t.Fatalf("client read %q, %v", back, err)
		}
		c.Close()
	}
}

// TestAcceptBadMessages: a message that is not one byte with one TCP
// descriptor is refused with an error naming what arrived, and the
// descriptors it carried are closed; the sender's close ends Accept with
// net.ErrClosed.
func TestAcceptBadMessages(t *testing.T) {
	u, l := pair(t)
	f, err := os.CreateTemp(t.TempDir(), "fd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	for _, c := range []struct {
		name string
		data []byte
		fds  []int
		want string
	}{
		{"no descriptor", []byte{msgConn}, nil, "0 descriptors"},
		{"two descriptors", []byte{msgConn}, []int{fd, fd}, "2 descriptors"},
		{"longer payload", []byte("zz"), []int{fd}, "truncated"},
		{"other payload", []byte("z"), []int{fd}, `payload "z"`},
		{"not a socket", []byte{msgConn}, []int{fd}, "descriptor: "},
	} {
		var oob []byte
		if c.fds != nil {
			oob = syscall.UnixRights(c.fds...)
		}
		if _, _, err := u.WriteMsgUnix(c.data, oob, nil); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		conn, err := l.Accept()
		if err == nil {
			conn.Close()
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to name %q", c.name, err, c.want)
		}
	}
	// A Unix socket is a socket but not TCP.
	a, b, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	if _, _, err := u.WriteMsgUnix([]byte{msgConn}, syscall.UnixRights(int(b.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(); !errors.Is(err, ErrBadMessage) || !strings.Contains(err.Error(), "not a TCP connection") {
		t.Errorf("a Unix socket handed over: %v", err)
	}
	u.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("after the sender closed: %v, want net.ErrClosed", err)
	}
}

// TestListenerClose: Close ends a blocked Accept with net.ErrClosed.
func TestListenerClose(t *testing.T) {
	_, l := pair(t)
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}
