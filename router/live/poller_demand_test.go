package live

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// The demand-driven polling tests (PollerConfig.IdleInterval) run in a
// synctest bubble: the poller's ticker, kicks and clock are the bubble's
// fake time, which moves only when every goroutine of the test waits, so
// poll counts and wake-up times are exact whatever the machine's load.
// synctest.Test also fails a test that leaves a goroutine blocked (the
// poll loops end with their context; a WaitFor with its own).

// demandNode is a fake node whose executed set the test moves; each
// poll connection answers it and counts the poll.
type demandNode struct {
	mu    sync.Mutex
	set   string
	polls int
}

func (n *demandNode) move(set string) {
	n.mu.Lock()
	n.set = set
	n.mu.Unlock()
}

func (n *demandNode) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.polls
}

type demandConn struct{ n *demandNode }

func (c demandConn) ReadValue(context.Context, string) (string, error) {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.n.polls++
	return c.n.set, nil
}
func (c demandConn) Close() error { return nil }

// demandPoller is a poller of one node "r1" (at uA:1-5) with Interval
// 10ms and IdleInterval idle, run until the returned stop.
func demandPoller(t *testing.T, idle time.Duration, mut func(*PollerConfig[gtid.Set])) (*Poller[gtid.Set], *demandNode, func()) {
	t.Helper()
	cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: 10 * time.Millisecond,
		IdleInterval: idle, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mut != nil {
		mut(&cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	node := &demandNode{set: uA + ":1-5"}
	p := newPoller(cfg, func(context.Context, string) (valueConn, error) { return demandConn{node}, nil })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	return p, node, func() { cancel(); <-done }
}

// modes is the poller's poll counts by mode.
func modes(p *Poller[gtid.Set]) (fast, idle uint64) { return p.Modes() }

// wantUntil is r1's pending Want's deadline (0: none).
func wantUntil(p *Poller[gtid.Set]) int64 {
	ns := p.states["r1"]
	ns.dmu.Lock()
	defer ns.dmu.Unlock()
	return ns.wantUntil
}

func TestPollerIdleIntervalValidated(t *testing.T) {
	base := func() PollerConfig[gtid.Set] {
		return PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: 10 * time.Millisecond}
	}
	for name, mut := range map[string]func(*PollerConfig[gtid.Set]){
		"below the interval":            func(c *PollerConfig[gtid.Set]) { c.IdleInterval = 5 * time.Millisecond },
		"negative":                      func(c *PollerConfig[gtid.Set]) { c.IdleInterval = -time.Second },
		"over a minute":                 func(c *PollerConfig[gtid.Set]) { c.IdleInterval = 2 * time.Minute },
		"down-after under twice idle":   func(c *PollerConfig[gtid.Set]) { c.IdleInterval, c.DownAfter = time.Second, 1500*time.Millisecond },
		"down-after under the interval": func(c *PollerConfig[gtid.Set]) { c.DownAfter = 5 * time.Millisecond },
	} {
		c := base()
		mut(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
	c := base()
	c.IdleInterval = 200 * time.Millisecond
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.DownAfter != time.Second {
		t.Errorf("default down-after with idle 200ms = %v, want 5 idle intervals (1s)", c.DownAfter)
	}
	c = base()
	c.IdleInterval = 100 * time.Millisecond
	if err := c.validate(); err != nil || c.DownAfter != 500*time.Millisecond {
		t.Errorf("idle 100ms: down-after %v (%v), want 500ms as without one", c.DownAfter, err)
	}
	c = base()
	c.IdleInterval = c.Interval
	if err := c.validate(); err != nil || c.IdleInterval != 0 {
		t.Errorf("idle = interval: %v (%v), want 0 (always fast)", c.IdleInterval, err)
	}
}

// TestPollerIdlePolls: a node nobody needs is polled every IdleInterval
// after its first poll (fast), and stays healthy throughout; without an
// IdleInterval it is polled every Interval, as before.
func TestPollerIdlePolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, node, stop := demandPoller(t, time.Second, nil)
		for range 100 {
			time.Sleep(100 * time.Millisecond)
			if _, ok := p.Position("r1"); !ok {
				t.Fatalf("node down between idle polls at %d polls", node.count())
			}
		}
		time.Sleep(50 * time.Millisecond) // off the 10s tick
		stop()
		fast, idle := modes(p)
		// t=0 (the first poll, fast), then t=1s..10s.
		if fast != 1 || idle != 10 || node.count() != 11 {
			t.Errorf("polls in 10s: fast %d, idle %d, node saw %d; want 1, 10, 11", fast, idle, node.count())
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p, node, stop := demandPoller(t, 0, nil)
		time.Sleep(1005 * time.Millisecond)
		stop()
		if fast, idle := modes(p); fast != 101 || idle != 0 || node.count() != 101 {
			t.Errorf("no idle interval: fast %d, idle %d, node saw %d in 1s; want 101, 0, 101", fast, idle, node.count())
		}
	})
}

// TestPollerWaitForDemand: a WaitFor whose want the view lacks kicks an
// idle node (a poll at once) and keeps it polled every Interval while it
// waits; it is woken by the first poll after the node holds the want,
// not by an idle tick. Afterwards the node idles again; a waiter that
// gives up leaves no demand behind.
func TestPollerWaitForDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, node, stop := demandPoller(t, 30*time.Second, nil)
		defer stop()
		time.Sleep(time.Second) // idle after the first poll
		synctest.Wait()
		if f, i := modes(p); f != 1 || i != 0 {
			t.Fatalf("before the waiter: fast %d idle %d", f, i)
		}
		want := set(t, uA+":1-7")
		errc := make(chan error, 1)
		var woke time.Time
		go func() {
			err := p.WaitFor(t.Context(), "r1", want)
			woke = time.Now()
			errc <- err
		}()
		synctest.Wait() // the kick's poll has run
		if f, _ := modes(p); f != 2 {
			t.Errorf("a waiter did not kick the idle node: fast polls %d, want 2", f)
		}
		time.Sleep(95 * time.Millisecond) // fast polls at +10..+90ms
		if f, _ := modes(p); f != 11 {
			t.Errorf("while waiting: fast polls %d, want 11", f)
		}
		node.move(uA + ":1-7")
		moved := time.Now()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if d := woke.Sub(moved); d > 10*time.Millisecond {
			t.Errorf("woken %v after the node held the want, want within one interval", d)
		}
		// No demand left: idle again (the next poll decides it).
		synctest.Wait()
		f0, _ := modes(p)
		time.Sleep(45 * time.Second)
		synctest.Wait()
		if f, i := modes(p); f > f0+1 || i != 1 {
			t.Errorf("after the waiter: fast %d (was %d), idle %d in 45s; want at most one more fast, 1 idle", f, f0, i)
		}
		// A waiter that gives up unsatisfied ends its demand.
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if err := p.WaitFor(ctx, "r1", set(t, uA+":1-9")); err == nil {
			t.Fatal("WaitFor for a position the node never reaches returned nil")
		}
		if n := p.states["r1"].waiters.Load(); n != 0 {
			t.Errorf("waiters after the waiter left: %d", n)
		}
		synctest.Wait()
		f0, i0 := modes(p)
		time.Sleep(45 * time.Second)
		synctest.Wait()
		if f, i := modes(p); f > f0+1 || i != i0+1 {
			t.Errorf("after a waiter gave up: fast %d (was %d), idle %d (was %d); want idle again", f, f0, i, i0)
		}
	})
}

