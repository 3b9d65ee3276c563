package live

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// TestWatermarkRace checks, on real MySQL, that the monotonic-reads
// watermark read right after a read on the same replica connection
// (mysqlwire.WatermarkQuery: gtid_executed joined with the received set)
// contains every transaction the read saw, and measures how often
// gtid_executed alone does not. MySQL commits a group in the engine (its
// rows become visible) before it adds the group's GTIDs to gtid_executed,
// so a read can see a row whose GTID the executed set read after it lacks.
//
// performance_schema.log_status (mysqlwire.LogStatusQuery) is checked
// too, on the replica and on the primary, where the joined query is not
// sound (the received set is empty there).
//
// Eight writers update a row each on the primary (each write's GTID taken
// from its own OK packet); readers read all eight rows on a replica or
// the primary and then the watermark, alternating queries. Judged after the run: a row
// version seen whose GTID the watermark read after it lacks is a miss.
func TestWatermarkRace(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pu, rn := topo.Primary(), topo.Replicas()[0]
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	const writers = 8
	w := startRaceWriters(t, ctx, d, "h", writers, 0)
	wctx, stop := w.ctx, w.stop
	var wg sync.WaitGroup
	type obs struct {
		k, v int
		kind string
		wm   gtid.Set
	}
	var (
		seen []obs
		rmu  sync.Mutex
	)
	kinds := []struct{ name, query, node string }{
		{"replica, watermark query", mysqlwire.WatermarkQuery, rn.Addr()},
		{"replica, gtid_executed alone", mysqlwire.ExecutedQuery, rn.Addr()},
		{"primary, watermark query", mysqlwire.WatermarkQuery, pu.Addr()},
		{"replica, log_status", mysqlwire.LogStatusQuery, rn.Addr()},
		{"primary, log_status", mysqlwire.LogStatusQuery, pu.Addr()},
	}
	for ri := range 2 * len(kinds) {
		kd := kinds[ri%len(kinds)]
		wg.Go(func() {
			c, err := d.Dial(ctx, kd.node, false)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for wctx.Err() == nil {
				r, err := mysqlwire.Exec(wctx, c, "SELECT id, v FROM wmrace."+w.table)
				if err != nil {
					return
				}
				rows := make([][2]int, 0, writers)
				for j := range r.RowNumber() {
					id, _ := r.GetInt(j, 0)
					v, _ := r.GetInt(j, 1)
					rows = append(rows, [2]int{int(id), int(v)})
				}
				r.Close()
				text, err := mysqlwire.ReadValue(wctx, c, kd.query)
				if err != nil {
					return
				}
				set, err := gtid.Parse(text)
				if err != nil {
					t.Errorf("%s: parse %q: %v", kd.name, text, err)
					return
				}
				rmu.Lock()
				for _, row := range rows {
					seen = append(seen, obs{row[0], row[1], kd.name, set})
				}
				rmu.Unlock()
			}
		})
	}
	select {
	case <-time.After(20 * time.Second):
	case <-ctx.Done():
	}
	stop()
	wg.Wait()
	miss, total := map[string]int{}, map[string]int{}
	for _, o := range seen {
		g := w.gtid(o.k, o.v)
		if o.v == 0 || g == "" {
			continue // the initial row, or a write whose OK never came
		}
		gs, err := gtid.Parse(g)
		if err != nil {
			t.Fatalf("write %d of row %d: GTID %q: %v", o.v, o.k, g, err)
		}
		total[o.kind]++
		if !o.wm.Contains(gs) {
			if miss[o.kind]++; miss[o.kind] <= 3 {
				t.Logf("%s: saw row %d = %d (%s), the watermark read after it lacks it", o.kind, o.k, o.v, g)
			}
		}
	}
	for _, kd := range kinds {
		t.Logf("%-30s %d of %d row versions seen are missing from the watermark", kd.name, miss[kd.name], total[kd.name])
	}
	// The received set the sound query joins must be there at all
	// (performance_schema is off in compose; the replication tables are
	// filled regardless), else the check below would pass vacuously.
	rc, err := d.Dial(ctx, rn.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	received, err := mysqlwire.ReadValue(ctx, rc, "SELECT IFNULL(GROUP_CONCAT(RECEIVED_TRANSACTION_SET), '') FROM performance_schema.replication_connection_status")
	if err != nil || received == "" {
		t.Fatalf("the replica's received set is empty (%v): the watermark query would be gtid_executed alone", err)
	}
	// The sound ones: the joined query on the replica, log_status on
	// either node (it copies gtid_executed under the commit lock, so no
	// group is between its engine commit and its GTIDs).
	for _, sound := range []string{kinds[0].name, kinds[3].name, kinds[4].name} {
		if total[sound] < 1000 {
			t.Fatalf("%s: only %d row versions written by the writers were seen: the test proves little", sound, total[sound])
		}
		if miss[sound] > 0 {
			t.Errorf("%s: %d of %d row versions seen were missing from the watermark read right after: unsound", sound, miss[sound], total[sound])
		}
	}
}

// raceWriters are writers updating one row each of wmrace.<table> on the
// primary as fast as they can, or with a pause after each write (row k's
// value counts its writes), each
// write's GTID taken from its own OK packet.
type raceWriters struct {
	table string
	ctx   context.Context // ends when stop is called
	stop  func()          // stops the writers and waits for them
	mu    sync.Mutex
	gtids []map[int]string // gtids[k][v]: the write that set row k to v
}

// gtid is the GTID of the write that set row k to v ("" for the initial
// row, or a write whose OK never came).
func (w *raceWriters) gtid(k, v int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gtids[k][v]
}

func startRaceWriters(t *testing.T, ctx context.Context, d *mysqlwire.Dialer, table string, writers int, pause time.Duration) *raceWriters {
	t.Helper()
	pu := topo.Primary()
	setup, err := d.Dial(ctx, pu.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS wmrace", "DROP TABLE IF EXISTS wmrace." + table,
		"CREATE TABLE wmrace." + table + " (id INT PRIMARY KEY, v INT NOT NULL)"} {
		if _, err := mysqlwire.Exec(ctx, setup, q); err != nil {
			t.Fatal(err)
		}
	}
	for k := range writers {
		if _, err := mysqlwire.Exec(ctx, setup, fmt.Sprintf("INSERT INTO wmrace.%s VALUES (%d, 0)", table, k)); err != nil {
			t.Fatal(err)
		}
	}
	// The tests before this one (TestWatermarkRace writes as fast as it
	// can) can leave the replicas applying a backlog: at load ~57 replica1
	// was still 30 s behind. A set-up wait, so bounded by the caller's ctx
	// and two minutes.
	if err := topo.WaitReplicated(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// And the backlog these writers leave is drained before the next test
	// starts: TestLive's set-up waits 30 s, and at load 6 (three CPU hogs
	// beside the package's tests) replica1 was still behind after them.
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := topo.WaitReplicated(dctx, 2*time.Minute); err != nil {
			t.Errorf("draining the race writers' backlog: %v", err)
		}
	})
	w := &raceWriters{table: table, gtids: make([]map[int]string, writers)}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	w.ctx = wctx
	w.stop = func() { cancel(); wg.Wait() }
	for k := range writers {
		w.gtids[k] = map[int]string{}
		wg.Go(func() {
			c, err := d.Dial(ctx, pu.Addr(), true)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			if _, err := mysqlwire.Exec(ctx, c, "SET SESSION session_track_gtids = OWN_GTID"); err != nil {
				t.Error(err)
				return
			}
			rec := mysqlwire.InstallRecorder(c) // go-mysql's OK strings alias a pooled buffer
			for v := 1; wctx.Err() == nil; v++ {
				rec.Start()
				r, err := mysqlwire.Exec(wctx, c, fmt.Sprintf("UPDATE wmrace.%s SET v = %d WHERE id = %d", table, v, k))
				if err != nil {
					if wctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				r.Close()
				tr, err := rec.LastOK()
				if err != nil {
					t.Error(err)
					return
				}
				w.mu.Lock()
				w.gtids[k][v] = tr.GTID
				w.mu.Unlock()
				if pause > 0 {
					select {
					case <-wctx.Done():
					case <-time.After(pause):
					}
				}
			}
		})
	}
	return w
}

// TestLazyWatermarkSwitch checks the lazy watermark (WatermarkLazy) on
// real MySQL while writers run: readers read all rows on one replica a
// few times, then switch to the other one, taking what they saw from a
// poller's bound (Poller with Bounds: a poll of the first replica that
// started after the last read there ended, on a poll connection open
// since before the reads began: SeenBound after WaitBound), waiting until
// the second replica's position contains it, and reading there. Two
// checks, both from ground truth: every row version seen on a replica
// has its GTID in the bound taken after it (a miss: the bound is
// unsound), and no row is ever read at a version older than one the
// reader saw before (a reader going back in time across the switch).
// A bound taken from a poll that started before the reads ended fails
// both (shown in a scratch run, docs/router.md "The lazy watermark").
//
// Two pollers run side by side and the readers' passes alternate
// between them: one reads performance_schema.log_status (the exact
// bound: what the replica had applied), the other is refused it (as an
// account without BACKUP_ADMIN is) and reads gtid_executed joined with
// the received set, which also holds what the replica received but had
// not applied, so the next replica must apply that much more before the
// switch. Both are checked; the time each switch waited is logged per
// poller (what the exact bound buys).
func TestLazyWatermarkSwitch(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pu := topo.Primary()
	reps := topo.Replicas()
	if len(reps) < 2 {
		t.Skip("needs two replicas")
	}
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	const writers = 8
	// Paced (each writer pauses 4 ms), so that the replicas keep up on a
	// loaded machine: a switch waits for the next replica to apply what
	// the first had received.
	w := startRaceWriters(t, ctx, d, "lz", writers, 4*time.Millisecond)
	nodes := []Node{node(reps[0]), node(reps[1])}
	pollers := []*Poller[gtid.Set]{
		startPollerOf(t, ctx, PollerConfig[gtid.Set]{Interval: 10 * time.Millisecond, Bounds: true}),
		startJoinedPoller(t, ctx, nodes, 10*time.Millisecond),
	}
	kinds := []string{"log_status", "joined"}
	for _, n := range nodes {
		if !pollers[0].Exact(n.Name) || pollers[1].Exact(n.Name) {
			t.Fatalf("%s: exact %v and %v, want log_status on the first poller only", n.Name, pollers[0].Exact(n.Name), pollers[1].Exact(n.Name))
		}
	}
	var (
		mu                              sync.Mutex
		misses, backwards, rows, passes [2]int
		switches, unbounded             [2]int
		waits                           [2][]time.Duration
	)
	var wg sync.WaitGroup
	for ri := range 4 {
		wg.Go(func() {
			conns := make([]*client.Conn, len(nodes))
			for i, n := range nodes {
				c, err := d.Dial(ctx, n.Addr, false)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				conns[i] = c
			}
			high := make([]int, writers) // the newest version of each row this reader saw
			cur := ri % len(nodes)
			for pass := ri; w.ctx.Err() == nil; pass++ {
				k := pass % len(pollers)
				p := pollers[k]
				// A few reads on cur: the pending seen, bounded below.
				gen := p.Generation(nodes[cur].Name)
				var versions [][2]int
				var end time.Time
				for range 1 + ri%3 {
					r, err := mysqlwire.Exec(w.ctx, conns[cur], "SELECT id, v FROM wmrace."+w.table)
					if err != nil {
						return
					}
					end = time.Now()
					for j := range r.RowNumber() {
						id, _ := r.GetInt(j, 0)
						v, _ := r.GetInt(j, 1)
						versions = append(versions, [2]int{int(id), int(v)})
					}
					r.Close()
				}
				back := 0
				for _, kv := range versions {
					if kv[1] < high[kv[0]] {
						back++
					}
					high[kv[0]] = max(high[kv[0]], kv[1])
				}
				// As the router resolves a pending seen: from the poller's
				// state if it bounds the reads already, else after waiting
				// for (and asking for) a poll.
				bound, ok, wait := p.SeenBound(nodes[cur].Name, end, gen)
				if !ok && wait > 0 {
					bctx, bcancel := context.WithTimeout(w.ctx, wait)
					err := p.WaitBound(bctx, nodes[cur].Name, end)
					bcancel()
					if w.ctx.Err() != nil {
						return
					}
					if err == nil {
						bound, ok, _ = p.SeenBound(nodes[cur].Name, end, gen)
					}
				}
				if !ok {
					mu.Lock()
					unbounded[k]++ // the poll connection changed: the session would fall back
					mu.Unlock()
					continue
				}
				miss := 0
				for _, kv := range versions {
					g := w.gtid(kv[0], kv[1])
					if kv[1] == 0 || g == "" {
						continue
					}
					gs, err := gtid.Parse(g)
					if err != nil {
						t.Errorf("GTID %q: %v", g, err)
						return
					}
					if !bound.Contains(gs) {
						if miss++; miss <= 2 {
							t.Logf("reader %d on %s (%s): saw row %d = %d (%s), the bound lacks it", ri, nodes[cur].Name, kinds[k], kv[0], kv[1], g)
						}
					}
				}
				// Switch: the other replica serves once it holds the bound.
				next := (cur + 1) % len(nodes)
				// (As long as it takes: a replica that lags on a loaded
				// machine makes the switch slow, not wrong; the writers'
				// end ends the wait.)
				t0 := time.Now()
				err := p.WaitFor(w.ctx, nodes[next].Name, bound)
				waited := time.Since(t0)
				if err != nil {
					if w.ctx.Err() == nil {
						pos, _ := p.Position(nodes[next].Name)
						t.Errorf("%s never reached the bound %v (it has %v): %v", nodes[next].Name, bound, pos, err)
					}
					return
				}
				mu.Lock()
				misses[k] += miss
				backwards[k] += back
				rows[k] += len(versions)
				passes[k]++
				switches[k]++
				waits[k] = append(waits[k], waited)
				mu.Unlock()
				cur = next
			}
		})
	}
	// At least 20 s, and on until enough switches happened (a loaded
	// machine reads slowly: at a load of 10 on two cores a switch of
	// the joined poller waited 10 s on average), at most 180 s.
	for start := time.Now(); ctx.Err() == nil; {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		n := min(switches[0], switches[1])
		mu.Unlock()
		if el := time.Since(start); el > 180*time.Second || (el > 20*time.Second && n >= 150) {
			break
		}
	}
	w.stop()
	wg.Wait()
	for k, kind := range kinds {
		ws := slices.Clone(waits[k])
		slices.Sort(ws)
		var sum time.Duration
		for _, x := range ws {
			sum += x
		}
		q := func(f float64) time.Duration {
			if len(ws) == 0 {
				return 0
			}
			return ws[min(len(ws)-1, int(f*float64(len(ws))))]
		}
		mean := time.Duration(0)
		if len(ws) > 0 {
			mean = sum / time.Duration(len(ws))
		}
		t.Logf("%-10s %d row versions seen in %d passes, %d switches between replicas; %d missing from the bound, %d older than one seen before; %d bounds not available (poll connection changed); switch wait mean %v p50 %v p90 %v p99 %v; %d polls read the joined query",
			kind, rows[k], passes[k], switches[k], misses[k], backwards[k], unbounded[k], mean.Round(time.Microsecond),
			q(0.5).Round(time.Microsecond), q(0.9).Round(time.Microsecond), q(0.99).Round(time.Microsecond), pollers[k].LogStatusFallbacks())
	}
	for k, kind := range kinds {
		if switches[k] < 30 || rows[k] < 300 {
			t.Fatalf("%s: only %d switches and %d row versions seen: the test proves little", kind, switches[k], rows[k])
		}
		if misses[k] > 0 || backwards[k] > 0 {
			t.Errorf("%s: the lazy bound is unsound: %d row versions seen missing from it, %d reads went back in time after a switch", kind, misses[k], backwards[k])
		}
	}
}

// noLogStatusConn is a poll connection whose server refuses log_status,
// as one does to an account without BACKUP_ADMIN.
type noLogStatusConn struct{ valueConn }

func (c noLogStatusConn) ReadValue(ctx context.Context, q string) (string, error) {
	if q == mysqlwire.LogStatusQuery {
		return "", &mysql.MyError{Code: 1227, State: "42000", Message: "Access denied (refused by the test)"}
	}
	return c.valueConn.ReadValue(ctx, q)
}

// startJoinedPoller runs a bounds poller of nodes whose connections are
// refused log_status: its bounds are gtid_executed joined with the
// received set (mysqlwire.BoundsQuery).
func startJoinedPoller(t *testing.T, ctx context.Context, nodes []Node, interval time.Duration) *Poller[gtid.Set] {
	t.Helper()
	pu := topo.Primary()
	cfg := PollerConfig[gtid.Set]{Nodes: nodes, User: pu.User, Password: pu.Password, Interval: interval, Bounds: true}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: cfg.DialTimeout}
	p := newPoller(cfg, func(ctx context.Context, addr string) (valueConn, error) {
		c, err := d.Dial(ctx, addr, false)
		if err != nil {
			return nil, err
		}
		return noLogStatusConn{mysqlValueConn{c}}, nil
	})
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = p.Run(pctx); close(done) }()
	t.Cleanup(func() { pcancel(); <-done })
	for _, n := range nodes {
		if err := p.WaitFor(ctx, n.Name, gtid.Set{}); err != nil {
			t.Fatal(err)
		}
		for !p.logStatus[n.Name].Known() && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return p
}

