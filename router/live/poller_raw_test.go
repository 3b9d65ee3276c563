package live

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// textConn is a bytesConn answering every poll with its node's current
// text (set by the test), in a buffer of its own as mysqlwire.PollConn's.
type textConn struct {
	text *atomic.Pointer[string]
	buf  []byte
}

func (c *textConn) ReadValue(context.Context, string) (string, error) { return *c.text.Load(), nil }
func (c *textConn) Value(time.Time, string) ([]byte, error) {
	c.buf = append(c.buf[:0], *c.text.Load()...)
	return c.buf, nil
}
func (c *textConn) Close() error { return nil }

// TestPollerUnchangedAnswer: a poll whose answer is the text of the last
// one on the same connection publishes no new state and allocates
// nothing, yet moves the node's times: SeenBound takes its bound from it
// (the state of the earlier poll holds the same upper bound). A changed
// answer, or the same one on a new connection, publishes a new state.
func TestPollerUnchangedAnswer(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: time.Minute, DownAfter: time.Minute, Bounds: true}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	text := &atomic.Pointer[string]{}
	set := func(s string) { text.Store(&s) }
	set(u + ":1-5;")
	p := newPoller(cfg, func(context.Context, string) (valueConn, error) { return &textConn{text: text}, nil })
	// A node that refuses log_status would need the probe's answers;
	// this one polls the joined query (no LogStatusFlavor verdict).
	p.logStatus = nil
	np := &nodePoll[gtid.Set]{n: cfg.Nodes[0], ns: p.states["r1"]}
	ctx := t.Context()
	poll := func() {
		t.Helper()
		if err := p.pollOnce(ctx, np); err != nil {
			t.Fatal(err)
		}
	}
	poll()
	gen := p.Generation("r1")
	st := np.ns.cur.Load()
	readEnd := time.Now()
	if _, ok, _ := p.SeenBound("r1", readEnd, gen); ok {
		t.Fatal("bounded by a poll that started before the read ended")
	}
	if allocs := testing.AllocsPerRun(100, poll); allocs != 0 {
		t.Errorf("an unchanged poll allocates %v times", allocs)
	}
	if np.ns.cur.Load() != st {
		t.Error("an unchanged answer published a new state")
	}
	b, ok, _ := p.SeenBound("r1", readEnd, gen)
	if !ok || !b.Contains(mustSet(t, u+":1-5")) || b.Contains(mustSet(t, u+":6")) {
		t.Fatalf("after unchanged polls: bound %v ok %v, want %s:1-5", b, ok, u)
	}
	if _, healthy := p.Position("r1"); !healthy {
		t.Error("unhealthy after a poll")
	}
	// A changed answer: a new state, the new bound, WaitFor woken.
	changed := st.changed
	set(u + ":1-6;" + u + ":7")
	readEnd = time.Now()
	poll()
	if np.ns.cur.Load() == st {
		t.Fatal("a changed answer published no state")
	}
	select {
	case <-changed:
	default:
		t.Error("a moved position did not wake WaitFor's waiters")
	}
	if b, ok, _ := p.SeenBound("r1", readEnd, gen); !ok || !b.Contains(mustSet(t, u+":1-7")) {
		t.Fatalf("bound %v ok %v, want %s:1-7", b, ok, u)
	}
	if pos, _ := p.Position("r1"); !pos.Contains(mustSet(t, u+":1-6")) || pos.Contains(mustSet(t, u+":7")) {
		t.Errorf("position %v, want %s:1-6", pos, u)
	}
	// The same answer on a new connection: a new state of a new
	// generation, which cannot bound the old one's reads.
	np.c.Close()
	np.c = nil
	readEnd = time.Now()
	poll()
	if g := p.Generation("r1"); g == gen {
		t.Fatal("a new connection kept the generation")
	}
	if _, ok, wait := p.SeenBound("r1", readEnd, gen); ok || wait != 0 {
		t.Errorf("the old generation's read bounded by a new connection (ok %v wait %v)", ok, wait)
	}
}

// TestWaitBoundWakes: WaitBound's waiter channel is installed only while
// someone waits; however its installation and the polls interleave,
// every wait for a poll after a moment returns once one is published
// (none is lost), with polls that mostly repeat the last answer.
func TestWaitBoundWakes(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: time.Millisecond, Bounds: true}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	text := &atomic.Pointer[string]{}
	s := u + ":1-5;"
	text.Store(&s)
	p := newPoller(cfg, func(context.Context, string) (valueConn, error) { return &textConn{text: text}, nil })
	p.logStatus = nil
	runPoller(t, p)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if w == 0 && i%20 == 0 {
					s := u + ":1-" + string(rune('6'+i/20%4)) + ";"
					text.Store(&s)
				}
				after := time.Now()
				if err := p.WaitBound(ctx, "r1", after); err != nil {
					failed.Add(1)
					return
				}
				if st := p.states["r1"].start.Load(); st <= p.rel(after) {
					failed.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d waiters not woken by a later poll (%v)", n, ctx.Err())
	}
}

// TestPollConnLive: mysqlwire.PollConn against a replica: it reads the
// executed set and log_status as go-mysql's client does; a statement the
// server refuses leaves it in step; a statement that overruns the
// deadline fails as context.DeadlineExceeded; and when the dial's
// context ends, an exchange in flight is cut at once.
func TestPollConnLive(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pu, rn := topo.Primary(), topo.Replicas()[0]
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second, IOTimeout: 10 * time.Second}
	pc, err := d.DialPoll(ctx, rn.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	gc, err := d.Dial(ctx, rn.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	for _, q := range []string{mysqlwire.ExecutedQuery, mysqlwire.LogStatusQuery, mysqlwire.BoundsQuery, "SELECT NULL", "SELECT 'a', 'b' UNION SELECT 'c', 'd'"} {
		v, err := pc.Value(time.Now().Add(5*time.Second), q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		want, err := mysqlwire.ReadValue(ctx, gc, q)
		if err != nil {
			t.Fatal(err)
		}
		// The replica is idle: its sets do not move between the two.
		if string(v) != want {
			t.Errorf("%s: %q, go-mysql %q", q, v, want)
		}
	}
	if _, err := pc.Value(time.Now().Add(5*time.Second), "SELECT * FROM no_such_db.t"); !mysqlwire.IsServerError(err) {
		t.Fatalf("refused statement: %v, want the server's error", err)
	}
	if v, err := pc.ReadValue(ctx, "SELECT 42"); err != nil || v != "42" {
		t.Fatalf("after a refusal: %q, %v", v, err)
	}
	// SLEEP answers 0 after 3 s: only the deadline makes it an error.
	if _, err := pc.Value(time.Now().Add(100*time.Millisecond), "SELECT SLEEP(3)"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("overrun: %v, want context.DeadlineExceeded", err)
	}
	// A connection whose dial context ends mid-exchange (or before it
	// starts: either way the exchange fails with the context's cause).
	dctx, dcancel := context.WithCancel(ctx)
	pc2, err := d.DialPoll(dctx, rn.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer pc2.Close()
	done := make(chan error, 1)
	go func() { _, err := pc2.Value(time.Time{}, "SELECT SLEEP(3)"); done <- err }()
	dcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cut exchange: %v, want context.Canceled", err)
	}
}
