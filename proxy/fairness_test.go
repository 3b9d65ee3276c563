package proxy

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Fairness tests (issue 38): no client or account can take what the
// others need. Each runs against the shared topology, on loopback,
// bounded in count and time.

// twoAccounts configures the proxy users app and other.
func twoAccounts(c *Config) {
	c.Users = []User{{Name: "app", Password: "apppw"}, {Name: "other", Password: "otherpw"}}
}

// loginErr logs in as user and returns the login's MySQL error (nil: it
// logged in; the connection is then closed at the test's end).
func loginErr(t *testing.T, s *Server, user, password string) *mysql.MyError {
	t.Helper()
	rc, err := tryRawLogin(s.Addr(), user, password, false)
	if err == nil {
		rc.t = t
		t.Cleanup(func() { rc.nc.Close() })
		return nil
	}
	var me *mysql.MyError
	if !errors.As(err, &me) {
		t.Fatalf("login as %s: %v (not a MySQL error)", user, err)
	}
	return me
}

// TestMaxUserConnections: an account at max_user_connections is refused
// the next login with MySQL's 1203 naming it, while another account
// still logs in; a connection that ends gives its place back. Without the
// bound the fourth login of app succeeds.
func TestMaxUserConnections(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		twoAccounts(c)
		c.MaxConnections = 20
		c.MaxUserConnections = 3
	})
	var apps []*rawConn
	for range 3 {
		apps = append(apps, rawLogin(t, s.Addr(), "app", "apppw", false))
	}
	me := loginErr(t, s, "app", "apppw")
	if me == nil || me.Code != mysql.ER_TOO_MANY_USER_CONNECTIONS ||
		!strings.Contains(me.Message, "User app already has more than 'max_user_connections' active connections") {
		t.Fatalf("a fourth login of app past max_user_connections 3: %v, want 1203", me)
	}
	if got := testutil.ToFloat64(s.m.connections.WithLabelValues("refused-max-user-connections")); got != 1 {
		t.Errorf("connections_total{outcome=refused-max-user-connections} = %v, want 1", got)
	}
	if me := loginErr(t, s, "other", "otherpw"); me != nil {
		t.Fatalf("another account refused while app is at its bound: %v", me)
	}
	for _, rc := range apps {
		served(t, rc)
	}
	// A connection that ends gives its place back (the session's end is
	// seen by the proxy a moment later).
	apps[0].nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		me := loginErr(t, s, "app", "apppw")
		if me == nil {
			break
		}
		if me.Code != mysql.ER_TOO_MANY_USER_CONNECTIONS || time.Now().After(deadline) {
			t.Fatalf("app's login after one of its connections ended: %v", me)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMaxSessionPreparedStatements: one client preparing in a loop is
// refused at max_session_prepared_statements with MySQL's 1461 before its
// prepare reaches the server, while another client still prepares. The
// server's max_prepared_stmt_count (global, every session's) is set to
// 60 statements above what the server holds: without the per-session
// bound the looping client takes them all and the other client's
// prepare fails with the server's 1461 (as one client took MySQL's
// default 16,382 in 3 s).
func TestMaxSessionPreparedStatements(t *testing.T) {
	_, admin := limitedAccount(t)
	var old, open int
	if err := admin.QueryRow("SELECT @@GLOBAL.max_prepared_stmt_count").Scan(&old); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := admin.QueryRow("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'").Scan(&name, &open); err != nil {
		t.Fatal(err)
	}
	mustExec(t, admin, "SET GLOBAL max_prepared_stmt_count = "+strconv.Itoa(open+60))
	t.Cleanup(func() { _, _ = admin.Exec("SET GLOBAL max_prepared_stmt_count = " + strconv.Itoa(old)) })

	const limit = 20
	s := startProxy(t, func(c *Config) { c.MaxSessionPreparedStatements = limit })
	hog := rawLogin(t, s.Addr(), "app", "apppw", false)
	prepared := 0
	for i := range 80 {
		_, err := hog.cc.Prepare("SELECT ? + " + strconv.Itoa(i))
		if err == nil {
			prepared++
			continue
		}
		var me *mysql.MyError
		if !errors.As(err, &me) || me.Code != mysql.ER_MAX_PREPARED_STMT_COUNT_REACHED || !strings.Contains(me.Message, "max_session_prepared_statements") {
			t.Fatalf("prepare %d of the looping client: %v, want the proxy's 1461", i+1, err)
		}
	}
	if prepared != limit {
		t.Errorf("the looping client prepared %d statements, want max_session_prepared_statements %d", prepared, limit)
	}
	if got := testutil.ToFloat64(s.m.clientErrors.WithLabelValues("prepared-statements")); got != 80-limit {
		t.Errorf("client_errors_total{kind=prepared-statements} = %v, want %d", got, 80-limit)
	}
	other := rawLogin(t, s.Addr(), "app", "apppw", false)
	for i := range 10 {
		st, err := other.cc.Prepare("SELECT ? * " + strconv.Itoa(i))
		if err != nil {
			t.Fatalf("another client's prepare %d while the first is at its bound: %v", i+1, err)
		}
		r, err := st.Execute(i)
		if err != nil {
			t.Fatalf("another client's execution %d: %v", i+1, err)
		}
		r.Close()
	}
	served(t, hog)
}

// trickle opens a connection that stalls its login: after the greeting it
// sends a handshake response one byte every interval until the proxy
// closes the connection or stop closes. False: refused before the
// greeting (1040).
func trickle(t *testing.T, s *Server, interval time.Duration, stop <-chan struct{}, wg *sync.WaitGroup) bool {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	seq, p, err := readPacket(c)
	if err != nil || classifyAnswer(seq, p).kind == "err" {
		c.Close()
		return false
	}
	wg.Go(func() {
		defer c.Close()
		msg := append([]byte{200, 0, 0, 1}, make([]byte, 200)...)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for _, b := range msg {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte{b}); err != nil {
				return // closed by the proxy
			}
		}
	})
	return true
}

