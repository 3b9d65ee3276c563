package proxy

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// TestProxyFollowsPromotion (issue 40, item 1): compose promotes
// replica1 (the old primary fenced with super_read_only) while two
// proxies serve; one discovers the promotion (discover roles), the other
// is told through the admin API (discover off). Each then:
//   - writes to replica1, in epoch 2, without a restart;
//   - ends a transaction that was open on the old primary with a clear
//     error (failover-transaction-lost), and the session goes on;
//   - never writes to the old primary again, even once it is writable.
//
// Before, the proxy kept sending writes to the old primary (1290) until
// it was restarted on the new topology.
func TestProxyFollowsPromotion(t *testing.T) {
	tp := composetest.Start(t, compose.Config{Replicas: 2})
	followsPromotion(t, tp, "", "SET PERSIST super_read_only = OFF", "SET PERSIST read_only = OFF")
}

// TestProxyFollowsPromotionMariaDB is TestProxyFollowsPromotion on
// MariaDB 11.8 (compose fences the old primary with read_only; the epoch's
// base is the promoted node's gtid_current_pos; only compose's admin
// account, <user>_admin, may lift read_only).
func TestProxyFollowsPromotionMariaDB(t *testing.T) {
	tp := composetest.Start(t, compose.Config{Engine: compose.EngineMariaDB, Replicas: 2})
	followsPromotion(t, tp, "_admin", "SET GLOBAL read_only = OFF")
}