// TestPollerWantDemand: Want of a position the view lacks kicks the idle
// node and keeps it fast until the view holds it, then idle; Want of a
// position the view holds, and Want without an IdleInterval, do nothing.
func TestPollerWantDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, node, stop := demandPoller(t, 30*time.Second, nil)
		defer stop()
		time.Sleep(time.Second)
		synctest.Wait()
		p.Want("r1", set(t, uA+":3")) // held: nothing
		p.Want("nope", set(t, uA+":9"))
		synctest.Wait()
		if f, i := modes(p); f != 1 || i != 0 {
			t.Fatalf("a Want the view holds polled: fast %d idle %d", f, i)
		}
		p.Want("r1", set(t, uA+":6"))
		synctest.Wait()
		if f, _ := modes(p); f != 2 {
			t.Errorf("Want did not kick the idle node: fast polls %d, want 2", f)
		}
		p.Want("r1", set(t, uA+":7")) // joins the first; fast already: no kick
		synctest.Wait()
		if f, _ := modes(p); f != 2 {
			t.Errorf("Want of a fast node kicked it: fast polls %d, want 2", f)
		}
		time.Sleep(95 * time.Millisecond)
		if f, _ := modes(p); f != 11 {
			t.Errorf("while wanted: fast polls %d, want 11", f)
		}
		node.move(uA + ":1-6") // the first want, not the second
		time.Sleep(100 * time.Millisecond)
		if f, i := modes(p); f != 21 || i != 0 {
			t.Errorf("half the want held: fast %d, idle %d; want 21, 0", f, i)
		}
		node.move(uA + ":1-7")
		time.Sleep(10 * time.Millisecond) // the poll that sees it
		synctest.Wait()
		if pos, _ := p.Position("r1"); !pos.Contains(set(t, uA+":6-7")) {
			t.Fatalf("view %v", pos)
		}
		f0, i0 := modes(p)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if f, i := modes(p); f != f0 || i != i0+2 {
			t.Errorf("after the want was held: fast %d (was %d), idle %d (was %d); want 0 more fast, 2 idle", f, f0, i, i0)
		}
		if wantUntil(p) != 0 {
			t.Error("a held want was kept")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p, _, stop := demandPoller(t, 0, nil)
		defer stop()
		time.Sleep(time.Second)
		synctest.Wait()
		f0, _ := modes(p)
		p.Want("r1", set(t, uA+":9"))
		synctest.Wait()
		if f, _ := modes(p); f != f0 || wantUntil(p) != 0 {
			t.Errorf("Want without an idle interval kicked or kept a want (fast %d, was %d)", f, f0)
		}
	})
}