// TestMaxHandshakes: 200 clients trickling their login one byte every
// half second do not keep a client from logging in: past max_handshakes
// (100) a new connection closes the oldest login in progress once it has
// stalled a second, and a normal login succeeds within a second, while a
// client logged in before is served throughout. Before, logins in
// progress counted against max_connections (150 here): the tricklers
// took them all and every login was refused (1040) until
// handshake_timeout cut them.
func TestMaxHandshakes(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		c.MaxConnections, c.MaxHandshakes = 150, 100
		c.HandshakeTimeout = 30 * time.Second
	})
	early := rawLogin(t, s.Addr(), "app", "apppw", false)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	start := time.Now()
	greeted := 0
	for range 200 {
		if trickle(t, s, 500*time.Millisecond, stop, &wg) {
			greeted++
		}
	}
	t.Logf("200 trickling clients connected in %v, %d greeted", time.Since(start).Round(time.Millisecond), greeted)
	// The oldest logins in progress have stalled past a second.
	time.Sleep(time.Until(start.Add(handshakeStalled + 200*time.Millisecond)))
	for i := range 3 {
		t0 := time.Now()
		rc, err := tryRawLogin(s.Addr(), "app", "apppw", false)
		took := time.Since(t0)
		if err != nil {
			t.Fatalf("login %d among 200 trickling clients: %v after %v", i+1, err, took)
		}
		rc.nc.Close()
		if took > time.Second {
			t.Errorf("login %d among 200 trickling clients took %v, want within a second", i+1, took)
		}
	}
	served(t, early)
	if n := testutil.ToFloat64(s.m.connections.WithLabelValues("handshake-evicted")); n < 1 {
		t.Errorf("connections_total{outcome=handshake-evicted} = %v, want at least 1 (the first login made room)", n)
	}
	if n := testutil.ToFloat64(s.m.handshakes); n > 100 {
		t.Errorf("causallab_proxy_handshakes = %v, past max_handshakes 100", n)
	}
}

