package postgres_test

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
	os.Exit(composetest.Main(m, compose.Config{Engine: compose.EnginePostgres, Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

// TestFaults runs the engine-neutral topology and fault tests, failover
// last (it leaves replica1 the primary). PostgreSQL replays all the WAL a
// standby received when it is promoted, so the failover holds replica1
// back by cutting its WAL receiver (Partition on the local backend).
func TestFaults(t *testing.T) {
	composetest.Need(t, topo)
	enginetest.Run(t, topo, 300*time.Millisecond, 50*time.Millisecond, func(t *testing.T, ctx context.Context, topo *compose.Topology) error {
		mode, err := topo.Partition(ctx, "replica1")
		if err == nil && mode != compose.PartitionIOThread {
			// A network partition would also cut compose off replica1.
			if err := topo.Heal(ctx, "replica1"); err != nil {
				return err
			}
			t.Skip("the failover test cuts replica1's WAL receiver, which needs the local backend")
		}
		return err
	})
}
