package walwatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/causallab/causallab/compose/composetest"
)

// TestFollowsWrites: each of 20 writes' commit LSN (pg_current_wal_lsn()
// after the commit) is published for both standbys, and what is published
// is never ahead of the standby's own pg_last_wal_replay_lsn() read right
// after; the primary's default is remote_apply (compose sets it).
func TestFollowsWrites(t *testing.T) {
	composetest.Need(t, topo)
	ctx := testCtx(t, 2*time.Minute)
	w := startWatcher(t, nil)
	for _, r := range topo.Replicas() {
		waitHealth(t, w, r.Name, HealthStreaming, 30*time.Second)
	}
	pc := connect(t, ctx, topo.Primary())
	if _, err := pc.Exec(ctx, "CREATE TABLE IF NOT EXISTS public.ww (id BIGINT PRIMARY KEY, v BIGINT)"); err != nil {
		t.Fatal(err)
	}
	rcs := map[string]*pgx.Conn{}
	for _, r := range topo.Replicas() {
		rcs[r.Name] = connect(t, ctx, r)
	}
	for i := range 20 {
		if _, err := pc.Exec(ctx, "INSERT INTO public.ww VALUES ($1, $1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v", i); err != nil {
			t.Fatal(err)
		}
		tok := lsn(t, ctx, pc, "pg_current_wal_lsn()")
		for _, r := range topo.Replicas() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := w.WaitFor(wctx, r.Name, tok)
			cancel()
			if err != nil {
				t.Fatalf("write %d at %s on %s: %v (%+v)", i, tok, r.Name, err, w.Snapshot().Standbys[r.Name])
			}
			pub, h := w.Position(r.Name)
			real := lsn(t, ctx, rcs[r.Name], "pg_last_wal_replay_lsn()")
			if pub > real || h != HealthStreaming {
				t.Fatalf("%s: published %s (%v) ahead of its replay LSN %s", r.Name, pub, h, real)
			}
		}
	}
	s := w.Snapshot()
	if !s.ApplyFeedback || !s.PrimaryUp || s.Timeline == 0 {
		t.Fatalf("snapshot: apply feedback %v, up %v, timeline %d", s.ApplyFeedback, s.PrimaryUp, s.Timeline)
	}
	if st := w.Stats(); st.Ticks == 0 || st.Regressions != 0 || st.Publishes == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPrimaryUnreachable: a watcher of an address where nothing listens
