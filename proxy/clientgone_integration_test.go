package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestClientHungUpMidStatement: a client that closes its connection while
// its statement waits on the server (a GET_LOCK another session holds)
// has that statement aborted, as MySQL aborts it for a client connected
// directly (main.dirty_close): the proxy ends the session, which cuts its
// backend connection. Before, the statement waited out its hour.
func TestClientHungUpMidStatement(t *testing.T) {
	s := startProxy(t, nil)
	ctx := context.Background()
	holder := rawLogin(t, s.Addr(), "app", "apppw", false)
	if v, ok := holder.value(t, "SELECT GET_LOCK('causallab_hangup', 0)"); !ok || v != "1" {
		t.Fatalf("GET_LOCK: %q", v)
	}
	waiter := rawLogin(t, s.Addr(), "app", "apppw", false)
	waiter.write(0, append([]byte{mysql.COM_QUERY}, "SELECT GET_LOCK('causallab_hangup', 3600)"...))
	direct := primaryDB(t, topo)
	waiting := func() int {
		var n int
		if err := direct.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT GET_LOCK(''causallab_hangup'', 3600)'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for end := time.Now().Add(30 * time.Second); waiting() != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the waiting GET_LOCK never showed on the primary")
		}
	}
	waiter.nc.Close() // the client hangs up mid-statement
	for end := time.Now().Add(30 * time.Second); waiting() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the statement of a client that hung up still waits on the primary")
		}
	}
	if n := metricSum(metricText(t, s), `causallab_proxy_client_errors_total{kind="client-gone-mid-statement"}`); n != 1 {
		t.Errorf("client-gone-mid-statement counted %d times, want 1", n)
	}
	holder.exec(t, "DO RELEASE_LOCK('causallab_hangup')")
}