// TestLazyWatermarkRouter runs the lazy watermark end to end through the
// live router (WatermarkLazy over a Poller with Bounds) while writers
// run: sessions read all rows under token-wait (token-ryw-mr, which does
// not wait, stays on the primary once replicas trail a fallback's
// watermark while writers run), and the
// replicas are held down in turn (20 ms every 30 ms, never both), so a
// session stuck to one must move to the other: its pending seen is then
// resolved from a poll (router.ReasonSeenPending) before the other
// replica may serve. No row may be read at a version older than one the
// session saw before, after a replica read or after one served by the
// primary (whose watermark the router reads from log_status: the
// joined query, gtid_executed alone there, can be short of what the
// read saw, docs/router.md "The commit race"; counted apart).
func TestLazyWatermarkRouter(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pu := topo.Primary()
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	const writers = 8
	w := startRaceWriters(t, ctx, d, "lr", writers, 20*time.Millisecond) // ~400 writes/s: appliers a loaded machine keeps within the wait budget
	p := startPollerOf(t, ctx, PollerConfig[gtid.Set]{Interval: 10 * time.Millisecond, Bounds: true})
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: p, Watermark: WatermarkLazy,
		Policy: router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second}, DownHold: time.Hour, Trace: true})
	_, reps := liveNodes()
	// Hold the replicas down in turn.
	holdCtx, holdStop := context.WithCancel(w.ctx)
	var hg sync.WaitGroup
	hg.Go(func() {
		for i := 0; holdCtx.Err() == nil; i++ {
			r.mu.Lock()
			r.st.DownUntil[reps[i%2].Name] = time.Now().Add(20 * time.Millisecond)
			r.mu.Unlock()
			select {
			case <-holdCtx.Done():
			case <-time.After(30 * time.Millisecond):
			}
		}
	})
	var (
		mu                                sync.Mutex
		reads, switches, afterPrimary     int
		backReplica, backPrimary, errored int
		pendingWaits                      int
	)
	var wg sync.WaitGroup
	for range 4 {
		// A budget long enough for the other replica to apply the bound
		// on a loaded machine: a read that spends it goes to the primary,
		// which moves no session between replicas (in CI at load ~10 with
		// 400 ms, 566 of 1,193 reads followed a primary read, 10 moves).
		pol := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 2 * time.Second}
		wg.Go(func() {
			s := r.NewSession()
			defer s.Close()
			high := make([]int, writers)
			prev := ""
			for w.ctx.Err() == nil {
				rd, err := s.QueryWith(w.ctx, pol, "SELECT id, v FROM wmrace."+w.table)
				if err != nil {
					if w.ctx.Err() == nil {
						mu.Lock()
						errored++
						mu.Unlock()
					}
					continue
				}
				back := 0
				for j := range rd.Result.RowNumber() {
					id, _ := rd.Result.GetInt(j, 0)
					v, _ := rd.Result.GetInt(j, 1)
					if int(v) < high[id] {
						back++
					}
					high[id] = max(high[id], int(v))
				}
				waitedPending := false
				for _, st := range rd.Trace {
					if st.Decision.Reason == router.ReasonSeenPending {
						waitedPending = true
					}
				}
				mu.Lock()
				reads++
				if prev != "" && prev != rd.Node && prev != pu.Name && rd.Node != pu.Name {
					switches++
				}
				if waitedPending {
					pendingWaits++
				}
				if prev == pu.Name {
					afterPrimary++
					backPrimary += back
				} else {
					backReplica += back
				}
				mu.Unlock()
				prev = rd.Node
			}
		})
	}
	// Until enough moves happened (a loaded machine reads slowly), at
	// most two minutes.
	start := time.Now()
	for deadline := start.Add(2 * time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		enough := switches >= 200 && time.Since(start) > 10*time.Second
		mu.Unlock()
		if enough {
			break
		}
	}
	holdStop()
	hg.Wait()
	w.stop()
	wg.Wait()
	t.Logf("%d reads, %d moves between replicas, %d waited for a pending seen's bound, %d followed a primary read (%d rows older than seen there), %d errors; %d rows older than seen after a replica read",
		reads, switches, pendingWaits, afterPrimary, backPrimary, errored, backReplica)
	if switches < 20 {
		t.Fatalf("only %d moves between replicas: the test proves little", switches)
	}
	if backReplica > 0 {
		t.Errorf("lazy watermark: %d rows read older than the session saw on a replica before", backReplica)
	}
	if backPrimary > 0 {
		t.Errorf("lazy watermark: %d rows read older than the session saw on the primary before", backPrimary)
	}
	if n := testutil.ToFloat64(r.m.wmFallbacks.WithLabelValues("primary-no-log-status")); n != 0 {
		t.Errorf("%v primary watermarks read without log_status", n)
	}
}

