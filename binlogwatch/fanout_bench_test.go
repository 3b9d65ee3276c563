package binlogwatch

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
)

// BenchmarkFanout: what serving more subscribers costs one watcher. A
// real replica's watcher serves its executed set with ProxySQL's
// binlog-reader protocol, updates coalesced to at most one per subscriber
// per millisecond (a fleet's setting), to 1 subscriber, then to 5 (four
// proxies and a ProxySQL, each a Subscriber), in one run. One op is one
// transaction on the primary (INSERT, one connection, back to back); at
// the end every subscriber must hold the replica's set. cpu-us/trx is
// this process's CPU time (getrusage: the watcher, its server, the
// subscribers and the write driver) per transaction; the difference
// between the two sub-benchmarks is what the extra subscribers cost,
// server and client side together (an upper bound of the server's).
//
//	go test -run '^$' -bench Fanout -benchtime 5000x ./binlogwatch/
func BenchmarkFanout(b *testing.B) {
	for _, subs := range []int{1, 5} {
		b.Run(map[int]string{1: "subscribers=1", 5: "subscribers=5"}[subs], func(b *testing.B) {
			benchFanout(b, subs)
		})
	}
}

func benchFanout(b *testing.B, subs int) {
	ctx := testCtx(b, 5*time.Minute)
	r := node(b, "replica1")
	w, _ := startWatcher(b, r, nil)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := NewProxySQLServer(w, ProxySQLConfig{Batch: time.Millisecond, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(sctx, ln) }()
	var ss []*Subscriber
	for range subs {
		s, err := NewSubscriber(SubscriberConfig{Addr: ln.Addr().String(), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		ss = append(ss, s)
		wg.Add(1)
		go func() { defer wg.Done(); s.Run(sctx) }()
	}
	for deadline := time.Now().Add(30 * time.Second); srv.Clients() != int64(subs); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d subscribers connected", srv.Clients(), subs)
		}
	}
	db := openDB(b, node(b, "primary"))
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS bw"); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS bw.fanout (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)"); err != nil {
		b.Fatal(err)
	}
	c, err := db.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for range b.N {
		if _, err := c.ExecContext(ctx, "INSERT INTO bw.fanout (v) VALUES (1)"); err != nil {
			b.Fatal(err)
		}
	}
	var want string
	if err := c.QueryRowContext(ctx, "SELECT @@gtid_executed").Scan(&want); err != nil {
		b.Fatal(err)
	}
	set, err := gtid.Parse(want)
	if err != nil {
		b.Fatal(err)
	}
	for i, s := range ss {
		if err := s.WaitFor(ctx, set); err != nil {
			b.Fatalf("subscriber %d never held the primary's set: %v", i, err)
		}
	}
	b.StopTimer()
	cpu := cpuTime(b) - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/trx")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "trx/s")
}

// cpuTime is this process's user and system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
