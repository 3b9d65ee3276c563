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

// TestProxyMariaDBUnloggedReplica: a MariaDB replica that does not write
// what it applies to its binary log (log-slave-updates OFF) has no bound
// for a read's watermark but gtid_current_pos, which can lack what the
// read saw: its reads are served, and each watermark batch there is
// counted (watermark_fallbacks_total{source="mariadb-unlogged"}), never
// silent. The primary, whose own writes are in its binary log, is not.
func TestProxyMariaDBUnloggedReplica(t *testing.T) {
	tp := composetest.Start(t, compose.Config{Engine: compose.EngineMariaDB, Replicas: 1, MyCnf: map[string]string{"log-slave-updates": "OFF"}})
	s := startProxyOn(t, tp, func(c *Config) { c.Policy = "token-ryw-mr" })
	db := openDB(t, s, "")
	emptyTable(t, db, "ptest", "unlogged", "id INT PRIMARY KEY")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tp.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The reader's first batch runs at start; a read a replica serves
	// runs another (the first reads may go to the primary until the
	// proxy's view of the replica holds the table).
	c := conn1(t, db)
	metric := `causallab_proxy_watermark_fallbacks_total{source="mariadb-unlogged"}`
	var got string
	for deadline := time.Now().Add(20 * time.Second); ; {
		var n int
		if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM ptest.unlogged").Scan(&n); err != nil {
			t.Fatal(err)
		}
		got = grepLines(metricText(t, s), metric)
		if got != "" && got != metric+" 0" && got != metric+" 1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reads on an unlogged MariaDB replica for 20 s: %q counted; reads:\n%s", got,
				grepLines(metricText(t, s), "causallab_proxy_watermark_reads_total", "causallab_router_reads_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every batch of the replica's reader is counted, none of the
	// primary's (reads fall back there while the replica lags). A batch
	// may still run after the client had its answer: compare once the
	// counts stand still.
	m := metricText(t, s)
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		next := metricText(t, s)
		if grepLines(next, "causallab_proxy_watermark_") == grepLines(m, "causallab_proxy_watermark_") {
			break
		}
		m = next
	}
	value := func(series string) string {
		line := grepLines(m, series)
		return line[strings.LastIndexByte(line, ' ')+1:]
	}
	unlogged, replicaBatches := value(metric), value(`causallab_proxy_watermark_reads_total{node="replica1",result="query"}`)
	if unlogged != replicaBatches {
		t.Fatalf("%s counted, replica1's reader ran %s batches: every one must be counted\n%s", unlogged, replicaBatches,
			grepLines(m, "causallab_proxy_watermark_reads_total", metric))
	}
	t.Logf("%s unlogged batches of %s on replica1; primary: %s", unlogged, replicaBatches,
		value(`causallab_proxy_watermark_reads_total{node="primary",result="query"}`))
}
