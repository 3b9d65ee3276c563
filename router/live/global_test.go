package live

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

func TestCommitLog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewCommitLog[gtid.Set](4, time.Millisecond)
	if got := l.Lag(set(t, uA+":1"), t0); got != 0 {
		t.Errorf("empty log: lag %v", got)
	}
	l.Record(t0, set(t, uA+":1-2"))
	l.Record(t0.Add(500*time.Microsecond), set(t, uA+":1-3")) // merged: within the resolution
	l.Record(t0.Add(10*time.Millisecond), set(t, uA+":1-3"))  // nothing new
	l.Record(t0.Add(20*time.Millisecond), set(t, uA+":1-5"))
	l.Record(t0.Add(30*time.Millisecond), set(t, uA+":1-9"))
	if l.Len() != 3 {
		t.Fatalf("len %d, want 3 (one merged, one adding nothing)", l.Len())
	}
	now := t0.Add(100 * time.Millisecond)
	for _, c := range []struct {
		applied string
		want    time.Duration
	}{
		{uA + ":1-9", 0},
		{uA + ":1-12", 0},
		{uA + ":1-5", 70 * time.Millisecond},
		{uA + ":1-4", 80 * time.Millisecond},
		{uA + ":1-3", 80 * time.Millisecond}, // the merged growth keeps its entry's time
		{uA + ":1-2", 100 * time.Millisecond},
		{uA + ":7", 100 * time.Millisecond},
	} {
		if got := l.Lag(set(t, c.applied), now); got != c.want {
			t.Errorf("lag of %s = %v, want %v", c.applied, got, c.want)
		}
	}
	// The ring keeps the newest entries; a replica behind the oldest gets
	// its age (a lower bound).
	for i := 1; i <= 6; i++ {
		l.Record(t0.Add(time.Duration(100+10*i)*time.Millisecond), set(t, uA+":1-"+strconv.Itoa(10+i)))
	}
	if l.Len() != 4 {
		t.Fatalf("len %d, want 4", l.Len())
	}
	now = t0.Add(200 * time.Millisecond)
	if got := l.Lag(set(t, uA+":1-2"), now); got != 70*time.Millisecond {
		t.Errorf("lag behind the oldest entry = %v, want its age 70ms", got)
	}
	if got := l.Lag(set(t, uA+":1-14"), now); got != 50*time.Millisecond {
		t.Errorf("lag of 1-14 = %v, want 50ms", got)
	}
	l.Reset()
	if l.Len() != 0 || l.Lag(gtid.Set{}, now) != 0 {
		t.Error("Reset kept entries")
	}
}

func TestGlobalSourceConfig(t *testing.T) {
	for _, g := range []GlobalSource{GlobalPrimaryQuery, GlobalView} {
		if p, err := ParseGlobalSource(g.String()); err != nil || p != g {
			t.Errorf("%v does not round-trip: %v %v", g, p, err)
		}
	}
	if GlobalPrimaryQuery.String() != "primary-query" || GlobalView.String() != "view" {
		t.Errorf("names %q %q", GlobalPrimaryQuery, GlobalView)
	}
	if _, err := ParseGlobalSource("primary"); err == nil || !strings.Contains(err.Error(), `"primary"`) {
		t.Errorf("bad name: %v", err)
	}
	r, _ := funcRouter(t, nil)
	cfg := r.cfg
	cfg.Global = GlobalView + 1
	if _, err := build(cfg); err == nil || !strings.Contains(err.Error(), "global source") {
		t.Errorf("unknown global source accepted: %v", err)
	}
	// Every kind, defer and the defer cap behaviour are carried out.
	for _, k := range router.PolicyKinds() {
		p, err := router.ParsePolicy(k.String())
		if err != nil {
			t.Fatal(err)
		}
		cfg := r.cfg
		cfg.Policy, cfg.Cap = p, router.Cap{PerSecond: 10, Behavior: router.CapDefer}
		cfg.Registerer = nil
		if _, err := build(cfg); err != nil {
			t.Errorf("%v with a defer cap refused: %v", p, err)
		}
		if p.Kind.IsToken() {
			p.Defer = true
			if err := r.NewSession().SetPolicy(p); err != nil {
				t.Errorf("SetPolicy(%v): %v", p, err)
			}
		}
	}
}

