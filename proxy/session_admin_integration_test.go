package proxy

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// gmConnect logs in to the proxy with go-mysql's client, which exposes
// the greeting's thread id (GetConnectionID).
func gmConnect(t testing.TB, s *Server, user, password string) *client.Conn {
	t.Helper()
	c, err := client.Connect(s.Addr(), user, password, "")
	if err != nil {
		t.Fatalf("login as %s: %v", user, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// gmUint is the first column of q's first row.
func gmUint(t testing.TB, c *client.Conn, q string) uint64 {
	t.Helper()
	r, err := c.Execute(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer r.Close()
	v, err := r.GetUint(0, 0)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// processList is SHOW [FULL] PROCESSLIST through c: rows by Id.
type plRow struct {
	user, host, command, info string
	infoNull                  bool
}

func processList(t testing.TB, c *client.Conn, full bool) map[uint64]plRow {
	t.Helper()
	q := "SHOW PROCESSLIST"
	if full {
		q = "SHOW FULL PROCESSLIST"
	}
	r, err := c.Execute(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer r.Close()
	if got := strings.Join(fieldNames(r), ","); got != "Id,User,Host,db,Command,Time,State,Info" {
		t.Fatalf("%s columns %s", q, got)
	}
	out := map[uint64]plRow{}
	for i := range r.RowNumber() {
		id, _ := r.GetUint(i, 0)
		user, _ := r.GetString(i, 1)
		host, _ := r.GetString(i, 2)
		cmd, _ := r.GetString(i, 4)
		info, _ := r.GetString(i, 7)
		null, _ := r.IsNull(i, 7)
		out[id] = plRow{user: user, host: host, command: cmd, info: info, infoNull: null}
	}
	return out
}

func fieldNames(r *mysql.Result) []string {
	var ns []string
	for _, f := range r.Fields {
		ns = append(ns, string(f.Name))
	}
	return ns
}

func myErrCode(err error) uint16 {
	var me *mysql.MyError
	if errors.As(err, &me) {
		return me.Code
	}
	return 0
}

// TestSessionIDs: a session's id is the same wherever the client reads
// it (the greeting's thread id, CONNECTION_ID() in a query and in a
// prepared statement, SHOW PROCESSLIST's Id) and unique across 50
// sessions (multiplexed: they share a pool's backend connections).
// Before, the greeting said 10001 up, CONNECTION_ID() the backend
// thread (two multiplexed sessions got the same), and the processlist
// was the server's.
func TestSessionIDs(t *testing.T) {
	s := startProxy(t, nil)
	const n = 50
	conns := make([]*client.Conn, n)
	seen := map[uint64]bool{}
	for i := range conns {
		c := gmConnect(t, s, "app", "apppw")
		conns[i] = c
		id := uint64(c.GetConnectionID())
		if seen[id] {
			t.Fatalf("session %d: id %d given twice", i, id)
		}
		seen[id] = true
		r, err := c.Execute("SELECT CONNECTION_ID()")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := r.GetUint(0, 0)
		if names := fieldNames(r); got != id || names[0] != "CONNECTION_ID()" {
			t.Fatalf("session %d: SELECT CONNECTION_ID() = %d (column %q), greeting %d", i, got, names[0], id)
		}
		r.Close()
		if got := gmUint(t, c, "SELECT connection_id() + 0 FROM DUAL WHERE 'CONNECTION_ID()' <> ''"); got != id {
			t.Fatalf("session %d: CONNECTION_ID() in an expression = %d, greeting %d", i, got, id)
		}
		// An expression's column is named after its text, as the
		// client wrote it (main.lead_lag).
		r, err = c.Execute("SELECT 1 + connection_id()")
		if err != nil {
			t.Fatal(err)
		}
		if names := fieldNames(r); names[0] != "1 + connection_id()" {
			t.Fatalf("session %d: SELECT 1 + connection_id() named %q", i, names[0])
		}
		r.Close()
		st, err := c.Prepare("SELECT CONNECTION_ID(), ? + CONNECTION_ID()")
		if err != nil {
			t.Fatal(err)
		}
		pr, err := st.Execute(1)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := pr.GetUint(0, 0); got != id {
			t.Fatalf("session %d: prepared CONNECTION_ID() = %d, greeting %d", i, got, id)
		}
		if names := fieldNames(pr); names[1] != "? + CONNECTION_ID()" {
			t.Fatalf("session %d: prepared ? + CONNECTION_ID() named %q", i, names[1])
		}
		pr.Close()
		st.Close()
	}
	pl := processList(t, conns[0], false)
	for id := range seen {
		row, ok := pl[id]
		if !ok {
			t.Fatalf("session %d not in SHOW PROCESSLIST (%d rows)", id, len(pl))
		}
		if row.user != "app" {
			t.Fatalf("session %d: User %q", id, row.user)
		}
	}
	if me := pl[uint64(conns[0].GetConnectionID())]; me.command != "Query" || me.info != "SHOW PROCESSLIST" {
		t.Fatalf("the asking session's row: %+v", me)
	}
	if other := pl[uint64(conns[1].GetConnectionID())]; other.command != "Sleep" || !other.infoNull {
		t.Fatalf("an idle session's row: %+v", other)
	}
}

// waitRunning polls SHOW FULL PROCESSLIST through c until session id
// runs a statement containing what (at most 20 s).
func waitRunning(t testing.TB, c *client.Conn, id uint64, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if row := processList(t, c, true)[id]; strings.Contains(row.info, what) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("session %d never showed %q running", id, what)
}

// killedStatements are statements that run 30 s unless killed, and
// MySQL's answer to a KILL QUERY of them: a routed read (replica), a
// primary statement, a prepared read. SLEEP() that is not the whole
// statement fails with 1317 when killed.
var killedStatements = []string{
	"SELECT 1 FROM DUAL WHERE SLEEP(30) = 0",
	"DO (SELECT 1 FROM DUAL WHERE SLEEP(30) = 0)",
	"BEGIN; SELECT 1 FROM DUAL WHERE SLEEP(30) = 0",
}

// TestKillQuery: KILL QUERY <id> from a second connection (what the
// mysql client's Ctrl-C, libmysql's cancel and JDBC's Statement.cancel
// send) interrupts the session's running statement wherever it runs,
// its client gets 1317, and the session goes on. Before, the id was
// unknown to the server (1094), or another client's thread.
func TestKillQuery(t *testing.T) {
	s := startProxy(t, nil)
	killer := gmConnect(t, s, "app", "apppw")
	for _, q := range killedStatements {
		target := gmConnect(t, s, "app", "apppw")
		id := uint64(target.GetConnectionID())
		last := q
		if pre, stmt, ok := strings.Cut(q, "; "); ok {
			if _, err := target.Execute(pre); err != nil {
				t.Fatal(err)
			}
			last = stmt
		}
		done := make(chan error, 1)
		t0 := time.Now()
		go func() {
			r, err := target.Execute(last)
			if err == nil {
				r.Close()
			}
			done <- err
		}()
		waitRunning(t, killer, id, "SLEEP(30)")
		if _, err := killer.Execute(fmt.Sprintf("KILL QUERY %d", id)); err != nil {
			t.Fatalf("%s: KILL QUERY %d: %v", q, id, err)
		}
		select {
		case err := <-done:
			if myErrCode(err) != mysql.ER_QUERY_INTERRUPTED {
				t.Fatalf("%s: killed statement answered %v, want 1317", q, err)
			}
		case <-time.After(25 * time.Second):
			t.Fatalf("%s: still running 25 s after KILL QUERY", q)
		}
		t.Logf("%s: interrupted after %v", q, time.Since(t0).Round(time.Millisecond))
		if got := gmUint(t, target, "SELECT CONNECTION_ID()"); got != id {
			t.Fatalf("after the kill: CONNECTION_ID() %d, want %d", got, id)
		}
		target.Close()
	}
	// Prepared: the execution is what runs.
	target := gmConnect(t, s, "app", "apppw")
	id := uint64(target.GetConnectionID())
	st, err := target.Prepare("SELECT ? FROM DUAL WHERE SLEEP(30) = 0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		r, err := st.Execute(1)
		if err == nil {
			r.Close()
		}
		done <- err
	}()
	waitRunning(t, killer, id, "SLEEP(30)")
	// The id in a user variable (main.user_lock: KILL QUERY @aux).
	if _, err := killer.Execute(fmt.Sprintf("SET @aux = %d", id)); err != nil {
		t.Fatal(err)
	}
	if _, err := killer.Execute("KILL QUERY @aux"); err != nil {
		t.Fatalf("KILL QUERY @aux: %v", err)
	}
	select {
	case err := <-done:
		if myErrCode(err) != mysql.ER_QUERY_INTERRUPTED {
			t.Fatalf("killed execution answered %v, want 1317", err)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("execution still running 25 s after KILL QUERY")
	}
	// KILL QUERY of an idle session does nothing to its next statement.
	if _, err := killer.Execute(fmt.Sprintf("KILL QUERY %d", id)); err != nil {
		t.Fatal(err)
	}
	if got := gmUint(t, target, "SELECT 41 + 1"); got != 42 {
		t.Fatalf("after a KILL QUERY while idle: %d", got)
	}
	// An unset variable is no thread (MySQL: 1094).
	if _, err := killer.Execute("KILL QUERY @never_set"); myErrCode(err) != mysql.ER_NO_SUCH_THREAD {
		t.Fatalf("KILL QUERY @never_set: %v, want 1094", err)
	}
	// One's own: 1317, the connection stays.
	if _, err := target.Execute("KILL QUERY CONNECTION_ID()"); myErrCode(err) != mysql.ER_QUERY_INTERRUPTED {
		t.Fatalf("KILL QUERY of one's own id: %v, want 1317", err)
	}
	if got := gmUint(t, target, "SELECT CONNECTION_ID()"); got != id {
		t.Fatalf("after KILL QUERY of its own id: CONNECTION_ID() %d, want %d", got, id)
	}
}

// TestKillConnection: KILL [CONNECTION] <id> ends the session, running
// or idle; KILL of one's own id answers 1317 and ends it, as MySQL does.
func TestKillConnection(t *testing.T) {
	s := startProxy(t, nil)
	killer := gmConnect(t, s, "app", "apppw")
	// Idle.
	idle := gmConnect(t, s, "app", "apppw")
	if _, err := killer.Execute(fmt.Sprintf("KILL %d", idle.GetConnectionID())); err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Execute("SELECT 1"); err == nil {
		t.Fatal("a killed idle session still answers")
	}
	// Running: its statement ends and so does the session.
	busy := gmConnect(t, s, "app", "apppw")
	id := uint64(busy.GetConnectionID())
	done := make(chan error, 1)
	go func() {
		r, err := busy.Execute("SELECT 1 FROM DUAL WHERE SLEEP(30) = 0")
		if err == nil {
			r.Close()
		}
		done <- err
	}()
	waitRunning(t, killer, id, "SLEEP(30)")
	if _, err := killer.Execute(fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the killed session's statement succeeded")
		}
	case <-time.After(25 * time.Second):
		t.Fatal("the killed session's statement still runs 25 s after KILL")
	}
	if _, ok := processList(t, killer, false)[id]; ok {
		// The session ends once its goroutine unwinds: give it a moment.
		deadline := time.Now().Add(10 * time.Second)
		for ok && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			_, ok = processList(t, killer, false)[id]
		}
		if ok {
			t.Fatalf("killed session %d still in the processlist", id)
		}
	}
	// Its own.
	self := gmConnect(t, s, "app", "apppw")
	if _, err := self.Execute("KILL CONNECTION_ID()"); myErrCode(err) != mysql.ER_QUERY_INTERRUPTED {
		t.Fatalf("KILL of one's own id: %v, want 1317", err)
	}
	if _, err := self.Execute("SELECT 1"); err == nil {
		t.Fatal("a session that killed itself still answers")
	}
	if got := gmUint(t, killer, "SELECT 41 + 1"); got != 42 {
		t.Fatalf("the killer after its kills: %d", got)
	}
}

// TestKillUnknownAndBackendIDs: an id no proxy session has is 1094, a
// backend thread id read from the server too, and the thread it names
// is untouched; KILL with an expression, prepared, or inside a
// multi-statement query is refused and never reaches a server.
// Before, every KILL went to the primary with the backend's id space.
func TestKillUnknownAndBackendIDs(t *testing.T) {
	s := startProxy(t, nil)
	c := gmConnect(t, s, "app", "apppw")
	if _, err := c.Execute("KILL 4000000000"); myErrCode(err) != mysql.ER_NO_SUCH_THREAD {
		t.Fatalf("KILL 4000000000: %v, want 1094", err)
	}
	direct, err := topo.DB("primary")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pl := processList(t, c, false)
	// A direct connection whose thread id is no proxy session's.
	var victim *sql.Conn
	var tid uint64
	for range 20 {
		conn, err := direct.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&tid); err != nil {
			t.Fatal(err)
		}
		if _, clash := pl[tid]; !clash {
			victim = conn
			break
		}
	}
	if victim == nil {
		t.Fatal("no direct connection with a thread id outside the proxy's")
	}
	for _, q := range []string{"KILL QUERY %d", "KILL %d", "KILL CONNECTION %d"} {
		if _, err := c.Execute(fmt.Sprintf(q, tid)); myErrCode(err) != mysql.ER_NO_SUCH_THREAD {
			t.Fatalf("%s of a backend thread: %v, want 1094", fmt.Sprintf(q, tid), err)
		}
	}
	var one int
	if err := victim.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the backend thread the KILLs named: %v", err)
	}
	// A variable holding a backend thread's id names no session either.
	if _, err := c.Execute(fmt.Sprintf("SET @x = %d", tid)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Execute("KILL @x"); myErrCode(err) != mysql.ER_NO_SUCH_THREAD {
		t.Fatalf("KILL @x, @x a backend thread: %v, want 1094", err)
	}
	if err := victim.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the backend thread KILL @x named: %v", err)
	}
	for _, q := range []string{fmt.Sprintf("KILL %d + 0", tid), "KILL @@pseudo_thread_id", fmt.Sprintf("SELECT 1; KILL %d", tid)} {
		if _, err := c.Execute(q); myErrCode(err) != mysql.ER_NOT_SUPPORTED_YET {
			t.Fatalf("%s: %v, want 1235", q, err)
		}
	}
	if _, err := c.Prepare(fmt.Sprintf("KILL %d", tid)); myErrCode(err) != mysql.ER_UNSUPPORTED_PS {
		t.Fatalf("prepared KILL: %v, want 1295", err)
	}
	if err := victim.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the backend thread after the refused KILLs: %v", err)
	}
}

// TestProcessListAccounts: with two proxy users (app, app2; mapped to
// the same backend account), SHOW PROCESSLIST shows a client only its own
// account's sessions unless the account has PROCESS, and KILL of another
// account's session needs CONNECTION_ADMIN (1095 without); the
// privileges come from privFault here (TestPrivilegeQuery asks a real
// server). With the real check in mapped mode the backend account has
// PROCESS, so every session shows.
func TestProcessListAccounts(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		c.Users = []User{{Name: "app", Password: "apppw"}, {Name: "app2", Password: "app2pw"}}
	})
	a1, a2 := gmConnect(t, s, "app", "apppw"), gmConnect(t, s, "app", "apppw")
	b1 := gmConnect(t, s, "app2", "app2pw")
	ida1, ida2, idb1 := uint64(a1.GetConnectionID()), uint64(a2.GetConnectionID()), uint64(b1.GetConnectionID())
	// The real check: the mapped backend account has PROCESS.
	if pl := processList(t, a1, false); len(pl) != 3 {
		t.Fatalf("mapped (admin backend account): %d rows, want 3", len(pl))
	}
	grants := map[string]map[string]bool{}
	var mu sync.Mutex
	f := func(account, priv string) bool {
		mu.Lock()
		defer mu.Unlock()
		return grants[account][priv]
	}
	s.privFault.Store(&f)
	pl := processList(t, a1, true)
	if _, ok := pl[idb1]; ok || len(pl) != 2 {
		t.Fatalf("app without PROCESS sees %v, want only app's %d and %d", pl, ida1, ida2)
	}
	if pl := processList(t, b1, false); len(pl) != 1 || pl[idb1].user != "app2" {
		t.Fatalf("app2 without PROCESS sees %v, want only its own %d", pl, idb1)
	}
	if row := pl[ida2]; row.host == "" || !strings.HasPrefix(row.host, "127.0.0.1:") {
		t.Fatalf("Host %q, want the client's address", row.host)
	}
	if _, err := a1.Execute(fmt.Sprintf("KILL %d", idb1)); myErrCode(err) != mysql.ER_KILL_DENIED_ERROR {
		t.Fatalf("app killing app2's session: %v, want 1095", err)
	}
	if _, err := a1.Execute(fmt.Sprintf("KILL QUERY %d", ida2)); err != nil {
		t.Fatalf("app killing its own account's query: %v", err)
	}
	mu.Lock()
	grants["app"] = map[string]bool{privProcess: true, privKill: true}
	mu.Unlock()
	if pl := processList(t, a1, false); len(pl) != 3 {
		t.Fatalf("app with PROCESS: %d rows, want 3", len(pl))
	}
	if _, err := a1.Execute(fmt.Sprintf("KILL %d", idb1)); err != nil {
		t.Fatalf("app with CONNECTION_ADMIN killing app2's session: %v", err)
	}
	if _, err := b1.Execute("SELECT 1"); err == nil {
		t.Fatal("app2's killed session still answers")
	}
}

