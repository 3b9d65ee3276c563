package proxy

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAdaptiveGOMAXPROCS: with gomaxprocs adaptive the Server runs on one
// P while one client queries, grows to the value it found when four
// clients' commands overlap, shrinks back once they stop, and restores
// that value when Serve returns. (GOMAXPROCS is the test binary's: the
// package's tests do not run in parallel.)
func TestAdaptiveGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // empty: not set, so adaptive runs
	orig := runtime.GOMAXPROCS(0)
	if orig < 2 {
		t.Skipf("GOMAXPROCS %d: nothing to adapt", orig)
	}
	var s *Server
	t.Run("serve", func(t *testing.T) {
		s = startProxy(t, func(c *Config) { c.GOMAXPROCS = "adaptive" })
		changes := func(dir string) float64 { return testutil.ToFloat64(s.m.procsChanges.WithLabelValues(dir)) }
		// await polls until cond holds (bounded generously: a loaded
		// machine), running load meanwhile.
		await := func(what string, cond func() bool) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for !cond() {
				if time.Now().After(deadline) {
					t.Fatalf("%s: GOMAXPROCS %d, changes grow %v shrink %v", what, runtime.GOMAXPROCS(0), changes("grow"), changes("shrink"))
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		await("one P at start", func() bool { return runtime.GOMAXPROCS(0) == 1 })

		db := openDB(t, s, "")
		db.SetMaxOpenConns(4)
		one := func(ctx context.Context, db *sql.DB) error {
			var v int
			return db.QueryRowContext(ctx, "SELECT 1").Scan(&v)
		}
		// One client, one query at a time: no overlap, no change.
		for range 200 {
			if err := one(t.Context(), db); err != nil {
				t.Fatal(err)
			}
		}
		if g := changes("grow"); g != 0 || runtime.GOMAXPROCS(0) != 1 {
			t.Fatalf("one client alone: GOMAXPROCS %d, %v grows", runtime.GOMAXPROCS(0), g)
		}

		// Four clients at once until the Server grows.
		ctx, stop := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					if err := one(ctx, db); err != nil && ctx.Err() == nil {
						errs <- err
						return
					}
				}
			})
		}
		await("four clients", func() bool { return changes("grow") >= 1 && runtime.GOMAXPROCS(0) == orig })
		stop()
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		await("quiet again", func() bool { return changes("shrink") >= 1 && runtime.GOMAXPROCS(0) == 1 })
	})
	// The subtest's cleanup stopped the Server.
	if got := runtime.GOMAXPROCS(0); got != orig {
		t.Fatalf("GOMAXPROCS %d after Serve returned, want the %d it found", got, orig)
	}
}
