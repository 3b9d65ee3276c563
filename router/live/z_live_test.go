package live

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// topo is the package's shared MySQL topology (nil under -short).
var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

func node(n compose.Node) Node { return Node{Name: n.Name, Addr: n.Addr()} }

func liveNodes() (Node, []Node) {
	var reps []Node
	for _, r := range topo.Replicas() {
		reps = append(reps, node(r))
	}
	return node(topo.Primary()), reps
}

func startPoller(t *testing.T, ctx context.Context, interval time.Duration) *Poller[gtid.Set] {
	return startPollerOf(t, ctx, PollerConfig[gtid.Set]{Interval: interval})
}

// startPollerOf runs a poller of every node (cfg's Nodes, User and
// Password filled in) until the test ends, once every node answered.
func startPollerOf[P gtid.Position[P]](t *testing.T, ctx context.Context, cfg PollerConfig[P]) *Poller[P] {
	t.Helper()
	p, reps := liveNodes()
	pu := topo.Primary()
	cfg.Nodes, cfg.User, cfg.Password = append([]Node{p}, reps...), pu.User, pu.Password
	pl, err := NewPoller(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = pl.Run(pctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	// Wait for a first poll of every node.
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range cfg.Nodes {
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

func newLiveRouter(t *testing.T, ctx context.Context, cfg Config[gtid.Set]) *Router[gtid.Set] {
	t.Helper()
	p, reps := liveNodes()
	pu := topo.Primary()
	cfg.Primary, cfg.Replicas, cfg.User, cfg.Password = p, reps, pu.User, pu.Password
	if cfg.Epoch == 0 {
		cfg.Epoch = topo.Epoch()
	}
	r, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func mustExec(t *testing.T, ctx context.Context, s *LiveSession[gtid.Set], q string, args ...any) {
	t.Helper()
	if _, err := s.Exec(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func readInt[P gtid.Position[P]](t *testing.T, rd *Read[P]) int64 {
	t.Helper()
	v, err := rd.Result.GetInt(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// resetFaults restores normal replication on every replica.
func resetFaults(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, r := range topo.Replicas() {
		if err := topo.SetApplyDelay(ctx, r.Name, 0); err != nil {
			t.Fatal(err)
		}
		if err := topo.StartApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestLive runs the integration scenarios in order on the shared topology
// (the failover comes last: it changes the topology for good). Its file is
// named to sort last: go test runs a package's tests in file-name order,
// and every other test here needs the topology before the failover.
func TestLive(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pl := startPoller(t, ctx, 5*time.Millisecond)
	setup := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl})
	s := setup.NewSession()
	mustExec(t, ctx, s, "CREATE DATABASE IF NOT EXISTS rt")
	mustExec(t, ctx, s, "CREATE TABLE IF NOT EXISTS rt.w (sess INT NOT NULL, seq INT NOT NULL, PRIMARY KEY (sess, seq))")
	// rt.aux takes the writes and deletes of the small subtests, so that
	// rt.w only grows: standing-lag counts its rows as its
	// monotonic-reads ground truth.
	mustExec(t, ctx, s, "CREATE TABLE IF NOT EXISTS rt.aux (sess INT NOT NULL, seq INT NOT NULL, PRIMARY KEY (sess, seq))")
	s.Close()
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Run("connect-check", func(t *testing.T) { testConnectCheck(t, ctx, pl) })
	t.Run("socket-io", func(t *testing.T) { testSocketIO(t, ctx, pl) })
	t.Run("compact-tokens", func(t *testing.T) { testCompactTokens(t, ctx, pl) })
	t.Run("standing-lag", func(t *testing.T) { testStandingLag(t, ctx, pl) })
	t.Run("watermark", func(t *testing.T) { testWatermark(t, ctx) })
	t.Run("cap", func(t *testing.T) { testCap(t, ctx, pl) })
	t.Run("futile-wait", func(t *testing.T) { testFutileWait(t, ctx, pl) })
	t.Run("replica-down", func(t *testing.T) { testReplicaDown(t, ctx, pl) })
	t.Run("shared-pool", func(t *testing.T) { testSharedPool(t, ctx, pl) })
	t.Run("failover", func(t *testing.T) { testFailover(t, ctx, pl) })
}

// testConnectCheck: a primary that cannot report session GTIDs is refused
// at connect time (here: a server where GTID tracking cannot be proven
// because the address is a replica with gtid_mode ON but we disable the
// capability by pointing at a bogus port is not a fair test, so we check
// the positive path and the error's type on an unreachable server).
func testConnectCheck(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl})
	s := r.NewSession()
	defer s.Close()
	mustExec(t, ctx, s, "INSERT INTO rt.aux VALUES (0, 1) ON DUPLICATE KEY UPDATE seq = seq")
	mustExec(t, ctx, s, "DELETE FROM rt.aux WHERE sess = 0")
	if !s.State().HasToken {
		t.Fatal("write captured no GTID token")
	}
	// Without CLIENT_SESSION_TRACK the OK packet carries nothing: the check
	// must fail loudly.
	d := &mysqlwire.Dialer{User: topo.Primary().User, Password: topo.Primary().Password, Timeout: 2 * time.Second}
	c, err := d.Dial(ctx, topo.Primary().Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := mysqlwire.Exec(ctx, c, "SET SESSION session_track_system_variables = 'session_track_gtids'"); err != nil {
		t.Fatal(err)
	}
	res, err := mysqlwire.Exec(ctx, c, "SET SESSION session_track_gtids = OWN_GTID")
	if err != nil {
		t.Fatal(err)
	}
	if res.SessionTracking != nil && res.SessionTracking.Variables["session_track_gtids"] != "" {
		t.Fatal("session tracking data arrived without CLIENT_SESSION_TRACK: the connect check would not detect a misconfiguration")
	}
}

// testSocketIO: connections use raw system calls (internal/rawnet) by
// default and Go's own net.Conn with PlainSocketIO; a write and a
// read-your-writes read (token-ryw, with an argument, so the prepared
// path too) work either way.
func testSocketIO(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	for _, plain := range []bool{false, true} {
		d := &mysqlwire.Dialer{User: topo.Primary().User, Password: topo.Primary().Password, Timeout: 2 * time.Second, PlainIO: plain}
		c, err := d.Dial(ctx, topo.Primary().Addr(), false)
		if err != nil {
			t.Fatal(err)
		}
		dc, ok := c.Conn.Conn.(*mysqlwire.DeadlineConn)
		if !ok {
			t.Fatalf("plainIO %v: connection is %T, want a *mysqlwire.DeadlineConn (every read and write with a deadline)", plain, c.Conn.Conn)
		}
		_, isTCP := dc.Conn.(*net.TCPConn)
		c.Close()
		if isTCP != plain {
			t.Fatalf("plainIO %v: connection below the deadlines is %T", plain, dc.Conn)
		}
		r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, PlainSocketIO: plain, Policy: router.Policy{Kind: router.PolicyTokenRYW}})
		s := r.NewSession()
		mustExec(t, ctx, s, "INSERT INTO rt.aux VALUES (?, ?) ON DUPLICATE KEY UPDATE seq = seq", 900, 1)
		rd, err := s.Query(ctx, "SELECT COUNT(*) FROM rt.aux WHERE sess = ?", 900)
		if err != nil {
			t.Fatalf("plainIO %v: read: %v", plain, err)
		}
		if n := readInt(t, rd); n != 1 {
			t.Fatalf("plainIO %v: read %d rows of the session's own write, want 1", plain, n)
		}
		mustExec(t, ctx, s, "DELETE FROM rt.aux WHERE sess = 900")
		s.Close()
	}
}

// testCompactTokens: two sessions write in turns, so each one's writes
// leave gaps for the other's. With exact tokens a session's token holds one
// interval per write; with CompactTokens one per source, a superset of the
// exact token; either way the session reads its own last write back
// (token-ryw) every time.
func testCompactTokens(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	const writes = 20
	for _, compact := range []bool{false, true} {
		r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, CompactTokens: compact, Policy: router.Policy{Kind: router.PolicyTokenRYW}})
		a, b := r.NewSession(), r.NewSession()
		var exact gtid.Set // a's writes, from the GTIDs the server reported
		for i := range writes {
			for j, s := range []*LiveSession[gtid.Set]{a, b} {
				sess := 910 + j
				_, g, err := execGTID(s, ctx, "INSERT INTO rt.aux VALUES (?, ?)", sess, i)
				if err != nil {
					t.Fatal(err)
				}
				if j == 0 {
					exact.UnionInPlace(g)
				}
			}
			rd, err := a.Query(ctx, "SELECT COALESCE(MAX(seq), -1) FROM rt.aux WHERE sess = 910")
			if err != nil {
				t.Fatal(err)
			}
			if got := readInt(t, rd); got != int64(i) {
				t.Fatalf("compact %v: session read %d after writing %d", compact, got, i)
			}
		}
		tok := gtok(a).GTIDs
		n := 0
		for _, ivs := range tok.Sources() {
			n += len(ivs)
		}
		if !tok.Contains(exact) {
			t.Fatalf("compact %v: token %s lacks the session's writes %s", compact, tok, exact)
		}
		if compact && n != tok.Len() {
			t.Fatalf("compacted token %s has %d intervals over %d sources", tok, n, tok.Len())
		}
		if !compact && (n != writes || !tok.Equal(exact)) {
			t.Fatalf("exact token %s: %d intervals, want %d equal to the writes %s", tok, n, writes, exact)
		}
		mustExec(t, ctx, a, "DELETE FROM rt.aux WHERE sess IN (910, 911)")
		a.Close()
		b.Close()
	}
}

type violations struct{ reads, ryw, mr, stale, fallback, replica int }

// runWorkload: nSess sessions; each step a random session writes its next
// seq, then random sessions read (their own MAX(seq): RYW; COUNT(*) of all
// rows: MR, since rows are only added). Checked from what MySQL returned.
func runWorkload(t *testing.T, ctx context.Context, r *Router[gtid.Set], sessBase, nSess, steps int, rng *rand.Rand) violations {
	t.Helper()
	sess := make([]*LiveSession[gtid.Set], nSess)
	lastSeq := make([]int64, nSess)
	maxCount := make([]int64, nSess)
	for i := range sess {
		sess[i] = r.NewSession()
		defer sess[i].Close()
	}
	var v violations
	for step := range steps {
		w := rng.IntN(nSess)
		lastSeq[w]++
		mustExec(t, ctx, sess[w], "INSERT INTO rt.w VALUES (?, ?)", sessBase+w, lastSeq[w])
		for k := range 3 {
			i := w
			if k == 2 {
				i = rng.IntN(nSess)
			}
			rd, err := sess[i].Query(ctx, "SELECT COALESCE(MAX(seq), 0) FROM rt.w WHERE sess = ?", sessBase+i)
			if err != nil {
				t.Fatalf("step %d read: %v", step, err)
			}
			v.reads++
			if readInt(t, rd) < lastSeq[i] {
				v.ryw++
			}
			rd2, err := sess[i].Query(ctx, "SELECT COUNT(*) FROM rt.w")
			if err != nil {
				t.Fatalf("step %d read: %v", step, err)
			}
			v.reads++
			for _, x := range []*Read[gtid.Set]{rd, rd2} {
				switch x.Outcome {
				case router.OutStale:
					v.stale++
				case router.OutFallback:
					v.fallback++
				case router.OutReplica:
					v.replica++
				}
			}
			c := readInt(t, rd2)
			if c < maxCount[i] {
				v.mr++
			}
			maxCount[i] = max(maxCount[i], c)
		}
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
	}
	// Quiet period longer than the standing delay, then one more read per
	// session: a replica with the apply delay has caught up by then.
	time.Sleep(1300 * time.Millisecond)
	for i := range sess {
		rd, err := sess[i].Query(ctx, "SELECT COALESCE(MAX(seq), 0) FROM rt.w WHERE sess = ?", sessBase+i)
		if err != nil {
			t.Fatalf("final read: %v", err)
		}
		v.reads++
		if readInt(t, rd) < lastSeq[i] {
			v.ryw++
		}
		if rd.Outcome == router.OutReplica {
			v.replica++
		}
	}
	return v
}

// testStandingLag: replica1's applier is stopped (it never catches up),
// replica2 applies 1 s late. token-ryw has zero RYW violations,
// token-ryw-mr zero RYW and zero MR, while any shows violations.
func testStandingLag(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	defer resetFaults(t, ctx)
	if err := topo.StopApplier(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	if err := topo.SetApplyDelay(ctx, "replica2", time.Second); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"any", "token-ryw", "token-ryw-mr", "token-wait(100ms)"} {
		pol, err := router.ParsePolicy(name)
		if err != nil {
			t.Fatal(err)
		}
		r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: pol, Seed: uint64(i + 1)})
		v := runWorkload(t, ctx, r, 100*(i+1), 4, 25, rand.New(rand.NewPCG(7, uint64(i))))
		t.Logf("%-18s reads=%d ryw=%d mr=%d replica=%d fallback=%d", name, v.reads, v.ryw, v.mr, v.replica, v.fallback)
		switch pol.Kind {
		case router.PolicyAny:
			if v.ryw == 0 {
				t.Errorf("any under standing lag showed no RYW violation in %d reads: the test cannot see lag", v.reads)
			}
		case router.PolicyTokenRYW:
			if v.ryw != 0 {
				t.Errorf("token-ryw: %d RYW violations", v.ryw)
			}
		default:
			if v.ryw != 0 || v.mr != 0 {
				t.Errorf("%s: %d RYW and %d MR violations", name, v.ryw, v.mr)
			}
		}
		if pol.Kind != router.PolicyAny && v.replica == 0 {
			t.Errorf("%s never used a replica: the policy degenerated to primary-only", name)
		}
	}
}

// staticSource is a PositionSource whose positions the test sets: a view
// that lags as much as the test wants.
type staticSource struct {
	mu  sync.Mutex
	pos map[string]gtid.Set
	up  map[string]bool
}

var _ PositionSource[gtid.Set] = (*staticSource)(nil)

func (s *staticSource) Position(n string) (gtid.Set, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos[n], s.up[n]
}

func (s *staticSource) WaitFor(ctx context.Context, n string, want gtid.Set) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s *staticSource) set(n string, up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up[n] = up
}

// testWatermark: the position source's view at decision time is only a
// lower bound. replica1 applies, replica2 is stopped; the view says both
// are at X (before the write W). A session reads from replica1 and sees W.
// Its next read can only go to replica2 (replica1 is marked down): the
// sound watermark (replica1's @@gtid_executed after the read) contains W,
// so replica2 does not qualify and the read falls back to the primary; the
// unsound one (the view, X) lets replica2 serve a world without W: an MR
// violation seen in the data.
//
// Run for a text read and for a read with arguments (the read pool's
// cached prepared statement), both with the watermark pipelined.
func testWatermark(t *testing.T, ctx context.Context) {
	defer resetFaults(t, ctx)
	for _, withArgs := range []bool{false, true} {
		for _, mode := range []WatermarkMode{WatermarkAfterRead, WatermarkViewAtDecision} {
			testWatermarkOnce(t, ctx, mode, withArgs)
		}
	}
}

func testWatermarkOnce(t *testing.T, ctx context.Context, mode WatermarkMode, withArgs bool) {
	sess := 900
	if withArgs {
		sess = 910
	}
	if err := topo.StopApplier(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	_, reps := liveNodes()
	d := &mysqlwire.Dialer{User: topo.Primary().User, Password: topo.Primary().Password, Timeout: 2 * time.Second}
	c, err := d.Dial(ctx, topo.Primary().Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	x, err := mysqlwire.ReadExecuted(ctx, c)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	src := &staticSource{pos: map[string]gtid.Set{reps[0].Name: x, reps[1].Name: x}, up: map[string]bool{reps[0].Name: true, reps[1].Name: false}}
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: src, Policy: router.Policy{Kind: router.PolicyTokenRYWMR}, Watermark: mode})
	writer := r.NewSession()
	mustExec(t, ctx, writer, "INSERT INTO rt.w VALUES (?, ?)", sess, 1+int(mode))
	writer.Close()
	// Wait until replica1 really has W.
	tok := gtok(writer)
	c, err = d.Dial(ctx, reps[0].Addr, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mysqlwire.Exec(ctx, c, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, 10)", tok.GTIDs.String()); err != nil {
		t.Fatal(err)
	}
	c.Close()
	reader := r.NewSession()
	q, args := fmt.Sprintf("SELECT COUNT(*) FROM rt.w WHERE sess = %d", sess), []any(nil)
	if withArgs {
		q, args = "SELECT COUNT(*) FROM rt.w WHERE sess = ?", []any{sess}
	}
	rd1, err := reader.Query(ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	if rd1.Node != reps[0].Name || readInt(t, rd1) != int64(1+int(mode)) {
		t.Fatalf("first read: node %s count %d, want %s with the write", rd1.Node, readInt(t, rd1), reps[0].Name)
	}
	src.set(reps[0].Name, false)
	src.set(reps[1].Name, true)
	rd2, err := reader.Query(ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	mr := readInt(t, rd2) < readInt(t, rd1)
	t.Logf("watermark mode %d (args %v): second read on %s (%v), count %d after %d, MR violation=%v",
		mode, withArgs, rd2.Node, rd2.Outcome, readInt(t, rd2), readInt(t, rd1), mr)
	if mode == WatermarkAfterRead && (mr || rd2.Outcome != router.OutFallback) {
		t.Errorf("sound watermark: second read %v on %s, violation=%v", rd2.Outcome, rd2.Node, mr)
	}
	if mode == WatermarkViewAtDecision && !mr {
		t.Errorf("the unsound watermark produced no violation: the test would not catch an unsound choice")
	}
	reader.Close()
	resetFaults(t, ctx)
}

// testCap: a lag spike (both appliers stopped) makes every token read need
// a fallback. With a cap of C/s, fallbacks never exceed Burst + C·elapsed;
// above the cap, fail-fast returns ErrCapExceeded and serve-stale serves
// labelled-stale reads (whose data indeed lacks the write).
func testCap(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	defer resetFaults(t, ctx)
	for _, r := range topo.Replicas() {
		if err := topo.StopApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
	const rate, burst = 5.0, 2.0
	for _, beh := range []router.CapBehavior{router.CapFailFast, router.CapServeStale, router.CapWaitLonger} {
		reg := prometheus.NewRegistry()
		r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: router.Policy{Kind: router.PolicyTokenRYW},
			Cap: router.Cap{PerSecond: rate, Burst: burst, Behavior: beh, ExtraWait: 50 * time.Millisecond}, Registerer: reg})
		s := r.NewSession()
		mustExec(t, ctx, s, "INSERT INTO rt.w VALUES (?, 1)", 700+int(beh))
		start := time.Now()
		var fallbacks, capped, stale, staleMissing, avail int
		for time.Since(start) < 2*time.Second {
			rd, err := s.Query(ctx, "SELECT COUNT(*) FROM rt.w WHERE sess = ?", 700+int(beh))
			el := time.Since(start).Seconds()
			switch {
			case errors.Is(err, ErrCapExceeded):
				capped++
				var re *ReadError
				if !errors.As(err, &re) || !re.Retryable() {
					t.Fatalf("cap error is not a retryable *ReadError: %v", err)
				}
			case err != nil:
				t.Fatal(err)
			case rd.Outcome == router.OutFallback:
				fallbacks++
				if float64(fallbacks) > burst+rate*el+1e-9 {
					t.Fatalf("%v: %d fallbacks after %.3fs exceed burst %v + %v/s", beh, fallbacks, el, burst, rate)
				}
			case rd.Outcome == router.OutPrimary && rd.Reason == router.ReasonNoReplicaUp:
				// The position source briefly saw no replica healthy: an
				// availability read, not capped and counted apart.
				avail++
			case rd.Outcome == router.OutStale:
				stale++
				if readInt(t, rd) == 0 {
					staleMissing++
				}
			default:
				t.Fatalf("unexpected outcome %v on %s", rd.Outcome, rd.Node)
			}
			time.Sleep(5 * time.Millisecond)
		}
		s.Close()
		el := time.Since(start).Seconds()
		t.Logf("%v: %.2fs fallbacks=%d (limit %.1f) capped=%d stale=%d (of which lacking the write: %d) availability-primary=%d",
			beh, el, fallbacks, burst+rate*el, capped, stale, staleMissing, avail)
		got := testutil.ToFloat64(r.m.fallbacks)
		if int(got) != fallbacks {
			t.Errorf("metric freshness_fallbacks_total=%v, counted %d", got, fallbacks)
		}
		switch beh {
		case router.CapFailFast, router.CapWaitLonger:
			if capped == 0 || stale != 0 {
				t.Errorf("%v: capped=%d stale=%d", beh, capped, stale)
			}
		case router.CapServeStale:
			if stale == 0 || capped != 0 || staleMissing == 0 {
				t.Errorf("serve-stale: stale=%d capped=%d missing=%d", stale, capped, staleMissing)
			}
		}
		if fallbacks == 0 {
			t.Errorf("%v: no fallback at all", beh)
		}
	}
}

// testFutileWait: token-wait(100ms)+skip-futile with every applier
// stopped. Once the replicas are far behind (1.5 s of sleep after a first
// write they lack), a read whose need is a fresh write cannot be served by
// a replica within the budget: the router's commit log says the waited
// replica still needs its Lag minus the need's age, about 1.5 s, so each
// read goes to the primary at once, typed and counted wait-futile (a
// freshness fallback), never waiting, and the primary's answer holds the
// write. Counters, not clocks, are asserted: the decisions by action and
// reason, the fallbacks by reason, and each read's Waited.
func testFutileWait(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	defer resetFaults(t, ctx)
	for _, r := range topo.Replicas() {
		if err := topo.StopApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	pol := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 100 * time.Millisecond, SkipFutile: true}
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: pol, Registerer: reg})
	s := r.NewSession()
	defer s.Close()
	const sess = 900
	count := func() int64 {
		t.Helper()
		rd, err := s.Query(ctx, "SELECT COUNT(*) FROM rt.aux WHERE sess = ?", sess)
		if err != nil {
			t.Fatal(err)
		}
		if rd.Outcome != router.OutFallback {
			t.Fatalf("read on %s: outcome %v (%v), want a freshness fallback: no replica applies", rd.Node, rd.Outcome, rd.Reason)
		}
		if rd.Reason == router.ReasonWaitFutile && rd.Waited != 0 {
			t.Errorf("a wait-futile read waited %v", rd.Waited)
		}
		return readInt(t, rd)
	}
	mustExec(t, ctx, s, "INSERT INTO rt.aux VALUES (?, 0)", sess)
	// The replicas lack only this write: if their lag held steady they
	// would apply it at once, so the steady-lag estimate lets the read wait
	// (a stopped applier looks like a steady one here); it falls back.
	first := r.m.decision(router.ActPrimary, router.ReasonWaitBudgetSpent)
	if n := count(); n != 1 {
		t.Fatalf("the primary's answer lacks the session's write: %d rows", n)
	}
	t.Logf("first read: decisions{primary,wait-budget-spent} = %v (the wait the estimate cannot call futile)", testutil.ToFloat64(first))
	time.Sleep(1500 * time.Millisecond) // the replicas fall 1.5 s behind
	waits := r.m.decision(router.ActWait, router.ReasonNoReplicaQualifies)
	futile := r.m.decision(router.ActPrimary, router.ReasonWaitFutile)
	waits0, futile0 := testutil.ToFloat64(waits), testutil.ToFloat64(futile)
	fb0 := testutil.ToFloat64(r.m.fallbacks.WithLabelValues(router.ReasonWaitFutile.String()))
	const reads = 5
	for i := 1; i <= reads; i++ {
		mustExec(t, ctx, s, "INSERT INTO rt.aux VALUES (?, ?)", sess, i)
		if n := count(); n != int64(i+1) {
			t.Fatalf("read %d: the primary's answer lacks the session's write: %d rows", i, n)
		}
	}
	if got := testutil.ToFloat64(futile) - futile0; got != reads {
		t.Errorf("decisions{primary,wait-futile} grew by %v over %d reads, want every read", got, reads)
	}
	if got := testutil.ToFloat64(waits) - waits0; got != 0 {
		t.Errorf("decisions{wait,no-replica-qualifies} grew by %v: a futile wait was waited", got)
	}
	if got := testutil.ToFloat64(r.m.fallbacks.WithLabelValues(router.ReasonWaitFutile.String())) - fb0; got != reads {
		t.Errorf("freshness fallbacks{wait-futile} grew by %v, want %d", got, reads)
	}
	if _, err := s.Exec(ctx, "DELETE FROM rt.aux WHERE sess = ?", sess); err != nil {
		t.Fatal(err)
	}
}

