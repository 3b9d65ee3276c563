// Package postgres_test runs router/live's PostgreSQL flavor (PGRouter,
// NewPGPoller, NewPGPositions: polling or the primary's walsender
// feedback) against a real PostgreSQL 18 primary and two streaming
// standbys, shared by the package's tests: tokens from
// pg_current_wal_lsn() after the commit, waits on polled replay LSNs, and
// what a failover does to a token whose write was lost.
package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// topo is this package's one topology: a primary and two standbys.
var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Engine: compose.EnginePostgres, Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

// dialTimeout bounds connection attempts (and the poll and watch
// queries): generous, the machine is shared and loaded.
const dialTimeout = 10 * time.Second

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

// startPoller polls every node's LSN until the test ends, once each has
// answered; primary is PollerConfig.Primary ("": every node is polled
// with the executed query).
func startPoller(t *testing.T, ctx context.Context, primary string) *live.Poller[gtid.PGLSN] {
	t.Helper()
	p := topo.Primary()
	var nodes []live.Node
	for _, n := range topo.Nodes() {
		nodes = append(nodes, node(n))
	}
	pl, err := live.NewPGPoller(live.PollerConfig[gtid.PGLSN]{Nodes: nodes, User: p.User, Password: p.Password, Interval: 5 * time.Millisecond, DialTimeout: dialTimeout, Primary: primary}, "")
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = pl.Run(pctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range nodes {
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

func newRouter(t *testing.T, ctx context.Context, pl *live.Poller[gtid.PGLSN], pol router.Policy) *live.PGRouter {
	t.Helper()
	p := topo.Primary()
	r, err := live.NewPG(ctx, live.PGConfig{Primary: node(p), Replicas: replicas(), User: p.User, Password: p.Password,
		Policy: pol, Positions: pl, Epoch: topo.Epoch(), DialTimeout: dialTimeout, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func mustExec(t *testing.T, ctx context.Context, s *live.PGSession, q string, args ...any) gtid.PGLSN {
	t.Helper()
	_, pos, err := s.Exec(ctx, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return pos
}

// value is the one int8 a read returned, or -1 for no row.
func value(t *testing.T, rd *live.PGRead) int64 {
	t.Helper()
	if len(rd.Rows) == 0 {
		return -1
	}
	v, ok := rd.Rows[0][0].(int64)
	if !ok {
		t.Fatalf("read returned %T %v", rd.Rows[0][0], rd.Rows[0][0])
	}
	return v
}

func setup(t *testing.T, ctx context.Context, s *live.PGSession) {
	t.Helper()
	mustExec(t, ctx, s, "CREATE TABLE IF NOT EXISTS public.rt (id BIGINT PRIMARY KEY, v BIGINT)")
}

const upsert = "INSERT INTO public.rt VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v"

// TestTokenWaitSeesOwnWrites: 30 write-then-read rounds each read the
// session's own value (most on a standby once its replay LSN, polled,
// reaches the token); a statement error is the caller's; a statement
// that leaves a transaction open is refused.
func TestTokenWaitSeesOwnWrites(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	rt := newRouter(t, ctx, startPoller(t, ctx, topo.Primary().Name), router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second})
	s := rt.NewSession()
	// DDL is tokened too: a table created by the session is there when it
	// reads it on a standby.
	ddl := mustExec(t, ctx, s, "CREATE TABLE public.rt_ddl (id BIGINT)")
	if ddl == 0 {
		t.Fatal("CREATE TABLE got no token")
	}
	if _, err := s.Query(ctx, "SELECT count(*) FROM public.rt_ddl"); err != nil {
		t.Fatalf("reading the session's new table: %v", err)
	}
	setup(t, ctx, s)
	onReplica := 0
	var last gtid.PGLSN
	for i := range 30 {
		pos := mustExec(t, ctx, s, upsert, 1, i)
		if pos == 0 || pos < last {
			t.Fatalf("round %d: token %s after %s", i, pos, last)
		}
		last = pos
		rd, err := s.Query(ctx, "SELECT v FROM public.rt WHERE id = $1", 1)
		if err != nil {
			t.Fatal(err)
		}
		if v := value(t, rd); v != int64(i) {
			t.Fatalf("round %d: read %d on %s, want own write", i, v, rd.Node)
		}
		if rd.Outcome == router.OutReplica {
			onReplica++
		}
	}
	if onReplica == 0 {
		t.Fatal("no read served by a standby: the token never qualified one")
	}
	if _, err := s.Query(ctx, "SELECT no_such_column FROM public.rt"); err == nil {
		t.Fatal("a bad statement succeeded")
	}
	if _, _, err := s.Exec(ctx, "BEGIN"); !errors.Is(err, live.ErrPGTransaction) {
		t.Fatalf("BEGIN: %v, want ErrPGTransaction", err)
	}
	t.Logf("%d/30 reads on a standby; last token %s", onReplica, last)
}

// TestZFailoverLostWrite (last: it changes roles). replica1's WAL
// receiver is cut (compose's partition on the local backend), two
// sessions write (one through a plain token-wait router, one through a
// router with the epoch), and replica1 is promoted without those writes:
// pg_promote replays only what the standby received; replica2, which has
// them, is rewound (pg_rewind) and streams the new timeline. The primary
// is killed first.
//
// First the window before the routers are told (lab failover's: compose
// promotes and repoints, then the routers hear of it): another client
// writes on the new primary until its LSN passes the lost writes' LSNs,
// and replica2 replays that. Read then, both sessions must see their own
// write or fail (typed, or an error: the primary they fall back to is
// dead), never be served by a node of the new timeline, whose LSN "has" the lost token:
// the promoted replica1's pg_current_wal_lsn() and the rewound replica2's
// pg_last_wal_replay_lsn() are both past it. The plain router's poller
// polls every node with the executed query (PollerConfig.Primary ""), the
// epoch router's names the primary (standbys asked their replay LSN
// only), as lab failover's do.
//
// Then the routers are told. The epoch router, told the new timeline's
// switch point (FailoverAt), fails the read fast (ReasonWriteLost); the
// plain router serves the read without the write, silently (an LSN token
// names a position the new timeline "has"), while the epoch router still
// fails it fast (the token is above the failover's base). Before bases
// (router.View.Bases) the epoch router served it too.
func TestZFailoverLostWrite(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	pl := startPoller(t, ctx, "")
	plain := newRouter(t, ctx, pl, router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second})
	epoch := newRouter(t, ctx, startPoller(t, ctx, topo.Primary().Name), router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second, CheckEpoch: true})
	// A router over the primary's walsender feedback: its Failover
	// retargets the watcher at the new primary.
	wsrc := startPositions(t, ctx, live.PGPositionsWalsender, nil)
	ws, err := live.NewPG(ctx, live.PGConfig{Primary: node(topo.Primary()), Replicas: replicas(), User: topo.Primary().User,
		Password: topo.Primary().Password, Policy: router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second},
		Positions: wsrc, Epoch: topo.Epoch(), DialTimeout: dialTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ws.Close)
	ps, es, other := plain.NewSession(), epoch.NewSession(), epoch.NewSession()
	setup(t, ctx, ps)
	mustExec(t, ctx, ps, upsert, 10, 0)
	mustExec(t, ctx, ps, upsert, 11, 0)
	if err := topo.WaitReplicated(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	mode, err := topo.Partition(ctx, "replica1")
	if err != nil {
		t.Fatal(err)
	}
	if mode != compose.PartitionIOThread {
		t.Skip("this test cuts replica1's WAL receiver, which needs the local backend")
	}
	pp := mustExec(t, ctx, ps, upsert, 10, 1)
	ep := mustExec(t, ctx, es, upsert, 11, 1)
	time.Sleep(300 * time.Millisecond)
	t1 := time.Now()
	if err := topo.Kill(ctx, topo.Primary().Name); err != nil {
		t.Fatal(err)
	}
	fr, err := topo.Failover(ctx, "replica1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("partition took %v, failover %v", t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	t.Logf("failover to %s (epoch %d, timeline %d at %s): lost %s (%d bytes); rewound %v", fr.NewPrimary, fr.Epoch, fr.NewTimeline, fr.SwitchPoint, fr.LostWAL, fr.LostWALBytes, fr.Errant)
	if fr.LostWAL == "" {
		t.Fatal("the failover lost nothing: the test's premise (a lost write) does not hold")
	}
	need := max(pp, ep)
	newTimelinePast(t, ctx, need)
	for _, c := range []struct {
		name string
		s    *live.PGSession
		id   int
	}{{"no-epoch", ps, 10}, {"epoch", es, 11}} {
		// Each read waits its budget (no standby qualifies) and goes to
		// the old primary, which is dead: an error. With a standby of the
		// new timeline counted as holding the token, every read would be
		// served by it.
		served := map[string]int{}
		for range 4 {
			rd, err := c.s.Query(ctx, "SELECT v FROM public.rt WHERE id = $1", c.id)
			var re *live.ReadError
			switch {
			case errors.As(err, &re):
				served["refused: "+re.Reason.String()]++
			case err != nil:
				served["error"]++
				t.Logf("%s read before the router is told: %v", c.name, err)
			case value(t, rd) != 1:
				t.Errorf("%s read before the router is told: served by %s (%v) with v = %d, without the session's write (token %s)",
					c.name, rd.Node, rd.Outcome, value(t, rd), tokenOf(c.s))
			default:
				served[rd.Node]++
			}
		}
		t.Logf("%s token before the router is told: %v", c.name, served)
	}
	if t.Failed() {
		t.FailNow()
	}
	if err := plain.Failover(ctx, node(topo.Primary()), replicas(), fr.Epoch); err != nil {
		t.Fatal(err)
	}
	sw, err := gtid.ParsePGLSN(fr.SwitchPoint)
	if err != nil {
		t.Fatalf("switch point %q: %v", fr.SwitchPoint, err)
	}
	if err := epoch.FailoverAt(ctx, node(topo.Primary()), replicas(), fr.Epoch, sw); err != nil {
		t.Fatal(err)
	}
	epochLost := func(when string) {
		t.Helper()
		_, err := es.Query(ctx, "SELECT v FROM public.rt WHERE id = $1", 11)
		var re *live.ReadError
		if !errors.As(err, &re) || re.Reason != router.ReasonWriteLost {
			t.Fatalf("epoch read %s: %v, want ReasonWriteLost", when, err)
		}
		// The refusal re-read the primary's position first (over pgx:
		// through the MySQL-protocol primary pool the re-read failed
		// after the dial timeout, and the refusal stood unchecked).
		reread := false
		for _, st := range re.Trace {
			reread = reread || st.Note == "primary position re-read"
		}
		if !reread {
			t.Errorf("epoch read %s: the refusal did not re-read the primary's position: %v", when, re.Trace)
		}
		t.Logf("epoch token %s %s: %v (%v)", ep, when, re.Reason, re.Outcome)
	}
	epochLost("right after the failover")
	for i := 0; ; i++ {
		pos := mustExec(t, ctx, other, upsert, 100+i, 2)
		if pos >= need {
			t.Logf("new primary's write %d at %s passes the lost tokens' %s", i, pos, need)
			break
		}
		if i > 1000 {
			t.Fatalf("new primary's writes reached %s, not %s", pos, need)
		}
	}
	for _, c := range []struct {
		name string
		s    *live.PGSession
		id   int
	}{{"no-epoch", ps, 10}} {
		rd, err := c.s.Query(ctx, "SELECT v FROM public.rt WHERE id = $1", c.id)
		if err != nil {
			t.Fatalf("%s read: %v", c.name, err)
		}
		if v := value(t, rd); v == 1 {
			t.Fatalf("%s read on %s has v = 1: the lost write cannot be on the new timeline", c.name, rd.Node)
		} else {
			t.Logf("%s token: read served by %s (%v), v = %d: silently without the session's write", c.name, rd.Node, rd.Outcome, v)
		}
	}
	epochLost("once the new timeline's LSN passed the lost write's")
	// The walsender router after its Failover: the watcher reads the new
	// primary's pg_stat_replication, and a session's write on the new
	// timeline is read back from a standby once its feedback arrives.
	if err := ws.Failover(ctx, node(topo.Primary()), replicas(), fr.Epoch); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, wsrc, 30*time.Second, topo.Replicas()...)
	if got := wsrc.Watcher().Snapshot().Primary; got != topo.Primary().Addr() {
		t.Fatalf("the watcher reads %s, not the new primary %s", got, topo.Primary().Addr())
	}
	wss := ws.NewSession()
	onReplica := 0
	for i := range 10 {
		mustExec(t, ctx, wss, upsert, 30, i)
		rd, err := wss.Query(ctx, "SELECT v FROM public.rt WHERE id = $1", 30)
		if err != nil {
			t.Fatal(err)
		}
		if v := value(t, rd); v != int64(i) {
			t.Fatalf("walsender router after the failover, round %d: read %d on %s", i, v, rd.Node)
		}
		if rd.Outcome == router.OutReplica {
			onReplica++
		}
	}
	if onReplica == 0 {
		t.Fatal("walsender router after the failover: no read on a standby")
	}
	t.Logf("walsender router after the failover: %d/10 reads on a standby (timeline %d)", onReplica, wsrc.Watcher().Snapshot().Timeline)
}

// newTimelinePast writes on the new primary, as a client other than the
// routers, until its pg_current_wal_lsn() passes need, and waits until
// every standby replayed that; it checks that replica2 is on the new
// timeline past need (the window's premise).
func newTimelinePast(t *testing.T, ctx context.Context, need gtid.PGLSN) {
	t.Helper()
	db, err := topo.DB(topo.Primary().Name)
	if err != nil {
		t.Fatal(err)
	}
	var at gtid.PGLSN
	for i := 0; at <= need; i++ {
		if i > 1000 {
			t.Fatalf("the new primary's writes reached %s, not %s", at, need)
		}
		if _, err := db.ExecContext(ctx, upsert, 1000+i, 2); err != nil {
			t.Fatal(err)
		}
		var text string
		if err := db.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&text); err != nil {
			t.Fatal(err)
		}
		if at, err = gtid.ParsePGLSN(text); err != nil {
			t.Fatal(err)
		}
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r2, err := topo.DB("replica2")
	if err != nil {
		t.Fatal(err)
	}
	var replay string
	var tli int64
	if err := r2.QueryRowContext(ctx, "SELECT pg_last_wal_replay_lsn()::text, received_tli FROM pg_stat_wal_receiver").Scan(&replay, &tli); err != nil {
		t.Fatal(err)
	}
	lsn, err := gtid.ParsePGLSN(replay)
	if err != nil {
		t.Fatal(err)
	}
	if lsn <= need || tli < 2 {
		t.Fatalf("replica2 replayed %s on timeline %d: not past the lost tokens' %s on the new timeline", lsn, tli, need)
	}
	t.Logf("new primary at %s, replica2 replayed %s (timeline %d): both past the lost tokens' %s", at, lsn, tli, need)
}

// tokenOf formats a session's token and its epoch.
func tokenOf(s *live.PGSession) string {
	tok, ep := s.Live().Token()
	return fmt.Sprintf("%s epoch %d", tok, ep)
}
