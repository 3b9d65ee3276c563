package proxy

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
)

// TestDemandPolling: with demand-driven polling (poll_idle_interval a
// minute, so an idle view of a replica is as good as never refreshed
// within the test), a replica's view is refreshed fast only when a client
// needs it, and then reads reach the replicas again within seconds:
// after a write through the proxy (the router asks for the write's GTID
// in every replica's view), and after a read whose token no replica's
// view holds (a write made straight on the primary: the read falls back
// and asks for the token). Between them, with no demand, the replicas'
// pollers make no fast poll.
func TestDemandPolling(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var lastReplica atomic.Int64
	s := startProxy(t, func(c *Config) {
		c.Policy = "token-ryw"
		c.PollInterval, c.PollIdleInterval = 5*time.Millisecond, time.Minute
		c.OnRead = func(r ReadRoute) { lastReplica.Store(int64(r.Replica)) }
	})
	pl := s.src.(*pollers)
	for _, b := range append([]Backend{s.cfg.Primary}, s.cfg.Replicas...) {
		if fast, idle := pl.byName[b.Name].Intervals(); fast != 5*time.Millisecond || idle != time.Minute {
			t.Fatalf("%s: intervals %v, %v", b.Name, fast, idle)
		}
	}
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(1)
	emptyTable(t, db, "ptest", "demand", "id INT PRIMARY KEY, n INT")
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	fastPolls := func() (n uint64) {
		for _, r := range s.cfg.Replicas {
			f, _ := pl.byName[r.Name].Modes()
			n += f
		}
		return n
	}
	// quiet waits until the replicas' pollers stop polling fast (the
	// setup's writes are in their views), and checks they stay idle.
	quiet := func(what string) {
		t.Helper()
		for prev := fastPolls(); ; {
			time.Sleep(300 * time.Millisecond)
			n := fastPolls()
			if n == prev {
				break
			}
			prev = n
			if ctx.Err() != nil {
				t.Fatalf("%s: the replicas' pollers never went idle", what)
			}
		}
		f0 := fastPolls()
		time.Sleep(500 * time.Millisecond)
		if f := fastPolls(); f != f0 {
			t.Errorf("%s: %d fast polls of the replicas with no demand", what, f-f0)
		}
	}
	// untilReplica reads on conn until a replica serves the read (the
	// replicas' views hold its token), at most 20 s.
	untilReplica := func(what string, read func() error) {
		t.Helper()
		t0 := time.Now()
		for reads := 1; ; reads++ {
			if err := read(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if lastReplica.Load() >= 0 {
				t.Logf("%s: a replica served read %d, %v after the first", what, reads, time.Since(t0).Round(time.Millisecond))
				return
			}
			if time.Since(t0) > 20*time.Second {
				t.Fatalf("%s: no replica served a read in 20s (%d reads): the views were not refreshed", what, reads)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	quiet("after the setup")

	// A write through the proxy: the router wants its GTID in every
	// replica's view.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	f0 := fastPolls()
	mustExec(t, conn, "INSERT INTO ptest.demand VALUES (1, 1)")
	for t0 := time.Now(); fastPolls() == f0; {
		if time.Since(t0) > 10*time.Second {
			t.Fatal("no fast poll of the replicas after a write through the proxy")
		}
		time.Sleep(time.Millisecond)
	}
	untilReplica("after a write through the proxy", func() error {
		var n int
		return conn.QueryRowContext(ctx, "SELECT n FROM ptest.demand WHERE id = 1").Scan(&n)
	})
	quiet("after the write's reads")

	// A write straight on the primary: the proxy learns nothing; a read
	// carrying it as a token falls back and wants it.
	pdb, err := topo.DB(topo.Primary().Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pdb.ExecContext(ctx, "INSERT INTO ptest.demand VALUES (2, 2)"); err != nil {
		t.Fatal(err)
	}
	var tok string
	if err := pdb.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	f0 = fastPolls()
	untilReplica("after a write on the primary", func() error {
		var n int
		return conn.QueryRowContext(ctx, "/* causal_token:"+tok+" */ SELECT n FROM ptest.demand WHERE id = 2").Scan(&n)
	})
	if f := fastPolls(); f == f0 {
		t.Error("the replicas were not polled fast after a read their views could not serve")
	}
	m := metricText(t, s)
	t.Logf("\n%s", grepLines(m, "causallab_proxy_poll_modes_total"))
	for _, r := range s.cfg.Replicas {
		for _, mode := range []string{"fast", "idle"} {
			if !containsLine(m, `causallab_proxy_poll_modes_total{backend="`+r.Name+`",mode="`+mode+`"}`) {
				t.Errorf("no %s series for %s", mode, r.Name)
			}
		}
	}
}

// containsLine reports whether a line of text starts with prefix.
func containsLine(text, prefix string) bool {
	return grepLines(text, prefix) != ""
}
