package proxy

import (
	"errors"
	"strconv"
	"strings"
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
