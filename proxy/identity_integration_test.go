package proxy

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/causallab/causallab/compose/composetest"
)

// identityAccounts creates the application accounts u1 and u2 on the
// primary (as the topology's admin account), each with DML and DDL on its
// own schema only, and waits until every replica has them (CREATE USER
// replicates). Idempotent: the package's tests share the topology.
func identityAccounts(t *testing.T) {
	t.Helper()
	composetest.Need(t, topo)
	p := topo.Primary()
	admin := sqlOpen(t, p.User+":"+p.Password+"@tcp("+p.Addr()+")/?multiStatements=true")
	for _, u := range []string{"u1", "u2"} {
		mustExec(t, admin, fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %sdb", u))
		mustExec(t, admin, fmt.Sprintf("CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%spw'", u, u))
		mustExec(t, admin, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON %sdb.* TO '%s'@'%%'", u, u))
		mustExec(t, admin, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %sdb.who (n INT, who VARCHAR(300))", u))
	}
	for _, r := range topo.Replicas() {
		rdb := sqlOpen(t, r.User+":"+r.Password+"@tcp("+r.Addr()+")/")
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n int
			if err := rdb.QueryRow("SELECT COUNT(*) FROM mysql.user WHERE user IN ('u1', 'u2')").Scan(&n); err == nil && n == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s lacks u1, u2 after 30 s", r.Name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func sqlOpen(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// passthroughProxy is a proxy under auth passthrough, multiplexed or not,
// with reads on the replicas (policy any).
func passthroughProxy(t *testing.T, multiplex bool) *Server {
	return startProxy(t, func(c *Config) {
		c.Users, c.Auth, c.Multiplex, c.Policy = nil, AuthPassthrough, multiplex, "any"
		c.PoolSize = 2 // u1's and u2's connections share every place
	})
}

// passLogin is the error of a login to s as user, password (nil: served).
func passLogin(s *Server, user, password, params string) error {
	db, err := sql.Open("mysql", user+":"+password+"@tcp("+s.Addr()+")/?"+params)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Ping()
}

// portRE matches the client's port in an access-denied message.
var portRE = regexp.MustCompile(`:\d+'`)

// TestPassthroughIdentity (issue 38, finding 1): under auth passthrough
// each client acts as its own MySQL account, plain and multiplexed: u1
// and u2 log in as themselves (over TLS and with the RSA exchange),
// CURRENT_USER() is theirs on the primary and on the replicas; a wrong
// password, an unknown user and the proxy's own (monitoring) account are
// refused alike with 1045; what the account may not do direct it may not
// do through the proxy, with the server's own error.
func TestPassthroughIdentity(t *testing.T) {
	identityAccounts(t)
	for _, mux := range []bool{false, true} {
		t.Run(fmt.Sprintf("multiplex=%v", mux), func(t *testing.T) {
			s := passthroughProxy(t, mux)
			var me *gomysql.MySQLError
			for _, params := range []string{"tls=skip-verify", "tls=false"} {
				if err := passLogin(s, "u1", "u1pw", params); err != nil {
					t.Fatalf("u1 (%s): %v", params, err)
				}
			}
			denied := map[string]string{}
			for name, up := range map[string][2]string{
				"wrong password": {"u1", "nope"},
				"unknown user":   {"nobody", "nope"},
				"monitoring":     {topo.Primary().User, topo.Primary().Password},
			} {
				err := passLogin(s, up[0], up[1], "tls=skip-verify")
				if !errors.As(err, &me) || me.Number != mysql.ER_ACCESS_DENIED_ERROR {
					t.Fatalf("%s: %v, want 1045", name, err)
				}
				denied[name] = portRE.ReplaceAllString(strings.Replace(me.Message, "'"+up[0]+"'", "'X'", 1), ":P'")
			}
			if denied["wrong password"] != denied["unknown user"] || denied["wrong password"] != denied["monitoring"] {
				t.Fatalf("refusals differ: %q", denied)
			}
			if strings.Contains(denied["monitoring"], topo.Primary().Password) {
				t.Fatalf("the monitoring password in an error: %q", denied["monitoring"])
			}
			u1 := openAs(t, s, "u1")
			u2 := openAs(t, s, "u2")
			checkCurrentUser(t, u1, "u1")
			checkCurrentUser(t, u2, "u2")
			checkPrivileges(t, u1)
		})
	}
}

func openAs(t *testing.T, s *Server, user string) *sql.DB {
	t.Helper()
	db := sqlOpen(t, user+":"+user+"pw@tcp("+s.Addr()+")/"+user+"db?tls=skip-verify")
	db.SetMaxOpenConns(1)
	return db
}

// checkCurrentUser: the account on the primary (inside a transaction)
// and on a replica (a routed read, policy any).
func checkCurrentUser(t *testing.T, db *sql.DB, user string) {
	t.Helper()
	var who, port, primaryPort string
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow("SELECT CURRENT_USER(), @@port").Scan(&who, &primaryPort); err != nil || who != user+"@%" {
		t.Fatalf("CURRENT_USER() on the primary: %q, %v; want %s@%%", who, err, user)
	}
	_ = tx.Rollback()
	if err := db.QueryRow("SELECT CURRENT_USER(), @@port").Scan(&who, &port); err != nil || who != user+"@%" {
		t.Fatalf("CURRENT_USER() on a read: %q, %v; want %s@%%", who, err, user)
	}
	if port == primaryPort {
		t.Fatalf("the read ran on the primary (port %s), want a replica", port)
	}
}

// checkPrivileges runs what an application account may not do, direct
// on the primary and through the proxy (db): the same answer.
func checkPrivileges(t *testing.T, db *sql.DB) {
	t.Helper()
	direct := sqlOpen(t, "u1:u1pw@tcp("+topo.Primary().Addr()+")/u1db?tls=preferred")
	direct.SetMaxOpenConns(1)
	answer := func(db *sql.DB, q string) string {
		var v sql.NullString
		err := db.QueryRow(q).Scan(&v)
		var me *gomysql.MySQLError
		switch {
		case errors.As(err, &me):
			return fmt.Sprintf("error %d", me.Number)
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			if _, err := db.Exec(q); errors.As(err, &me) {
				return fmt.Sprintf("error %d", me.Number)
			} else if err != nil {
				return "failed: " + err.Error()
			}
			return "ok"
		}
		return fmt.Sprintf("value %v", v)
	}
	for _, q := range []string{
		"SET GLOBAL max_connections = 301",
		"SELECT LOAD_FILE('/etc/passwd')",
		"SELECT 1 INTO OUTFILE '/tmp/causallab-identity-outfile'",
		"CREATE USER evil IDENTIFIED BY 'evil'",
		"SELECT authentication_string FROM mysql.user LIMIT 1",
		"SET sql_log_bin = 0",
		"SHUTDOWN",
	} {
		want, got := answer(direct, q), answer(db, q)
		if got != want || !(strings.HasPrefix(want, "error") || want == fmt.Sprintf("value %v", sql.NullString{})) {
			t.Errorf("%s: through the proxy %s, direct %s (want the same refusal)", q, got, want)
		}
	}
}

// TestPassthroughSessionsKeepTheirAccounts: multiplexed through a pool of
// two connections per node, u1's and u2's statements (writes on the
// primary, reads on the replicas) only ever run on connections of their
// own account.
func TestPassthroughSessionsKeepTheirAccounts(t *testing.T) {
	identityAccounts(t)
	s := passthroughProxy(t, true)
	const rounds = 40
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, u := range []string{"u1", "u2"} {
		db := openAs(t, s, u)
		db.SetMaxOpenConns(2)
		mustExec(t, db, "DELETE FROM who")
		for c := 0; c < 2; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					if _, err := db.Exec("INSERT INTO who VALUES (?, CURRENT_USER())", i); err != nil {
						errs <- err
						return
					}
					var who string
					if err := db.QueryRow("SELECT CURRENT_USER()").Scan(&who); err != nil || who != u+"@%" {
						errs <- fmt.Errorf("%s read as %q: %v", u, who, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, u := range []string{"u1", "u2"} {
		var n, others int
		if err := openAs(t, s, u).QueryRow("SELECT COUNT(*), COUNT(NULLIF(who, CONCAT(?, '@%'))) FROM who FOR UPDATE", u).Scan(&n, &others); err != nil {
			t.Fatal(err)
		}
		if n != 2*rounds || others != 0 {
			t.Fatalf("%s: %d rows, %d written as another account", u, n, others)
		}
	}
}

// changeUserFull is COM_CHANGE_USER under auth passthrough over TLS: the
// scramble, then the password in clear when the proxy asks for it (full
// authentication).
func (r *rawConn) changeUserFull(t *testing.T, user, password, db string) answer {
	t.Helper()
	r.write(0, append([]byte{mysql.COM_CHANGE_USER}, changeUserPayload(user, nil, db, 255, mysql.AUTH_CACHING_SHA2_PASSWORD)...))
	seq, p, err := r.read()
	if err != nil || len(p) == 0 || p[0] != mysql.EOF_HEADER {
		t.Fatalf("COM_CHANGE_USER: %v, %q; want an authentication switch", err, p)
	}
	_, rest, _ := bytes.Cut(p[1:], []byte{0})
	r.write(seq+1, mysql.CalcCachingSha2Password(rest[:20], []byte(password)))
	if seq, p, err = r.read(); err != nil {
		return answer{kind: "closed"}
	}
	if len(p) == 2 && p[0] == mysql.MORE_DATE_HEADER && p[1] == mysql.CACHE_SHA2_FULL_AUTH {
		r.write(seq+1, append([]byte(password), 0))
		if seq, p, err = r.read(); err != nil {
			return answer{kind: "closed"}
		}
	}
	return classifyAnswer(seq, p)
}

// TestPassthroughChangeUser: COM_CHANGE_USER under passthrough re-authenticates
// against the servers: to u2 with u2's password the session acts as u2;
// a wrong password or the monitoring account is 1045 and closes the
// connection.
func TestPassthroughChangeUser(t *testing.T) {
	identityAccounts(t)
	for _, mux := range []bool{false, true} {
		t.Run(fmt.Sprintf("multiplex=%v", mux), func(t *testing.T) {
			s := passthroughProxy(t, mux)
			rc := rawLogin(t, s.Addr(), "u1", "u1pw", true)
			if who, _ := rc.value(t, "SELECT CURRENT_USER()"); who != "u1@%" {
				t.Fatalf("logged in as %q", who)
			}
			if a := rc.changeUserFull(t, "u2", "u2pw", "u2db"); a.kind != "ok" {
				t.Fatalf("change to u2: %v", a)
			}
			if who, _ := rc.value(t, "SELECT CURRENT_USER()"); who != "u2@%" {
				t.Fatalf("after COM_CHANGE_USER: %q, want u2@%%", who)
			}
			rc.exec(t, "INSERT INTO who VALUES (0, CURRENT_USER())")
			for name, up := range map[string][2]string{
				"wrong password": {"u1", "nope"},
				"monitoring":     {topo.Primary().User, topo.Primary().Password},
			} {
				rc := rawLogin(t, s.Addr(), "u2", "u2pw", true)
				a := rc.changeUserFull(t, up[0], up[1], "")
				if a.kind != "err" || a.code != mysql.ER_ACCESS_DENIED_ERROR {
					t.Fatalf("%s: %v, want 1045", name, a)
				}
				if err := rc.ping(); err == nil {
					t.Fatalf("%s: the connection stayed open", name)
				}
			}
		})
	}
}

// TestPassthroughConfigCLIDefault: a Config without users is
// passthrough; its sessions' backend connections are the client's
// account even under a mapped-looking login name (the topology's admin
// refused).
func TestPassthroughNoUsersDefault(t *testing.T) {
	identityAccounts(t)
	s := startProxy(t, func(c *Config) { c.Users, c.Auth = nil, "" })
	if s.cfg.Auth != AuthPassthrough {
		t.Fatalf("auth %q without users", s.cfg.Auth)
	}
	var who string
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := openAs(t, s, "u1").QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&who); err != nil || who != "u1@%" {
		t.Fatalf("%q, %v", who, err)
	}
}

// TestPassthroughProcessListAndKill (issue 38, findings 2 and 3, under
// auth passthrough): with each client its own MySQL account, u1 (no
// PROCESS, no CONNECTION_ADMIN: the server's answer) sees only u1's
// sessions in SHOW PROCESSLIST, cannot kill u2's session (1095), and can
// kill its own account's running query from another connection, as the
// mysql client's Ctrl-C does; plain and multiplexed.
func TestPassthroughProcessListAndKill(t *testing.T) {
	identityAccounts(t)
	for _, mux := range []bool{false, true} {
		t.Run(fmt.Sprintf("multiplex=%v", mux), func(t *testing.T) {
			s := passthroughProxy(t, mux)
			a1, a2 := gmConnect(t, s, "u1", "u1pw"), gmConnect(t, s, "u1", "u1pw")
			b1 := gmConnect(t, s, "u2", "u2pw")
			ida1, ida2, idb1 := uint64(a1.GetConnectionID()), uint64(a2.GetConnectionID()), uint64(b1.GetConnectionID())
			pl := processList(t, a1, true)
			if _, ok := pl[idb1]; ok || len(pl) != 2 {
				t.Fatalf("u1 sees %v, want only u1's sessions %d and %d", pl, ida1, ida2)
			}
			if pl := processList(t, b1, false); len(pl) != 1 || pl[idb1].user != "u2" {
				t.Fatalf("u2 sees %v, want only its own session %d", pl, idb1)
			}
			if _, err := a1.Execute(fmt.Sprintf("KILL %d", idb1)); myErrCode(err) != mysql.ER_KILL_DENIED_ERROR {
				t.Fatalf("u1 killing u2's session: %v, want 1095", err)
			}
			if _, err := a1.Execute(fmt.Sprintf("KILL QUERY %d", idb1)); myErrCode(err) != mysql.ER_KILL_DENIED_ERROR {
				t.Fatalf("u1 killing u2's query: %v, want 1095", err)
			}
			if _, err := b1.Execute("SELECT 1"); err != nil {
				t.Fatalf("u2's session after u1's refused kills: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := a2.Execute(killedStatements[0])
				done <- err
			}()
			waitRunning(t, a1, ida2, "SLEEP(30)")
			if _, err := a1.Execute(fmt.Sprintf("KILL QUERY %d", ida2)); err != nil {
				t.Fatalf("u1 killing its own account's query: %v", err)
			}
			select {
			case err := <-done:
				if myErrCode(err) != mysql.ER_QUERY_INTERRUPTED {
					t.Fatalf("the killed statement: %v, want 1317", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("KILL QUERY did not end the statement within 20 s")
			}
			if got := gmUint(t, a2, "SELECT CONNECTION_ID()"); got != ida2 {
				t.Fatalf("after the kill CONNECTION_ID() = %d, want %d", got, ida2)
			}
		})
	}
}

// TestPassthroughPinnedShare is TestMultiplexPinnedShare under auth
// passthrough, where each account has its own pooled connections within
// the node's pool_size: 64 sessions of u1 pinning the primary's pool
// (BEGIN and an uncommitted INSERT) leave a client of u2 logged in and
// writing within a second, as u2.
func TestPassthroughPinnedShare(t *testing.T) {
	identityAccounts(t)
	s := startProxy(t, func(c *Config) {
		c.Users, c.Auth, c.Multiplex = nil, AuthPassthrough, true // pool_size 64, max_pinned_share 0.75
	})
	ctx := t.Context()
	u1 := sqlOpen(t, "u1:u1pw@tcp("+s.Addr()+")/u1db?tls=skip-verify")
	mustExec(t, u1, "CREATE TABLE IF NOT EXISTS u1db.pinned (k INT PRIMARY KEY)")
	mustExec(t, u1, "DELETE FROM u1db.pinned")
	const clients = 64
	conns := make([]*sql.Conn, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range conns {
		c, err := u1.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
		wg.Go(func() {
			for _, q := range []string{"BEGIN", fmt.Sprintf("INSERT INTO u1db.pinned VALUES (%d)", i)} {
				if _, err := c.ExecContext(ctx, q); err != nil {
					errs <- fmt.Errorf("u1 client %d: %s: %w", i, q, err)
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
	u2 := sqlOpen(t, "u2:u2pw@tcp("+s.Addr()+")/u2db?tls=skip-verify")
	t0 := time.Now()
	if _, err := u2.ExecContext(ctx, "INSERT INTO u2db.who VALUES (1, CURRENT_USER())"); err != nil {
		t.Fatalf("u2 while 64 sessions of u1 pin the pool: %v after %v", err, time.Since(t0))
	}
	if took := time.Since(t0); took > time.Second {
		t.Errorf("u2 was served after %v, want within a second", took)
	}
	checkCurrentUser(t, u2, "u2")
	for _, c := range conns {
		mustExec(t, c, "COMMIT")
	}
}

// TestPassthroughPrivilegesThroughRole: under auth passthrough an account
// whose PROCESS and CONNECTION_ADMIN come from a default role only (u3,
// as many sites grant admin rights) sees every session in SHOW
// PROCESSLIST and may kill another account's, as on MySQL directly.
// Before, the proxy read information_schema.USER_PRIVILEGES, which lists
// no privilege held through a role: u3 saw only its own sessions and its
// KILL was refused (1095).
func TestPassthroughPrivilegesThroughRole(t *testing.T) {
	identityAccounts(t)
	p := topo.Primary()
	admin := sqlOpen(t, p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	for _, q := range []string{"CREATE ROLE IF NOT EXISTS 'u3_admin'", "GRANT PROCESS, CONNECTION_ADMIN ON *.* TO 'u3_admin'",
		"CREATE USER IF NOT EXISTS 'u3'@'%' IDENTIFIED BY 'u3pw'", "GRANT 'u3_admin' TO 'u3'@'%'", "SET DEFAULT ROLE 'u3_admin' TO 'u3'@'%'"} {
		mustExec(t, admin, q)
	}
	if err := topo.WaitReplicated(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s := passthroughProxy(t, false)
	a := gmConnect(t, s, "u1", "u1pw")
	r := gmConnect(t, s, "u3", "u3pw")
	ida := uint64(a.GetConnectionID())
	if pl := processList(t, r, false); len(pl) < 2 {
		t.Fatalf("u3 (PROCESS through its role) sees %v, want u1's session %d too", pl, ida)
	} else if _, ok := pl[ida]; !ok {
		t.Fatalf("u3 (PROCESS through its role) sees %v, not u1's session %d", pl, ida)
	}
	if _, err := r.Execute(fmt.Sprintf("KILL %d", ida)); err != nil {
		t.Fatalf("u3 (CONNECTION_ADMIN through its role) killing u1's session: %v", err)
	}
	if _, err := a.Execute("SELECT 1"); err == nil {
		t.Fatal("u1's killed session still answers")
	}
}
