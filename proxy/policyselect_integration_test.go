package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/causallab/causallab/gtid"
)

// TestPolicySelection: a client chooses the routing policy through the
// proxy, per session (SET @causal_policy) and per statement (a
// /* causal_policy=... */ comment), on the shared real topology with every
// replica's applier stopped. A write straight to the primary (no token
// anywhere) is missed by token-ryw-mr reads and seen by global ones; a
// deferred read gets the configured error code and a retry estimate, and a
// retry once the appliers run is served.
//
// The proxy's view of the replicas (its position polls) trails the
// servers: a read decided before a poll saw the session's last write
// falls back to the primary (no-replica-qualifies), which is what failed
// this test once in a multiplexed run on 2026-12-02 (docs/proxy-sessions.md,
// "Multiplexing"). The polls here run every 250 ms instead of 5 ms, so
// that trailing view is every run's case, not one run's in fourteen: the
// test must wait for the proxy's view (waitProxySees), never only for
// the servers (topo.WaitReplicated).
func TestPolicySelection(t *testing.T) {
	var (
		s        *Server
		routesMu sync.Mutex
		routes   []string
	)
	s = startProxy(t, func(c *Config) {
		c.Policy, c.DeferErrorCode = "token-ryw-mr", 1205
		c.PollInterval = 250 * time.Millisecond
		replicas := c.Replicas
		// Each read's route with the router's reason and the view it was
		// decided on, recorded before the read runs (the router counts
		// reads_total only after the client has its answer: a fallback's
		// watermark is read behind it).
		c.OnRead = func(r ReadRoute) {
			route := fmt.Sprintf("conn %d: %s (%s); view:", r.Conn, r.Node, r.Reason)
			for _, b := range replicas {
				pos, healthy := s.src.Position(b.Name)
				route += fmt.Sprintf(" %s healthy=%v %v;", b.Name, healthy, pos)
			}
			routesMu.Lock()
			routes = append(routes, route)
			routesMu.Unlock()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := openDB(t, s, "tls=skip-verify")
	emptyTable(t, db, "ppol", "c", "id INT PRIMARY KEY, n INT")
	mustExec(t, db, "INSERT INTO ppol.c VALUES (1, 0)")
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The session's token (the INSERT's, if conn below is the same client
	// connection) must be in the proxy's view of the replicas, not only in
	// the servers': else the first read goes to the primary (no replica
	// qualifies). Their positions cannot move once the appliers stop.
	waitProxySees(t, ctx, s)
	for _, r := range topo.Replicas() {
		if err := topo.StopApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
	started := false
	startAppliers := func() {
		if started {
			return
		}
		started = true
		for _, r := range topo.Replicas() {
			if err := topo.StartApplier(ctx, r.Name); err != nil {
				t.Error(err)
			}
		}
		if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
			t.Error(err)
		}
	}
	defer startAppliers()
	pdb, err := topo.DB(topo.Primary().Name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pdb.ExecContext(ctx, "UPDATE ppol.c SET n = 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	read := func(q string) int {
		t.Helper()
		var n int
		if err := conn.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	policy := func() string {
		t.Helper()
		var p string
		if err := conn.QueryRowContext(ctx, "SELECT @causal_policy").Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := policy(); p != "token-ryw-mr+epoch" {
		t.Errorf("the configured policy reads %q", p)
	}
	if n := read("SELECT n FROM ppol.c WHERE id = 1"); n != 0 {
		// The read was served by the primary: the router's reason and
		// view say why (a pinned read has reason routed on the primary).
		var tok sql.NullString
		_ = conn.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok)
		routesMu.Lock()
		rs := strings.Join(routes, "\n")
		routesMu.Unlock()
		t.Fatalf("token-ryw-mr saw the outside write (n=%d) with every applier stopped: the test cannot tell\nroutes:\n%s\nsession token %v\n%s", n, rs, tok.String,
			grepLines(metricText(t, s), "causallab_router_node_errors", "causallab_proxy_backend_errors", "causallab_proxy_pool_acquire_failures", "causallab_proxy_statements_total", "causallab_proxy_primary_statements_total", "causallab_proxy_pinned_total", "causallab_proxy_polls_total", "causallab_proxy_poll_overruns_total"))
	}
	// Per statement: this read only.
	if n := read("/* causal_policy=global(0) */ SELECT n FROM ppol.c WHERE id = 1"); n != 1 {
		t.Errorf("a global read (comment) missed a write acknowledged before it: n=%d", n)
	}
	if p := policy(); p != "token-ryw-mr+epoch" {
		t.Errorf("after a statement's policy the session's reads %q", p)
	}
	// Per session. The watermark the global read raised keeps the
	// session's later reads off the stale replicas now, so a fresh
	// connection shows the session policy's own effect.
	mustExec(t, conn, "SET @causal_policy = 'global(100ms)'")
	if p := policy(); p != "global(100ms)+epoch" {
		t.Errorf("SET @causal_policy then reads %q", p)
	}
	if n := read("SELECT n FROM ppol.c WHERE id = 1"); n != 1 {
		t.Errorf("a global read (session) missed a write acknowledged before it: n=%d", n)
	}
	mustExec(t, conn, "SET @causal_policy = ''")
	if p := policy(); p != "token-ryw-mr+epoch" {
		t.Errorf("SET @causal_policy = '' reads %q, want the configured policy", p)
	}
	var me *gomysql.MySQLError
	if _, err := conn.ExecContext(ctx, "SET @causal_policy = 'fastest'"); !errors.As(err, &me) || !strings.Contains(me.Message, "unknown policy") {
		t.Errorf("a bad policy: %v", err)
	}
	if _, err := conn.ExecContext(ctx, "SET @causal_policy = CONCAT('glo', 'bal')"); !errors.As(err, &me) || !strings.Contains(me.Message, "@causal_policy can only be set") {
		t.Errorf("an expression: %v", err)
	}
	if _, err := db.PrepareContext(ctx, "/* causal_policy=global */ SELECT n FROM ppol.c WHERE id = ?"); !errors.As(err, &me) || !strings.Contains(me.Message, "prepared statement") {
		t.Errorf("a policy comment in a prepared statement: %v", err)
	}

	// Deferral: a write through the proxy (the session's token), then a
	// read that may not fall back.
	mustExec(t, conn, "UPDATE ppol.c SET n = 2 WHERE id = 1")
	mustExec(t, conn, "SET @causal_policy = 'token-wait(30ms)+defer'")
	var n int
	err = conn.QueryRowContext(ctx, "SELECT n FROM ppol.c WHERE id = 1").Scan(&n)
	if !errors.As(err, &me) || me.Number != 1205 || !strings.Contains(me.Message, "read deferred: wait-budget-spent; retry after ") {
		t.Fatalf("deferred read: %v, want error 1205 naming the deferral", err)
	}
	t.Logf("deferred: %d %s", me.Number, me.Message)
	m := metricText(t, s)
	if l := linesWithAll(m, "causallab_router_reads_total{", `outcome="deferred"`); !strings.HasSuffix(l, "} 1") {
		t.Errorf("reads_total{outcome=deferred}: %q, want one line counting 1", l)
	}
	if l := linesWithAll(m, "causallab_router_reads_total{", `policy="token-wait"`, `outcome="fallback"`); l != "" {
		t.Errorf("a fallback under +defer: %s", l)
	}
	if l := linesWithAll(m, "causallab_router_deferrals_total{", `reason="wait-budget-spent"`); !strings.HasSuffix(l, "} 1") {
		t.Errorf("deferrals_total: %q", l)
	}
	startAppliers()
	// Once the proxy's view holds the session's write, the retry is
	// served (the replicas hold it).
	waitProxySees(t, ctx, s)
	if err := conn.QueryRowContext(ctx, "SELECT n FROM ppol.c WHERE id = 1").Scan(&n); err != nil || n != 2 {
		t.Fatalf("retry after the appliers started: n=%d %v", n, err)
	}
}

// linesWithAll returns the metric lines holding every sub.
func linesWithAll(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		ok := !strings.HasPrefix(l, "#")
		for _, sub := range subs {
			ok = ok && strings.Contains(l, sub)
		}
		if ok {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// waitProxySees waits until the proxy's position source holds, for every
// replica, what the primary had executed when it was called.
func waitProxySees(t *testing.T, ctx context.Context, s *Server) {
	t.Helper()
	pdb, err := topo.DB(topo.Primary().Name)
	if err != nil {
		t.Fatal(err)
	}
	var txt string
	if err := pdb.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&txt); err != nil {
		t.Fatal(err)
	}
	want, err := gtid.Parse(txt)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.cfg.Replicas {
		if err := s.src.WaitFor(ctx, r.Name, want); err != nil {
			t.Fatalf("the proxy's view of %s never held %v: %v", r.Name, want, err)
		}
	}
}
