package live

import (
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// BenchmarkWatermarkQuery measures, on real MySQL, what the sound
// watermark costs over gtid_executed alone: a point read on replica1
// followed by the watermark on the same connection, pipelined as the
// router sends it (one write, both answers read), with
// mysqlwire.ExecutedQuery (gtid_executed alone, unsound: "The commit
// race" in docs/router.md) and with mysqlwire.WatermarkQuery
// (gtid_executed joined with the received set). Sub-benchmarks alternate
// in one run so the machine's load falls on both.
func BenchmarkWatermarkQuery(b *testing.B) {
	composetest.Need(b, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pu, rn := topo.Primary(), topo.Replicas()[0]
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	c, err := d.Dial(ctx, rn.Addr(), false)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	mysqlwire.InstallPipe(c)
	const read = "SELECT 1 FROM mysql.user LIMIT 1"
	for round := range 2 {
		for _, q := range []struct{ name, query string }{
			{"executed-alone", mysqlwire.ExecutedQuery},
			{"executed+received", mysqlwire.WatermarkQuery},
			{"log-status", mysqlwire.LogStatusQuery},
		} {
			b.Run(q.name+"/round"+string(rune('1'+round)), func(b *testing.B) {
				for b.Loop() {
					if _, _, err := mysqlwire.ExecPipelined(ctx, c, q.query, read); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkWatermarkWriteCost measures what a watermark read costs the
// primary's writers: autocommit UPDATEs from b.RunParallel's goroutines
// while one connection reads the watermark back to back (the worst case:
// a poller reads it every Interval), with no reader, with the joined
// query, and with performance_schema.log_status (which holds the commit
// lock while it copies gtid_executed).
func BenchmarkWatermarkWriteCost(b *testing.B) {
	composetest.Need(b, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pu := topo.Primary()
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	setup, err := d.Dial(ctx, pu.Addr(), false)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close()
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS wmcost", "DROP TABLE IF EXISTS wmcost.h",
		"CREATE TABLE wmcost.h (id INT PRIMARY KEY AUTO_INCREMENT, v INT NOT NULL)"} {
		if _, err := mysqlwire.Exec(ctx, setup, q); err != nil {
			b.Fatal(err)
		}
	}
	for round := range 2 {
		for _, q := range []struct {
			name, query string
			every       time.Duration
		}{
			{"no-reader", "", 0},
			{"executed+received", mysqlwire.WatermarkQuery, 0},
			{"log-status", mysqlwire.LogStatusQuery, 0},
			{"log-status-every-10ms", mysqlwire.LogStatusQuery, 10 * time.Millisecond},
		} {
			b.Run(q.name+"/round"+string(rune('1'+round)), func(b *testing.B) {
				rctx, stop := context.WithCancel(ctx)
				done := make(chan int)
				go func() {
					n := 0
					defer func() { done <- n }()
					if q.query == "" {
						return
					}
					c, err := d.Dial(rctx, pu.Addr(), false)
					if err != nil {
						return
					}
					defer c.Close()
					for rctx.Err() == nil {
						if _, err := mysqlwire.ReadValue(rctx, c, q.query); err != nil {
							return
						}
						n++
						if q.every > 0 {
							select {
							case <-time.After(q.every):
							case <-rctx.Done():
							}
						}
					}
				}()
				b.SetParallelism(2)
				b.RunParallel(func(pb *testing.PB) {
					c, err := d.Dial(ctx, pu.Addr(), false)
					if err != nil {
						b.Error(err)
						return
					}
					defer c.Close()
					for pb.Next() {
						if _, err := mysqlwire.Exec(ctx, c, "INSERT INTO wmcost.h (v) VALUES (1)"); err != nil {
							b.Error(err)
							return
						}
					}
				})
				stop()
				b.ReportMetric(float64(<-done), "watermark-reads")
			})
		}
	}
}
