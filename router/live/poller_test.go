package live

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
)

// hangingConn is a poll connection whose node never answers: ReadValue
// returns only when its context ends (as a partition that drops packets
// looks to the poller).
type hangingConn struct{ closed *atomic.Bool }

func (h hangingConn) ReadValue(ctx context.Context, _ string) (string, error) {
	<-ctx.Done()
	return "", context.Cause(ctx)
}
func (h hangingConn) Close() error { h.closed.Store(true); return nil }

// answeringConn answers every poll with one GTID set.
type answeringConn struct{ set string }

func (a answeringConn) ReadValue(context.Context, string) (string, error) { return a.set, nil }
func (a answeringConn) Close() error                                      { return nil }

// TestPollTimeoutRedials: a poll that never gets an answer is cut by
// PollTimeout, its connection closed, and the next dial reaches the node
// again. Without the per-poll timeout the poller waits on the first
// connection for as long as the run lasts.
func TestPollTimeoutRedials(t *testing.T) {
	cfg := PollerConfig[gtid.Set]{
		Nodes:       []Node{{Name: "r1", Addr: "r1:3306"}},
		Interval:    5 * time.Millisecond,
		DownAfter:   500 * time.Millisecond,
		PollTimeout: 50 * time.Millisecond,
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	const set = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7"
	var firstClosed atomic.Bool
	var mu sync.Mutex
	dials := 0
	p := newPoller(cfg, func(ctx context.Context, addr string) (valueConn, error) {
		mu.Lock()
		defer mu.Unlock()
		dials++
		if dials == 1 {
			return hangingConn{&firstClosed}, nil
		}
		return answeringConn{set}, nil
	})
	runPoller(t, p)

	want, err := gtid.Parse(set)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := p.WaitFor(wctx, "r1", want); err != nil {
		t.Fatalf("the poller never reached the node on a new connection: %v (overran %d)", err, p.Overran())
	}
	if !firstClosed.Load() {
		t.Error("the connection whose poll overran was not closed")
	}
	if p.Overran() < 1 {
		t.Errorf("overran = %d, want at least 1", p.Overran())
	}
	if _, errs := p.Stats(); errs < 1 {
		t.Errorf("errs = %d, want the overrun counted", errs)
	}
}

func TestPollTimeoutValidated(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 2 * time.Minute} {
		cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, PollTimeout: d}
		if err := cfg.validate(); err == nil {
			t.Errorf("poll timeout %v accepted", d)
		}
	}
	cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.PollTimeout != cfg.DownAfter {
		t.Errorf("default poll timeout %v, want DownAfter %v", cfg.PollTimeout, cfg.DownAfter)
	}
}

// queryConn records the queries a poll connection was asked and answers
// each with an LSN.
type queryConn struct {
	mu   *sync.Mutex
	seen map[string]bool
}

func (q queryConn) ReadValue(_ context.Context, query string) (string, error) {
	q.mu.Lock()
	q.seen[query] = true
	q.mu.Unlock()
	return "0/16B3748", nil
}
func (q queryConn) Close() error { return nil }

// TestPollerStandbyQuery: with a primary named and a flavor that has a
// standby query (PostgreSQL), every other node is polled with the standby
// query, which stays where recovery ended once the node is promoted: a
// standby promoted before the router is told can never report the new
// timeline's position (past a lost write's LSN, with no timeline in
// gtid.PGLSN). SetPrimary, which the routers' Failover calls, moves the
// primary's query to the new primary.
func TestPollerStandbyQuery(t *testing.T) {
	cfg := PollerConfig[gtid.PGLSN]{Flavor: Postgres{}, Nodes: []Node{{Name: "p", Addr: "p:5432"}, {Name: "s1", Addr: "s1:5432"}},
		Interval: time.Millisecond, Primary: "p"}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]map[string]bool{"p:5432": {}, "s1:5432": {}}
	p := newPoller(cfg, func(_ context.Context, addr string) (valueConn, error) {
		return queryConn{&mu, seen[addr]}, nil
	})
	if q := p.query("s1"); q != pgStandbyQuery {
		t.Errorf("standby polled with %q, want the standby query", q)
	}
	if q := p.query("p"); q != pgExecutedQuery {
		t.Errorf("primary polled with %q, want the executed query", q)
	}
	if err := p.SetPrimary("s1"); err != nil {
		t.Fatal(err)
	}
	if q := p.query("s1"); q != pgExecutedQuery {
		t.Errorf("new primary polled with %q, want the executed query", q)
	}
	if q := p.query("p"); q != pgStandbyQuery {
		t.Errorf("old primary polled with %q, want the standby query", q)
	}
	// The polls themselves use it.
	stop := runPoller(t, p)
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	for _, n := range []string{"p", "s1"} {
		if err := p.WaitFor(wctx, n, 0x16B3748); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	mu.Lock()
	defer mu.Unlock()
	if !seen["p:5432"][pgStandbyQuery] || seen["p:5432"][pgExecutedQuery] {
		t.Errorf("old primary's polls: %v", seen["p:5432"])
	}
	if !seen["s1:5432"][pgExecutedQuery] || seen["s1:5432"][pgStandbyQuery] {
		t.Errorf("new primary's polls: %v", seen["s1:5432"])
	}
	// Without a primary named, every node gets the executed query (as
	// before; MySQL's flavor has no standby query at all).
	q := newPoller(PollerConfig[gtid.PGLSN]{Flavor: Postgres{}, Nodes: cfg.Nodes}, nil)
	if got := q.query("s1"); got != pgExecutedQuery {
		t.Errorf("no primary named: %q", got)
	}
}

// runPoller runs p until the test ends or stop is called (which waits
// for Run to return).
func runPoller[P gtid.Position[P]](t *testing.T, p *Poller[P]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}
