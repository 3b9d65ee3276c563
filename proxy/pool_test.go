package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

func TestPoolConfigValidate(t *testing.T) {
	c := Config{Users: []User{{Name: "a"}}, Primary: Backend{Addr: "127.0.0.1:1"}}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.PoolSize != 64 || c.PoolWait != 2*time.Second || c.PoolMaxWaiters != c.MaxConnections {
		t.Fatalf("pool defaults: size %d, wait %v, max waiters %d", c.PoolSize, c.PoolWait, c.PoolMaxWaiters)
	}
	for name, mod := range map[string]func(*Config){
		"size <0":     func(c *Config) { c.PoolSize = -1 },
		"size big":    func(c *Config) { c.PoolSize = 1 << 20 },
		"wait <0":     func(c *Config) { c.PoolWait = -time.Second },
		"wait 1us":    func(c *Config) { c.PoolWait = time.Microsecond },
		"wait long":   func(c *Config) { c.PoolWait = 2 * time.Hour },
		"waiters <0":  func(c *Config) { c.PoolMaxWaiters = -1 },
		"waiters big": func(c *Config) { c.PoolMaxWaiters = 1<<20 + 1 },
	} {
		c := Config{Users: []User{{Name: "a"}}, Primary: Backend{Addr: "127.0.0.1:1"}}
		mod(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := newPool(context.Background(), poolConfig{node: "x"}); err == nil {
		t.Error("newPool accepted a zero configuration")
	}
}

// testPool is a pool on node n of the shared topology, closed with the test.
type testPool struct {
	*pool
	m      *poolMetrics
	cancel context.CancelFunc
}

func newTestPool(t *testing.T, n compose.Node, size int, wait time.Duration, healthy func() bool) *testPool {
	t.Helper()
	return newTestPoolFor(t, n, size, wait, healthy, nil)
}

// newTestPoolFor is newTestPool bounded by sessions (poolConfig.sessions).
func newTestPoolFor(t *testing.T, n compose.Node, size int, wait time.Duration, healthy func() bool, sessions func() int) *testPool {
	t.Helper()
	cfg := Config{Users: []User{{Name: "app"}}, Primary: Backend{Addr: n.Addr()}, PoolSize: size, PoolWait: wait,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	cfg.ConnectTimeout = 3 * time.Second
	b := &Backend{Name: n.Name, Addr: n.Addr(), User: n.User, Password: n.Password}
	m := newPoolMetrics(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	p, err := newBackendPool(ctx, b, &cfg, healthy, false, m, sessions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-p.done })
	return &testPool{pool: p, m: m, cancel: cancel}
}

func (p *testPool) failures(r PoolFailure) float64 {
	return testutil.ToFloat64(p.m.failures.WithLabelValues(p.node, string(r)))
}

func (p *testPool) discards(r string) float64 {
	return testutil.ToFloat64(p.m.discards.WithLabelValues(p.node, r))
}

func mustAcquire(t *testing.T, p *testPool) *backendConn {
	t.Helper()
	bc, err := p.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return bc
}

func wantPoolError(t *testing.T, err error, reason PoolFailure) {
	t.Helper()
	var pe *PoolError
	if !errors.As(err, &pe) || pe.Reason != reason {
		t.Fatalf("got %v, want a PoolError %s", err, reason)
	}
}

func queryString(t *testing.T, bc *backendConn, q string) string {
	t.Helper()
	r, err := bc.exec(t.Context(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	v, _ := r.GetString(0, 0)
	return v
}

// TestPoolBoundResetAndReuse: the pool never opens more than its size; an
// acquisition past it waits for its bound and fails typed and counted; a
// returned connection is reused after COM_RESET_CONNECTION (the session's
// variables are gone, the proxy's set-up is back), or as it is when clean.
// TestPoolKeepsNoMoreThanSessions: a pool keeps no more connections open
// than there are client sessions: a connection returned beyond that is
// closed, and idle ones are closed at the next sweep when sessions leave
// (MySQL's own tests wait for the server's Threads_connected to fall back
// after their extra connections end: include/wait_until_count_sessions.inc).
func TestPoolKeepsNoMoreThanSessions(t *testing.T) {
	composetest.Need(t, topo)
	var sessions atomic.Int64
	sessions.Store(3)
	p := newTestPoolFor(t, topo.Primary(), 8, time.Minute, nil, func() int { return int(sessions.Load()) })
	a, b, c := mustAcquire(t, p), mustAcquire(t, p), mustAcquire(t, p)
	sessions.Store(2) // one client left while its connection was lent
	p.release(a, poolClean)
	p.release(b, poolClean)
	p.release(c, poolClean)
	waitFor(t, 10*time.Second, "one surplus connection closed on its return", func() bool { return p.discards(discardSurplus) == 1 })
	sessions.Store(0) // every client left: the sweep closes the idle ones
	waitFor(t, 10*time.Second, "the idle connections closed by the sweep", func() bool { return p.discards(discardSurplus) == 3 })
	// One client: its connection stays and an idle one of other flags
	// (another client's, gone) is closed in its place.
	sessions.Store(1)
	other, err := p.acquireFor(t.Context(), "other", mysql.CLIENT_FOUND_ROWS)
	if err != nil {
		t.Fatal(err)
	}
	p.release(other, poolClean)
	mine := mustAcquire(t, p)
	id := mine.conn.GetConnectionID()
	p.release(mine, poolClean)
	waitFor(t, 10*time.Second, "the other flags' idle connection closed", func() bool { return p.discards(discardSurplus) == 4 })
	again := mustAcquire(t, p)
	if got := again.conn.GetConnectionID(); got != id {
		t.Fatalf("the client's connection %d was closed, not the idle one of other flags (got %d)", id, got)
	}
	p.release(again, poolClean)
}

func TestPoolBoundResetAndReuse(t *testing.T) {
	composetest.Need(t, topo)
	p := newTestPool(t, topo.Primary(), 2, time.Minute, nil)
	a, b := mustAcquire(t, p), mustAcquire(t, p)
	if a.conn.GetConnectionID() == b.conn.GetConnectionID() {
		t.Fatal("two acquisitions got one connection")
	}
	// Full: a short bound now (the dials above get a minute on a loaded
	// machine; acquire reads the bound in the caller's goroutine).
	p.wait = 50 * time.Millisecond
	_, err := p.acquire(context.Background())
	p.wait = time.Minute
	wantPoolError(t, err, PoolWaitTimeout)
	if want := "no pooled connection: wait-timeout (none of pool_size 2 came free within pool_wait 50ms)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("wait-timeout error %q, want it to say %q", err, want)
	}
	if n := p.failures(PoolWaitTimeout); n != 1 {
		t.Fatalf("wait-timeout failures counted %v, want 1", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.acquire(ctx)
	wantPoolError(t, err, PoolCanceled)

	id := a.conn.GetConnectionID()
	if _, err := a.exec(t.Context(), "SET @pooled = 'kept', SESSION sql_mode = 'ANSI_QUOTES'"); err != nil {
		t.Fatal(err)
	}
	p.release(a, poolDirty)
	a = mustAcquire(t, p)
	if got := a.conn.GetConnectionID(); got != id {
		t.Fatalf("released connection %d not reused (got %d)", id, got)
	}
	if v := queryString(t, a, "SELECT IFNULL(@pooled, 'reset')"); v != "reset" {
		t.Fatalf("user variable after the reset: %q", v)
	}
	if v := queryString(t, a, "SELECT @@SESSION.sql_mode"); v == "ANSI_QUOTES" {
		t.Fatalf("sql_mode survived the reset")
	}
	if v := queryString(t, a, "SELECT @@SESSION.session_track_gtids"); v != "OWN_GTID" {
		t.Fatalf("session_track_gtids after the reset: %q (the proxy's set-up not re-run)", v)
	}
	// Clean: no reset (the variable is still there).
	if _, err := a.exec(t.Context(), "SET @pooled = 'kept'"); err != nil {
		t.Fatal(err)
	}
	p.release(a, poolClean)
	a = mustAcquire(t, p)
	if v := queryString(t, a, "SELECT IFNULL(@pooled, 'reset')"); v != "kept" {
		t.Fatalf("a clean release was reset: %q", v)
	}
	// A broken connection is discarded; its place is free again.
	a.broken = true
	p.release(a, poolDirty)
	if n := p.discards(discardBroken); n != 1 {
		t.Fatalf("broken discards %v, want 1", n)
	}
	c := mustAcquire(t, p)
	if c.conn.GetConnectionID() == id {
		t.Fatal("a discarded connection was lent again")
	}
	p.release(b, poolDirty)
	p.release(c, poolDirty)
}

// TestPoolResetWriteBehind: a dirty release writes the reset and returns
// the connection without waiting for its answers (resetPending); the next
// borrower reads them before it gets the connection, which is then reset
// (its user variable gone), counted in resets_total and reset_wait.
func TestPoolResetWriteBehind(t *testing.T) {
	composetest.Need(t, topo)
	p := newTestPool(t, topo.Primary(), 1, time.Minute, nil)
	a := mustAcquire(t, p)
	if _, err := a.exec(t.Context(), "SET @behind = 1"); err != nil {
		t.Fatal(err)
	}
	p.release(a, poolDirty)
	if !a.resetPending {
		t.Fatal("release waited for the reset's answers")
	}
	if n := testutil.ToFloat64(p.m.resets.WithLabelValues(p.node)); n != 1 {
		t.Fatalf("resets_total %v, want 1", n)
	}
	b := mustAcquire(t, p)
	if b != a || b.resetPending {
		t.Fatalf("not the same connection (%v) or its reset still pending (%v)", b == a, b.resetPending)
	}
	if v := queryString(t, b, "SELECT IFNULL(@behind, 'reset')"); v != "reset" {
		t.Fatalf("user variable after the write-behind reset: %q", v)
	}
	if n := testutil.CollectAndCount(p.m.resetWait); n != 1 {
		t.Fatalf("reset_wait series %d, want 1", n)
	}
	p.release(b, poolClean)
}

// TestPoolFlags: connections are lent by the client flags they were
// dialled with; a borrower with other flags, the pool full of idle
// connections, gets a new one in place of an idle one (discarded,
// counted), never more than the pool's size; the server honours the
// flags (CLIENT_FOUND_ROWS: an UPDATE's affected rows are the rows it
// matched).
func TestPoolFlags(t *testing.T) {
	composetest.Need(t, topo)
	db := primaryDB(t, topo)
	mustExec(t, db, "CREATE DATABASE IF NOT EXISTS ptest")
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS ptest.flags (k INT PRIMARY KEY, v INT)")
	mustExec(t, db, "REPLACE INTO ptest.flags VALUES (1, 1)")
	p := newTestPool(t, topo.Primary(), 1, time.Minute, nil)
	affected := func(bc *backendConn) uint64 {
		t.Helper()
		r, err := bc.exec(t.Context(), "UPDATE ptest.flags SET v = 1 WHERE k = 1")
		if err != nil {
			t.Fatal(err)
		}
		return r.AffectedRows
	}
	plain, err := p.acquireFor(t.Context(), useOther, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := affected(plain); n != 0 {
		t.Fatalf("without CLIENT_FOUND_ROWS: %d affected, want 0", n)
	}
	id := plain.conn.GetConnectionID()
	p.release(plain, poolClean)
	found, err := p.acquireFor(t.Context(), useOther, mysql.CLIENT_FOUND_ROWS)
	if err != nil {
		t.Fatal(err)
	}
	if found.conn.GetConnectionID() == id || found.pooledFlags != mysql.CLIENT_FOUND_ROWS {
		t.Fatalf("a CLIENT_FOUND_ROWS borrower got connection %d (flags %#x), the plain one was %d", found.conn.GetConnectionID(), found.pooledFlags, id)
	}
	if n := affected(found); n != 1 {
		t.Fatalf("with CLIENT_FOUND_ROWS: %d affected, want 1", n)
	}
	if n := p.discards(discardFlags); n != 1 {
		t.Fatalf("flags discards %v, want 1", n)
	}
	if g := testutil.ToFloat64(p.m.conns.WithLabelValues(p.node, "open")); g != 1 {
		t.Fatalf("open connections %v, want 1 (the pool's size)", g)
	}
	// Returned, it serves the next borrower with its flags as it is.
	fid := found.conn.GetConnectionID()
	p.release(found, poolDirty)
	again, err := p.acquireFor(t.Context(), useOther, mysql.CLIENT_FOUND_ROWS)
	if err != nil {
		t.Fatal(err)
	}
	if again.conn.GetConnectionID() != fid {
		t.Fatalf("the CLIENT_FOUND_ROWS connection %d was not reused (got %d)", fid, again.conn.GetConnectionID())
	}
	p.release(again, poolClean)
}

// TestPoolKeepPlace: a connection closed with its place kept (an overrun
// wait until its KILL QUERY ran) still counts in the pool's size until
// freed; the kill itself borrows from the pool.
func TestPoolKeepPlace(t *testing.T) {
	composetest.Need(t, topo)
	p := newTestPool(t, topo.Primary(), 1, time.Minute, nil)
	a := mustAcquire(t, p)
	free := p.keepPlace(a)
	p.wait = 50 * time.Millisecond
	_, err := p.acquire(context.Background())
	p.wait = time.Minute
	wantPoolError(t, err, PoolWaitTimeout)
	free()
	if n := p.discards(discardKilledWait); n != 1 {
		t.Fatalf("killed-wait discards %v, want 1", n)
	}
	// KILL QUERY of a connection id that runs nothing: the server's own
	// answer is no error for an ended thread.
	if err := p.kill(t.Context(), a.conn.GetConnectionID()); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(p.m.acquired.WithLabelValues(p.node, useKill)); n != 1 {
		t.Fatalf("kill acquisitions %v, want 1", n)
	}
}

// TestPoolWaiterServed: an acquisition that waits gets the connection
// another session returns, in order of arrival.
func TestPoolWaiterServed(t *testing.T) {
	composetest.Need(t, topo)
	p := newTestPool(t, topo.Primary(), 1, time.Minute, nil)
	a := mustAcquire(t, p)
	id := a.conn.GetConnectionID()
	got := make(chan *backendConn)
	go func() {
		bc, err := p.acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- bc
	}()
	// The waiter is in line once the pool's owner holds it: the line's
	// gauge says so.
	waiters := func() float64 { return testutil.ToFloat64(p.m.waiters.WithLabelValues(p.node)) }
	for deadline := time.Now().Add(30 * time.Second); waiters() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			n := waiters()
			p.release(a, poolDirty) // the waiter's goroutine ends before the test
			if bc := <-got; bc != nil {
				p.release(bc, poolClean)
			}
			t.Fatalf("the waiter never counted in line: waiters %v", n)
		}
	}
	p.release(a, poolDirty)
	b := <-got
	if b == nil {
		t.FailNow()
	}
	if b.conn.GetConnectionID() != id {
		t.Fatalf("waiter got connection %d, want the returned %d", b.conn.GetConnectionID(), id)
	}
	p.release(b, poolClean)
	// The owner set the gauge again before it took the next request.
	p.release(mustAcquire(t, p), poolClean)
	if n := waiters(); n != 0 {
		t.Fatalf("waiters %v after the waiter was served, want 0", n)
	}
}

// TestPoolResetFails: a connection the server ended while it was lent
// fails its reset on release and is discarded, counted; the next
// acquisition dials a new one.
func TestPoolResetFails(t *testing.T) {
	composetest.Need(t, topo)
	p := newTestPool(t, topo.Primary(), 1, time.Minute, nil)
	a := mustAcquire(t, p)
	id := a.conn.GetConnectionID()
	mustExec(t, primaryDB(t, topo), "KILL "+strconv.FormatUint(uint64(id), 10))
	p.release(a, poolDirty)
	// The reset is written on release (the write may well succeed on a
	// socket the server closed); its answers are read by the next
	// acquisition, which finds it failed, discards it and dials anew.
	b := mustAcquire(t, p)
	if n := p.discards(discardResetFailed); n != 1 {
		t.Fatalf("reset-failed discards %v, want 1", n)
	}
	if b.conn.GetConnectionID() == id {
		t.Fatal("the killed connection was lent again")
	}
	if v := queryString(t, b, "SELECT 'alive'"); v != "alive" {
		t.Fatalf("new connection: %q", v)
	}
	p.release(b, poolDirty)
}

// TestPoolNodeKilled: a replica is killed while connections sit idle in
// its pool. Acquisitions find each one closed (peeked before it is lent),
// discard it, then fail typed when the dial fails (dial-failed); with the
// node's health reported down they fail at once (unhealthy) and the idle
// connections are dropped; after the restart the pool serves again.
func TestPoolNodeKilled(t *testing.T) {
	composetest.Need(t, topo)
	node := topo.Replicas()[len(topo.Replicas())-1]
	var up atomic.Bool
	up.Store(true)
	p := newTestPool(t, node, 3, 10*time.Second, up.Load)
	var held []*backendConn
	for range 3 {
		held = append(held, mustAcquire(t, p))
	}
	for _, bc := range held {
		p.release(bc, poolClean)
	}
	ctx := context.Background()
	if err := topo.Kill(ctx, node.Name); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = topo.Restart(context.WithoutCancel(ctx), node.Name)
		}
	}()
	// The idle check peeks only at connections idle for idleCheckAfter.
	time.Sleep(idleCheckAfter + 100*time.Millisecond)
	_, err := p.acquire(ctx)
	wantPoolError(t, err, PoolDialFailed)
	if n := p.discards(discardIdleClosed); n != 3 {
		t.Fatalf("closed-while-idle discards %v, want 3", n)
	}
	if n := p.failures(PoolDialFailed); n != 1 {
		t.Fatalf("dial-failed failures %v, want 1", n)
	}
	up.Store(false)
	_, err = p.acquire(ctx)
	wantPoolError(t, err, PoolUnhealthy)

	if err := topo.Restart(ctx, node.Name); err != nil {
		t.Fatal(err)
	}
	restarted = true
	up.Store(true)
	bc := mustAcquire(t, p)
	if v := queryString(t, bc, "SELECT 'back'"); v != "back" {
		t.Fatalf("after the restart: %q", v)
	}
	// Unhealthy again with a connection idle: the acquisition fails and
	// the idle connection is closed.
	p.release(bc, poolClean)
	up.Store(false)
	_, err = p.acquire(ctx)
	wantPoolError(t, err, PoolUnhealthy)
	if n := p.discards(discardUnhealthy); n != 1 {
		t.Fatalf("unhealthy discards %v, want 1", n)
	}
}

// TestPoolClosed: once the pool's context ends, acquisitions fail with
// PoolClosed and a connection returned late is closed, not kept.
func TestPoolClosed(t *testing.T) {
	composetest.Need(t, topo)
	p := newTestPool(t, topo.Primary(), 2, time.Minute, nil)
	a := mustAcquire(t, p)
	id := a.conn.GetConnectionID()
	p.cancel()
	<-p.done
	_, err := p.acquire(context.Background())
	wantPoolError(t, err, PoolClosed)
	p.release(a, poolClean)
	if n := p.discards(discardPoolClosed); n != 1 {
		t.Fatalf("pool-closed discards %v, want 1", n)
	}
	// The server sees the connection go.
	db := primaryDB(t, topo)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %d still open on the server after the pool closed", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPoolSetOptionSurvivesReset: COM_SET_OPTION's multi-statements
// setting outlives COM_RESET_CONNECTION (MySQL keeps the client's
// capabilities), so a pooled connection's flags are what COM_SET_OPTION
// last left (pooledFlags), whatever resets followed.
func TestPoolSetOptionSurvivesReset(t *testing.T) {
	composetest.Need(t, topo)
	p := newTestPool(t, topo.Primary(), 1, time.Minute, nil)
	bc := mustAcquire(t, p)
	multi := func() bool {
		t.Helper()
		_, err := bc.exec(t.Context(), "DO 1; DO 2")
		var me *mysql.MyError
		if err != nil && !errors.As(err, &me) {
			t.Fatal(err)
		}
		if err != nil {
			return false
		}
		// The second statement's answer follows: read it off.
		return true
	}
	if multi() {
		t.Fatal("a connection dialled without CLIENT_MULTI_STATEMENTS ran two statements")
	}
	if err := bc.setOption(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if bc.pooledFlags != mysql.CLIENT_MULTI_STATEMENTS {
		t.Fatalf("flags after COM_SET_OPTION on: %#x", bc.pooledFlags)
	}
	if err := bc.setOption(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if err := bc.setOption(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if err := p.reset(bc); err != nil {
		t.Fatal(err)
	}
	if !multi() {
		t.Fatal("COM_RESET_CONNECTION turned multi-statements off: pooledFlags would lie")
	}
	bc.broken = true // out of step after the multi-statement answer
	p.release(bc, poolDirty)
}

// TestPoolCutKept: a connection the watchdog cut mid-statement keeps its
// place (the server may still run the statement, and counts it) until its
// node is healthy again and a KILL QUERY of it ran, counted.
func TestPoolCutKept(t *testing.T) {
	composetest.Need(t, topo)
	var up atomic.Bool
	up.Store(true)
	p := newTestPool(t, topo.Replicas()[0], 2, time.Minute, up.Load)
	a := mustAcquire(t, p)
	up.Store(false)
	a.dc.Cut(errUnresponsive)
	a.broken = true
	p.release(a, poolClean)
	open := func() float64 { return testutil.ToFloat64(p.m.conns.WithLabelValues(p.node, "open")) }
	if n := open(); n != 1 {
		t.Fatalf("open connections after the cut %v, want 1 (its place kept)", n)
	}
	if n := p.discards(discardBroken); n != 1 {
		t.Fatalf("broken discards %v, want 1", n)
	}
	up.Store(true)
	killed := func() float64 { return testutil.ToFloat64(p.m.cutKills.WithLabelValues(p.node, "killed")) }
	for deadline := time.Now().Add(time.Minute); killed() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no KILL QUERY of the cut connection counted (failed %v)", testutil.ToFloat64(p.m.cutKills.WithLabelValues(p.node, "failed")))
		}
	}
	// The kill borrowed the other place; the cut connection's is free
	// again: both places lend. (A pool of one: TestPoolCutKeptAlone.)
	for deadline := time.Now().Add(time.Minute); open() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("open connections %v after the kill, want 1 (the kill's, idle)", open())
		}
	}
	b, c := mustAcquire(t, p), mustAcquire(t, p)
	p.release(b, poolClean)
	p.release(c, poolClean)
}

// TestPoolCutKeptAlone: in a pool of one, the cut connection's kept place
// is the only one: the kill's connection is dialled in it (no place comes
// free within pool_wait) and serves the pool afterwards.
func TestPoolCutKeptAlone(t *testing.T) {
	composetest.Need(t, topo)
	p := newTestPool(t, topo.Replicas()[0], 1, 200*time.Millisecond, nil)
	a := mustAcquire(t, p)
	id := a.conn.GetConnectionID()
	a.dc.Cut(errUnresponsive)
	a.broken = true
	p.release(a, poolClean)
	killed := func() float64 { return testutil.ToFloat64(p.m.cutKills.WithLabelValues(p.node, "killed")) }
	for deadline := time.Now().Add(time.Minute); killed() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no KILL QUERY of the cut connection counted (failed %v)", testutil.ToFloat64(p.m.cutKills.WithLabelValues(p.node, "failed")))
		}
	}
	p.wait = time.Minute
	b := mustAcquire(t, p)
	if b.conn.GetConnectionID() == id {
		t.Fatal("the cut connection was lent again")
	}
	if g := testutil.ToFloat64(p.m.conns.WithLabelValues(p.node, "open")); g != 1 {
		t.Fatalf("open connections %v, want 1", g)
	}
	// The kill's own acquisition timed out (no place came free) before
	// it dialled in the kept one: the kills' count, not the clients'.
	if n, c := p.killFailures(PoolWaitTimeout), p.failures(PoolWaitTimeout); n != 1 || c != 0 {
		t.Fatalf("the kill's wait-timeout: kill failures %v (want 1), client failures %v (want 0)", n, c)
	}
	p.release(b, poolClean)
}

// newFakePool is a pool whose dial lends connections that are never used
// for I/O (no conn: the test only borrows and returns them clean), for
// the line's bookkeeping without servers. Its connections were used "in
// an hour", so take never peeks at their (absent) socket.
func newFakePool(t *testing.T, size, maxWaiters int, wait time.Duration) *testPool {
	t.Helper()
	m := newPoolMetrics(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	p, err := newPool(ctx, poolConfig{node: "fake", size: size, wait: wait, maxWaiters: maxWaiters,
		resetBound: time.Minute, m: m,
		dial: func(ctx context.Context, key poolKey) (*backendConn, error) {
			return &backendConn{used: time.Now().Add(time.Hour), pooledFlags: key.flags, pooledAcct: key.acct, fresh: true}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-p.done })
	return &testPool{pool: p, m: m, cancel: cancel}
}

func (p *testPool) killFailures(r PoolFailure) float64 {
	return testutil.ToFloat64(p.m.killFailures.WithLabelValues(p.node, string(r)))
}

// waitWaiters waits until the pool's line (the waiters gauge) is n long.
func waitWaiters(t *testing.T, p *testPool, n float64) {
	t.Helper()
	waiters := func() float64 { return testutil.ToFloat64(p.m.waiters.WithLabelValues(p.node)) }
	for deadline := time.Now().Add(30 * time.Second); waiters() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiters %v, want %v", waiters(), n)
		}
	}
}

// TestPoolQueueFull: with pool_max_waiters client acquisitions in line,
// one more fails at once, typed (queue-full), counted, its message naming
// the setting; a KILL QUERY's acquisition is not refused by the bound
// and its failure is counted apart (kill_acquire_failures_total); a
// waiter that gives up leaves room in the line; waiters are served in
// order once connections come back.
func TestPoolQueueFull(t *testing.T) {
	p := newFakePool(t, 1, 2, time.Hour)
	a := mustAcquire(t, p)
	type got struct {
		bc  *backendConn
		err error
	}
	wait := func(ctx context.Context, use string) chan got {
		ch := make(chan got, 1)
		go func() {
			bc, err := p.acquireFor(ctx, use, 0)
			ch <- got{bc, err}
		}()
		return ch
	}
	first := wait(t.Context(), useRead)
	waitWaiters(t, p, 1)
	ctx2, cancel2 := context.WithCancel(t.Context())
	second := wait(ctx2, useRead)
	waitWaiters(t, p, 2)

	// The line is full: the next client acquisition fails at once.
	_, err := p.acquireFor(t.Context(), useRead, 0)
	wantPoolError(t, err, PoolQueueFull)
	for _, want := range []string{"queue-full", "pool_max_waiters 2", "pool_size 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("queue-full error %q does not say %q", err, want)
		}
	}
	if n := p.failures(PoolQueueFull); n != 1 {
		t.Fatalf("queue-full failures %v, want 1", n)
	}

	// A kill waits past the bound; its failure (here: its context ended)
	// is the kills' count, not the clients'.
	kctx, kcancel := context.WithCancel(t.Context())
	kill := wait(kctx, useKill)
	waitWaiters(t, p, 3)
	kcancel()
	k := <-kill
	wantPoolError(t, k.err, PoolCanceled)
	if n, c := p.killFailures(PoolCanceled), p.failures(PoolCanceled); n != 1 || c != 0 {
		t.Fatalf("a kill's canceled acquisition: kill failures %v (want 1), client failures %v (want 0)", n, c)
	}
	waitWaiters(t, p, 2)

	// A waiter that gives up makes room: the next one waits, not refused.
	cancel2()
	wantPoolError(t, (<-second).err, PoolCanceled)
	waitWaiters(t, p, 1)
	third := wait(t.Context(), useRead)
	waitWaiters(t, p, 2)
	if n := p.failures(PoolQueueFull); n != 1 {
		t.Fatalf("queue-full failures %v after a waiter left, want still 1", n)
	}
	if n := testutil.ToFloat64(p.m.waitersPeak.WithLabelValues(p.node)); n != 2 {
		t.Fatalf("waiters peak %v, want 2 (the kill not counted)", n)
	}

	// Connections coming back serve the line in order.
	p.release(a, poolClean)
	f := <-first
	if f.err != nil || f.bc != a {
		t.Fatalf("first waiter: %v (same connection %v)", f.err, f.bc == a)
	}
	p.release(f.bc, poolClean)
	th := <-third
	if th.err != nil {
		t.Fatal(th.err)
	}
	p.release(th.bc, poolClean)
	waitWaiters(t, p, 0)
}

