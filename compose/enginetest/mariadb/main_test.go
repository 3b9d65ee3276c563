package mariadb_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/compose/enginetest"
)

// topo is this package's one topology: a primary and two replicas.
var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Engine: compose.EngineMariaDB, Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

// TestFaults runs the engine-neutral topology and fault tests, failover
// last (it leaves replica1 the primary). The failover holds replica1 back
// by stopping its applier: compose does not drain a stopped applier.
func TestFaults(t *testing.T) {
	composetest.Need(t, topo)
	enginetest.Run(t, topo, 2*time.Second, time.Second, func(_ *testing.T, ctx context.Context, topo *compose.Topology) error {
		return topo.StopApplier(ctx, "replica1")
	})
}