// TestMaxTotalSessionBytes: long data held by a few sessions, each within
// max_session_bytes (1 MiB), is bounded in total by
// max_total_session_bytes (2.5 MiB): the third session's 900 KiB is
// refused, its execution failing with 1105 naming the total, while the
// first two execute with theirs; once they have (their bytes given
// back), the third's long data is kept again. Before, the total was
// max_session_bytes times the sessions (8 clients holding 60 MiB each
// added 490 MiB).
func TestMaxTotalSessionBytes(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		c.MaxAllowedPacket = 2 << 20
		c.MaxSessionBytes = 1 << 20
		c.MaxTotalSessionBytes = 5 << 19 // 2.5 MiB
	})
	const size = 900 << 10
	var rcs []*rawConn
	var ids []uint32
	for range 3 {
		rc := rawLogin(t, s.Addr(), "app", "apppw", false)
		id, _ := rc.prepare("SELECT LENGTH(?)")
		rc.longData(id, 0, bytes.Repeat([]byte{'t'}, size))
		// COM_STMT_SEND_LONG_DATA has no answer: a ping's answer says the
		// session read it (its bytes are held) before the next session's.
		if err := rc.ping(); err != nil {
			t.Fatal(err)
		}
		rcs, ids = append(rcs, rc), append(ids, id)
	}
	for i := range 2 {
		if a, rows := rcs[i].executeBlob(ids[i]); a.kind != "data" || len(rows) != 1 || binaryBigint(rows[0]) != size {
			t.Fatalf("session %d's long data within the total: %v %q", i+1, a, rows)
		}
	}
	a, _ := rcs[2].executeBlob(ids[2])
	if a.kind != "err" || a.code != mysql.ER_UNKNOWN_ERROR || !strings.Contains(a.msg, "max_total_session_bytes") {
		t.Fatalf("the third session's long data past max_total_session_bytes: %v, want 1105 naming it", a)
	}
	if got := testutil.ToFloat64(s.m.clientErrors.WithLabelValues("total-session-bytes")); got != 1 {
		t.Errorf("client_errors_total{kind=total-session-bytes} = %v, want 1", got)
	}
	// The first two executed: their bytes are back in the total.
	rcs[2].longData(ids[2], 0, bytes.Repeat([]byte{'u'}, size))
	if a, rows := rcs[2].executeBlob(ids[2]); a.kind != "data" || len(rows) != 1 || binaryBigint(rows[0]) != size {
		t.Fatalf("the third session's long data once the others executed: %v %q", a, rows)
	}
	if used := s.totalBytes.used.Load(); used > 3*1024 { // the three statements' own costs
		t.Errorf("the total holds %d bytes after every execution, want only the statements' costs", used)
	}
	for _, rc := range rcs {
		rc.nc.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); s.totalBytes.used.Load() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the total holds %d bytes after every session ended", s.totalBytes.used.Load())
		}
	}
}

// TestIdleInTransactionTimeout: a client idle past
// idle_in_transaction_timeout with an open transaction (BEGIN, an INSERT)
// is told why (4031, sequence 0) and disconnected, and its transaction is
// rolled back: another client inserts the same key without waiting for
// its lock, and the row is that client's. A client idle as long outside a
// transaction stays connected (idle_timeout is 8h), and others are served
// meanwhile. Before, the transaction and its locks stayed until
// idle_timeout.
func TestIdleInTransactionTimeout(t *testing.T) {
	const idleTx = 500 * time.Millisecond
	s := startProxy(t, func(c *Config) { c.IdleInTransactionTimeout = idleTx })
	db := openDB(t, s, "tls=skip-verify")
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS fair", "DROP TABLE IF EXISTS fair.idle_tx",
		"CREATE TABLE fair.idle_tx (k INT PRIMARY KEY, v VARCHAR(20))"} {
		mustExec(t, db, q)
	}
	idle := rawLogin(t, s.Addr(), "app", "apppw", false)
	tx := rawLogin(t, s.Addr(), "app", "apppw", false)
	tx.exec(t, "BEGIN")
	tx.exec(t, "INSERT INTO fair.idle_tx VALUES (1, 'abandoned')")
	t0 := time.Now()
	var one int
	if err := db.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatalf("another client while one idles in a transaction: %v", err)
	}
	_ = tx.nc.SetReadDeadline(time.Now().Add(idleTx + 5*time.Second))
	seq, p, err := readPacket(tx.nc)
	if err != nil {
		t.Fatalf("a client idle in a transaction past idle_in_transaction_timeout %v: %v after %v, want 4031", idleTx, err, time.Since(t0))
	}
	if a := classifyAnswer(seq, p); a.code != codeClientTimeout || seq != 0 || !strings.Contains(a.msg, "idle_in_transaction_timeout") {
		t.Fatalf("idle in a transaction: %v, want 4031 naming idle_in_transaction_timeout with sequence 0", a)
	}
	if _, _, err := readPacket(tx.nc); err == nil {
		t.Fatal("the connection stayed open after 4031")
	}
	if got := testutil.ToFloat64(s.m.clientErrors.WithLabelValues("idle-in-transaction-timeout")); got != 1 {
		t.Errorf("client_errors_total{kind=idle-in-transaction-timeout} = %v, want 1", got)
	}
	// Rolled back: its lock released (the server sees the closed
	// connection a moment later), its row gone.
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustExec(t, conn, "SET SESSION innodb_lock_wait_timeout = 1")
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := conn.ExecContext(t.Context(), "INSERT INTO fair.idle_tx VALUES (1, 'another')")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned transaction's row is still locked or there: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var v string
	if err := conn.QueryRowContext(t.Context(), "SELECT v FROM fair.idle_tx WHERE k = 1 FOR SHARE").Scan(&v); err != nil || v != "another" {
		t.Fatalf("row 1 after the rollback: %q %v, want another's", v, err)
	}
	served(t, idle)
}

