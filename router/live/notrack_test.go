package live

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// stripTrackProxy is a TCP proxy in front of a MySQL server that clears
// CLIENT_SESSION_TRACK from the client's handshake response: what a
// connection pooler or proxy that does not pass session tracking through
// does. The server then sends no session-state data in OK packets.
type stripTrackProxy struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup
	stripped int
	mu       sync.Mutex
}

func startStripProxy(t *testing.T, upstream string) *stripTrackProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stripTrackProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *stripTrackProxy) serve(c net.Conn) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", p.upstream, 2*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() { _, _ = io.Copy(c, u); c.Close(); close(done) }()
	// The client's first packet is its handshake response: 4-byte header,
	// then the 4-byte little-endian capability flags.
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil || n < 4 {
		return
	}
	flags := binary.LittleEndian.Uint32(body[:4])
	if flags&mysql.CLIENT_SESSION_TRACK != 0 {
		binary.LittleEndian.PutUint32(body[:4], flags&^mysql.CLIENT_SESSION_TRACK)
		p.mu.Lock()
		p.stripped++
		p.mu.Unlock()
	}
	if _, err := u.Write(append(hdr[:], body...)); err != nil {
		return
	}
	_, _ = io.Copy(u, c)
	u.Close()
	<-done
}

// TestNoSessionTracking reproduces, end to end, the misconfiguration the
// connect check exists for: the router reaches the primary through a proxy
// that does not pass session tracking, so write GTIDs would never arrive.
// New must fail with ErrNoSessionTracking. And the opposite case:
// session_track_gtids=OFF globally is NOT a failure, since the router sets
// it per session; writes must still carry their GTID.
func TestNoSessionTracking(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, reps := liveNodes()
	pu := topo.Primary()
	proxy := startStripProxy(t, p.Addr)
	cfg := Config[gtid.Set]{Primary: Node{Name: p.Name, Addr: proxy.ln.Addr().String()}, Replicas: reps,
		User: pu.User, Password: pu.Password, Positions: &staticSource{}}
	r, err := New(ctx, cfg)
	if err == nil {
		r.Close()
		t.Fatal("New succeeded through a proxy that strips CLIENT_SESSION_TRACK")
	}
	if !errors.Is(err, ErrNoSessionTracking) {
		t.Fatalf("New: %v, want ErrNoSessionTracking", err)
	}
	proxy.mu.Lock()
	stripped := proxy.stripped
	proxy.mu.Unlock()
	if stripped == 0 {
		t.Fatal("the proxy never saw CLIENT_SESSION_TRACK requested: the test did not exercise the check")
	}
	t.Logf("New through the stripping proxy: %v", err)

	// Global OFF: the router sets session_track_gtids per session.
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 2 * time.Second}
	admin, err := d.Dial(ctx, p.Addr, false)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := mysqlwire.Exec(ctx, admin, "SET GLOBAL session_track_gtids = OFF"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := mysqlwire.Exec(context.Background(), admin, "SET GLOBAL session_track_gtids = DEFAULT"); err != nil {
			t.Error(err)
		}
	}()
	cfg.Primary = p
	r, err = New(ctx, cfg)
	if err != nil {
		t.Fatalf("New with global session_track_gtids=OFF: %v", err)
	}
	defer r.Close()
	s := r.NewSession()
	defer s.Close()
	mustExec(t, ctx, s, "CREATE DATABASE IF NOT EXISTS rt")
	if !s.State().HasToken {
		t.Fatal("a write under global session_track_gtids=OFF captured no GTID")
	}
}