// TestPoolKillWaitTimeoutApart: a KILL QUERY's acquisition that times out
// in a full pool (pool.kill, as an overrun wait's or a cut connection's
// kill does) is counted in kill_acquire_failures_total, not in the
// clients' acquire_failures_total.
func TestPoolKillWaitTimeoutApart(t *testing.T) {
	p := newFakePool(t, 1, 1, 10*time.Millisecond)
	a := mustAcquire(t, p)
	defer p.release(a, poolClean)
	wantPoolError(t, p.kill(t.Context(), 12345), PoolWaitTimeout)
	if n, c := p.killFailures(PoolWaitTimeout), p.failures(PoolWaitTimeout); n != 1 || c != 0 {
		t.Fatalf("kill wait-timeout: kill failures %v (want 1), client failures %v (want 0)", n, c)
	}
	// A client's, for comparison, is the clients'.
	_, err := p.acquireFor(t.Context(), useRead, 0)
	wantPoolError(t, err, PoolWaitTimeout)
	if n, c := p.killFailures(PoolWaitTimeout), p.failures(PoolWaitTimeout); n != 1 || c != 1 {
		t.Fatalf("client wait-timeout: kill failures %v (want 1), client failures %v (want 1)", n, c)
	}
}

// TestPoolAccounts (issue 38): a pooled connection is lent only to a
// borrower of the account it was dialled as; a fresh acquisition (a
// passthrough login) never gets a connection lent before; with the pool
// full of idle connections of another account, the oldest is closed to
// make room (discards{reason="account"}), and for a fresh one of the same
// account (reason "fresh").
func TestPoolAccounts(t *testing.T) {
	p := newFakePool(t, 2, 0, time.Second)
	ctx := t.Context()
	u1 := poolKey{acct: account{user: "u1", password: "p1"}}
	u2 := poolKey{acct: account{user: "u2", password: "p2"}}
	get := func(k poolKey, fresh bool) *backendConn {
		t.Helper()
		bc, err := p.acquireAs(ctx, useOther, k, fresh)
		if err != nil {
			t.Fatal(err)
		}
		if bc.key() != k {
			t.Fatalf("asked for %s, got a connection of %s", k.acct.user, bc.pooledAcct.user)
		}
		return bc
	}
	a := get(u1, false)
	p.release(a, poolClean)
	if b := get(u1, false); b != a {
		t.Fatal("u1's idle connection not reused for u1")
	} else {
		p.release(b, poolClean)
	}
	b := get(u2, false)
	if b == a {
		t.Fatal("u1's connection lent to u2")
	}
	p.release(b, poolClean)
	c := get(u1, true)
	if c == a {
		t.Fatal("a fresh acquisition got a connection lent before")
	}
	if n := p.discards(discardFresh); n != 1 {
		t.Fatalf("discards{fresh} = %v, want 1 (a, the oldest idle, made room)", n)
	}
	p.release(c, poolClean)
	d := get(u2, false)
	p.release(d, poolClean)
	e := get(poolKey{}, false) // the monitoring account (a KILL QUERY's)
	if e == c || e == d {
		t.Fatal("a client account's connection lent to the monitoring account")
	}
	if n := p.discards(discardAccount); n != 1 {
		t.Fatalf("discards{account} = %v, want 1", n)
	}
	p.release(e, poolClean)
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
