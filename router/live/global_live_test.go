package live

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// TestGlobalAndDeferLive runs read-all-writes and deferred reads on the
// shared real topology. Its file sorts before z_live_test.go, so it runs
// before TestLive's failover.
func TestGlobalAndDeferLive(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pl := startPoller(t, ctx, 5*time.Millisecond)
	setup := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl})
	s := setup.NewSession()
	mustExec(t, ctx, s, "CREATE DATABASE IF NOT EXISTS rtg")
	mustExec(t, ctx, s, "CREATE TABLE IF NOT EXISTS rtg.c (id INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)")
	mustExec(t, ctx, s, "INSERT INTO rtg.c VALUES (1, 0), (2, 0) ON DUPLICATE KEY UPDATE n = 0")
	s.Close()
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Run("global-sees-other-writers", func(t *testing.T) { testGlobalOtherWriters(t, ctx, pl) })
	t.Run("defer", func(t *testing.T) { testDeferLive(t, ctx, pl) })
}

// outsideWriter is a plain connection to the primary, not through any
// router: "another process" whose writes no router saw.
func outsideWriter(t *testing.T, ctx context.Context) func(q string) {
	t.Helper()
	p := topo.Primary()
	c, err := (&mysqlwire.Dialer{User: p.User, Password: p.Password, Timeout: 2 * time.Second}).Dial(ctx, p.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func(q string) {
		t.Helper()
		if _, err := mysqlwire.Exec(ctx, c, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// testGlobalOtherWriters: replica1 applies 1 s late, replica2 not at
// all. An outside connection bumps a counter; a fresh session (no token,
// no watermark of its own) reads it right after. Under global with the
// sound source (GlobalPrimaryQuery) every read sees every bump, served by
// replica1 after a wait or by the primary; token-ryw-mr, for which the
// session has nothing to honour, shows the lag (the test can see it).
func testGlobalOtherWriters(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	defer resetFaults(t, ctx)
	if err := topo.SetApplyDelay(ctx, "replica1", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := topo.StopApplier(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	write := outsideWriter(t, ctx)
	const rounds = 8
	for _, name := range []string{"token-ryw-mr", "global(3s)", "global(0)"} {
		pol, err := router.ParsePolicy(name)
		if err != nil {
			t.Fatal(err)
		}
		r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: pol, Trace: true})
		var stale, replica, fallback int
		for i := range rounds {
			write("UPDATE rtg.c SET n = n + 1 WHERE id = 1")
			want, err := primaryCounter(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			sess := r.NewSession()
			rd, err := sess.Query(ctx, "SELECT n FROM rtg.c WHERE id = 1")
			if err != nil {
				t.Fatalf("%s read %d: %v", name, i, err)
			}
			if readInt(t, rd) < want {
				stale++
			}
			switch rd.Outcome {
			case router.OutReplica:
				replica++
			case router.OutFallback:
				fallback++
			}
			sess.Close()
		}
		t.Logf("%-14s reads=%d missed-a-write=%d replica=%d fallback=%d", name, rounds, stale, replica, fallback)
		switch pol.Kind {
		case router.PolicyGlobal:
			if stale != 0 {
				t.Errorf("%s: %d of %d reads missed a write acknowledged before they began", name, stale, rounds)
			}
			if pol.WaitBudget > 0 && replica == 0 {
				t.Errorf("%s: no read was served by a replica after waiting (the delayed replica catches up in 1 s)", name)
			}
			if pol.WaitBudget == 0 && fallback == 0 {
				t.Errorf("%s: no fallback although no replica could hold the newest write at once", name)
			}
			if n := testutil.ToFloat64(r.m.globals.WithLabelValues("primary-query", "ok")); n != rounds {
				t.Errorf("%s: global_targets_total{primary-query,ok} = %v, want %d", name, n, rounds)
			}
		default:
			if stale == 0 {
				t.Errorf("%s: no read missed the outside write under a 1 s delay: the test cannot see lag", name)
			}
		}
	}
}

// primaryCounter reads the counter's current value on the primary (what a
// read issued now must see at least).
func primaryCounter(ctx context.Context, r *Router[gtid.Set]) (int64, error) {
	pc, err := r.prim.get(ctx, r.cfg.Primary)
	if err != nil {
		return 0, err
	}
	defer r.prim.put(pc, true)
	v, err := mysqlwire.ReadValue(ctx, pc.c, "SELECT n FROM rtg.c WHERE id = 1")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// testDeferLive: both appliers stopped. A session's read under
// token-ryw+defer is deferred (typed, counted, nothing run on the primary)
// with a retry estimate; once the appliers start, a retry after the
// estimate is served by a replica and sees the write. Under the defer cap
// behaviour the first fallback goes to the primary and the next is
// deferred.
func testDeferLive(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	defer resetFaults(t, ctx)
	for _, r := range topo.Replicas() {
		if err := topo.StopApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
	pol := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 50 * time.Millisecond, Defer: true}
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: pol})
	s := r.NewSession()
	defer s.Close()
	mustExec(t, ctx, s, "UPDATE rtg.c SET n = n + 1 WHERE id = 2")
	time.Sleep(100 * time.Millisecond) // the replicas lag by at least this
	_, err := s.Query(ctx, "SELECT n FROM rtg.c WHERE id = 2")
	var re *ReadError
	if !errors.As(err, &re) || !errors.Is(err, ErrDeferred) || re.Reason != router.ReasonWaitBudgetSpent {
		t.Fatalf("read with both appliers stopped: %v, want deferred (wait-budget-spent)", err)
	}
	if re.RetryAfter < 100*time.Millisecond || re.RetryAfter > time.Minute {
		t.Errorf("retry after %v: the replicas lag the write by at least 100 ms", re.RetryAfter)
	}
	if n := testutil.ToFloat64(r.m.reads.WithLabelValues("token-wait", "fallback", "wait-budget-spent")); n != 0 {
		t.Errorf("%v fallbacks under +defer", n)
	}
	if n := testutil.ToFloat64(r.m.deferrals.WithLabelValues("wait-budget-spent")); n != 1 {
		t.Errorf("deferrals_total = %v, want 1", n)
	}
	t.Logf("deferred: %v", re)
	for _, rep := range topo.Replicas() {
		if err := topo.StartApplier(ctx, rep.Name); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	retries := 0
	for {
		time.Sleep(re.RetryAfter)
		rd, err := s.Query(ctx, "SELECT n FROM rtg.c WHERE id = 2")
		if err == nil {
			if rd.Outcome != router.OutReplica || readInt(t, rd) < 1 {
				t.Fatalf("retry served by %s (%v) with n=%d, want a replica with the write", rd.Node, rd.Outcome, readInt(t, rd))
			}
			t.Logf("served by %s after %d more deferral(s)", rd.Node, retries)
			break
		}
		if !errors.As(err, &re) || !errors.Is(err, ErrDeferred) {
			t.Fatalf("retry: %v", err)
		}
		if retries++; time.Now().After(deadline) {
			t.Fatalf("still deferred after %d retries", retries)
		}
	}

	// The defer cap behaviour: one fallback in the bucket, then deferrals.
	for _, rep := range topo.Replicas() {
		if err := topo.StopApplier(ctx, rep.Name); err != nil {
			t.Fatal(err)
		}
	}
	rc := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: router.Policy{Kind: router.PolicyTokenRYW},
		Cap: router.Cap{PerSecond: 0.01, Burst: 1, Behavior: router.CapDefer}})
	sc := rc.NewSession()
	defer sc.Close()
	mustExec(t, ctx, sc, "UPDATE rtg.c SET n = n + 1 WHERE id = 2")
	rd, err := sc.Query(ctx, "SELECT n FROM rtg.c WHERE id = 2")
	if err != nil || rd.Outcome != router.OutFallback {
		t.Fatalf("first read: %v %v, want the bucket's one fallback", rd, err)
	}
	_, err = sc.Query(ctx, "SELECT n FROM rtg.c WHERE id = 2")
	if !errors.As(err, &re) || re.Outcome != router.OutDeferred || re.Reason != router.ReasonCapExceeded {
		t.Fatalf("second read: %v, want deferred (cap-exceeded)", err)
	}
}
