package proxy

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router/live"
)

// routeLog records Config.OnRead's reports by connection.
type routeLog struct {
	mu   sync.Mutex
	last map[uint32]ReadRoute
}

func (l *routeLog) add(r ReadRoute) {
	l.mu.Lock()
	l.last[r.Conn] = r
	l.mu.Unlock()
}

// healthLog is the proxy's own position source (the pollers it builds by
// default, with its default interval and down-after), counting, per node,
// the verdicts "unhealthy" it gave the router. A poll that a loaded
// machine delays past the down-after window makes a replica unhealthy for
// a moment, and the router then rightly reselects (or remaps) its ids: a
// read during which the router was told so says nothing about hashing,
// and the test reads again. The count shows how often that happened.
type healthLog struct {
	live.PositionSource[gtid.Set]
	unhealthy map[string]*atomic.Int64
}

func (h *healthLog) Position(node string) (gtid.Set, bool) {
	p, ok := h.PositionSource.Position(node)
	if c := h.unhealthy[node]; !ok && c != nil {
		c.Add(1)
	}
	return p, ok
}

// verdicts returns the unhealthy counts of nodes.
func (h *healthLog) verdicts(nodes []string) []int64 {
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		out[i] = h.unhealthy[n].Load()
	}
	return out
}

// pollSource builds c's default position source (newPollers, as New
// does) behind a healthLog, runs it until the test ends, and sets it as
// c.Source.
func pollSource(t *testing.T, c *Config) *healthLog {
	t.Helper()
	vc := *c
	if err := vc.validate(); err != nil {
		t.Fatal(err)
	}
	pl, err := newPollers(&vc, vc.Logger)
	if err != nil {
		t.Fatal(err)
	}
	h := &healthLog{PositionSource: pl, unhealthy: map[string]*atomic.Int64{}}
	for _, b := range append([]Backend{vc.Primary}, vc.Replicas...) {
		h.unhealthy[b.Name] = new(atomic.Int64)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { pl.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	c.Source = h
	return h
}

// TestAffinityThroughOutage: policy affinity through the proxy, in both
// hash modes, reports every read's route (OnRead: node and hash reason);
// a killed replica's ids are reselected (and say so); once it is back
// its sessions return to it without holding it down again on their
// connections opened before the kill (Router.Failures does not move).
//
// Every assertion is on a read during which the proxy's position source
// told the router that the replicas it should find up were healthy: a
// read the router made with a replica unhealthy (a poll a loaded machine
// delayed past the 500 ms down-after window) is read again, up to a
// deadline, and counted in the log. (The proxy's first polls are in
// before it serves: its readiness gate, TestReadyGate.)
func TestAffinityThroughOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, mode := range []hashroute.Mode{hashroute.FullList, hashroute.AvailableOnly} {
		t.Run(mode.String(), func(t *testing.T) {
			log := &routeLog{last: map[uint32]ReadRoute{}}
			var health *healthLog
			s := startProxy(t, func(c *Config) {
				c.Policy, c.HashMode, c.OnRead = "affinity", mode.String(), log.add
				health = pollSource(t, c)
			})
			reps := topo.Replicas()
			all := []string{reps[0].Name, reps[1].Name}
			tab, err := hashroute.NewTable([]hashroute.Server{{Name: reps[0].Name, Weight: 1}, {Name: reps[1].Name, Weight: 1}})
			if err != nil {
				t.Fatal(err)
			}
			// one id per replica
			ids := map[int]string{}
			for k := 0; len(ids) < 2; k++ {
				id := "u" + strconv.Itoa(k)
				if _, ok := ids[tab.First(hashroute.Hash(id))]; !ok {
					ids[tab.First(hashroute.Hash(id))] = id
				}
			}
			db := openDB(t, s, "")
			db.SetMaxIdleConns(8)
			const sessions = 4
			var conns []*sql.Conn
			for range sessions {
				c, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				conns = append(conns, c)
			}
			// readOnce reads id on c; a read in flight on a connection
			// the kill cut is lost to the client (error 2013, not
			// retried: it may have run), so one retry is allowed, as a
			// client would.
			readOnce := func(c *sql.Conn, id string) ReadRoute {
				t.Helper()
				var err error
				for try := 0; try < 2; try++ {
					log.mu.Lock()
					clear(log.last)
					log.mu.Unlock()
					var one int
					if err = c.QueryRowContext(ctx, "/* consistent_read_id:"+id+" */ SELECT 1").Scan(&one); err == nil {
						break
					}
				}
				if err != nil {
					t.Fatalf("read %s: %v", id, err)
				}
				log.mu.Lock()
				defer log.mu.Unlock()
				if len(log.last) != 1 {
					t.Fatalf("%d routes reported for one read", len(log.last))
				}
				for _, r := range log.last {
					return r
				}
				return ReadRoute{}
			}
			// read is readOnce, repeated until the source gave the
			// router no unhealthy verdict on the nodes healthy during it
			// and the router counted no failure of them since the last
			// look (the watchdog cutting a read on a replica reported
			// unhealthy does: the replica is then held down for the
			// router's DownHold, 1 s by default, past the verdict; the
			// next read waits it out).
			excused := 0
			lastFails := map[string]uint64{}
			failed := func(nodes []string) bool {
				moved := false
				for _, n := range nodes {
					if f := s.Router().Failures(n); f != lastFails[n] {
						lastFails[n], moved = f, true
					}
				}
				return moved
			}
			read := func(c *sql.Conn, id string, healthy []string) ReadRoute {
				t.Helper()
				deadline := time.Now().Add(60 * time.Second)
				for {
					if failed(healthy) {
						excused++
						time.Sleep(1100 * time.Millisecond)
					}
					before := health.verdicts(healthy)
					r := readOnce(c, id)
					if slices.Equal(before, health.verdicts(healthy)) && !failed(healthy) {
						return r
					}
					excused++
					time.Sleep(1100 * time.Millisecond)
					if time.Now().After(deadline) {
						t.Fatalf("read %s: the proxy's source kept reporting one of %v unhealthy for 60s (%d reads excused)", id, healthy, excused)
					}
				}
			}
			defer func() { t.Logf("%d reads read again: a replica was reported unhealthy during them", excused) }()
			for _, c := range conns {
				for i, id := range ids {
					if r := read(c, id, all); r.Replica != i || r.Node != reps[i].Name || r.HashReason != hashroute.FirstChoice {
						t.Fatalf("id %s: route %+v, want %s first-choice", id, r, reps[i].Name)
					}
				}
			}
			down := reps[0].Name
			if err := topo.Kill(ctx, down); err != nil {
				t.Fatal(err)
			}
			restarted := false
			defer func() {
				if !restarted {
					_ = topo.Restart(context.WithoutCancel(ctx), down)
				}
			}()
			for _, c := range conns {
				if r := read(c, ids[0], all[1:]); r.Node != reps[1].Name || r.HashReason != hashroute.Reselected {
					t.Fatalf("%s down: route %+v, want %s reselected", down, r, reps[1].Name)
				}
			}
			if err := topo.Restart(ctx, down); err != nil {
				t.Fatal(err)
			}
			restarted = true
			// wait until the router serves the id from its replica again
			deadline := time.Now().Add(60 * time.Second)
			for readOnce(conns[0], ids[0]).Node != down {
				if time.Now().After(deadline) {
					t.Fatalf("%s never served again after its restart", down)
				}
				time.Sleep(100 * time.Millisecond)
			}
			for _, c := range conns[1:] {
				// Failures is read around one read during which every
				// replica was healthy: a read the source cut
				// (ErrUnresponsive) may count a failure, and is excused.
				var r ReadRoute
				var before, after uint64
				for range 100 {
					v := health.verdicts(all)
					before = s.Router().Failures(down)
					r = readOnce(c, ids[0])
					after = s.Router().Failures(down)
					if slices.Equal(v, health.verdicts(all)) {
						break
					}
					excused++
				}
				if r.Node != down || r.HashReason != hashroute.FirstChoice {
					t.Errorf("after the restart: route %+v, want %s first-choice", r, down)
				}
				if after != before {
					t.Errorf("%s failed %d more times on a connection opened before its restart", down, after-before)
				}
			}
		})
	}
}
