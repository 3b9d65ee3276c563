package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
	"github.com/causallab/causallab/walwatch"
)

// slots maps each standby to its replication slot (compose names it
// after the node): how the walsender source finds its row.
func slots() map[string]string {
	m := map[string]string{}
	for _, r := range topo.Replicas() {
		m[r.Name] = r.Name
	}
	return m
}

// startPositions runs a NewPGPositions source of kind until the test
// ends, once every standby is healthy in it.
func startPositions(t *testing.T, ctx context.Context, kind live.PGPositions, reg prometheus.Registerer) *live.PGPositionSource {
	t.Helper()
	p := topo.Primary()
	src, err := live.NewPGPositions(live.PGPositionsConfig{Kind: kind, Primary: node(p), Replicas: replicas(), User: p.User,
		Password: p.Password, Slots: slots(), Interval: 5 * time.Millisecond, DialTimeout: dialTimeout, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = src.Run(pctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitHealthy(t, src, 30*time.Second, topo.Replicas()...)
	return src
}

func waitHealthy(t *testing.T, src live.PositionSource[gtid.PGLSN], limit time.Duration, nodes ...compose.Node) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for _, n := range nodes {
		for {
			if _, ok := src.Position(n.Name); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not healthy in the position source within %v", n.Name, limit)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestWalsenderSourceSeesOwnWrites: the router over the primary's
// walsender feedback (kind walsender) serves 30 write-then-read rounds
// their own value, most on a standby, with no statement on a standby but
// the reads themselves; kind poll is the same router with the poller, and
// an unknown kind is refused.
func TestWalsenderSourceSeesOwnWrites(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	if _, err := live.NewPGPositions(live.PGPositionsConfig{Kind: "feedback", Primary: node(topo.Primary()), Replicas: replicas()}); err == nil {
		t.Fatal("kind \"feedback\" accepted")
	}
	for _, kind := range []live.PGPositions{live.PGPositionsWalsender, live.PGPositionsPoll} {
		src := startPositions(t, ctx, kind, nil)
		p := topo.Primary()
		rt, err := live.NewPG(ctx, live.PGConfig{Primary: node(p), Replicas: replicas(), User: p.User, Password: p.Password,
			Policy: router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second}, Positions: src, Epoch: topo.Epoch(), DialTimeout: dialTimeout})
		if err != nil {
			t.Fatal(err)
		}
		s := rt.NewSession()
		setup(t, ctx, s)
		onReplica := 0
		for i := range 30 {
			mustExec(t, ctx, s, upsert, 20, i)
			rd, err := s.Query(ctx, "SELECT v FROM public.rt WHERE id = $1", 20)
			if err != nil {
				t.Fatal(err)
			}
			if v := value(t, rd); v != int64(i) {
				t.Fatalf("%s round %d: read %d on %s, want own write", kind, i, v, rd.Node)
			}
			if rd.Outcome == router.OutReplica {
				onReplica++
			}
		}
		rt.Close()
		if onReplica == 0 {
			t.Fatalf("%s: no read served by a standby", kind)
		}
		if src.Fallbacks() != 0 {
			t.Fatalf("%s: %d fallbacks with every standby streaming", kind, src.Fallbacks())
		}
		t.Logf("%s: %d/30 reads on a standby", kind, onReplica)
	}
}

// TestWalsenderFallback: replica2's WAL receiver cut (compose's partition)
// takes it out of pg_stat_replication. The walsender source alone calls it
// unhealthy; with the polling fallback it is healthy at its own replay
// LSN, every such answer counted under the reason "missing". Healed, the
// walsender source vouches for it again.
func TestWalsenderFallback(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	reg := prometheus.NewRegistry()
	alone := startPositions(t, ctx, live.PGPositionsWalsender, nil)
	both := startPositions(t, ctx, live.PGPositionsWalsenderPoll, reg)
	mode, err := topo.Partition(ctx, "replica2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topo.Heal(context.Background(), "replica2") }) // best effort for later tests
	if mode != compose.PartitionIOThread {
		t.Skip("this test cuts replica2's WAL receiver, which needs the local backend")
	}
	// Both watchers must have seen the walsender go (on its way out it may
	// show as stopping: not-streaming, another reason).
	deadline := time.Now().Add(30 * time.Second)
	for _, src := range []*live.PGPositionSource{alone, both} {
		for {
			_, h := src.Watcher().Position("replica2")
			if h == walwatch.HealthMissing {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica2 still %v in the %s watcher after its WAL receiver stopped", h, src.Kind())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if _, ok := alone.Position("replica2"); ok {
		t.Fatal("the walsender source vouches for a standby missing from pg_stat_replication")
	}
	before := both.Fallbacks()
	lsn, ok := both.Position("replica2")
	if !ok || lsn == 0 {
		t.Fatalf("with the fallback: replica2 at %s, healthy %v", lsn, ok)
	}
	if both.Fallbacks() <= before {
		t.Fatal("the fallback answer was not counted")
	}
	if n := fallbackCount(t, reg, "replica2", "missing", "position"); n < 1 {
		t.Fatalf("causallab_router_pg_position_fallbacks_total{replica2,missing,position} = %v", n)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := both.WaitFor(wctx, "replica2", lsn); err != nil {
		t.Fatalf("WaitFor through the fallback: %v", err)
	}
	if err := topo.Heal(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	r2, err := topo.Node("replica2")
	if err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, alone, 30*time.Second, r2)
	t.Logf("replica2 cut: fallback answered at %s (%d fallbacks)", lsn, both.Fallbacks())
}

// fallbackCount reads causallab_router_pg_position_fallbacks_total for
// one node, reason and op from reg.
func fallbackCount(t *testing.T, reg *prometheus.Registry, node, reason, op string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"node": node, "reason": reason, "op": op}
	for _, mf := range mfs {
		if mf.GetName() != "causallab_router_pg_position_fallbacks_total" {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
