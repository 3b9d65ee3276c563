package lab

import (
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/router"
)

// BenchmarkChecker: the ground-truth check of one served read (8 hot rows).
func BenchmarkChecker(b *testing.B) {
	const sessions, hot = 10000, 8
	c, _ := NewChecker(sessions, hot)
	reads := make([]Read, 1024)
	for i := range reads {
		h := make([]int64, hot)
		for k := range h {
			h[k] = int64(i + k)
		}
		reads[i] = Read{Session: i % sessions, AckedSeq: 1, Own: 1, Hot: h, Outcome: router.OutReplica}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := c.Check(&reads[i%len(reads)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDriverThroughput drives a closed-loop, read-heavy workload (short
// gaps, many reads per write) through two routers on the shared topology
// and reports the reads/s the driver sustained. One iteration is one 8 s
// measurement: run with -benchtime=1x.
func BenchmarkDriverThroughput(b *testing.B) {
	if topo == nil {
		b.Skip("needs MySQL (skipped under -short)")
	}
	for _, c := range []struct {
		pol router.PolicyKind
		via Via
	}{{router.PolicyAny, ViaRouter}, {router.PolicyTokenRYWMR, ViaRouter}, {router.PolicyAny, ViaProxy}, {router.PolicyTokenRYWMR, ViaProxy}} {
		pol := c.pol
		b.Run(pol.String()+"/via-"+string(c.via), func(b *testing.B) {
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				res, err := Run(ctx, topo, Config{Sessions: 2000, WriteRate: 400, Duration: 8 * time.Second,
					ReadsPerWrite: 40, GapMin: time.Millisecond, GapMax: 3 * time.Millisecond,
					Routers: []RouterSpec{{Policy: router.Policy{Kind: pol}}}, Workers: 32, Via: c.via})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				r := res.Routers[0]
				b.ReportMetric(res.ReadsPerSec, "reads/s")
				b.ReportMetric(r.LatP50Ms, "read-p50-ms")
				b.ReportMetric(r.DispatchP99Ms, "dispatch-p99-ms")
				b.ReportMetric(float64(r.RYW+r.MR), "violations")
			}
		})
	}
}
