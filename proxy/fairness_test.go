package proxy

import (
	"errors"
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