// TestMultiplexPinnedShare: with multiplexing, 64 clients of one account
// each pinning the primary's pool (BEGIN and an uncommitted INSERT) hold
// at most max_pinned_share (0.75: 48) of its 64 connections; the other 16
// become their sessions' own, outside the pool, and a 65th client of
// another account logs in and writes within a second. Before, the 64 held
// the whole pool and the 65th client's login failed after pool_wait
// (2013 wait-timeout). When the transactions commit, the own connections
// are closed and nothing stays pinned.
func TestMultiplexPinnedShare(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		twoAccounts(c)
		c.Multiplex = true // pool_size 64, pool_wait 2s, max_pinned_share 0.75
	})
	db := openDB(t, s, "")
	emptyTable(t, db, "fair", "pinned", "k INT PRIMARY KEY")
	ctx := t.Context()
	const clients = 64
	conns := make([]*sql.Conn, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
		wg.Go(func() {
			for _, q := range []string{"BEGIN", "INSERT INTO fair.pinned VALUES (" + strconv.Itoa(i) + ")"} {
				if _, err := c.ExecContext(ctx, q); err != nil {
					errs <- fmt.Errorf("client %d: %s: %w", i, q, err)
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
	primary := s.cfg.Primary.Name
	gauge := func(state string) float64 {
		return testutil.ToFloat64(s.pm.conns.WithLabelValues(primary, state))
	}
	if p, own := gauge("pinned"), gauge("own"); p != 48 || own != clients-48 {
		t.Errorf("64 pinned sessions: pool_connections{state=pinned} %v (want 48), {state=own} %v (want 16)", p, own)
	}
	if n := testutil.ToFloat64(s.pm.pinnedOwn.WithLabelValues(primary)); n != clients-48 {
		t.Errorf("pool_pinned_own_total = %v, want 16", n)
	}
	other, err := sql.Open("mysql", "other:otherpw@tcp("+s.Addr()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	t0 := time.Now()
	if _, err := other.ExecContext(ctx, "INSERT INTO fair.pinned VALUES (1000)"); err != nil {
		t.Fatalf("a client of another account while 64 sessions pin the pool: %v after %v", err, time.Since(t0))
	}
	took := time.Since(t0)
	if took > time.Second {
		t.Errorf("a client of another account was served after %v, want within a second", took)
	}
	t.Logf("a client of another account logged in and wrote in %v", took.Round(time.Millisecond))
	for _, c := range conns {
		mustExec(t, c, "COMMIT")
	}
	if p, own := gauge("pinned"), gauge("own"); p != 0 || own != 0 {
		t.Errorf("after every commit: pool_connections{state=pinned} %v, {state=own} %v, want 0 and 0", p, own)
	}
	var n int
	if err := conns[0].QueryRowContext(ctx, "SELECT COUNT(*) FROM fair.pinned FOR SHARE").Scan(&n); err != nil || n != clients+1 {
		t.Fatalf("rows after the commits: %d %v, want %d", n, err, clients+1)
	}
}
