package live

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

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
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
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
// few times, then switch to the other one, taking what they saw from the
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
func TestLazyWatermarkSwitch(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
	p := startPollerOf(t, ctx, PollerConfig[gtid.Set]{Nodes: nodes, Interval: 10 * time.Millisecond, Bounds: true})
	var (
		mu                              sync.Mutex
		misses, backwards, rows, passes int
		switches, unbounded             int
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
			for w.ctx.Err() == nil {
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
					unbounded++ // the poll connection changed: the session would fall back
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
							t.Logf("reader %d on %s: saw row %d = %d (%s), the bound lacks it", ri, nodes[cur].Name, kv[0], kv[1], g)
						}
					}
				}
				// Switch: the other replica serves once it holds the bound.
				next := (cur + 1) % len(nodes)
				// (As long as it takes: a replica that lags on a loaded
				// machine makes the switch slow, not wrong; the writers'
				// end ends the wait.)
				err := p.WaitFor(w.ctx, nodes[next].Name, bound)
				if err != nil {
					if w.ctx.Err() == nil {
						pos, _ := p.Position(nodes[next].Name)
						t.Errorf("%s never reached the bound %v (it has %v): %v", nodes[next].Name, bound, pos, err)
					}
					return
				}
				mu.Lock()
				misses += miss
				backwards += back
				rows += len(versions)
				passes++
				switches++
				mu.Unlock()
				cur = next
			}
		})
	}
	// At least 20 s, and on until enough switches happened (a loaded
	// machine reads slowly), at most 90 s.
	for start := time.Now(); ctx.Err() == nil; {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		n := switches
		mu.Unlock()
		if el := time.Since(start); el > 90*time.Second || (el > 20*time.Second && n >= 300) {
			break
		}
	}
	w.stop()
	wg.Wait()
	t.Logf("%d row versions seen in %d passes, %d switches between replicas; %d missing from the bound, %d older than one seen before; %d bounds not available (poll connection changed)",
		rows, passes, switches, misses, backwards, unbounded)
	if switches < 30 || rows < 300 {
		t.Fatalf("only %d switches and %d row versions seen: the test proves little", switches, rows)
	}
	if misses > 0 || backwards > 0 {
		t.Errorf("the lazy bound is unsound: %d row versions seen missing from it, %d reads went back in time after a switch", misses, backwards)
	}
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
// session saw before. A read that follows one served by the primary is
// judged apart: the primary's bound is gtid_executed alone, which the
// commit race can leave short (docs/router.md, "The commit race"), as
// the pipelined watermark does there.
func TestLazyWatermarkRouter(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
}
