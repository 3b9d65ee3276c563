package proxy

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// changeUser sends COM_CHANGE_USER for user with plugin and answers the
// proxy's authentication switch with password's scramble; it returns the
// final answer (after a caching_sha2_password fast-auth packet).
func (r *rawConn) changeUser(t *testing.T, user, password, db, plugin string) answer {
	t.Helper()
	r.write(0, append([]byte{mysql.COM_CHANGE_USER}, changeUserPayload(user, nil, db, 255, plugin)...))
	seq, p, err := r.read()
	if err != nil {
		t.Fatalf("COM_CHANGE_USER: %v", err)
	}
	if len(p) == 0 || p[0] != mysql.EOF_HEADER {
		return classifyAnswer(seq, p)
	}
	// The switch: 0xfe, plugin NUL, scramble NUL.
	name, rest, ok := bytes.Cut(p[1:], []byte{0})
	if !ok || len(rest) < 21 {
		t.Fatalf("malformed authentication switch %q", p)
	}
	salt := rest[:20]
	var resp []byte
	switch string(name) {
	case mysql.AUTH_NATIVE_PASSWORD:
		resp = mysql.CalcNativePassword(salt, []byte(password))
	case mysql.AUTH_CACHING_SHA2_PASSWORD:
		resp = mysql.CalcCachingSha2Password(salt, []byte(password))
	default:
		t.Fatalf("switch to %q", name)
	}
	r.write(seq+1, resp)
	seq, p, err = r.read()
	if err != nil {
		return answer{kind: "closed"}
	}
	if len(p) == 2 && p[0] == mysql.MORE_DATE_HEADER && p[1] == mysql.CACHE_SHA2_FAST_AUTH {
		if string(name) != mysql.AUTH_CACHING_SHA2_PASSWORD {
			t.Fatalf("fast-auth packet after %s", name)
		}
		if seq, p, err = r.read(); err != nil {
			return answer{kind: "closed"}
		}
	}
	return classifyAnswer(seq, p)
}

// TestChangeUserResetsSession (cause 11): COM_CHANGE_USER, as pools and
// connectors send it, authenticates the new user and resets what MySQL
// resets for a new connection: the transaction, session and user
// variables, temporary tables, and the proxy's own state (its causal
// token, its pins); the database is the one the command names. With
// either plugin; a wrong password is 1045 and the connection closes.
// (With start_token none: under the default the session starts again from
// the proxy's writes, TestStartTokenProxyWrites.)
func TestChangeUserResetsSession(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		c.StartToken = StartTokenNone
		c.Users = append(c.Users, User{Name: "app2", Password: "app2pw"})
	})
	for _, plugin := range []string{mysql.AUTH_CACHING_SHA2_PASSWORD, mysql.AUTH_NATIVE_PASSWORD} {
		t.Run(plugin, func(t *testing.T) {
			rc := rawLogin(t, s.Addr(), "app", "apppw", false)
			exec := func(q string) *mysql.Result { t.Helper(); return rc.exec(t, q) }
			value := func(q string) (string, bool) { t.Helper(); return rc.value(t, q) }
			exec("CREATE DATABASE IF NOT EXISTS ptest")
			exec("CREATE DATABASE IF NOT EXISTS ptest2")
			exec("CREATE TABLE IF NOT EXISTS ptest.cu (a INT)")
			exec("INSERT INTO ptest.cu VALUES (1)")
			if _, ok := value("SELECT @causal_token"); !ok {
				t.Fatal("no token after a write")
			}
			exec("SET SESSION sql_mode = 'ANSI_QUOTES'")
			exec("SELECT @cu := 7")
			exec("CREATE TEMPORARY TABLE ptest.cutmp (a INT)")
			exec("BEGIN")
			if a := rc.changeUser(t, "app2", "app2pw", "ptest2", plugin); a.kind != "ok" {
				t.Fatalf("COM_CHANGE_USER: %v", a)
			}
			if tok, ok := value("SELECT @causal_token"); ok {
				t.Fatalf("token %q kept across COM_CHANGE_USER", tok)
			}
			if db, _ := value("SELECT DATABASE()"); db != "ptest2" {
				t.Fatalf("database %q after COM_CHANGE_USER, want ptest2", db)
			}
			if mode, _ := value("SELECT @@SESSION.sql_mode"); mode == "ANSI_QUOTES" {
				t.Fatal("sql_mode kept across COM_CHANGE_USER")
			}
			if v, ok := value("SELECT @cu"); ok {
				t.Fatalf("user variable kept across COM_CHANGE_USER: %q", v)
			}
			if _, err := rc.cc.Execute("SELECT * FROM ptest.cutmp"); err == nil {
				t.Fatal("temporary table kept across COM_CHANGE_USER")
			}
			if r := exec("DO 1"); r.Status&mysql.SERVER_STATUS_IN_TRANS != 0 {
				t.Fatal("transaction still open after COM_CHANGE_USER")
			}
			before := grepLines(metricText(t, s), `reason="in-transaction"`, `reason="temp-table-session"`, `reason="user-variables"`)
			for range 3 {
				value("SELECT 1")
				value("SELECT @cu")
			}
			if after := grepLines(metricText(t, s), `reason="in-transaction"`, `reason="temp-table-session"`, `reason="user-variables"`); after != before {
				t.Fatalf("reads still pinned after COM_CHANGE_USER:\n%s\n%s", before, after)
			}
			// A wrong password: denied, and the connection closes.
			if a := rc.changeUser(t, "app2", "wrong", "", plugin); a.kind != "err" || a.code != mysql.ER_ACCESS_DENIED_ERROR {
				t.Fatalf("COM_CHANGE_USER with a wrong password: %v, want 1045", a)
			}
			if err := rc.ping(); err == nil {
				t.Fatal("the connection answered after a failed COM_CHANGE_USER")
			}
		})
	}
}

