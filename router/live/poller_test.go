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
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	defer func() { cancel(); <-done }()

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
