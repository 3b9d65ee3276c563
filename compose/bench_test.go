package compose_test

import (
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// BenchmarkUpDown starts and removes a 1 primary + 3 replica topology on
// the backend CAUSALLAB_TEST_BACKEND names (default local), reporting the
// seconds of Start (up-s) and Down (down-s) per topology.
func BenchmarkUpDown(b *testing.B) {
	if testing.Short() {
		b.Skip("needs MySQL")
	}
	cfg := composetest.Config(compose.Config{Replicas: 3})
	ctx := context.Background()
	var up, down time.Duration
	for b.Loop() {
		t0 := time.Now()
		topo, err := compose.Start(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := topo.Down(ctx); err != nil {
			b.Fatal(err)
		}
		up += t1.Sub(t0)
		down += time.Since(t1)
	}
	b.ReportMetric(up.Seconds()/float64(b.N), "up-s")
	b.ReportMetric(down.Seconds()/float64(b.N), "down-s")
}
