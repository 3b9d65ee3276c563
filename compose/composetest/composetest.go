// Package composetest starts compose topologies for tests.
//
// One topology per test package, from TestMain:
//
//	var topo *compose.Topology
//
//	func TestMain(m *testing.M) {
//		os.Exit(composetest.Main(m, compose.Config{Replicas: 2}, func(t *compose.Topology) int {
//			topo = t
//			return m.Run()
//		}))
//	}
//
// Under `go test -short` Main starts nothing and calls run with a nil
// topology: tests that need MySQL should call composetest.Need(t, topo).
//
// Or one topology per test: topo := composetest.Start(t, cfg), removed by
// t.Cleanup.
//
// The environment variable CAUSALLAB_TEST_BACKEND (local or docker)
// overrides Config.Backend; unset, the backend is cfg.Backend or local.
package composetest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

// EnvBackend names the environment variable that overrides the backend.
const EnvBackend = "CAUSALLAB_TEST_BACKEND"

// startTimeout bounds a test topology's start-up.
const startTimeout = 3 * time.Minute

// Config returns cfg with the backend overridden by CAUSALLAB_TEST_BACKEND.
func Config(cfg compose.Config) compose.Config {
	if b := os.Getenv(EnvBackend); b != "" && cfg.Backend != compose.BackendExternal {
		cfg.Backend = compose.Backend(b)
	}
	if cfg.Backend == compose.BackendDocker && os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	return cfg
}

// Main starts one topology, calls run with it (run should return m.Run()),
// removes the topology and returns the exit code for os.Exit. Under -short
// it starts nothing and calls run(nil).
func Main(m *testing.M, cfg compose.Config, run func(*compose.Topology) int) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		return run(nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	topo, err := compose.Start(ctx, Config(cfg))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "composetest: start topology:", err)
		return 1
	}
	code := func() int {
		defer func() {
			if r := recover(); r != nil {
				_ = topo.Down(context.Background())
				panic(r)
			}
		}()
		return run(topo)
	}()
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := topo.Down(dctx); err != nil {
		fmt.Fprintln(os.Stderr, "composetest: down:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Need skips the test when topo is nil (Main under -short).
func Need(tb testing.TB, topo *compose.Topology) {
	tb.Helper()
	if topo == nil {
		tb.Skip("needs MySQL (skipped under -short)")
	}
}

// Start starts a topology for one test and removes it with tb.Cleanup. It
// skips the test under -short and fails it when the topology cannot start.
func Start(tb testing.TB, cfg compose.Config) *compose.Topology {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs MySQL (skipped under -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	topo, err := compose.Start(ctx, Config(cfg))
	if err != nil {
		tb.Fatalf("composetest: start topology: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := topo.Down(ctx); err != nil {
			tb.Errorf("composetest: down: %v", err)
		}
	})
	return topo
}
