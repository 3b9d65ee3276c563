package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

// startProxy runs a proxy against the shared topology until the test ends,
// and returns once it serves (its readiness gate open: every backend's
// first position read), so that what a test does to the servers next
// (max_connections, a pause) cannot keep the gate shut until its bound.
func startProxy(t testing.TB, mod func(*Config)) *Server {
	t.Helper()
	s := startProxyUnready(t, mod)
	select {
	case <-s.ready:
	case <-time.After(s.cfg.StartupTimeout + 10*time.Second):
		t.Fatalf("the proxy did not open its readiness gate past startup_timeout %v", s.cfg.StartupTimeout)
	}
	return s
}

// conn1 is one client session (a pinned *sql.Conn) of db.
func conn1(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startProxyUnready is startProxy returning as soon as Serve runs.
func startProxyUnready(t testing.TB, mod func(*Config)) *Server {
	t.Helper()
	composetest.Need(t, topo)
	return startProxyOn(t, topo, mod)
}

// startProxyOn is startProxyUnready on topology tp.
func startProxyOn(t testing.TB, tp *compose.Topology, mod func(*Config)) *Server {
	t.Helper()
	p := tp.Primary()
	cfg := Config{
		Listen:     "127.0.0.1:0",
		HTTPListen: "127.0.0.1:0",
		Users:      []User{{Name: "app", Password: "apppw"}},
		Primary:    Backend{Addr: p.Addr(), User: p.User, Password: p.Password},
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		// The readiness gate waits for every backend's first position
		// (a loaded machine can take seconds): a test's first read is
		// never decided without them.
		StartupTimeout: time.Minute,
	}
	for _, r := range tp.Replicas() {
		cfg.Replicas = append(cfg.Replicas, Backend{Name: r.Name, Addr: r.Addr(), User: r.User, Password: r.Password})
	}
	if tp.Engine() == compose.EngineMariaDB {
		cfg.Engine = EngineMariaDB
	}
	// The suite with multiplexing on (docs/proxy-sessions.md, "Multiplexing"):
	// CAUSALLAB_PROXY_TEST_MULTIPLEX=1 (a test's own setting wins).
	cfg.Multiplex = os.Getenv("CAUSALLAB_PROXY_TEST_MULTIPLEX") == "1"
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func openDB(t *testing.T, s *Server, params string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", "app:apppw@tcp("+s.Addr()+")/?"+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestAuth(t *testing.T) {
	s := startProxy(t, nil)
	// caching_sha2_password over TLS (go-sql-driver's tls=skip-verify) and
	// over plain TCP with the RSA key exchange.
	for _, params := range []string{"tls=skip-verify", "tls=false"} {
		db := openDB(t, s, params)
		var one int
		if err := db.QueryRow("SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("%s: SELECT 1 = %d, %v", params, one, err)
		}
	}
	bad, _ := sql.Open("mysql", "app:wrong@tcp("+s.Addr()+")/?tls=skip-verify")
	defer bad.Close()
	err := bad.Ping()
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1045 {
		t.Fatalf("bad password: %v, want error 1045", err)
	}
	if strings.Contains(err.Error(), topo.Primary().Password) && topo.Primary().Password != "" {
		t.Fatalf("backend password in client error: %v", err)
	}
	unknown, _ := sql.Open("mysql", "nobody:x@tcp("+s.Addr()+")/?tls=skip-verify")
	defer unknown.Close()
	// Refused as a wrong password is (TestLoginUnknownUserIsAccessDenied).
	if err := unknown.Ping(); !errors.As(err, &me) || me.Number != 1045 {
		t.Fatalf("unknown user: %v, want 1045", err)
	}
}

func TestNativePassword(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.AuthMethod = "mysql_native_password" })
	db := openDB(t, s, "")
	var v string
	if err := db.QueryRow("SELECT 'native'").Scan(&v); err != nil || v != "native" {
		t.Fatalf("got %q, %v", v, err)
	}
}

// TestQueriesTransactionsAndErrors runs over TLS with both ways of socket
// I/O (Config.SocketIO): raw system calls, the default, and Go's own.
func TestQueriesTransactionsAndErrors(t *testing.T) {
	for _, sio := range []string{"raw", "go"} {
		t.Run(sio, func(t *testing.T) { testQueriesTransactionsAndErrors(t, sio) })
	}
}

