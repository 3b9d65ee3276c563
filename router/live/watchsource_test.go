package live

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/causallab/causallab/binlogwatch"
	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// fakeWatcher is a Watcher whose snapshot the test sets (health mapping).
type fakeWatcher struct{ snap *binlogwatch.Snapshot }

func (f *fakeWatcher) Snapshot() *binlogwatch.Snapshot { return f.snap }
func (f *fakeWatcher) WaitFor(ctx context.Context, want gtid.Set) error {
	if f.snap.Executed.Contains(want) {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func TestWatchSourceHealth(t *testing.T) {
	now := time.Unix(1000, 0)
	set := gtid.MustParse("3e11fa47-0000-4000-8000-000000000000:1-5")
	cases := []struct {
		name string
		snap binlogwatch.Snapshot
		want bool
	}{
		{"streaming", binlogwatch.Snapshot{Health: binlogwatch.HealthStreaming, LastEvent: now.Add(-time.Second)}, true},
		{"catching-up", binlogwatch.Snapshot{Health: binlogwatch.HealthCatchingUp}, true},
		{"starting", binlogwatch.Snapshot{Health: binlogwatch.HealthStarting}, false},
		{"reconnecting", binlogwatch.Snapshot{Health: binlogwatch.HealthReconnecting, LastEvent: now}, false},
		{"down", binlogwatch.Snapshot{Health: binlogwatch.HealthDown, LastEvent: now}, false},
		{"stopped", binlogwatch.Snapshot{Health: binlogwatch.HealthStreaming, Stopped: true, LastEvent: now}, false},
		{"silent stream", binlogwatch.Snapshot{Health: binlogwatch.HealthStreaming, LastEvent: now.Add(-6 * time.Second)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.snap.Executed = set
			fw := &fakeWatcher{snap: &c.snap}
			src, err := NewWatchSource(WatchSourceConfig{Watchers: map[string]Watcher{"r1": fw}, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			got, ok := src.Position("r1")
			if ok != c.want || !got.Equal(set) {
				t.Fatalf("Position = %v, %v; want %v, %v", got, ok, set, c.want)
			}
		})
	}
	src, err := NewWatchSource(WatchSourceConfig{Watchers: map[string]Watcher{"r1": &fakeWatcher{snap: &binlogwatch.Snapshot{}}}})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := src.Position("nope"); ok || !s.IsEmpty() {
		t.Fatalf("unknown node: %v %v", s, ok)
	}
	if err := src.WaitFor(context.Background(), "nope", set); err == nil {
		t.Fatal("WaitFor on an unknown node succeeded")
	}
	for _, bad := range []WatchSourceConfig{{}, {Watchers: map[string]Watcher{"": &fakeWatcher{}}}, {Watchers: map[string]Watcher{"x": nil}}} {
		if _, err := NewWatchSource(bad); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
	if _, err := NewGroupSource(nil, 0); err == nil {
		t.Error("nil group accepted")
	}
}

// startGroup runs binlog watchers on the primary and every replica of the
// shared topology until the test ends, and waits until all stream.
func startGroup(tb testing.TB, ctx context.Context) *binlogwatch.Group {
	tb.Helper()
	mk := func(n compose.Node) *binlogwatch.Watcher {
		w, err := binlogwatch.New(binlogwatch.Config{Name: n.Name, Host: n.Host, Port: uint16(n.Port), User: n.User,
			Password: n.Password, HeartbeatPeriod: 200 * time.Millisecond, ReadTimeout: time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		return w
	}
	var reps []*binlogwatch.Watcher
	for _, r := range topo.Replicas() {
		reps = append(reps, mk(r))
	}
	g, err := binlogwatch.NewGroup(mk(topo.Primary()), reps...)
	if err != nil {
		tb.Fatal(err)
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = g.Run(gctx); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range append([]string{topo.Primary().Name}, namesOf(topo.Replicas())...) {
		for g.Snapshot(n).Health != binlogwatch.HealthStreaming {
			if time.Now().After(deadline) {
				tb.Fatalf("watcher %s not streaming: %+v", n, g.Snapshot(n))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return g
}

func namesOf(ns []compose.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

// TestWatchSource: the binlogwatch-backed source on real MySQL. Reads of a
// session's own writes through token-wait with the watcher's notification
// return the write (checked from the rows); each replica's published set is
// never ahead of its @@gtid_executed; a stopped applier makes the read wait
// on the watcher, then go elsewhere or fall back.
func TestWatchSource(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resetFaults(t, ctx)
	g := startGroup(t, ctx)
	src, err := NewGroupSource(g, 0, append([]string{topo.Primary().Name}, namesOf(topo.Replicas())...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range src.Nodes() {
		if _, ok := src.Position(n); !ok {
			t.Fatalf("%s unhealthy while streaming", n)
		}
	}
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: src, Wait: WaitWatcher,
		Policy: router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second}, Trace: true})
	s := r.NewSession()
	defer s.Close()
	mustExec(t, ctx, s, "CREATE DATABASE IF NOT EXISTS rt")
	mustExec(t, ctx, s, "CREATE TABLE IF NOT EXISTS rt.ws (id INT PRIMARY KEY, v INT NOT NULL)")
	mustExec(t, ctx, s, "DELETE FROM rt.ws")

	// 1. Read-your-writes through the watcher, checked from the data; the
	// published sets are checked against the servers after each read.
	replicaReads, waits := 0, 0
	for i := 1; i <= 30; i++ {
		mustExec(t, ctx, s, "INSERT INTO rt.ws VALUES (?, ?)", i, i*10)
		rd, err := s.Query(ctx, "SELECT COALESCE(MAX(id), 0) FROM rt.ws")
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if got := readInt(t, rd); got < int64(i) {
			t.Fatalf("read %d on %s (%v) returned max id %d: RYW violated; trace %v", i, rd.Node, rd.Outcome, got, rd.Trace)
		}
		if rd.Outcome == router.OutReplica {
			replicaReads++
		}
		if rd.Waited > 0 {
			waits++
		}
		for _, rep := range topo.Replicas() {
			pub, _ := src.Position(rep.Name)
			exec := executedOf(t, ctx, rep)
			if !exec.Contains(pub) {
				t.Fatalf("%s: published set %v ahead of @@gtid_executed %v", rep.Name, pub, exec)
			}
		}
	}
	t.Logf("30 writes+reads: %d served by replicas, %d waited on the watcher", replicaReads, waits)
	if replicaReads == 0 {
		t.Fatal("no read was served by a replica: the source never showed a replica holding the token")
	}

	// 2. replica1 stopped: reads still see the write (replica2, or a wait).
	if err := topo.StopApplier(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	defer resetFaults(t, ctx)
	for i := 31; i <= 40; i++ {
		mustExec(t, ctx, s, "INSERT INTO rt.ws VALUES (?, ?)", i, i*10)
		rd, err := s.Query(ctx, "SELECT COALESCE(MAX(id), 0) FROM rt.ws")
		if err != nil {
			t.Fatal(err)
		}
		if got := readInt(t, rd); got < int64(i) || rd.Node == "replica1" {
			t.Fatalf("replica1 stopped: read %d on %s returned %d", i, rd.Node, got)
		}
	}

	// 3. Both stopped: the read waits its budget on the watcher, then falls
	// back to the primary, which has the write.
	if err := topo.StopApplier(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPolicy(router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, s, "INSERT INTO rt.ws VALUES (41, 410)")
	rd, err := s.Query(ctx, "SELECT COALESCE(MAX(id), 0) FROM rt.ws")
	if err != nil {
		t.Fatal(err)
	}
	if rd.Outcome != router.OutFallback || rd.Reason != router.ReasonWaitBudgetSpent || rd.Waited < 250*time.Millisecond || readInt(t, rd) < 41 {
		t.Fatalf("both stopped: outcome %v reason %v waited %v node %s; trace %v", rd.Outcome, rd.Reason, rd.Waited, rd.Node, rd.Trace)
	}
	// 4. The watcher's notification ends a wait as soon as the applier
	// resumes.
	need := s.State().Token
	done := make(chan error, 1)
	go func() {
		wctx, c := context.WithTimeout(ctx, 10*time.Second)
		defer c()
		done <- src.WaitFor(wctx, "replica2", need)
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("WaitFor returned %v while replica2's applier is stopped", err)
	default:
	}
	if err := topo.StartApplier(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitFor after the applier resumed: %v", err)
	}
	wctx, c := context.WithTimeout(ctx, 50*time.Millisecond)
	defer c()
	if err := src.WaitFor(wctx, "replica1", need); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor on stopped replica1: %v, want a deadline error", err)
	}
}

func executedOf(t *testing.T, ctx context.Context, n compose.Node) gtid.Set {
	t.Helper()
	d := &mysqlwire.Dialer{User: n.User, Password: n.Password, Timeout: 2 * time.Second}
	c, err := d.Dial(ctx, n.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	set, err := mysqlwire.ReadExecuted(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestWaitAuto: the zero wait method resolves from the position source.
func TestWaitAuto(t *testing.T) {
	ws, err := NewWatchSource(WatchSourceConfig{Watchers: map[string]Watcher{"r1": &fakeWatcher{snap: &binlogwatch.Snapshot{}}}})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := NewPoller(PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "x:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		src  PositionSource[gtid.Set]
		set  WaitMethod
		want WaitMethod
	}{
		{ws, WaitAuto, WaitWatcher},
		{pl, WaitAuto, WaitGTIDFunction},
		{&staticSource{}, WaitAuto, WaitGTIDFunction},
		{ws, WaitGTIDFunction, WaitGTIDFunction},
		{pl, WaitWatcher, WaitWatcher},
	} {
		cfg := Config[gtid.Set]{Primary: Node{Name: "p", Addr: "x:0"}, Replicas: []Node{{Name: "r1", Addr: "x:1"}}, Positions: c.src, Wait: c.set}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.Wait != c.want {
			t.Errorf("%T with %v: resolved to %v, want %v", c.src, c.set, cfg.Wait, c.want)
		}
	}
	bad := Config[gtid.Set]{Primary: Node{Name: "p", Addr: "x:0"}, Positions: ws, Wait: WaitWatcher + 1}
	if err := bad.validate(); err == nil {
		t.Error("unknown wait method accepted")
	}
}