// TestPollerWantExpires: a Want the node never reaches (a write lost in
// a failover) keeps it fast for DownAfter after the last Want, then the
// node idles again.
func TestPollerWantExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, stop := demandPoller(t, 10*time.Second, func(c *PollerConfig[gtid.Set]) { c.DownAfter = 20 * time.Second })
		defer stop()
		time.Sleep(time.Second)
		synctest.Wait()
		p.Want("r1", set(t, uA+":9"))
		time.Sleep(10 * time.Second)
		p.Want("r1", set(t, uA+":9")) // again: another DownAfter from now
		time.Sleep(19 * time.Second)
		synctest.Wait()
		f0, i0 := modes(p)
		if i0 != 0 || f0 < 2900 {
			t.Errorf("29s wanted: fast %d, idle %d; want about 2,900 fast, none idle", f0, i0)
		}
		time.Sleep(2 * time.Second) // past the second Want's DownAfter
		synctest.Wait()
		f1, _ := modes(p)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if f, i := modes(p); f != f1 || i != 6 {
			t.Errorf("after the want expired: fast %d (was %d), idle %d; want idle every 10s", f, f1, i)
		}
		if _, ok := p.Position("r1"); !ok {
			t.Error("node down")
		}
	})
}

// TestPollerNewNodeFast: until a node's first successful poll it is
// polled every Interval (the readiness gate waits for it), however long
// the idle interval.
func TestPollerNewNodeFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		dials := 0
		cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: 10 * time.Millisecond,
			IdleInterval: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		node := &demandNode{set: uA + ":1-5"}
		p := newPoller(cfg, func(context.Context, string) (valueConn, error) {
			mu.Lock()
			defer mu.Unlock()
			if dials++; dials <= 5 {
				return nil, context.DeadlineExceeded
			}
			return demandConn{node}, nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		time.Sleep(45 * time.Millisecond) // dials at 0..40ms fail; the sixth, at 50ms, answers
		if _, ok := p.Position("r1"); ok {
			t.Error("healthy before any poll answered")
		}
		time.Sleep(10 * time.Millisecond)
		if _, ok := p.Position("r1"); !ok {
			t.Error("not read 55ms in: a new node must be polled every interval")
		}
		cancel()
		<-done
	})
}

// demandSource is a staticSource that records the router's Wants.
type demandSource struct {
	*staticSource
	mu    sync.Mutex
	wants []string // "node want"
}

func (d *demandSource) Want(node string, want gtid.Set) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.wants = append(d.wants, node+" "+want.String())
}

func (d *demandSource) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.wants
	d.wants = nil
	return w
}

