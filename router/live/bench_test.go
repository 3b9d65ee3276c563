package live

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// BenchmarkLiveWait measures, on real MySQL, one write on the primary
// followed by a wait until replica1 has applied it, by each wait method:
// the binlogwatch stream's notification (WatchSource), the polling
// watcher's notification (5ms and 1ms intervals), and
// WAIT_FOR_EXECUTED_GTID_SET on the replica. "write-only" is the baseline
// (the write alone). ns/op is write + wait; wait-p50-us, wait-p90-us and
// wait-p99-us are the wait alone.
func BenchmarkLiveWait(b *testing.B) {
	composetest.Need(b, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, r := range topo.Replicas() {
		if err := topo.SetApplyDelay(ctx, r.Name, 0); err != nil {
			b.Fatal(err)
		}
		if err := topo.StartApplier(ctx, r.Name); err != nil {
			b.Fatal(err)
		}
	}
	cases := []struct {
		name     string
		binlog   bool
		interval time.Duration
		method   WaitMethod
		noWait   bool
	}{
		{"write-only", false, 5 * time.Millisecond, WaitWatcher, true},
		{"watcher-binlogwatch", true, 0, WaitWatcher, false},
		{"watcher-poll-5ms", false, 5 * time.Millisecond, WaitWatcher, false},
		{"watcher-poll-1ms", false, time.Millisecond, WaitWatcher, false},
		{"wait-for-executed-gtid-set", false, 5 * time.Millisecond, WaitGTIDFunction, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			p, reps := liveNodes()
			pu := topo.Primary()
			var src PositionSource[gtid.Set]
			if c.binlog {
				g := startGroup(b, ctx)
				ws, err := NewGroupSource(g, 0, append([]string{p.Name}, namesOf(topo.Replicas())...)...)
				if err != nil {
					b.Fatal(err)
				}
				src = ws
			} else {
				pl, err := NewPoller(PollerConfig[gtid.Set]{Nodes: append([]Node{p}, reps...), User: pu.User, Password: pu.Password, Interval: c.interval})
				if err != nil {
					b.Fatal(err)
				}
				pctx, pcancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { _ = pl.Run(pctx); close(done) }()
				defer func() { pcancel(); <-done }()
				src = pl
			}
			r, err := New(ctx, Config[gtid.Set]{Primary: p, Replicas: reps, User: pu.User, Password: pu.Password, Positions: src, Wait: c.method})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			s := r.NewSession()
			defer s.Close()
			if _, err := s.Exec(ctx, "CREATE DATABASE IF NOT EXISTS rt"); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Exec(ctx, "CREATE TABLE IF NOT EXISTS rt.b (id INT AUTO_INCREMENT PRIMARY KEY, v INT)"); err != nil {
				b.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			var waits []time.Duration
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Exec(ctx, "INSERT INTO rt.b (v) VALUES (1)"); err != nil {
					b.Fatal(err)
				}
				if c.noWait {
					continue
				}
				t0 := time.Now()
				ok, err := r.wait(ctx, Target{Node: reps[0], Replica: 0}, s.State().Token, 2*time.Second, nil)
				waits = append(waits, time.Since(t0))
				if err != nil || !ok {
					b.Fatalf("wait: ok=%v err=%v", ok, err)
				}
			}
			b.StopTimer()
			if len(waits) > 0 {
				slices.Sort(waits)
				q := func(f float64) float64 { return float64(waits[int(f*float64(len(waits)-1))].Microseconds()) }
				b.ReportMetric(q(0.5), "wait-p50-us")
				b.ReportMetric(q(0.9), "wait-p90-us")
				b.ReportMetric(q(0.99), "wait-p99-us")
			}
		})
	}
}
