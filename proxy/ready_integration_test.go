package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// heldSource is a position source that reports the held nodes unhealthy,
// with no position, until they are released: a proxy's first polls not
// yet in, made certain. Other nodes and released ones report the real
// source's view.
type heldSource struct {
	live.PositionSource[gtid.Set]
	mu   sync.Mutex
	held map[string]bool
}

func (h *heldSource) Position(node string) (gtid.Set, bool) {
	h.mu.Lock()
	held := h.held[node]
	h.mu.Unlock()
	if held {
		return gtid.Set{}, false
	}
	return h.PositionSource.Position(node)
}

func (h *heldSource) release(nodes ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range nodes {
		delete(h.held, n)
	}
}

// holdSource makes c's source the proxy's default pollers (pollSource)
// behind a heldSource holding nodes.
func holdSource(t *testing.T, c *Config, nodes ...string) *heldSource {
	t.Helper()
	pollSource(t, c)
	h := &heldSource{PositionSource: c.Source, held: map[string]bool{}}
	for _, n := range nodes {
		h.held[n] = true
	}
	c.Source = h
	return h
}

// syncBuffer is a bytes.Buffer a logger and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// getReady fetches /ready: its status code and body.
func getReady(t *testing.T, s *Server) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

type firstRead struct {
	route ReadRoute
	err   error
}

// readFirst opens a client connection to s and runs one read on it in the
// background; the result arrives on the channel with the read's route.
func readFirst(t *testing.T, s *Server, routes *routeLog) <-chan firstRead {
	db := openDB(t, s, "")
	out := make(chan firstRead, 1)
	go func() {
		var one int
		err := db.QueryRowContext(context.Background(), "SELECT 1 FROM DUAL WHERE 1 = 1").Scan(&one)
		routes.mu.Lock()
		defer routes.mu.Unlock()
		var r ReadRoute
		for _, x := range routes.last {
			r = x
		}
		out <- firstRead{r, err}
	}()
	return out
}

// TestReadyGate: a proxy whose position source has read no replica yet
// (held) does not serve: /ready answers 503 naming the replicas, the
// readiness gauge is 0, and a client connecting meanwhile waits for its
// greeting (counted waited-for-ready) instead of having its first read
// decided with no positions (sent to the primary, no-replica-up: the race
// TestAffinityThroughOutage and TestIdleClosedReplicaReadResent met).
// Once the positions come in, the client is served and its read goes to
// a replica. Without the gate the read is served at once, on the primary.
func TestReadyGate(t *testing.T) {
	composetest.Need(t, topo)
	reps := topo.Replicas()
	names := []string{reps[0].Name, reps[1].Name}
	routes := &routeLog{last: map[uint32]ReadRoute{}}
	var held *heldSource
	s := startProxyUnready(t, func(c *Config) {
		c.OnRead = routes.add
		held = holdSource(t, c, names...)
	})
	if code, body := getReady(t, s); code != http.StatusServiceUnavailable || !strings.Contains(body, names[0]) || !strings.Contains(body, names[1]) {
		t.Fatalf("/ready before any replica's position: %d %q, want 503 naming %v", code, body, names)
	}
	if g := testutil.ToFloat64(s.m.ready); g != 0 {
		t.Fatalf("causallab_proxy_ready %v before any replica's position", g)
	}
	res := readFirst(t, s, routes)
	waited := s.m.connections.WithLabelValues("waited-for-ready")
	for deadline := time.Now().Add(30 * time.Second); testutil.ToFloat64(waited) == 0; time.Sleep(5 * time.Millisecond) {
		select {
		case r := <-res:
			t.Fatalf("a client was served before the proxy had read any replica's position: %+v (%v)", r.route, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the client's connection was not counted as waiting for readiness in 30s")
		}
	}
	select {
	case r := <-res:
		t.Fatalf("a client was served before the proxy had read any replica's position: %+v (%v)", r.route, r.err)
	default:
	}
	held.release(names...)
	r := <-res
	if r.err != nil {
		t.Fatalf("the first read after readiness: %v", r.err)
	}
	t.Logf("first read: %s (%v)", r.route.Node, r.route.Reason)
	if r.route.Replica < 0 && r.route.Reason == router.ReasonNoReplicaUp {
		// Only a poll a loaded machine delayed past the down-after window
		// for both replicas at once could do this after the gate.
		t.Errorf("the first read after readiness went to the primary, %v", r.route.Reason)
	}
	if code, body := getReady(t, s); code != http.StatusOK || body != "ready" {
		t.Fatalf("/ready once served: %d %q, want 200 \"ready\"", code, body)
	}
	if g := testutil.ToFloat64(s.m.ready); g != 1 {
		t.Fatalf("causallab_proxy_ready %v once served", g)
	}
	if n := testutil.CollectAndCount(s.m.startupUnread); n != 0 {
		t.Fatalf("%d backends counted unread although every position was read", n)
	}
}

// TestReadyAfterStartupTimeout: a replica whose position never comes in
// does not keep the proxy from serving past startup_timeout: the outcome
// is explicit (a warning naming the replica, startup_unread_total{backend}
// for it alone, /ready naming it) and the client waiting meanwhile is
// served.
func TestReadyAfterStartupTimeout(t *testing.T) {
	composetest.Need(t, topo)
	down := topo.Replicas()[1].Name
	logs := &syncBuffer{}
	routes := &routeLog{last: map[uint32]ReadRoute{}}
	s := startProxyUnready(t, func(c *Config) {
		c.OnRead = routes.add
		c.StartupTimeout = 500 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		holdSource(t, c, down)
	})
	r := <-readFirst(t, s, routes)
	if r.err != nil {
		t.Fatalf("a read once startup_timeout passed: %v", r.err)
	}
	if r.route.Node == down {
		t.Fatalf("the read went to %s, whose position was never read", down)
	}
	if got := testutil.ToFloat64(s.m.startupUnread.WithLabelValues(down)); got != 1 {
		t.Fatalf("startup_unread_total{backend=%q} %v, want 1", down, got)
	}
	if n := testutil.CollectAndCount(s.m.startupUnread); n != 1 {
		t.Fatalf("%d backends counted unread, want only %s", n, down)
	}
	if code, body := getReady(t, s); code != http.StatusOK || !strings.Contains(body, "startup_timeout") || !strings.Contains(body, down) {
		t.Fatalf("/ready past startup_timeout: %d %q, want 200 naming %s", code, body, down)
	}
	if g := testutil.ToFloat64(s.m.ready); g != 1 {
		t.Fatalf("causallab_proxy_ready %v past startup_timeout", g)
	}
	if l := logs.String(); !strings.Contains(l, "startup_timeout passed") || !strings.Contains(l, down) {
		t.Fatalf("no warning naming %s: %q", down, l)
	}
}