// globalRead runs one read of a fresh session under pol with a recorder
// and returns what happened.
func globalRead(t *testing.T, r *Router[gtid.Set], pol router.Policy, token string) (*Read[gtid.Set], error, *runRec, *LiveSession[gtid.Set]) {
	t.Helper()
	s := r.NewSession()
	if token != "" {
		s.AddToken(set(t, token), 1)
	}
	rr := &runRec{obs: set(t, uA+":1-10")}
	rd, err := s.QueryFunc(context.Background(), pol, ReadOptions[gtid.Set]{}, rr.run)
	return rd, err, rr, s
}

func TestGlobalView(t *testing.T) {
	// The view's primary is at 1-10: only r1 holds every write.
	r, src := funcRouter(t, func(c *Config[gtid.Set]) { c.Global = GlobalView })
	pol := router.Policy{Kind: router.PolicyGlobal}
	for i := range 20 {
		rd, err, rr, s := globalRead(t, r, pol, "")
		if err != nil {
			t.Fatal(err)
		}
		if rd.Node != "r1" || rd.Outcome != router.OutReplica || !rr.calls[0].Watermark {
			t.Fatalf("read %d: %s %v watermark=%v, want r1 replica with the watermark", i, rd.Node, rd.Outcome, rr.calls[0].Watermark)
		}
		if !s.State().HasSeen {
			t.Fatal("a global read did not raise the session's watermark")
		}
	}
	if n := testutil.ToFloat64(r.m.globals.WithLabelValues("view", "ok")); n != 20 {
		t.Errorf("global_targets_total{view,ok} = %v, want 20", n)
	}
	// The primary's stream moves on (another process wrote 11-12): r1 no
	// longer qualifies; with no wait budget the read falls back.
	src.pos["p"] = set(t, uA+":1-12")
	rd, err, _, _ := globalRead(t, r, pol, "")
	if err != nil || rd.Outcome != router.OutFallback || rd.Reason != router.ReasonWaitBudgetSpent {
		t.Fatalf("after the primary moved: %+v %v, want a fallback (wait-budget-spent)", rd, err)
	}
	if !r.st.PrimaryPos.Contains(set(t, uA+":1-12")) {
		t.Error("the target did not raise the router's primary position")
	}
}