// TestPrivilegeQuery asks a real server what privilegeQuery and
// grantsGlobal say of an account without PROCESS and CONNECTION_ADMIN,
// then with each, of one holding them through a default role only (which
// information_schema.USER_PRIVILEGES, the proxy's query before, did not
// show), and of the topology's admin account.
func TestPrivilegeQuery(t *testing.T) {
	composetest.Need(t, topo)
	direct, err := topo.DB("primary")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP USER IF EXISTS 'kpriv'@'%', 'krole'@'%'", "DROP ROLE IF EXISTS 'kpriv_admin'",
		"CREATE USER 'kpriv'@'%' IDENTIFIED BY 'kpriv'", "CREATE ROLE 'kpriv_admin'", "GRANT PROCESS, CONNECTION_ADMIN ON *.* TO 'kpriv_admin'",
		"CREATE USER 'krole'@'%' IDENTIFIED BY 'krole'", "GRANT 'kpriv_admin' TO 'krole'@'%'", "SET DEFAULT ROLE 'kpriv_admin' TO 'krole'@'%'"} {
		mustExec(t, direct, q)
	}
	t.Cleanup(func() {
		_, _ = direct.Exec("DROP USER IF EXISTS 'kpriv'@'%', 'krole'@'%'")
		_, _ = direct.Exec("DROP ROLE IF EXISTS 'kpriv_admin'")
	})
	privs := func(user, pw string) []string {
		t.Helper()
		db, err := sql.Open("mysql", user+":"+pw+"@tcp("+topo.Primary().Addr()+")/?allowNativePasswords=true&tls=skip-verify")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.Query(privilegeQuery)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var g string
			if err := rows.Scan(&g); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{privKill, privProcess, "SUPER"} {
				if grantsGlobal(g, p) && !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	if got := privs("krole", "krole"); !slices.Equal(got, []string{"CONNECTION_ADMIN", "PROCESS"}) {
		t.Fatalf("through a default role: %v", got)
	}
	if got := privs("kpriv", "kpriv"); len(got) != 0 {
		t.Fatalf("an account without them: %v", got)
	}
	mustExec(t, direct, "GRANT PROCESS ON *.* TO 'kpriv'@'%'")
	if got := privs("kpriv", "kpriv"); !slices.Equal(got, []string{"PROCESS"}) {
		t.Fatalf("with PROCESS: %v", got)
	}
	mustExec(t, direct, "GRANT CONNECTION_ADMIN ON *.* TO 'kpriv'@'%'")
	if got := privs("kpriv", "kpriv"); !slices.Equal(got, []string{"CONNECTION_ADMIN", "PROCESS"}) {
		t.Fatalf("with CONNECTION_ADMIN too: %v", got)
	}
	p := topo.Primary()
	if got := privs(p.User, p.Password); !slices.Contains(got, "PROCESS") || !slices.Contains(got, "CONNECTION_ADMIN") {
		t.Fatalf("the topology's admin account: %v", got)
	}
}

// TestMysqlCLICtrlC runs the real mysql client (the MySQL root
// filesystem's) against the proxy, sends it SIGINT while it runs a
// 30-second statement, and checks what its Ctrl-C does through the
// proxy: it sends KILL QUERY <the greeting's thread id> on a second
// connection, the statement ends with 1317 within seconds, and the
// client's connection stays (its next statement runs on the same
// session). Before, the KILL answered 1094 and the statement ran on.
func TestMysqlCLICtrlC(t *testing.T) {
	s := startProxy(t, nil)
	rootfs := compose.DefaultRootFS()
	if _, err := os.Stat(rootfs + "/usr/bin/mysql"); err != nil {
		t.Skip("mysql client not in the root filesystem")
	}
	watcher := gmConnect(t, s, "app", "apppw")
	host, port, _ := net.SplitHostPort(s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "chroot", rootfs, "mysql", "-h", host, "-P", port, "-u", "app", "-papppw",
		"--ssl-mode=REQUIRED", "-N", "-B", "--force", "--unbuffered")
	cmd.Stdin = strings.NewReader("SELECT CONNECTION_ID();\nSELECT 1 FROM DUAL WHERE SLEEP(30) = 0;\nSELECT 'alive', CONNECTION_ID();\n")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	first, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("mysql: %v (%s)", err, stderr.String())
	}
	var id uint64
	if _, err := fmt.Sscan(first, &id); err != nil {
		t.Fatalf("mysql's first line %q: %v", first, err)
	}
	waitRunning(t, watcher, id, "SLEEP(30)")
	t0 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	_ = cmd.Wait()
	took := time.Since(t0)
	text := string(rest) + stderr.String()
	t.Logf("mysql after SIGINT (%v):\n%s", took.Round(time.Millisecond), text)
	if took > 25*time.Second {
		t.Fatalf("the statement ran on %v after Ctrl-C", took)
	}
	if !strings.Contains(text, "ERROR 1317") {
		t.Fatalf("no 1317 after Ctrl-C:\n%s", text)
	}
	if !strings.Contains(text, fmt.Sprintf("alive\t%d", id)) {
		t.Fatalf("the client's next statement did not run on session %d:\n%s", id, text)
	}
}