// testReplicaDown: a replica that errors is skipped and used again after
// DownHold; the affinity policy reselects per hashroute meanwhile.
func testReplicaDown(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	p, reps := liveNodes()
	pu := topo.Primary()
	bad := reps[0]
	bad.Addr = refusedAddr(t) // nothing listens: connection refused
	r, err := New(ctx, Config[gtid.Set]{Primary: p, Replicas: []Node{bad, reps[1]}, User: pu.User, Password: pu.Password,
		Positions: pl, Policy: router.Policy{Kind: router.PolicyAny}, DownHold: 300 * time.Millisecond, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := r.NewSession()
	served := map[string]int{}
	for range 20 {
		rd, err := s.Query(ctx, "SELECT 1")
		if err != nil {
			t.Fatal(err)
		}
		served[rd.Node]++
	}
	if served[reps[1].Name] != 20 {
		t.Fatalf("reads went to %v, want all on %s while %s is unreachable", served, reps[1].Name, bad.Name)
	}
	if n := testutil.ToFloat64(r.m.nodeDown.WithLabelValues(bad.Name)); n < 1 {
		t.Fatalf("node error not counted")
	}
	// Back: the unreachable address is fixed by a failover to the same
	// primary with the real replica list (epoch bump), and DownHold expires.
	time.Sleep(350 * time.Millisecond)
	if err := r.Failover(ctx, p, reps, r.Epoch()+1); err != nil {
		t.Fatal(err)
	}
	served = map[string]int{}
	for range 40 {
		rd, err := s.Query(ctx, "SELECT 1")
		if err != nil {
			t.Fatal(err)
		}
		served[rd.Node]++
	}
	if served[reps[0].Name] == 0 {
		t.Fatalf("replica %s never used again after it came back: %v", reps[0].Name, served)
	}
}

// testFailover: the session's write reaches only the old primary, a
// replica is promoted. An epoch token fails fast with ErrWriteLost, a GTID
// token without epoch waits and times out, and a scalar (LSN-like) token,
// run through the same live router as a Router[gtid.LSN], is satisfied by
// the new timeline: the read is served and the data lacks the write.
func testFailover(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	// replica1 will be promoted without the write: SOURCE_DELAY keeps the
	// write in its relay log (compose does not drain a delayed applier);
	// replica2's applier is stopped too so no replica has the write.
	if err := topo.SetApplyDelay(ctx, "replica1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := topo.StopApplier(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	epochPol, _ := router.ParsePolicy("token-wait(300ms)+epoch")
	gtidPol, _ := router.ParsePolicy("token-wait(300ms)")
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: epochPol, Trace: true})
	s := r.NewSession()
	defer s.Close()
	mustExec(t, ctx, s, "INSERT INTO rt.w VALUES (800, 1)")
	// The scalar router: the same live router over scalar positions (the
	// Scalar flavor, polled), its own write lost with the other one.
	sr, spl := newScalarRouter(t, ctx, router.Policy{Kind: router.PolicyTokenRYW})
	ss := sr.NewSession()
	defer ss.Close()
	if _, err := ss.Exec(ctx, "INSERT INTO rt.w VALUES (802, 1)"); err != nil {
		t.Fatal(err)
	}
	scalarTok, _ := ss.Token()
	if scalarTok == 0 {
		t.Fatal("the scalar router tokened no write")
	}

	res, err := topo.Failover(ctx, "replica1")
	if err != nil {
		t.Logf("failover: %v (result %+v)", err, res)
	}
	if res.LostGTIDs == "" {
		t.Fatalf("failover lost nothing: %+v", res)
	}
	lost := gtid.MustParse(res.LostGTIDs)
	if !lost.Contains(s.State().Token) {
		t.Fatalf("the session's write %v is not among the lost %v", s.State().Token, lost)
	}
	p, reps := liveNodes()
	if err := r.Failover(ctx, p, reps, res.Epoch); err != nil {
		t.Fatal(err)
	}
	if err := sr.Failover(ctx, p, reps, res.Epoch); err != nil {
		t.Fatal(err)
	}
	q := "SELECT COUNT(*) FROM rt.w WHERE sess = 800"

	// Epoch token: fails fast, without waiting on a replica (counted by
	// the router; a wall-time bound, 250 ms once, fails on a loaded
	// machine however fast the decision).
	waited := testutil.ToFloat64(r.m.waited.WithLabelValues(router.PolicyTokenWait.String()))
	t0 := time.Now()
	_, err = s.Query(ctx, q)
	if !errors.Is(err, ErrWriteLost) {
		t.Fatalf("epoch token after failover: %v, want ErrWriteLost", err)
	}
	if n := testutil.ToFloat64(r.m.waited.WithLabelValues(router.PolicyTokenWait.String())) - waited; n != 0 {
		t.Errorf("write-lost after %v and %v wait(s) on a replica, want at once", time.Since(t0), n)
	}
	// GTID token without epoch: waits the budget, then times out.
	t0 = time.Now()
	_, err = s.QueryWith(ctx, gtidPol, q)
	el := time.Since(t0)
	if !errors.Is(err, ErrTimedOut) || el < 300*time.Millisecond {
		t.Fatalf("gtid token after failover: %v after %v, want ErrTimedOut after the 300ms budget", err, el)
	}
	if n := testutil.ToFloat64(r.m.waited.WithLabelValues(router.PolicyTokenWait.String())) - waited; n != 1 {
		t.Errorf("the gtid token's read counted %v waits, want 1 (the counter the epoch token's check reads)", n)
	}
	t.Logf("epoch token: ErrWriteLost; gtid token: %v after %v", err, el.Round(time.Millisecond))

	// Scalar token: the new primary's log grows past the old count, and
	// the scalar router then serves the session's read without its write.
	w := r.NewSession()
	defer w.Close()
	for i := 0; ; i++ {
		if pos, ok := spl.Position(p.Name); ok && pos >= scalarTok {
			break
		}
		if i > 10000 {
			t.Fatalf("the new primary never reached the scalar token %d", scalarTok)
		}
		mustExec(t, ctx, w, "INSERT INTO rt.w VALUES (801, ?)", i+1)
		time.Sleep(time.Millisecond)
	}
	rd, err := ss.Query(ctx, "SELECT COUNT(*) FROM rt.w WHERE sess = 802")
	if err != nil {
		t.Fatalf("scalar token after failover: %v, want a (silently satisfied) read", err)
	}
	if n := readInt(t, rd); n != 0 {
		t.Fatalf("the lost write is visible on %s (%d rows)", rd.Node, n)
	}
	t.Logf("scalar token %d satisfied by the new timeline: read served by %s (%v, %v) without the session's write", scalarTok, rd.Node, rd.Outcome, rd.Reason)
}

// newScalarRouter is a Router[gtid.LSN] (the Scalar flavor) over a
// Poller[gtid.LSN] of every node, with policy pol.
func newScalarRouter(t *testing.T, ctx context.Context, pol router.Policy) (*Router[gtid.LSN], *Poller[gtid.LSN]) {
	t.Helper()
	spl := startPollerOf(t, ctx, PollerConfig[gtid.LSN]{Flavor: Scalar{}, Interval: 5 * time.Millisecond})
	p, reps := liveNodes()
	pu := topo.Primary()
	sr, err := New(ctx, Config[gtid.LSN]{Flavor: Scalar{}, Primary: p, Replicas: reps, User: pu.User, Password: pu.Password,
		Positions: spl, Policy: pol, Epoch: topo.Epoch()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sr.Close)
	return sr, spl
}