func TestGlobalPrimaryUnknown(t *testing.T) {
	// GlobalPrimaryQuery against a primary that refuses connections: the
	// target is unknown, no replica may serve.
	r, _ := funcRouter(t, nil)
	rd, err, rr, _ := globalRead(t, r, router.Policy{Kind: router.PolicyGlobal, WaitBudget: time.Second}, "")
	if err != nil || rd.Outcome != router.OutFallback || rd.Reason != router.ReasonPrimaryUnknown || rd.Waited != 0 {
		t.Fatalf("%+v %v, want an immediate fallback (primary-position-unknown)", rd, err)
	}
	if len(rr.calls) != 1 || rr.calls[0].Node.Name != "p" {
		t.Fatalf("ran on %+v, want the primary", rr.calls)
	}
	if n := testutil.ToFloat64(r.m.globals.WithLabelValues("primary-query", "error")); n != 1 {
		t.Errorf("global_targets_total{primary-query,error} = %v, want 1", n)
	}
	// Under +defer the same read is deferred, the primary untouched.
	_, err, rr, _ = globalRead(t, r, router.Policy{Kind: router.PolicyGlobal, Defer: true}, "")
	var re *ReadError
	if !errors.As(err, &re) || !errors.Is(err, ErrDeferred) || re.Reason != router.ReasonPrimaryUnknown || len(rr.calls) != 0 {
		t.Fatalf("err %v calls %d, want a deferral (primary-position-unknown) running nothing", err, len(rr.calls))
	}
	// A cancelled context is an error, not an unknown target.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.NewSession().QueryFunc(ctx, router.Policy{Kind: router.PolicyGlobal}, ReadOptions[gtid.Set]{}, (&runRec{}).run); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestDeferred(t *testing.T) {
	// Neither replica holds the token uA:8 (r1 set back to 1-5); the
	// commit log learned 1-5 250 ms ago and 1-10 150 ms ago: both replicas
	// lag 150 ms.
	r, src := funcRouter(t, func(c *Config[gtid.Set]) { c.Wait = WaitWatcher })
	src.pos["r1"] = set(t, uA+":1-5")
	now := time.Now()
	r.st.Commits.Record(now.Add(-250*time.Millisecond), set(t, uA+":1-5"))
	r.st.Commits.Record(now.Add(-150*time.Millisecond), set(t, uA+":1-10"))
	for _, c := range []struct {
		name       string
		pol        router.Policy
		reason     router.Reason
		waited     bool
		wantOutput string
	}{
		{"token-ryw+defer", router.Policy{Kind: router.PolicyTokenRYW, Defer: true}, router.ReasonNoReplicaQualifies, false, "no-replica-qualifies"},
		{"token-wait(20ms)+defer", router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 20 * time.Millisecond, Defer: true}, router.ReasonWaitBudgetSpent, true, "wait-budget-spent"},
		{"global(20ms)+defer", router.Policy{Kind: router.PolicyGlobal, WaitBudget: 20 * time.Millisecond, Defer: true}, router.ReasonPrimaryUnknown, false, "primary-position-unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err, rr, _ := globalRead(t, r, c.pol, uA+":8")
			var re *ReadError
			if !errors.As(err, &re) {
				t.Fatalf("err %v, want a *ReadError", err)
			}
			if !errors.Is(err, ErrDeferred) || re.Outcome != router.OutDeferred || re.Reason != c.reason || !re.Retryable() {
				t.Fatalf("%+v, want deferred (%v), retryable", re, c.reason)
			}
			if len(rr.calls) != 0 {
				t.Fatalf("a deferred read ran on %+v", rr.calls)
			}
			if (re.Waited > 0) != c.waited {
				t.Errorf("waited %v", re.Waited)
			}
			// The estimate: the replicas' lag from the commit log (150 ms
			// plus the test's own time), not the 10 ms floor.
			if re.RetryAfter < 150*time.Millisecond || re.RetryAfter > 150*time.Millisecond+time.Since(now) {
				t.Errorf("retry after %v, want 150ms..%v", re.RetryAfter, 150*time.Millisecond+time.Since(now))
			}
			if !strings.Contains(re.Error(), "deferred: "+c.wantOutput) || !strings.Contains(re.Error(), "retry after") {
				t.Errorf("message %q", re.Error())
			}
			if n := testutil.ToFloat64(r.m.deferrals.WithLabelValues(c.reason.String())); n != 1 {
				t.Errorf("deferrals_total{%v} = %v, want 1", c.reason, n)
			}
			if n := testutil.ToFloat64(r.m.reads.WithLabelValues(c.pol.Kind.String(), "deferred", c.reason.String())); n != 1 {
				t.Errorf("reads_total{deferred} = %v, want 1", n)
			}
		})
	}
}

func TestCapDefer(t *testing.T) {
	r, src := funcRouter(t, func(c *Config[gtid.Set]) {
		c.Cap = router.Cap{PerSecond: 0.001, Burst: 1, Behavior: router.CapDefer}
	})
	src.pos["r1"] = set(t, uA+":1-5")
	pol := router.Policy{Kind: router.PolicyTokenRYW}
	rd, err, _, _ := globalRead(t, r, pol, uA+":8")
	if err != nil || rd.Outcome != router.OutFallback {
		t.Fatalf("first: %+v %v, want the one fallback the bucket holds", rd, err)
	}
	_, err, rr, _ := globalRead(t, r, pol, uA+":8")
	var re *ReadError
	if !errors.As(err, &re) || re.Outcome != router.OutDeferred || re.Reason != router.ReasonCapExceeded || len(rr.calls) != 0 {
		t.Fatalf("second: %v, want deferred (cap-exceeded) running nothing", err)
	}
	if !errors.Is(err, ErrDeferred) || !errors.Is(err, ErrCapExceeded) {
		t.Errorf("%v matches neither ErrDeferred nor ErrCapExceeded", err)
	}
	if re.RetryAfter != router.MinRetryAfter {
		t.Errorf("retry after %v with an empty commit log, want the floor %v", re.RetryAfter, router.MinRetryAfter)
	}
}