func testQueriesTransactionsAndErrors(t *testing.T, socketIO string) {
	s := startProxy(t, func(c *Config) { c.SocketIO = socketIO })
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	emptyTable(t, db, "ptest", "kv", "k INT PRIMARY KEY, v VARCHAR(64)")
	// Transaction: the inserted row is visible inside it (primary), and
	// after commit through any connection carrying the token.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO ptest.kv VALUES (1, 'one')")
	var v string
	if err := tx.QueryRow("SELECT v FROM ptest.kv WHERE k=1").Scan(&v); err != nil || v != "one" {
		t.Fatalf("read inside the transaction: %q %v", v, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Server errors come through with code, state and message.
	_, err = db.Exec("INSERT INTO ptest.kv VALUES (1, 'dup')")
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1062 || string(me.SQLState[:]) != "23000" || !strings.Contains(me.Message, "Duplicate entry") {
		t.Fatalf("duplicate key: %#v", err)
	}
	_, err = db.Query("SELECT * FROM ptest.nosuchtable")
	if !errors.As(err, &me) || me.Number != 1146 {
		t.Fatalf("missing table: %v", err)
	}
	// Prepared statements, with a large result streamed through.
	stmt, err := db.Prepare("SELECT ?, CONCAT('x', ?), REPEAT('a', ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	var a int
	var b, c string
	if err := stmt.QueryRow(7, "y", 100000).Scan(&a, &b, &c); err != nil || a != 7 || b != "xy" || len(c) != 100000 {
		t.Fatalf("prepared: %d %q len %d %v", a, b, len(c), err)
	}
	ins, err := db.Prepare("INSERT INTO ptest.kv VALUES (?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 20; i++ {
		if _, err := ins.Exec(i, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	// A prepared execution's server error keeps its code and SQLSTATE.
	_, err = ins.Exec(2, "dup")
	if !errors.As(err, &me) || me.Number != 1062 || string(me.SQLState[:]) != "23000" {
		t.Fatalf("prepared duplicate key: %#v", err)
	}
	ins.Close()
	// Many rows through the relay, with the session's own token.
	var tok string
	if err := db.QueryRow("SELECT @causal_token").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("/* causal_token:" + tok + " */ SELECT COUNT(*) FROM ptest.kv").Scan(&n); err != nil || n != 20 {
		t.Fatalf("count = %d, %v (token %q)", n, err, tok)
	}
}

func TestMultipleResultSets(t *testing.T) {
	s := startProxy(t, nil)
	db := openDB(t, s, "tls=skip-verify")
	mustExec(t, db, "CREATE DATABASE IF NOT EXISTS ptest")
	mustExec(t, db, "DROP PROCEDURE IF EXISTS ptest.two")
	mustExec(t, db, "CREATE PROCEDURE ptest.two() BEGIN SELECT 1 AS a; SELECT 'b' AS b, 2 AS c; END")
	check := func(rows *sql.Rows, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var sets [][]string
		var vals []string
		for {
			cols, _ := rows.Columns()
			sets = append(sets, cols)
			for rows.Next() {
				v := make([]any, len(cols))
				for i := range v {
					v[i] = new(string)
				}
				if err := rows.Scan(v...); err != nil {
					t.Fatal(err)
				}
				vals = append(vals, *v[0].(*string))
			}
			if !rows.NextResultSet() {
				break
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(sets) != 2 || sets[0][0] != "a" || sets[1][1] != "c" || strings.Join(vals, ",") != "1,b" {
			t.Fatalf("result sets: %v, first values %v", sets, vals)
		}
	}
	check(db.Query("CALL ptest.two()"))
	// The same as a prepared statement: the binary result sets of a CALL
	// go through the raw execute relay.
	st, err := db.Prepare("CALL ptest.two()")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	check(st.Query())
	check(st.Query()) // and the connection is still in step
}

func TestSessionStateReplayed(t *testing.T) {
	s := startProxy(t, nil)
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(1)
	mustExec(t, db, "SET @myvar = 42")
	mustExec(t, db, "SET SESSION sql_mode = 'ANSI_QUOTES'")
	mustExec(t, db, "CREATE DATABASE IF NOT EXISTS ptest")
	mustExec(t, db, "USE ptest")
	// Each read goes wherever the router sends it; every backend must show
	// the session's state.
	for i := 0; i < 20; i++ {
		var v int
		var mode, dbname string
		if err := db.QueryRow("SELECT @myvar, @@sql_mode, DATABASE()").Scan(&v, &mode, &dbname); err != nil {
			t.Fatal(err)
		}
		if v != 42 || mode != "ANSI_QUOTES" || dbname != "ptest" {
			t.Fatalf("read %d: @myvar=%d sql_mode=%q db=%q", i, v, mode, dbname)
		}
	}
	stats := metricText(t, s)
	if !strings.Contains(stats, `causallab_proxy_statements_total{kind="read",role="replica"}`) {
		t.Fatalf("no read was routed to a replica:\n%s", grepLines(stats, "statements_total"))
	}
}

// TestReadYourWritesPool: writes through one pooled connection, reads
// through any other with the token in a comment, while one replica stands
// still (applier stopped): zero stale reads.
func TestReadYourWritesPool(t *testing.T) {
	// Both position sources: the router's Poller and binlogwatch streams
	// (live.WatchSource).
	// (live.WatchSource), and waits through the binlog watcher.
	for _, c := range []struct{ positions, wait string }{
		{"poll", ""}, {"binlog", ""}, {"binlog", "watcher"},
	} {
		name := c.positions + "+" + c.wait
		if c.wait == "" {
			name = c.positions + "+function"
		}
		t.Run(name, func(t *testing.T) { testReadYourWritesPool(t, c.positions, c.wait) })
	}
}

func testReadYourWritesPool(t *testing.T, positions, wait string) {
	s := startProxy(t, func(c *Config) { c.Positions, c.Wait = positions, wait })
	ctx := context.Background()
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	emptyTable(t, db, "ptest", "ryw", "id INT PRIMARY KEY, n INT")
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r1 := topo.Replicas()[0].Name
	if err := topo.StopApplier(ctx, r1); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := topo.StartApplier(ctx, r1); err != nil {
			t.Error(err)
		}
	}()
	const workers, rounds = 8, 40
	var violations, reads atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				id := w*1000 + i
				// Write and fetch the token on one pooled connection...
				conn, err := db.Conn(ctx)
				if err != nil {
					errc <- err
					return
				}
				if _, err := conn.ExecContext(ctx, "INSERT INTO ptest.ryw VALUES (?, ?)", id, i); err != nil {
					conn.Close()
					errc <- fmt.Errorf("insert: %w", err)
					return
				}
				var tok string
				if err := conn.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil {
					conn.Close()
					errc <- fmt.Errorf("SELECT @causal_token: %w", err)
					return
				}
				conn.Close()
				// ...read on whatever connection the pool hands out.
				var n int
				err = db.QueryRowContext(ctx, "/* causal_token:"+tok+" */ SELECT n FROM ptest.ryw WHERE id = ?", id).Scan(&n)
				reads.Add(1)
				if errors.Is(err, sql.ErrNoRows) || (err == nil && n != i) {
					violations.Add(1)
				} else if err != nil {
					errc <- fmt.Errorf("read with token %q: %w", tok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if v := violations.Load(); v != 0 {
		t.Fatalf("%d read-your-writes violations in %d reads", v, reads.Load())
	}
	stats := metricText(t, s)
	t.Logf("reads %d, violations 0\n%s", reads.Load(), grepLines(stats, "router_decisions_total", "statements_total", "router_reads_total", "wait_seconds_count"))
	// The stopped replica must not have served a token read: check that
	// some reads reached replicas at all.
	if !strings.Contains(stats, `role="replica"`) {
		t.Fatalf("no read reached a replica")
	}
	if !strings.Contains(stats, `causallab_router_reads_total{outcome="replica"`) {
		t.Fatalf("no read counted with the router's outcome replica:\n%s", grepLines(stats, "router_reads_total"))
	}
}

func TestBadTokensAndOldEpoch(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.Epoch = 3 })
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(1)
	var me *gomysql.MySQLError
	_, err := db.Query("/* causal_token:nonsense */ SELECT 1")
	if !errors.As(err, &me) || !strings.Contains(me.Message, "unknown causal token format") {
		t.Fatalf("unknown token format: %v", err)
	}
	// A token of an older epoch naming a transaction the primary never
	// had: the write was lost; a clear error.
	lost := "g1.2.00000000-0000-0000-0000-00000000abcd:1-5"
	_, err = db.Query("/* causal_token:" + lost + " */ SELECT 1")
	if !errors.As(err, &me) || !strings.Contains(me.Message, "write-lost-in-failover") {
		t.Fatalf("old-epoch token: %v", err)
	}
	// A future epoch is refused too.
	_, err = db.Query("/* causal_token:g1.9.00000000-0000-0000-0000-00000000abcd:1 */ SELECT 1")
	if !errors.As(err, &me) || !strings.Contains(me.Message, "epoch 9") {
		t.Fatalf("future-epoch token: %v", err)
	}
	// The same connection keeps working, and others too.
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("after errors: %v", err)
	}
	_, err = db.Exec("SET @causal_token = 'garbage'")
	if !errors.As(err, &me) {
		t.Fatalf("SET bad token: %v", err)
	}
}

func TestMalformedAndOversizedPackets(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.MaxAllowedPacket = 4096 })
	db := openDB(t, s, "tls=skip-verify")
	db.SetMaxOpenConns(1)
	_, err := db.Query("SELECT '" + strings.Repeat("x", 8000) + "'")
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1153 {
		t.Fatalf("oversized: %v", err)
	}
	// A raw connection sending garbage instead of a handshake response.
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	_, _ = c.Read(buf) // the server's greeting
	_, _ = c.Write([]byte{5, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef, 0x00})
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.ReadAll(c) // the proxy answers with an error and hangs up
	c.Close()
	// Other clients keep going.
	db2 := openDB(t, s, "tls=skip-verify")
	var one int
	if err := db2.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatalf("after a malformed client: %v", err)
	}
}

func TestClientDisconnectMidResult(t *testing.T) {
	s := startProxy(t, nil)
	for i := 0; i < 3; i++ {
		db := openDB(t, s, "tls=skip-verify")
		db.SetMaxOpenConns(1)
		rows, err := db.Query("SELECT REPEAT('z', 1000) FROM information_schema.columns a, information_schema.columns b LIMIT 200000")
		if err != nil {
			t.Fatal(err)
		}
		rows.Next()
		// Hang up with most of the result unread.
		db.Close()
	}
	db := openDB(t, s, "tls=skip-verify")
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatalf("after disconnects: %v", err)
	}
}

func TestPrimaryLostMidTransaction(t *testing.T) {
	s := startProxy(t, nil)
	ctx := context.Background()
	db := openDB(t, s, "tls=skip-verify")
	emptyTable(t, db, "ptest", "lost", "id INT PRIMARY KEY")
	direct, err := topo.DB("primary")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustExec(t, conn, "BEGIN")
	mustExec(t, conn, "INSERT INTO ptest.lost VALUES (1)")
	var backendID int64
	// The proxy's backend connection id (CONNECTION_ID() is the proxy's
	// session id): pseudo_thread_id defaults to the server's thread id.
	if err := conn.QueryRowContext(ctx, "SELECT @@pseudo_thread_id").Scan(&backendID); err != nil {
		t.Fatal(err)
	}
	mustExec(t, direct, fmt.Sprintf("KILL %d", backendID))
	_, err = conn.ExecContext(ctx, "INSERT INTO ptest.lost VALUES (2)")
	if err == nil {
		t.Fatal("statement after losing the primary mid-transaction succeeded")
	}
	if !strings.Contains(err.Error(), "inside a transaction") {
		t.Fatalf("error does not say the transaction was lost: %v", err)
	}
	var n int
	if err := direct.QueryRow("SELECT COUNT(*) FROM ptest.lost").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows of the lost transaction are in the table", n)
	}
	// The session recovers (new primary connection) for later statements.
	mustExec(t, conn, "INSERT INTO ptest.lost VALUES (3)")
}

