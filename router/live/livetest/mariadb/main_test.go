// Package mariadb_test runs router/live's MariaDB flavor against a real
// MariaDB 11.8 topology (a primary and two replicas, shared by the
// package's tests): token capture from session_track_system_variables =
// last_gtid, MASTER_GTID_WAIT and the poller's waits, and what a failover
// does to a token whose write was lost.
package mariadb_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// topo is this package's one topology: a primary and two replicas.
var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Engine: compose.EngineMariaDB, Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

type pos = gtid.MariaDBPosition

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func node(n compose.Node) live.Node { return live.Node{Name: n.Name, Addr: n.Addr()} }

func replicas() []live.Node {
	var out []live.Node
	for _, r := range topo.Replicas() {
		out = append(out, node(r))
	}
	return out
}

// startPoller polls every node's gtid_current_pos until the test ends,
// once each has answered.
func startPoller(t *testing.T, ctx context.Context) *live.Poller[pos] {
	t.Helper()
	p := topo.Primary()
	pl, err := live.NewPoller(live.PollerConfig[pos]{Flavor: live.MariaDB{}, Nodes: append([]live.Node{node(p)}, replicas()...),
		User: p.User, Password: p.Password, Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = pl.Run(pctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range topo.Nodes() {
		for {
			if _, ok := pl.Position(n.Name); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("poller never reached %s", n.Name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return pl
}

func newRouter(t *testing.T, ctx context.Context, pl *live.Poller[pos], pol router.Policy, wait live.WaitMethod) *live.Router[pos] {
	t.Helper()
	p := topo.Primary()
	r, err := live.New(ctx, live.Config[pos]{Flavor: live.MariaDB{}, Primary: node(p), Replicas: replicas(), User: p.User, Password: p.Password,
		Policy: pol, Positions: pl, Wait: wait, Epoch: topo.Epoch()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func mustExec(t *testing.T, ctx context.Context, s *live.LiveSession[pos], q string, args ...any) live.Write[pos] {
	t.Helper()
	_, w, err := s.ExecWrite(ctx, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return w
}

func setup(t *testing.T, ctx context.Context, s *live.LiveSession[pos]) {
	t.Helper()
	mustExec(t, ctx, s, "CREATE DATABASE IF NOT EXISTS rt")
	mustExec(t, ctx, s, "CREATE TABLE IF NOT EXISTS rt.t (id BIGINT PRIMARY KEY, v BIGINT)")
}

// resetAppliers starts every replica's applier.
func resetAppliers(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, r := range topo.Replicas() {
		if err := topo.StartApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTrackSessionProves: the flavor's TrackSession accepts MariaDB's
// primary (the router starts), and a write's position is the GTID the
// server reports as @@last_gtid, one GTID in domain 0.
func TestTrackSessionProves(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	rt := newRouter(t, ctx, startPoller(t, ctx), router.Policy{Kind: router.PolicyTokenWait, WaitBudget: time.Second}, live.WaitAuto)
	s := rt.NewSession()
	setup(t, ctx, s)
	w := mustExec(t, ctx, s, "REPLACE INTO rt.t VALUES (1, 1)")
	if !w.OK || len(w.Pos.GTIDs()) != 1 {
		t.Fatalf("write not tokened: %+v", w)
	}
	// Reading it back in the same session proves the token names the
	// write: the read waited (or found a replica) and saw the row.
	rd, err := s.Query(ctx, "SELECT v FROM rt.t WHERE id = 1")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := rd.Result.GetInt(0, 0); err != nil || v != 1 {
		t.Fatalf("read on %s: v = %d, %v", rd.Node, v, err)
	}
	t.Logf("write position %s, read served by %s (%v)", w.Pos, rd.Node, rd.Outcome)
}

// TestSharedPrimaryPool: an autocommit write does not pin its primary
// connection on MariaDB (its OK packet's tracking of last_gtid is not a
// session state the pool must keep): 20 sessions write through a pool of
// 2 connections, each write within its own 10 s.
func TestSharedPrimaryPool(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	p := topo.Primary()
	rt, err := live.New(ctx, live.Config[pos]{Flavor: live.MariaDB{}, Primary: node(p), Replicas: replicas(), User: p.User, Password: p.Password,
		Policy: router.Policy{Kind: router.PolicyTokenWait, WaitBudget: time.Second}, Positions: startPoller(t, ctx), PrimaryPool: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	setup(t, ctx, rt.NewSession())
	for i := range 20 {
		s := rt.NewSession()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, w, err := s.ExecWrite(wctx, "REPLACE INTO rt.t VALUES (?, ?)", 1000+i, i)
		cancel()
		if err != nil || !w.OK {
			t.Fatalf("session %d's write through a pool of 2: %v (%+v)", i, err, w)
		}
	}
}

// TestTokenWaitSeesOwnWrites: with every wait method, 30 write-then-read
// rounds each read the session's own value, and once both replicas'
// appliers are stopped a read waits its budget and falls back to the
// primary (still its own value): MASTER_GTID_WAIT answered -1, or the
// poller never saw the position.
func TestTokenWaitSeesOwnWrites(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	pl := startPoller(t, ctx)
	for _, wm := range []live.WaitMethod{live.WaitGTIDFunction, live.WaitWatcher} {
		t.Run(wm.String(), func(t *testing.T) {
			rt := newRouter(t, ctx, pl, router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second}, wm)
			s := rt.NewSession()
			setup(t, ctx, s)
			onReplica := 0
			for i := range 30 {
				mustExec(t, ctx, s, "REPLACE INTO rt.t VALUES (2, ?)", i)
				rd, err := s.Query(ctx, "SELECT v FROM rt.t WHERE id = 2")
				if err != nil {
					t.Fatal(err)
				}
				if v, err := rd.Result.GetInt(0, 0); err != nil || v != int64(i) {
					t.Fatalf("round %d: read %d on %s (%v), want own write", i, v, rd.Node, err)
				}
				if rd.Outcome == router.OutReplica {
					onReplica++
				}
			}
			if onReplica == 0 {
				t.Fatal("no read served by a replica: the token never qualified one")
			}
			for _, r := range topo.Replicas() {
				if err := topo.StopApplier(ctx, r.Name); err != nil {
					t.Fatal(err)
				}
			}
			defer resetAppliers(t, ctx)
			mustExec(t, ctx, s, "REPLACE INTO rt.t VALUES (2, 1000)")
			rd, err := s.Query(ctx, "SELECT v FROM rt.t WHERE id = 2")
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := rd.Result.GetInt(0, 0); v != 1000 || rd.Outcome != router.OutFallback {
				t.Fatalf("appliers stopped: read %d on %s (%v, %v), want 1000 from the primary after the budget", v, rd.Node, rd.Outcome, rd.Reason)
			}
			t.Logf("%d/30 reads on a replica; stopped appliers: %v after %v", onReplica, rd.Reason, rd.Waited)
		})
	}
}

// TestZFailoverLostWrite (last: it changes roles) shows what MariaDB's
// per-domain comparison does to a token through a failover. both
// replicas' appliers are stopped, a session writes row 10 (its token names the
// write), the primary is killed and replica1 promoted without it. The
// epoch router (CheckEpoch) fails the read fast (ReasonWriteLost), and still
// does once the new primary's sequence numbers pass the lost write's.
// The new primary writes in the same domain, and its sequence numbers
// pass the lost writes': every node of the new timeline then "contains"
// the tokens (MariaDB's per-domain comparison, gtid.MariaDBPosition.Contains,
// the one MASTER_GTID_WAIT makes), so the plain router serves the read
// silently without the session's write; the epoch router does not.
func TestZFailoverLostWrite(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	pl := startPoller(t, ctx)
	plain := newRouter(t, ctx, pl, router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second}, live.WaitGTIDFunction)
	epoch := newRouter(t, ctx, pl, router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second, CheckEpoch: true}, live.WaitGTIDFunction)
	ps, es, other := plain.NewSession(), epoch.NewSession(), epoch.NewSession()
	setup(t, ctx, ps)
	mustExec(t, ctx, ps, "REPLACE INTO rt.t VALUES (10, 0)")
	if err := topo.WaitReplicated(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// Both appliers stop: neither replica applies the two writes below,
	// and replica2, repointed to replica1, gets only what replica1 has.
	for _, r := range topo.Replicas() {
		if err := topo.StopApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
	pw := mustExec(t, ctx, ps, "REPLACE INTO rt.t VALUES (10, 1)")
	ew := mustExec(t, ctx, es, "REPLACE INTO rt.t VALUES (11, 1)")
	fr, err := topo.Failover(ctx, "replica1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s (epoch %d): lost %s", fr.NewPrimary, fr.Epoch, fr.LostGTIDs)
	if fr.LostGTIDs == "" {
		t.Fatal("the failover lost nothing: the test's premise (a lost write) does not hold")
	}
	var reps []live.Node
	for _, r := range topo.Replicas() {
		reps = append(reps, node(r))
	}
	for _, rt := range []*live.Router[pos]{plain, epoch} {
		if err := rt.Failover(ctx, node(topo.Primary()), reps, fr.Epoch); err != nil {
			t.Fatal(err)
		}
	}
	// Right after the failover the epoch check holds: the new primary's
	// position lacks the lost write, so the read fails fast.
	_, err = es.Query(ctx, "SELECT v FROM rt.t WHERE id = 11")
	var re *live.ReadError
	if !errors.As(err, &re) || re.Reason != router.ReasonWriteLost {
		t.Fatalf("epoch read right after the failover: %v, want a ReadError with ReasonWriteLost", err)
	}
	t.Logf("epoch token %s right after the failover: %v (%v)", ew.Pos, re.Reason, re.Outcome)
	// The new primary writes in domain 0 (through the epoch router, which
	// raises its view of the primary with each acknowledged write) until
	// its sequence number passes both lost writes'.
	need := pw.Pos.Union(ew.Pos)
	for i := 0; ; i++ {
		w := mustExec(t, ctx, other, "REPLACE INTO rt.t VALUES (?, 2)", 100+i)
		if w.Pos.Contains(need) {
			t.Logf("new primary's write %d at %s contains the lost tokens %s", i, w.Pos, need)
			break
		}
		if i > 10 {
			t.Fatalf("new primary's writes reached %s without containing %s", w.Pos, need)
		}
	}
	if err := topo.WaitReplicated(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// Now both tokens are "contained" by the new timeline's positions: the
	// plain router serves the read from a node that never had the write
	// (MariaDB compares by sequence number within the domain). The epoch
	// router still fails it fast: the token is not in the failover's base
	// (router.View.Bases, the new primary's position when promoted), and
	// only then does a numbered token's loss stay detectable. Before bases
	// it was served silently too.
	rd, err := ps.Query(ctx, "SELECT v FROM rt.t WHERE id = ?", 10)
	if err != nil {
		t.Fatalf("no-epoch read: %v", err)
	}
	if rd.Result.RowNumber() == 1 {
		if v, _ := rd.Result.GetInt(0, 0); v == 1 {
			t.Fatalf("no-epoch read on %s has v = 1: the lost write cannot be there", rd.Node)
		}
	}
	if rd.Outcome != router.OutReplica && rd.Outcome != router.OutFallback {
		t.Fatalf("no-epoch read: outcome %v", rd.Outcome)
	}
	t.Logf("no-epoch token: read served by %s (%v) without the session's write: silently stale", rd.Node, rd.Outcome)
	_, err = es.Query(ctx, "SELECT v FROM rt.t WHERE id = 11")
	if !errors.As(err, &re) || re.Reason != router.ReasonWriteLost {
		t.Fatalf("epoch read once the new timeline passed the lost sequence numbers: %v, want ReasonWriteLost", err)
	}
	t.Logf("epoch token %s once the new timeline passed it: %v (%v)", ew.Pos, re.Reason, re.Outcome)
}
