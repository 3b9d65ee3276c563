package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
)

// proxyConnsOn counts the primary's connections of the proxy's account
// other than db's own and replication's.
func proxyConnsOn(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE USER = ? AND ID <> CONNECTION_ID() AND COMMAND NOT LIKE 'Binlog Dump%'`, topo.Primary().User).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMultiplex: with multiplex on, eight client sessions writing and
// reading their own rows at once share a primary pool of two connections
// (counted on the server), each reads its own writes, and nothing one
// session leaves on a connection reaches another (user variables,
// LAST_INSERT_ID: reset with the connection); an open transaction pins
// its session (counted) and is rolled back when the client goes.
func TestMultiplex(t *testing.T) {
	composetest.Need(t, topo)
	admin := primaryDB(t, topo)
	admin.SetMaxOpenConns(1)
	s := startProxy(t, func(c *Config) {
		c.Multiplex, c.PoolSize, c.PoolWait = true, 2, 30*time.Second
		c.Policy = "token-ryw-mr"
	})
	db := openDB(t, s, "")
	emptyTable(t, db, "ptest", "mux", "k INT PRIMARY KEY AUTO_INCREMENT, v INT")
	// The proxy's own connections (its position poller) and the one
	// pooled connection so far.
	before := proxyConnsOn(t, admin)
	if g := grepLines(metricText(t, s), `causallab_proxy_pool_connections{backend="primary",state="open"}`); !strings.HasSuffix(g, " 1") {
		t.Fatalf("primary pool after one client: %q", g)
	}
	ctx := context.Background()
	const sessions = 8
	var conns []*sql.Conn
	for range sessions {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i, c := range conns {
		wg.Go(func() {
			for n := range 20 {
				if _, err := c.ExecContext(ctx, "REPLACE INTO ptest.mux VALUES (?, ?)", 1000+i, n); err != nil {
					errs <- err
					return
				}
				var v int
				if err := c.QueryRowContext(ctx, "SELECT v FROM ptest.mux WHERE k = ?", 1000+i).Scan(&v); err != nil || v != n {
					errs <- fmt.Errorf("session %d: read %d after writing %d (%v)", i, v, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The pool's second connection, and the primary watermark reader's
	// (primaryWatermark: one connection of the proxy's account, dialled
	// at its first read, when a read the primary served needed its
	// watermark).
	allowed := 1
	if g := grepLines(metricText(t, s), `causallab_proxy_watermark_reads_total{node="primary",result="query"}`); g != "" && !strings.HasSuffix(g, " 0") {
		allowed++
	}
	if n := proxyConnsOn(t, admin) - before; n > allowed {
		rows, _ := admin.Query("SELECT ID, COMMAND, IFNULL(INFO,''), TIME FROM information_schema.PROCESSLIST")
		for rows.Next() {
			var id, tm int
			var cmd, info string
			rows.Scan(&id, &cmd, &info, &tm)
			t.Logf("%d %s %q %d", id, cmd, info, tm)
		}
		rows.Close()
		t.Fatalf("%d proxy connections on the primary beyond the first pooled one, with a pool of 2 (%d allowed)", n, allowed)
	}

	// A user variable (a session statement, replayed on each connection
	// the session borrows) stays the session's: another does not see it.
	a, b := conns[0], conns[1]
	mustExec(t, a, "SET @mine = 'a'")
	var v sql.NullString
	if err := b.QueryRowContext(ctx, "SELECT @mine").Scan(&v); err != nil || v.Valid {
		t.Fatalf("another session saw the user variable: %v %v", v, err)
	}
	if err := a.QueryRowContext(ctx, "SELECT @mine").Scan(&v); err != nil || v.String != "a" {
		t.Fatalf("the pinned session lost its variable: %v %v", v, err)
	}
	// LAST_INSERT_ID does not travel with the connection.
	if _, err := b.ExecContext(ctx, "INSERT INTO ptest.mux (v) VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := conns[2].QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&id); err != nil || id != 0 {
		t.Fatalf("another session's LAST_INSERT_ID: %d %v", id, err)
	}
	// A transaction pins; a client that leaves one open gets it rolled back.
	tc := conns[3]
	mustExec(t, tc, "BEGIN")
	mustExec(t, tc, "INSERT INTO ptest.mux VALUES (5000, 1)")
	if !strings.Contains(grepLines(metricText(t, s), "causallab_proxy_pool_pinned_total"), `reason="in-transaction"`) {
		t.Fatalf("pin not counted:\n%s", grepLines(metricText(t, s), "causallab_proxy_pool"))
	}
	tc.Close()
	var n int
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := conns[4].QueryRowContext(ctx, "SELECT COUNT(*) FROM ptest.mux WHERE k = 5000").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an abandoned transaction's row became visible")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMultiplexBusyPoolNotNodeFault: a read that finds its replica's pool
// busy past pool_wait fails (2013, wait-timeout, counted) and the replica
// is not marked down: a busy pool is not the node's fault, and routing
// the read elsewhere moved a busy replica pool's reads onto the primary's
// (at 2,000 clients the primary's pool then ran out: the scale harness).
func TestMultiplexBusyPoolNotNodeFault(t *testing.T) {
	composetest.Need(t, topo)
	rep := topo.Replicas()[0]
	s := startProxy(t, func(c *Config) {
		c.Multiplex, c.PoolSize, c.PoolWait = true, 1, 300*time.Millisecond
		c.Policy = "token-ryw-mr"
		c.Replicas = c.Replicas[:1]
		// Polls every 2 s: the position source gives the replica up
		// after 10 s without a poll (down-after, five intervals), not
		// 500 ms. At the default a loaded machine's overrun poll marked
		// the replica down during the holding read (load 15): the
		// watchdog cut it, its place stayed kept until a KILL QUERY of
		// it ran (a cut connection's, pool.go), and the read was run
		// again on the primary. (Its kill's own acquisition, timed out,
		// then counted in the wait-timeout count below; it is now
		// counted apart, in kill_acquire_failures_total.) The replica's health is not what
		// this test is about.
		c.PollInterval = 2 * time.Second
	})
	db := openDB(t, s, "")
	ctx := context.Background()
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, c := range []*sql.Conn{a, b} {
		if err := c.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Until the proxy's view of the replica qualifies it (its first
	// positions), reads go to the primary.
	onReplica := `causallab_proxy_statements_total{kind="read",role="replica"}`
	for deadline := time.Now().Add(30 * time.Second); grepLines(metricText(t, s), onReplica) == ""; {
		var v int
		if err := a.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no read reached the replica")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := grepLines(metricText(t, s), `causallab_proxy_statements_total{kind="read",role="primary"}`)
	// a holds the replica pool's only connection: a long read there.
	const sleep = "SELECT SLEEP(10) AS held_replica"
	held := make(chan error, 1)
	go func() {
		var v int
		held <- a.QueryRowContext(ctx, sleep).Scan(&v)
	}()
	rdb, err := sql.Open("mysql", rep.User+":"+rep.Password+"@tcp("+rep.Addr()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := rdb.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = ?", sleep).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holding read never reached the replica:\n%s", grepLines(metricText(t, s), "causallab_proxy_statements_total", "causallab_router_reads_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var v int
	err = b.QueryRowContext(ctx, "SELECT 1").Scan(&v)
	if err == nil || !strings.Contains(err.Error(), "2013") || !strings.Contains(err.Error(), "wait-timeout") {
		t.Fatalf("a read past a busy replica pool: %v (value %d), want 2013 wait-timeout", err, v)
	}
	m := metricText(t, s)
	// The router's verdict on the read: the caller's error, not the
	// node's (which marks the node down). (Node errors themselves are not
	// counted here: on a loaded machine the holding read may be cut by the
	// watchdog when a poll overruns.)
	if g := grepLines(m, `causallab_router_reads_total{outcome="error",policy="token-ryw-mr",reason="caller"}`); !strings.HasSuffix(g, " 1") {
		t.Fatalf("the busy pool's read not counted as the caller's error: %q\n%s", g, grepLines(m, "causallab_router_reads_total", "causallab_router_node_errors_total"))
	}
	if g := grepLines(m, `causallab_proxy_pool_acquire_failures_total{backend="`+rep.Name+`",reason="wait-timeout"}`); !strings.HasSuffix(g, " 1") {
		t.Fatalf("wait-timeout not counted once: %q", g)
	}
	if g := grepLines(m, `causallab_proxy_statements_total{kind="read",role="primary"}`); g != before {
		t.Fatalf("a read went to the primary: %q, before %q", g, before)
	}
	if err := <-held; err != nil {
		t.Logf("the holding read: %v", err) // see above: the watchdog on a loaded machine
	}
	// The pool's connection is idle again once the holding read gave it
	// back (or, had the watchdog cut it after all, once its kill freed
	// its place: within cutKillWithin).
	idle := `causallab_proxy_pool_connections{backend="` + rep.Name + `",state="idle"} 1`
	for deadline := time.Now().Add(cutKillWithin + 30*time.Second); grepLines(metricText(t, s), idle) == ""; {
		if time.Now().After(deadline) {
			t.Fatalf("the replica pool's connection never came back:\n%s", grepLines(metricText(t, s), "causallab_proxy_pool_", "causallab_proxy_backend_errors"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := b.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil || v != 1 {
		t.Fatalf("after the pool came free: %v %d\n%s", err, v, grepLines(metricText(t, s), "causallab_proxy_pool_", "causallab_proxy_backend_errors"))
	}
}

// TestMultiplexDiagnostics: what a statement leaves for the next one to
// ask about stays the session's for that one command (ProxySQL's rules):
// SHOW WARNINGS after a statement with warnings, FOUND_ROWS() after
// SELECT SQL_CALC_FOUND_ROWS, the transaction SET TRANSACTION set up
// (not an insert id: the OK packet carries it), each keep
// counted by its reason; the command after gives the connection back (a
// pool of one serves another session then).
func TestMultiplexDiagnostics(t *testing.T) {
	composetest.Need(t, topo)
	s := startProxy(t, func(c *Config) {
		c.Multiplex, c.PoolSize, c.PoolWait = true, 1, 30*time.Second
		c.Policy = "token-ryw-mr"
	})
	db := openDB(t, s, "")
	emptyTable(t, db, "ptest", "diag", "k INT PRIMARY KEY AUTO_INCREMENT, v INT")
	ctx := context.Background()
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	other, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	mustExec(t, a, "INSERT INTO ptest.diag (v) VALUES (1), (2), (3)")
	pinned := func(reason string) string {
		return grepLines(metricText(t, s), `causallab_proxy_pool_pinned_total{reason="`+reason+`"}`)
	}

	// Warnings (a WHERE comparing a string that is no number; a locking
	// read: on the primary).
	var level, msg string
	var code, n int
	if err := a.QueryRowContext(ctx, "SELECT COUNT(*) FROM ptest.diag WHERE k = '1x' FOR UPDATE").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := a.QueryRowContext(ctx, "SHOW WARNINGS").Scan(&level, &code, &msg); err != nil || code != 1292 {
		t.Fatalf("SHOW WARNINGS after a statement with a warning: code %d %q, %v", code, msg, err)
	}
	// (SHOW WARNINGS's own answer carries the warnings it lists: kept
	// again, as asking twice answers twice in MySQL.)
	if g := pinned("next-statement-warnings"); g == "" {
		t.Fatal("warnings keep not counted")
	}
	// FOUND_ROWS() after SQL_CALC_FOUND_ROWS (on the primary).
	var k int
	if err := a.QueryRowContext(ctx, "SELECT SQL_CALC_FOUND_ROWS k FROM ptest.diag ORDER BY k LIMIT 1").Scan(&k); err != nil {
		t.Fatal(err)
	}
	if err := a.QueryRowContext(ctx, "SELECT FOUND_ROWS()").Scan(&n); err != nil || n != 3 {
		t.Fatalf("FOUND_ROWS() after SQL_CALC_FOUND_ROWS: %d, %v (want 3)", n, err)
	}
	if g := pinned("next-statement-found-rows"); !strings.HasSuffix(g, " 1") {
		t.Fatalf("found-rows keep not counted once: %q", g)
	}
	// An insert id keeps nothing (the OK packet carries it): right after
	// an insert, another session gets the pool's one primary connection.
	if _, err := a.ExecContext(ctx, "INSERT INTO ptest.diag (v) VALUES (10)"); err != nil {
		t.Fatal(err)
	}
	if err := other.QueryRowContext(ctx, "SELECT COUNT(*) FROM ptest.diag FOR UPDATE").Scan(&n); err != nil || n != 4 {
		t.Fatalf("another session right after an insert: %d rows, %v", n, err)
	}
	// SET TRANSACTION (the next transaction's characteristics), then the
	// transaction it applies to.
	mustExec(t, a, "SET TRANSACTION READ ONLY")
	mustExec(t, a, "START TRANSACTION")
	if _, err := a.ExecContext(ctx, "INSERT INTO ptest.diag (v) VALUES (99)"); err == nil || !strings.Contains(err.Error(), "1792") {
		t.Fatalf("an INSERT in the READ ONLY transaction SET TRANSACTION asked for: %v, want 1792", err)
	}
	mustExec(t, a, "ROLLBACK")
	if g := pinned("next-transaction"); !strings.HasSuffix(g, " 1") {
		t.Fatalf("next-transaction keep not counted once: %q", g)
	}
	// Given back: the pool's one primary connection serves another
	// session (a locking read: on the primary; that session has no token
	// for a replica to honour).
	if err := other.QueryRowContext(ctx, "SELECT COUNT(*) FROM ptest.diag FOR UPDATE").Scan(&n); err != nil || n != 4 {
		t.Fatalf("another session after the keeps: %d rows, %v", n, err)
	}
}

// TestMultiplexQueueFull: with pool_max_waiters sessions already waiting
// for the primary pool's connection, another session's statement fails
// at once with the proxy's backend-lost error naming queue-full and the
// setting, counted in acquire_failures_total{reason="queue-full"}; the
// waiting session is served once the connection comes back.
func TestMultiplexQueueFull(t *testing.T) {
	composetest.Need(t, topo)
	s := startProxy(t, func(c *Config) {
		// pool_wait long: the waiter must not time out on a loaded
		// machine; only the primary, so every statement borrows there.
		c.Multiplex, c.PoolSize, c.PoolWait, c.PoolMaxWaiters = true, 1, time.Minute, 1
		c.Replicas = nil
	})
	db := openDB(t, s, "")
	ctx := context.Background()
	var conns []*sql.Conn
	for range 3 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	holder, waiter, refused := conns[0], conns[1], conns[2]
	// holder's open transaction pins the pool's only connection.
	if _, err := holder.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := holder.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		var v int
		served <- waiter.QueryRowContext(ctx, "SELECT 2").Scan(&v)
	}()
	inLine := `causallab_proxy_pool_waiters{backend="primary"} 1`
	for deadline := time.Now().Add(30 * time.Second); grepLines(metricText(t, s), inLine) == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the waiting session never counted in line:\n%s", grepLines(metricText(t, s), "causallab_proxy_pool_"))
		}
	}
	start := time.Now()
	err := refused.QueryRowContext(ctx, "SELECT 3").Scan(&v)
	if err == nil || !strings.Contains(err.Error(), "2013") || !strings.Contains(err.Error(), "queue-full") || !strings.Contains(err.Error(), "pool_max_waiters 1") {
		t.Fatalf("a statement past a full line: %v, want 2013 queue-full naming pool_max_waiters 1", err)
	}
	// At once: not after pool_wait (a minute).
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the refusal took %v", d)
	}
	m := metricText(t, s)
	if g := grepLines(m, `causallab_proxy_pool_acquire_failures_total{backend="primary",reason="queue-full"}`); !strings.HasSuffix(g, " 1") {
		t.Fatalf("queue-full not counted once: %q", g)
	}
	if g := grepLines(m, `causallab_proxy_pool_acquire_failures_total{backend="primary",reason="wait-timeout"}`); g != "" {
		t.Fatalf("a wait-timeout counted: %q", g)
	}
	if _, err := holder.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("the waiting session after the connection came back: %v", err)
	}
	// The refused session goes on once there is room.
	if err := refused.QueryRowContext(ctx, "SELECT 3").Scan(&v); err != nil || v != 3 {
		t.Fatalf("the refused session afterwards: %v %d", err, v)
	}
}