// TestPrimaryWatermarkRouter checks, on real MySQL, the watermark of reads
// the live router serves from the primary (its read pool, the watermark
// pipelined behind the read as the router sends it) while eight writers
// update a row each as fast as they can: every row version a read saw
// must be in the read's watermark (Read.Watermark, which the session's
// watermark is raised with). Two routers read side by side, neither with
// a replica (every read is served by the primary): one whose account
// may read performance_schema.log_status, which the router then reads
// (probed once; nothing counted as a fallback), and one whose account
// lacks BACKUP_ADMIN, which reads the joined query, every such watermark
// counted in watermark_fallbacks_total{source="primary-no-log-status"}.
// The second one's misses are the commit race's gap (docs/router.md),
// logged: they come and go with the machine's timing, so only the first
// router's soundness and the counts are asserted.
func TestPrimaryWatermarkRouter(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pu := topo.Primary()
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	admin, err := d.Dial(ctx, pu.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, q := range []string{"DROP USER IF EXISTS 'nologstatus'@'%'", "CREATE USER 'nologstatus'@'%' IDENTIFIED BY 'nlpw'",
		"GRANT ALL PRIVILEGES ON *.* TO 'nologstatus'@'%'", "REVOKE BACKUP_ADMIN ON *.* FROM 'nologstatus'@'%'"} {
		if _, err := mysqlwire.Exec(ctx, admin, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const writers = 8
	w := startRaceWriters(t, ctx, d, "pw", writers, 0)
	pl := startPoller(t, ctx, 10*time.Millisecond)
	mk := func(user, password string) *Router[gtid.Set] {
		r, err := New(ctx, Config[gtid.Set]{Primary: node(pu), User: user, Password: password, Positions: pl,
			Policy: router.Policy{Kind: router.PolicyTokenRYWMR}, Epoch: topo.Epoch()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	routers := []struct {
		name string
		r    *Router[gtid.Set]
	}{{"log_status", mk(pu.User, pu.Password)}, {"no BACKUP_ADMIN", mk("nologstatus", "nlpw")}}
	var (
		mu                 sync.Mutex
		miss, total, reads [2]int
		wg                 sync.WaitGroup
		outsideThePrimary  int
	)
	for i := range 8 {
		k := i % len(routers)
		r := routers[k].r
		wg.Go(func() {
			s := r.NewSession()
			defer s.Close()
			for w.ctx.Err() == nil {
				rd, err := s.Query(w.ctx, "SELECT id, v FROM wmrace."+w.table)
				if err != nil {
					if w.ctx.Err() == nil {
						t.Errorf("%s: %v", routers[k].name, err)
					}
					return
				}
				m, n := 0, 0
				for j := range rd.Result.RowNumber() {
					id, _ := rd.Result.GetInt(j, 0)
					v, _ := rd.Result.GetInt(j, 1)
					g := w.gtid(int(id), int(v))
					if v == 0 || g == "" {
						continue
					}
					gs, err := gtid.Parse(g)
					if err != nil {
						t.Errorf("GTID %q: %v", g, err)
						return
					}
					n++
					if !rd.Watermark.Contains(gs) {
						if m++; m == 1 && k == 0 {
							t.Logf("%s: saw row %d = %d (%s), the watermark %v lacks it", routers[k].name, id, v, g, rd.Watermark)
						}
					}
				}
				mu.Lock()
				miss[k] += m
				total[k] += n
				reads[k]++
				if rd.Node != pu.Name {
					outsideThePrimary++
				}
				mu.Unlock()
			}
		})
	}
	select {
	case <-time.After(20 * time.Second):
	case <-ctx.Done():
	}
	w.stop()
	wg.Wait()
	for k, rt := range routers {
		t.Logf("%-16s %d reads, %d of %d row versions seen missing from the read's watermark; %v fallbacks counted", rt.name, reads[k], miss[k], total[k],
			testutil.ToFloat64(rt.r.m.wmFallbacks.WithLabelValues("primary-no-log-status")))
	}
	if outsideThePrimary > 0 {
		t.Fatalf("%d reads served outside the primary", outsideThePrimary)
	}
	if total[0] < 1000 {
		t.Fatalf("only %d row versions written by the writers were seen: the test proves little", total[0])
	}
	if miss[0] > 0 {
		t.Errorf("log_status: %d of %d row versions seen were missing from the read's watermark: unsound", miss[0], total[0])
	}
	if n := testutil.ToFloat64(routers[0].r.m.wmFallbacks.WithLabelValues("primary-no-log-status")); n != 0 {
		t.Errorf("%v fallbacks counted by the router whose account reads log_status", n)
	}
	if ls := routers[0].r.pool.logStatusOf(pu.Addr()); !ls.Sound() {
		t.Errorf("log_status verdict known %v sound %v, want sound", ls.Known(), ls.Sound())
	}
	// Every read of the second router read its watermark with the joined
	// query, counted (a reader's last read, cut by the writers' end, may
	// have counted one without being served).
	if n := int(testutil.ToFloat64(routers[1].r.m.wmFallbacks.WithLabelValues("primary-no-log-status"))); n < reads[1] || n > reads[1]+4 || reads[1] == 0 {
		t.Errorf("no BACKUP_ADMIN: %d fallbacks counted for %d reads", n, reads[1])
	}
	if ls := routers[1].r.pool.logStatusOf(pu.Addr()); !ls.Known() || ls.Sound() {
		t.Errorf("no BACKUP_ADMIN: verdict known %v sound %v, want refused", ls.Known(), ls.Sound())
	}
}