// TestRouterWants: the router tells a Demander source what its clients
// need in the replicas' views: after a write it learns (every replica,
// the write's GTID), and when a read finds no replica whose view holds
// its need (a freshness fallback); a read a replica serves asks nothing.
func TestRouterWants(t *testing.T) {
	var ds *demandSource
	r, _ := funcRouter(t, func(c *Config[gtid.Set]) {
		ds = &demandSource{staticSource: c.Positions.(*staticSource)}
		c.Positions = ds
	})
	s := r.NewSession()
	ctx := context.Background()
	var rr runRec
	if rd, err := s.QueryFunc(ctx, s.policy, ReadOptions[gtid.Set]{}, rr.run); err != nil || rd.Outcome != router.OutReplica {
		t.Fatalf("read = %+v, %v", rd, err)
	}
	if w := ds.take(); len(w) != 0 {
		t.Errorf("a read without a token asked for %v", w)
	}
	s.RecordAck(set(t, uA+":11"))
	if w := ds.take(); len(w) != 2 || w[0] != "r1 "+uA+":11" || w[1] != "r2 "+uA+":11" {
		t.Errorf("after a write: %v, want r1 and r2 for the write's GTID", w)
	}
	if rd, err := s.QueryFunc(ctx, s.policy, ReadOptions[gtid.Set]{}, rr.run); err != nil || rd.Outcome != router.OutFallback {
		t.Fatalf("read = %+v, %v", rd, err)
	}
	if w := ds.take(); len(w) != 2 || w[0] != "r1 "+uA+":11" || w[1] != "r2 "+uA+":11" {
		t.Errorf("a fallback read: %v, want r1 and r2 for its token", w)
	}
	ds.staticSource.mu.Lock()
	ds.staticSource.pos["r1"] = set(t, uA+":1-11")
	ds.staticSource.mu.Unlock()
	if rd, err := s.QueryFunc(ctx, s.policy, ReadOptions[gtid.Set]{}, rr.run); err != nil || rd.Outcome != router.OutReplica {
		t.Fatalf("read = %+v, %v", rd, err)
	}
	if w := ds.take(); len(w) != 0 {
		t.Errorf("a read a replica served asked for %v", w)
	}
}

// TestPollerIdleWaitBound: under the lazy watermark a node polled idly
// still bounds a read at once: WaitBound kicks a poll, which starts
// after the read ended (so SeenBound answers from it), and the node
// stays idle after (a bound is one poll, not a demand).
func TestPollerIdleWaitBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
		cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: 10 * time.Millisecond,
			IdleInterval: 30 * time.Second, Bounds: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		node := &boundsNode{exec: u + ":1-5", received: u + ":1-9", noLogStatus: true}
		p := newPoller(cfg, func(context.Context, string) (valueConn, error) { return &boundsConn{node: node}, nil })
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		defer func() { cancel(); <-done }()
		time.Sleep(time.Second)
		gen := p.Generation("r1")
		readEnd := time.Now()
		if _, ok, wait := p.SeenBound("r1", readEnd, gen); ok || wait <= 0 {
			t.Fatalf("bounded before a poll after the read (ok %v, wait %v)", ok, wait)
		}
		time.Sleep(time.Millisecond) // the fake clock moves only when asked: the poll must start after readEnd
		t0 := time.Now()
		if err := p.WaitBound(t.Context(), "r1", readEnd); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d != 0 {
			t.Errorf("WaitBound of an idle node took %v, want a poll at once", d)
		}
		if b, ok, _ := p.SeenBound("r1", readEnd, gen); !ok || !b.Contains(mustSet(t, u+":1-9")) {
			t.Fatalf("after WaitBound: bound %v ok %v", b, ok)
		}
		synctest.Wait()
		f0, _ := p.Modes()
		time.Sleep(45 * time.Second)
		synctest.Wait()
		if f, i := p.Modes(); f != f0 || i != 1 {
			t.Errorf("after the bound: fast %d (was %d), idle %d in 45s; want idle", f, f0, i)
		}
	})
}

// TestPollerWantNoLostWakeup: a Want that arrives while the poll loop
// decides to go idle (after it found no demand, before it publishes
// idle: testHookIdle runs the Want there) finds the loop still fast, so
// it does not kick; the loop must see it (nextFast looks for demand
// again after publishing idle) and poll fast, not wait for the idle
// tick.
func TestPollerWantNoLostWakeup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: 10 * time.Millisecond,
			IdleInterval: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		node := &demandNode{set: uA + ":1-5"}
		p := newPoller(cfg, func(context.Context, string) (valueConn, error) { return demandConn{node}, nil })
		var once sync.Once
		p.testHookIdle = func() {
			once.Do(func() {
				if !p.states["r1"].fast.Load() {
					t.Error("the loop published idle before the hook")
				}
				p.Want("r1", set(t, uA+":9"))
			})
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		defer func() { cancel(); <-done }()
		time.Sleep(95 * time.Millisecond)
		if f, i := p.Modes(); f != 10 || i != 0 {
			t.Errorf("a Want during the idle decision: fast %d, idle %d in 95ms; want 10 fast (every 10ms), 0 idle", f, i)
		}
	})
}