func TestMysqlCLI(t *testing.T) {
	s := startProxy(t, nil)
	rootfs := compose.DefaultRootFS()
	if _, err := os.Stat(rootfs + "/usr/bin/mysql"); err != nil {
		t.Skip("mysql client not in the root filesystem")
	}
	host, port, _ := net.SplitHostPort(s.Addr())
	cmd := exec.Command("chroot", rootfs, "mysql", "-h", host, "-P", port, "-u", "app", "-papppw",
		"--ssl-mode=REQUIRED", "-N", "-B", "-e", "SELECT 40+2; SELECT @causal_token IS NULL;")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mysql client: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "42") {
		t.Fatalf("mysql client output: %s", out)
	}
	// The mysql client (9.x) probes the server with "select $$" at
	// connect and ignores the 1064 it gets: a read the replica served
	// (its answer an error), not a router error (issue 21).
	m := metricText(t, s)
	if e := grepLines(m, `causallab_router_reads_total{outcome="error"`); e != "" {
		t.Errorf("a mysql CLI session counted router errors:\n%s", e)
	}
}

// TestServerRefusedReadCountsWhereServed: a read the serving node refuses
// when it runs (a subquery returning two rows, plain and prepared) reaches the client with the
// server's code and counts in causallab_proxy_read_server_errors_total,
// not as a router error outcome.
func TestServerRefusedReadCountsWhereServed(t *testing.T) {
	s := startProxy(t, nil)
	db := openDB(t, s, "")
	var me *gomysql.MySQLError
	var v int
	err := db.QueryRow("SELECT (SELECT 1 UNION SELECT 2)").Scan(&v)
	if !errors.As(err, &me) || me.Number != 1242 {
		t.Fatalf("plain read: %v, want 1242", err)
	}
	// interpolateParams=false: a prepared read (raw path).
	err = db.QueryRow("SELECT (SELECT 1 UNION SELECT 2) + ?", 1).Scan(&v)
	if !errors.As(err, &me) || me.Number != 1242 {
		t.Fatalf("prepared read: %v, want 1242", err)
	}
	// The client has the error before the proxy counts the read (under
	// token-wait the response is flushed before the watermark read behind
	// it is read): wait for both counts.
	sum := func(m, series string) float64 {
		var n float64
		for _, l := range strings.Split(grepLines(m, series), "\n") {
			var v float64
			if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
				n += v
			}
		}
		return n
	}
	var m string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m = metricText(t, s)
		if sum(m, "causallab_router_reads_total{") >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if e := grepLines(m, `causallab_router_reads_total{outcome="error"`); e != "" {
		t.Errorf("refused reads counted as router errors:\n%s", e)
	}
	if n := sum(m, "causallab_proxy_read_server_errors_total{"); n != 2 {
		t.Errorf("causallab_proxy_read_server_errors_total = %v, want 2 (a plain and a prepared read)\n%s", n, grepLines(m, "reads_total", "server_errors"))
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	s := startProxy(t, nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + s.HTTPAddr() + "/healthz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(string(body), "replicas_up=2/2") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz never ok: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(metricText(t, s), "causallab_proxy_sessions") {
		t.Fatal("metrics lack the sessions gauge")
	}
}

