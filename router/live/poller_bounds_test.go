package live

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// boundsConn answers the bounds query with what its node holds now
// (executed;received), and log_status with the executed set unless the
// node refuses it (as a server refuses an account without
// BACKUP_ADMIN); once broken it fails every poll.
type boundsConn struct {
	node   *boundsNode
	broken atomic.Bool
}

type boundsNode struct {
	mu             sync.Mutex
	exec, received string
	// noLogStatus: log_status is refused (ER_SPECIFIC_ACCESS_DENIED).
	noLogStatus bool
	queries     map[string]int
}

func (b *boundsConn) ReadValue(_ context.Context, q string) (string, error) {
	if b.broken.Load() {
		return "", errors.New("connection lost")
	}
	b.node.mu.Lock()
	defer b.node.mu.Unlock()
	if b.node.queries == nil {
		b.node.queries = map[string]int{}
	}
	b.node.queries[q]++
	switch q {
	case mysqlwire.BoundsQuery:
		return b.node.exec + ";" + b.node.received, nil
	case mysqlwire.LogStatusBinlogQuery:
		return "1", nil
	case mysqlwire.LogStatusQuery:
		if b.node.noLogStatus {
			return "", &mysql.MyError{Code: 1227, State: "42000", Message: "Access denied; you need (at least one of) the BACKUP_ADMIN privilege(s) for this operation"}
		}
		return b.node.exec, nil
	}
	return "", errors.New("unexpected query " + q)
}
func (b *boundsConn) Close() error { return nil }

// count is how many times q was asked.
func (n *boundsNode) count(q string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.queries[q]
}

// TestPollerSeenBound: with Bounds, on a node that refuses log_status,
// each poll reads the lower and upper bounds in one statement (counted
// as a fallback); SeenBound answers only from a poll that
// started after the read ended on the same poll connection (a new
// connection, as after a restart, cannot bound a read of the old one:
// wait 0), and WaitBound brings such a poll at once (a kick, well before
// the interval).
func TestPollerSeenBound(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: 30 * time.Second, Bounds: true,
		DownAfter: 50 * time.Second}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	node := &boundsNode{exec: u + ":1-5", received: u + ":1-9", noLogStatus: true}
	var mu sync.Mutex
	var conns []*boundsConn
	p := newPoller(cfg, func(context.Context, string) (valueConn, error) {
		mu.Lock()
		defer mu.Unlock()
		c := &boundsConn{node: node}
		conns = append(conns, c)
		return c, nil
	})
	if !p.Bounds() {
		t.Fatal("MySQL with Bounds: no bounds")
	}
	runPoller(t, p)
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := p.WaitFor(wctx, "r1", mustSet(t, u+":1-5")); err != nil {
		t.Fatal(err)
	}
	gen := p.Generation("r1")
	if gen == 0 {
		t.Fatal("no generation after a poll")
	}
	if pos, _ := p.Position("r1"); !pos.Contains(mustSet(t, u+":1-5")) || pos.Contains(mustSet(t, u+":6")) {
		t.Fatalf("position %v: want the executed set only", pos)
	}
	readEnd := time.Now()
	if _, ok, wait := p.SeenBound("r1", readEnd, gen); ok || wait <= 0 {
		t.Fatalf("bounded by a poll that started before the read ended (ok %v, wait %v)", ok, wait)
	}
	// The interval is 30 s: only a kick can bring the poll.
	if err := p.WaitBound(wctx, "r1", readEnd); err != nil {
		t.Fatal(err)
	}
	b, ok, _ := p.SeenBound("r1", readEnd, gen)
	if !ok || !b.Contains(mustSet(t, u+":1-9")) {
		t.Fatalf("after WaitBound: bound %v ok %v, want the received set joined", b, ok)
	}
	// The poll connection breaks: the next one has a new generation and
	// cannot bound a read that began under the old one.
	readEnd = time.Now()
	mu.Lock()
	conns[len(conns)-1].broken.Store(true)
	mu.Unlock()
	for p.Generation("r1") == gen {
		// The failed poll publishes nothing: kick again until the
		// redialled connection answers.
		kctx, kcancel := context.WithTimeout(wctx, 20*time.Millisecond)
		err := p.WaitBound(kctx, "r1", time.Now())
		kcancel()
		if err != nil && wctx.Err() != nil {
			t.Fatal(err)
		}
	}
	if _, ok, wait := p.SeenBound("r1", readEnd, gen); ok || wait != 0 {
		t.Fatalf("a new connection's poll bounded an old one's read (ok %v, wait %v)", ok, wait)
	}
	// A wrong separator-less answer is a poll error, not a bound.
	if _, _, err := p.parse(u+":1-5", false); err == nil {
		t.Error("an answer without the separator parsed")
	}
	// log_status was probed once (the verdict is kept across
	// connections) and every poll read the joined query, counted.
	if n := node.count(mysqlwire.LogStatusQuery); n != 1 {
		t.Errorf("log_status asked %d times, want once (the probe)", n)
	}
	if p.Exact("r1") {
		t.Error("a node that refused log_status is exact")
	}
	if polls, fb := node.count(mysqlwire.BoundsQuery), p.LogStatusFallbacks(); fb < uint64(polls) || polls == 0 {
		t.Errorf("%d fallbacks counted for %d joined polls", fb, polls)
	}
}

// TestPollerLogStatusBound: with Bounds, on a node that answers
// log_status, each poll reads it: the position and the upper bound are
// both its set (what the node applied, not what it received), nothing
// is counted as a fallback, and the bound still comes only from a poll
// that started after the read ended.
func TestPollerLogStatusBound(t *testing.T) {
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	cfg := PollerConfig[gtid.Set]{Nodes: []Node{{Name: "r1", Addr: "r1:3306"}}, Interval: 30 * time.Second, Bounds: true,
		DownAfter: 50 * time.Second}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	node := &boundsNode{exec: u + ":1-5", received: u + ":1-9"}
	p := newPoller(cfg, func(context.Context, string) (valueConn, error) { return &boundsConn{node: node}, nil })
	runPoller(t, p)
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := p.WaitFor(wctx, "r1", mustSet(t, u+":1-5")); err != nil {
		t.Fatal(err)
	}
	if !p.Exact("r1") {
		t.Fatal("log_status answered, but the node is not exact")
	}
	gen := p.Generation("r1")
	readEnd := time.Now()
	if _, ok, wait := p.SeenBound("r1", readEnd, gen); ok || wait <= 0 {
		t.Fatalf("bounded by a poll that started before the read ended (ok %v, wait %v)", ok, wait)
	}
	node.mu.Lock()
	node.exec = u + ":1-7"
	node.mu.Unlock()
	if err := p.WaitBound(wctx, "r1", readEnd); err != nil {
		t.Fatal(err)
	}
	b, ok, _ := p.SeenBound("r1", readEnd, gen)
	if !ok || !b.Contains(mustSet(t, u+":1-7")) || b.Contains(mustSet(t, u+":8")) {
		t.Fatalf("bound %v ok %v, want exactly the executed set %s:1-7", b, ok, u)
	}
	if pos, _ := p.Position("r1"); !pos.Contains(b) || !b.Contains(pos) {
		t.Errorf("position %v, want the bound %v", pos, b)
	}
	if n := node.count(mysqlwire.BoundsQuery); n != 0 {
		t.Errorf("the joined query was asked %d times", n)
	}
	if fb := p.LogStatusFallbacks(); fb != 0 {
		t.Errorf("%d fallbacks counted", fb)
	}
}

func mustSet(t *testing.T, s string) gtid.Set {
	t.Helper()
	set, err := gtid.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}
