package walwatch

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// topo is this package's one topology: a primary and two streaming
// standbys (replica1, replica2), whose application_name is their node name.
// The tests that change roles run last (TestZ...).
var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Engine: compose.EnginePostgres, Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustNode(t testing.TB, name string) compose.Node {
	t.Helper()
	n, err := topo.Node(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// connect opens a pgx connection to n, closed when the test ends.
func connect(t testing.TB, ctx context.Context, n compose.Node) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, n.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(cctx) // test teardown
	})
	return c
}

// lsn reads one LSN expression on c ("" / NULL is 0).
func lsn(t testing.TB, ctx context.Context, c *pgx.Conn, expr string) gtid.PGLSN {
	t.Helper()
	var s *string
	if err := c.QueryRow(ctx, "SELECT ("+expr+")::text").Scan(&s); err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	if s == nil {
		return 0
	}
	p, err := gtid.ParsePGLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startWatcher runs a watcher on the current primary, for every replica,
// until the test ends.
func startWatcher(t testing.TB, mod func(*Config)) *Watcher {
	t.Helper()
	p := topo.Primary()
	cfg := Config{Name: t.Name(), Primary: p.Addr(), User: p.User, Password: p.Password, Interval: 5 * time.Millisecond,
		Registerer: prometheus.NewRegistry()}
	for _, r := range topo.Replicas() {
		cfg.Standbys = append(cfg.Standbys, Standby{Name: r.Name, Slot: r.Name})
	}
	if mod != nil {
		mod(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	return w
}

// waitHealth waits until standby name has health h.
func waitHealth(t testing.TB, w *Watcher, name string, h Health, limit time.Duration) StandbyState {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s := w.Snapshot()
		if st := s.Standbys[name]; st.Health == h {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not %v within %v: %+v", name, h, limit, s.Standbys[name])
		}
		select {
		case <-s.Changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