// TestGreetingVersion (main.version_with_update_client_api): the greeting
// announces the primary's own version, so that mysql_get_server_info()
// agrees with SELECT VERSION(); a configured server_version wins.
func TestGreetingVersion(t *testing.T) {
	s := startProxy(t, nil)
	c := gmConnect(t, s, "app", "apppw")
	r, err := c.Execute("SELECT VERSION()")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := r.GetString(0, 0)
	if got := c.GetServerVersion(); got != v || !strings.HasPrefix(v, "9.") {
		t.Fatalf("greeting announces %q, SELECT VERSION() says %q", got, v)
	}
	s = startProxy(t, func(c *Config) { c.ServerVersion = "8.0.99-configured" })
	if got := gmConnect(t, s, "app", "apppw").GetServerVersion(); got != "8.0.99-configured" {
		t.Fatalf("configured server_version: greeting announces %q", got)
	}
}

// TestKillQueryBeforeStatement: a KILL QUERY that reaches the server
// before the statement it was sent for (the proxy publishes a statement
// as running when it sends it) finds the thread idle, which MySQL
// ignores; the proxy sends it again while the statement is in flight, so
// the statement is still interrupted. The primary is behind a forwarder
// that holds the statement's packet for 800 ms; the kill, on the proxy's
// own connection, is not held. Before, the statement ran its 30 s.
func TestKillQueryBeforeStatement(t *testing.T) {
	composetest.Need(t, topo)
	fwd, held := holdingForwarder(t, topo.Primary().Addr(), "SLEEP(30)", 800*time.Millisecond)
	s := startProxy(t, func(c *Config) { c.Primary.Addr = fwd })
	killer := gmConnect(t, s, "app", "apppw")
	target := gmConnect(t, s, "app", "apppw")
	id := uint64(target.GetConnectionID())
	done := make(chan error, 1)
	go func() {
		_, err := target.Execute("DO (SELECT 1 FROM DUAL WHERE SLEEP(30) = 0)")
		done <- err
	}()
	waitRunning(t, killer, id, "SLEEP(30)")
	// The statement is on its way (the forwarder holds it): the kill
	// cannot stop it before it is sent (under multiplexing a kill that
	// came before the borrow would, and nothing would be re-sent).
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the statement never reached the forwarder")
	}
	if _, err := killer.Execute(fmt.Sprintf("KILL QUERY %d", id)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if myErrCode(err) != mysql.ER_QUERY_INTERRUPTED {
			t.Fatalf("killed statement answered %v, want 1317", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("still running 20 s after KILL QUERY: the kill that came first was not sent again")
	}
	if n := testutil.ToFloat64(s.m.killResends); n == 0 {
		t.Error("kill_resends_total is 0: the first kill should have found the thread idle")
	}
	if got := gmUint(t, target, "SELECT 41 + 1"); got != 42 {
		t.Fatalf("after the kill: %d", got)
	}
}

// holdingForwarder forwards loopback connections to addr, holding each
// client-to-server read that contains marker for hold before passing it
// on; it returns its address, and a channel told as each hold begins.
func holdingForwarder(t *testing.T, addr, marker string, hold time.Duration) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	held := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forwardHolding(c, addr, []byte(marker), hold, held)
		}
	}()
	return ln.Addr().String(), held
}

func forwardHolding(c net.Conn, addr string, marker []byte, hold time.Duration, held chan<- struct{}) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(c, up)
		c.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if bytes.Contains(buf[:n], marker) {
				select {
				case held <- struct{}{}:
				default:
				}
				time.Sleep(hold)
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