// followsPromotion runs TestProxyFollowsPromotion on tp; writable are
// the statements that make the fenced old primary writable again, run as
// the node's user with suffix admin.
func followsPromotion(t *testing.T, tp *compose.Topology, admin string, writable ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const adminToken = "test-admin-token-0123456789"
	discovered := startProxyOn(t, tp, func(c *Config) { c.DiscoverInterval = 50 * time.Millisecond })
	told := startProxyOn(t, tp, func(c *Config) { c.Discover, c.AdminToken = "off", adminToken })
	for _, s := range []*Server{discovered, told} {
		select {
		case <-s.ready:
		case <-time.After(s.cfg.StartupTimeout + 10*time.Second):
			t.Fatal("a proxy did not open its readiness gate")
		}
	}
	old := tp.Primary()
	direct := sqlOpen(t, old.User+":"+old.Password+"@tcp("+old.Addr()+")/")
	emptyTable(t, direct, "ptest", "fo", "id INT PRIMARY KEY, via VARCHAR(16)")

	dbs := map[string]*sql.DB{"discovered": openDB(t, discovered, ""), "told": openDB(t, told, "")}
	open := map[string]*sql.Conn{}
	for name, db := range dbs {
		mustExec(t, db, "INSERT INTO ptest.fo VALUES (?, ?)", len(open)+1, name)
		c := conn1(t, db)
		mustExec(t, c, "BEGIN")
		mustExec(t, c, "INSERT INTO ptest.fo VALUES (?, ?)", 100+len(open), name)
		open[name] = c
	}
	if err := tp.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	res, err := tp.Failover(ctx, "replica1")
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	if res.NewPrimary != "replica1" {
		t.Fatalf("failover: %+v", res)
	}

	// The discovering proxy follows by itself.
	for discovered.topo.Load().epoch != 2 {
		if time.Since(promoted) > time.Minute {
			t.Fatal("the discovering proxy did not follow the promotion within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("discovered the promotion %v after compose's failover returned", time.Since(promoted).Round(time.Millisecond))
	if told.topo.Load().epoch != 1 {
		t.Fatal("the proxy with discover off followed the promotion by itself")
	}

	// The admin API: a wrong token is refused, a replica that is not
	// writable is refused, the promoted node is taken.
	promote := func(token, node string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+told.HTTPAddr()+"/admin/promote?node="+node, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, _ := promote("wrong-token-0123456789", "replica1"); code != http.StatusUnauthorized {
		t.Fatalf("promote with a wrong token: %d, want 401", code)
	}
	if code, body := promote(adminToken, "replica2"); code != http.StatusConflict || !strings.Contains(body, "read_only") {
		t.Fatalf("promote of a read-only replica: %d %s, want 409 naming read_only", code, body)
	}
	code, body := promote(adminToken, "replica1")
	if code != http.StatusOK {
		t.Fatalf("promote replica1: %d %s", code, body)
	}
	var p Promotion
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	if p.Epoch != 2 || p.Primary != "replica1" || p.OldPrimary != "primary" || p.Cause != causeAdmin || p.Base == "" {
		t.Fatalf("promotion %+v", p)
	}

	// The fenced primary is no longer polled.
	polls := func(s *Server) string {
		return grepLines(metricText(t, s), `causallab_proxy_polls_total{backend="primary"`)
	}
	for _, s := range []*Server{discovered, told} {
		before := polls(s)
		time.Sleep(300 * time.Millisecond)
		if after := polls(s); after != before {
			t.Fatalf("the fenced primary is still polled:\n%s\nthen\n%s", before, after)
		}
	}

	newPrimary, _ := tp.Node("replica1")
	ndb := sqlOpen(t, newPrimary.User+":"+newPrimary.Password+"@tcp("+newPrimary.Addr()+")/")
	// Fencing: the old primary comes back writable; no proxy writes there.
	adm := sqlOpen(t, old.User+admin+":"+old.Password+"@tcp("+old.Addr()+")/")
	for _, q := range writable {
		mustExec(t, adm, q)
	}
	for i, name := range []string{"discovered", "told"} {
		c := open[name]
		// The transaction open on the old primary ends with a clear error.
		_, err := c.ExecContext(ctx, "INSERT INTO ptest.fo VALUES (?, ?)", 200+i, name)
		if err == nil || !strings.Contains(err.Error(), "failover-transaction-lost") && !strings.Contains(err.Error(), "primary changed") {
			t.Fatalf("%s: a statement in a transaction open across the promotion: %v, want the transaction-lost error", name, err)
		}
		// The session goes on, on the new primary.
		mustExec(t, c, "INSERT INTO ptest.fo VALUES (?, ?)", 300+i, name)
		mustExec(t, dbs[name], "INSERT INTO ptest.fo VALUES (?, ?)", 400+i, name)
	}
	var onNew, onOld int
	if err := ndb.QueryRowContext(ctx, "SELECT COUNT(*) FROM ptest.fo WHERE id >= 300").Scan(&onNew); err != nil {
		t.Fatal(err)
	}
	if err := direct.QueryRowContext(ctx, "SELECT COUNT(*) FROM ptest.fo WHERE id >= 200").Scan(&onOld); err != nil {
		t.Fatal(err)
	}
	if onNew != 4 || onOld != 0 {
		t.Fatalf("after the promotion: %d writes on the new primary (want 4), %d on the old (want 0)", onNew, onOld)
	}
	// The open transactions' rows are gone (rolled back on the old
	// primary, never replicated).
	var lost int
	if err := ndb.QueryRowContext(ctx, "SELECT COUNT(*) FROM ptest.fo WHERE id BETWEEN 100 AND 199").Scan(&lost); err != nil {
		t.Fatal(err)
	}
	if lost != 0 {
		t.Fatalf("%d rows of transactions open across the promotion reached the new primary", lost)
	}
	// Reads of a session's own write, through each proxy, in epoch 2.
	for name, db := range dbs {
		c := conn1(t, db)
		mustExec(t, c, "INSERT INTO ptest.fo VALUES (?, ?)", 500+len(name), name)
		var via string
		if err := c.QueryRowContext(ctx, "SELECT via FROM ptest.fo WHERE id = ?", 500+len(name)).Scan(&via); err != nil || via != name {
			t.Fatalf("%s: read-your-writes after the promotion: %q %v", name, via, err)
		}
	}
}