// emptyTable creates schema.table with the given columns if needed and
// empties it.
func emptyTable(t *testing.T, db *sql.DB, schema, table, columns string) {
	t.Helper()
	mustExec(t, db, "CREATE DATABASE IF NOT EXISTS "+schema)
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS "+schema+"."+table+" ("+columns+")")
	mustExec(t, db, "DELETE FROM "+schema+"."+table)
}

func metricText(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestCompactTokens: with compact_tokens, a connection whose writes
// alternate with another connection's carries a token of one interval per
// source (SELECT @causal_token), and still reads its own last write.
func TestCompactTokens(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.CompactTokens, c.Policy = true, "token-ryw" })
	a, b := openDB(t, s, "tls=skip-verify"), openDB(t, s, "tls=skip-verify")
	a.SetMaxOpenConns(1)
	b.SetMaxOpenConns(1)
	emptyTable(t, a, "ptest", "ct", "k INT PRIMARY KEY, v INT")
	for i := 1; i <= 10; i++ {
		mustExec(t, a, "INSERT INTO ptest.ct VALUES (?, ?)", i, i)
		mustExec(t, b, "INSERT INTO ptest.ct VALUES (?, ?)", 100+i, i)
		var got int
		if err := a.QueryRow("SELECT v FROM ptest.ct WHERE k = ?", i).Scan(&got); err != nil || got != i {
			t.Fatalf("read own write %d: %d, %v", i, got, err)
		}
	}
	var tok string
	if err := a.QueryRow("SELECT @causal_token").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	tk, err := gtid.ParseToken(tok)
	if err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}
	n := 0
	for _, ivs := range tk.GTIDs.Sources() {
		n += len(ivs)
	}
	if n != tk.GTIDs.Len() {
		t.Fatalf("token %q: %d intervals over %d sources, want one each", tok, n, tk.GTIDs.Len())
	}
}
