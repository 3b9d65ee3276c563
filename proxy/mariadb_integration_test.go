package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// TestProxyMariaDB (issue 40): the proxy in front of MariaDB 11.8 keeps
// its guarantees from MariaDB's GTIDs (last_gtid in each write's OK
// packet, gtid_current_pos, MASTER_GTID_WAIT), with every replica's
// applier stopped so that a read served there lacks every new write:
//   - a write's OK packet carries the signed token, which another proxy
//     of the fleet takes: its session reads the row, a session without
//     it does not (the test can fail);
//   - token-wait waits on a replica with MASTER_GTID_WAIT and serves the
//     read there once the applier runs again;
//   - on a proxy taking unsigned tokens, MariaDB's own position text
//     ("0-1-42", as last_gtid prints it) is a token; a MySQL GTID set is
//     refused (token-wrong-engine);
//   - SET session_track_system_variables, which would stop the
//     tracking of last_gtid, is refused (mariadb-track-variables);
//   - a proxy configured for MySQL refuses to start in front of MariaDB,
//     naming the engine to set.
func TestProxyMariaDB(t *testing.T) {
	tp := composetest.Start(t, compose.Config{Engine: compose.EngineMariaDB, Replicas: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fleet := func(mod func(*Config)) *Server {
		return startProxyOn(t, tp, func(c *Config) {
			c.TokenKeys, c.Policy, c.StartToken = testTokenKeys, "token-ryw-mr", StartTokenNone
			if mod != nil {
				mod(c)
			}
		})
	}
	a, b := fleet(nil), fleet(nil)
	if a.cfg.Engine != EngineMariaDB || a.cfg.WatermarkSource != "query" {
		t.Fatalf("engine %q, watermark_source %q: want mariadb, query", a.cfg.Engine, a.cfg.WatermarkSource)
	}
	emptyTable(t, openDB(t, a, ""), "ptest", "fleettok", "id INT PRIMARY KEY")
	if err := tp.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, r := range tp.Replicas() {
		if err := tp.StopApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
	started := false
	startAppliers := func() {
		started = true
		for _, r := range tp.Replicas() {
			if err := tp.StartApplier(ctx, r.Name); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() {
		if !started {
			startAppliers()
		}
	})

	c, err := trackingClient(a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tok, ok, _ := trackedToken(t, c, "INSERT INTO ptest.fleettok VALUES (1)")
	if !ok || !strings.HasPrefix(tok, "s1.k2.") {
		t.Fatalf("the write's OK packet carried causal_token %q (%v); want a token signed with k2", tok, ok)
	}
	if readID(t, conn1(t, openDB(t, b, "")), 1) {
		t.Fatal("a session on proxy B without the token read row 1 from a stopped replica: the test cannot fail")
	}
	rb := conn1(t, openDB(t, b, ""))
	mustExec(t, rb, "SET @causal_token = '"+tok+"'")
	if !readID(t, rb, 1) {
		t.Fatal("proxy B, with the token of the write: row 1 is missing")
	}

	// token-wait: the read waits on a replica (MASTER_GTID_WAIT) until
	// its applier runs again, and is served there.
	w := fleet(func(c *Config) { c.Policy, c.WaitBudget, c.FallbackPerSecond = "token-wait", 20*time.Second, 0 })
	ww := conn1(t, openDB(t, w, ""))
	mustExec(t, ww, "SET @causal_token = '"+tok+"'")
	go func() {
		time.Sleep(300 * time.Millisecond)
		startAppliers()
	}()
	if !readID(t, ww, 1) {
		t.Fatal("token-wait: row 1 is missing")
	}
	if caught := grepLines(metricText(t, w), `causallab_router_wait_seconds_count{method="wait-for-executed-gtid-set",result="caught-up"}`); caught == "" || strings.HasSuffix(caught, " 0") {
		t.Fatalf("token-wait served the read without a wait that caught up:\n%s", grepLines(metricText(t, w), "causallab_router_wait_seconds_count", "freshness_fallbacks_total"))
	}

	// MariaDB's position text as an unsigned token; a MySQL set refused.
	u := startProxyOn(t, tp, func(c *Config) { c.Policy = "token-ryw-mr" })
	var pos string
	direct := sqlOpen(t, tp.Primary().User+":"+tp.Primary().Password+"@tcp("+tp.Primary().Addr()+")/")
	if err := direct.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_current_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	uc := conn1(t, openDB(t, u, ""))
	mustExec(t, uc, "SET @causal_token = '"+pos+"'")
	var got string
	if err := uc.QueryRowContext(ctx, "SELECT @causal_token").Scan(&got); err != nil {
		t.Fatal(err)
	}
	want, err := gtid.MariaDBSetOf(pos)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, want.String()) {
		t.Fatalf("SET @causal_token = %q, then SELECT @causal_token: %q, want the set %s", pos, got, want)
	}
	_, err = uc.ExecContext(ctx, "SET @causal_token = '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5'")
	if err == nil || !strings.Contains(err.Error(), "token-wrong-engine") {
		t.Fatalf("a MySQL GTID set as a token on MariaDB: %v, want token-wrong-engine", err)
	}

	// The proxy's tracking of last_gtid is not the client's to turn off.
	_, err = uc.ExecContext(ctx, "SET session_track_system_variables = ''")
	if err == nil || !strings.Contains(err.Error(), "mariadb-track-variables") {
		t.Fatalf("SET session_track_system_variables on MariaDB: %v, want mariadb-track-variables", err)
	}

	// A proxy configured for MySQL in front of MariaDB does not start.
	p := tp.Primary()
	s, err := New(Config{Listen: "127.0.0.1:0", Users: []User{{Name: "app", Password: "apppw"}}, Engine: EngineMySQL,
		Primary: Backend{Addr: p.Addr(), User: p.User, Password: p.Password}, StartupTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	err = s.Listen(lctx)
	if err == nil || !strings.Contains(err.Error(), "set engine: mariadb") {
		t.Fatalf("engine mysql in front of MariaDB: %v, want an error naming engine mariadb", err)
	}
}