// TestResetConnectionDropsHolds (cause 11): after COM_RESET_CONNECTION
// the holds are gone as MySQL drops them: the temporary table, the user
// variable set by a SELECT, the named lock (free again for another
// session) and the prepared statements; reads are not pinned by any of
// them any more.
func TestResetConnectionDropsHolds(t *testing.T) {
	s := startProxy(t, nil)
	rc := rawLogin(t, s.Addr(), "app", "apppw", false)
	exec := func(q string) *mysql.Result {
		t.Helper()
		r, err := rc.cc.Execute(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return r
	}
	exec("CREATE DATABASE IF NOT EXISTS ptest")
	exec("CREATE TEMPORARY TABLE ptest.rtmp (a INT)")
	exec("SELECT @rv := 1")
	if r := exec("SELECT GET_LOCK('causallab_reset', 0)"); r.Resultset == nil {
		t.Fatal("GET_LOCK: no result")
	}
	st, err := rc.cc.Prepare("SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	rc.write(0, []byte{mysql.COM_RESET_CONNECTION})
	if a := rc.reply(); a.kind != "ok" {
		t.Fatalf("COM_RESET_CONNECTION: %v", a)
	}
	if _, err := rc.cc.Execute("SELECT * FROM ptest.rtmp"); err == nil {
		t.Fatal("temporary table kept across COM_RESET_CONNECTION")
	}
	if _, err := st.Execute(); err == nil {
		t.Fatal("a prepared statement survived COM_RESET_CONNECTION")
	}
	// Another session can take the lock: the reset released it.
	other := rawLogin(t, s.Addr(), "app", "apppw", false)
	r, err := other.cc.Execute("SELECT GET_LOCK('causallab_reset', 5)")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := r.GetInt(0, 0); got != 1 {
		t.Fatalf("GET_LOCK in another session after the reset: %d, want 1 (the lock was released)", got)
	}
	pins := func() string {
		return grepLines(metricText(t, s), `reason="temp-table-session"`, `reason="user-variables"`)
	}
	before := pins()
	for range 3 {
		exec("SELECT @rv")
	}
	if after := pins(); after != before {
		t.Fatalf("reads pinned after COM_RESET_CONNECTION:\n%s\n%s", before, after)
	}
}