// publishes primary-down for every standby and counts the failures;
// WaitFor ends with its context.
func TestPrimaryUnreachable(t *testing.T) {
	composetest.Need(t, topo)
	w := startWatcher(t, func(c *Config) { c.Primary = "127.0.0.1:1"; c.RetryInterval = 20 * time.Millisecond })
	for _, r := range topo.Replicas() {
		waitHealth(t, w, r.Name, HealthPrimaryDown, 30*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.WaitFor(ctx, "replica1", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor: %v", err)
	}
	if w.Stats().TickErrors == 0 {
		t.Fatal("no tick error counted")
	}
}

// TestWatchingAStandby: a watcher pointed at a standby (in recovery: no
// primary, its pg_stat_replication empty) calls every standby
// not-primary, not healthy.
func TestWatchingAStandby(t *testing.T) {
	composetest.Need(t, topo)
	r2 := mustNode(t, "replica2")
	w := startWatcher(t, func(c *Config) { c.Primary = r2.Addr() })
	for _, r := range topo.Replicas() {
		waitHealth(t, w, r.Name, HealthNotPrimary, 30*time.Second)
	}
	if s := w.Snapshot(); !s.PrimaryUp || s.Timeline != 0 {
		t.Fatalf("snapshot of a standby: up %v, timeline %d", s.PrimaryUp, s.Timeline)
	}
}

// TestStandbyStopped: replica2 killed disappears from
// pg_stat_replication: missing (unhealthy), its last position kept, not
// 0, and WaitFor on it does not return; restarted, it streams again in a
// new walsender session (a reconnect counted) and follows writes.
func TestStandbyStopped(t *testing.T) {
	composetest.Need(t, topo)
	ctx := testCtx(t, 3*time.Minute)
	w := startWatcher(t, nil)
	before := waitHealth(t, w, "replica2", HealthStreaming, 30*time.Second)
	if err := topo.Kill(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = topo.Restart(context.Background(), "replica2") // best effort for later tests
		}
	})
	gone := waitHealth(t, w, "replica2", HealthMissing, 60*time.Second)
	if !gone.Known || gone.ReplayLSN < before.ReplayLSN || gone.PID != 0 {
		t.Fatalf("missing replica2: %+v (before %+v)", gone, before)
	}
	if _, h := w.Position("replica2"); h != HealthMissing {
		t.Fatalf("Position health %v", h)
	}
	if st := w.Snapshot().Standbys["replica1"]; st.Health != HealthStreaming {
		t.Fatalf("replica1 while replica2 is down: %+v", st)
	}
	pc := connect(t, ctx, topo.Primary())
	if _, err := pc.Exec(ctx, "CREATE TABLE IF NOT EXISTS public.ww_stop (id BIGINT)"); err != nil {
		t.Fatal(err)
	}
	tok := lsn(t, ctx, pc, "pg_current_wal_lsn()")
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := w.WaitFor(wctx, "replica2", tok)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor on a stopped standby: %v", err)
	}
	if err := topo.Restart(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	restarted = true
	wctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := w.WaitFor(wctx, "replica2", tok); err != nil {
		t.Fatalf("restarted replica2: %v (%+v)", err, w.Snapshot().Standbys["replica2"])
	}
	if w.Stats().Reconnects == 0 {
		t.Fatal("the restarted standby's new session was not counted")
	}
	t.Logf("replica2: missing at %s, back at %s; stats %+v", gone.ReplayLSN, w.Snapshot().Standbys["replica2"].ReplayLSN, w.Stats())
}

// TestZPromotion (last: it changes roles): replica1 is promoted. The
// watcher of the old primary sees both standbys leave its
// pg_stat_replication (replica1 promoted, replica2 repointed): missing;
// retargeted to the new primary it reports replica2 on the new timeline
// and follows the new primary's writes; the promoted node is not its own
// standby (missing).
func TestZPromotion(t *testing.T) {
	composetest.Need(t, topo)
	ctx := testCtx(t, 3*time.Minute)
	w := startWatcher(t, nil)
	for _, r := range topo.Replicas() {
		waitHealth(t, w, r.Name, HealthStreaming, 30*time.Second)
	}
	tli := w.Snapshot().Timeline
	fr, err := topo.Failover(ctx, "replica1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: %s on timeline %d (switch point %s)", fr.NewPrimary, fr.NewTimeline, fr.SwitchPoint)
	for _, name := range []string{"replica1", "replica2"} {
		waitHealth(t, w, name, HealthMissing, 60*time.Second)
	}
	np := topo.Primary()
	if err := w.Retarget(np.Addr()); err != nil {
		t.Fatal(err)
	}
	st := waitHealth(t, w, "replica2", HealthStreaming, 60*time.Second)
	s := w.Snapshot()
	if s.Primary != np.Addr() || s.Timeline <= tli || st.Timeline != s.Timeline {
		t.Fatalf("after retarget: primary %s timeline %d (was %d), replica2 %+v", s.Primary, s.Timeline, tli, st)
	}
	if h := s.Standbys["replica1"].Health; h != HealthMissing {
		t.Fatalf("the new primary as its own standby: %v", h)
	}
	pc := connect(t, ctx, np)
	if _, err := pc.Exec(ctx, "CREATE TABLE IF NOT EXISTS public.ww_promo (id BIGINT)"); err != nil {
		t.Fatal(err)
	}
	tok := lsn(t, ctx, pc, "pg_current_wal_lsn()")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.WaitFor(wctx, "replica2", tok); err != nil {
		t.Fatalf("replica2 after the failover: %v (%+v)", err, w.Snapshot().Standbys["replica2"])
	}
	if w.Stats().Regressions != 0 {
		t.Logf("regressions across the failover: %+v", w.Stats())
	}
}
