package sim

import (
	"context"
	"testing"
)

// BenchmarkTrial runs one default trial (600 writes/s, 5 replicas, 16 s,
// straggler+heavy) per iteration under each router and reports events/s and
// allocations per event.
func BenchmarkTrial(b *testing.B) {
	cfg := Config{Trials: 1}
	if err := cfg.validate(); err != nil {
		b.Fatal(err)
	}
	var wl workload
	wl.draw(&cfg, 0)
	for _, sp := range seven() {
		b.Run(sp.Name, func(b *testing.B) {
			e := newEngine()
			var m trialMetrics
			e.reset(&cfg, &wl, &sp, 0, &m)
			_ = e.run(context.Background())
			b.ReportAllocs()
			b.ResetTimer()
			var events int64
			for b.Loop() {
				e.reset(&cfg, &wl, &sp, 0, &m)
				if err := e.run(context.Background()); err != nil {
					b.Fatal(err)
				}
				events += m.events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(m.events), "events/trial")
		})
	}
}
