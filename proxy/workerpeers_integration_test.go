package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// workerPair starts two in-process proxies as workers 0 and 1 of two,
// sharing a peer directory (as `causallab proxy --workers 2` runs them).
func workerPair(t *testing.T) (w0, w1 *Server, dir string) {
	dir = t.TempDir()
	as := func(i int) func(*Config) {
		return func(c *Config) { c.Workers, c.WorkerIndex, c.WorkerDir = 2, i, dir }
	}
	return startProxy(t, as(0)), startProxy(t, as(1)), dir
}

// TestWorkerPeers: a client of worker 1 sees worker 0's session in SHOW
// PROCESSLIST, and its KILL ends it; an id of worker 0's that no session
// has is 1094, as is one of its own.
func TestWorkerPeers(t *testing.T) {
	w0, w1, _ := workerPair(t)
	a := gmConnect(t, w0, "app", "apppw")
	b := gmConnect(t, w1, "app", "apppw")
	ida, idb := uint64(a.GetConnectionID()), uint64(b.GetConnectionID())
	if ida%2 != 1 || idb%2 != 0 {
		t.Fatalf("ids %d (worker 0) and %d (worker 1): worker i of 2 gives i+1, i+3, ...", ida, idb)
	}
	pl := processList(t, b, false)
	if _, ok := pl[ida]; !ok || len(pl) != 2 {
		t.Fatalf("worker 1's client sees %v, want worker 0's %d and its own %d", pl, ida, idb)
	}
	for _, id := range []uint64{ida + 200, idb + 200} {
		if _, err := b.Execute(fmt.Sprintf("KILL %d", id)); myErrCode(err) != mysql.ER_NO_SUCH_THREAD {
			t.Fatalf("KILL %d (no such session): %v, want 1094", id, err)
		}
	}
	if _, err := b.Execute(fmt.Sprintf("KILL %d", ida)); err != nil {
		t.Fatalf("KILL of worker 0's session from worker 1: %v", err)
	}
	if _, err := a.Execute("SELECT 1"); err == nil {
		t.Fatal("worker 0's killed session still answers")
	}
}

// TestWorkerPeerUnreachable: when the worker that holds an id does not
// answer, KILL and SHOW PROCESSLIST fail with 1105 naming it (counted as
// worker-peer-failed), never as an unknown thread or a short list.
func TestWorkerPeerUnreachable(t *testing.T) {
	dir := t.TempDir()
	w1 := startProxy(t, func(c *Config) { c.Workers, c.WorkerIndex, c.WorkerDir = 2, 1, dir })
	b := gmConnect(t, w1, "app", "apppw")
	for _, q := range []string{"KILL 1", "SHOW PROCESSLIST"} {
		_, err := b.Execute(q)
		if myErrCode(err) != mysql.ER_UNKNOWN_ERROR || !strings.Contains(err.Error(), "worker 0") {
			t.Fatalf("%s with worker 0 gone: %v, want 1105 naming worker 0", q, err)
		}
	}
	if _, err := b.Execute("SELECT 1"); err != nil {
		t.Fatalf("the session after the failed requests: %v", err)
	}
}

// TestWorkerPeerBadRequest: a request that is no JSON, or names an
// unknown op, is closed without an answer, and the worker serves on.
func TestWorkerPeerBadRequest(t *testing.T) {
	w0, w1, dir := workerPair(t)
	for _, req := range []string{"{nonsense", `{"op":"drop","user":"app"}` + "\n", strings.Repeat("x", 2*maxPeerRequest)} {
		c, err := net.Dial("unix", peerSocket(dir, 0))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte(req))
		_ = c.(*net.UnixConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil && !errors.Is(err, syscall.ECONNRESET) || len(got) != 0 { // reset: closed with the request unread
			t.Fatalf("request %.20q: answered %q, %v; want the connection closed without an answer", req, got, err)
		}
	}
	a := gmConnect(t, w0, "app", "apppw")
	if pl := processList(t, gmConnect(t, w1, "app", "apppw"), false); len(pl) != 2 {
		t.Fatalf("after the bad requests worker 1's client sees %v, want 2 sessions (worker 0's %d)", pl, a.GetConnectionID())
	}
}
