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
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose"
)

// Issue 13, finding 6: the wait budget is a bound. A 730 KB token, which
// no replica holds, made WAIT_FOR_EXECUTED_GTID_SET run for seconds on a
// replica past its 400 ms budget (a read took 7.15 s) and held other
// clients up.

// waitsOn lists the WAIT_FOR_EXECUTED_GTID_SET statements running on n
// (their first bytes), from performance_schema.processlist (it takes no
// server-wide lock). A server busy parsing huge sets may not answer in
// time: err says so, for the caller to ask again.
func waitsOn(t *testing.T, n compose.Node) ([]string, error) {
	t.Helper()
	db, err := sql.Open("mysql", n.User+":"+n.Password+"@tcp("+n.Addr()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, "SELECT LEFT(COALESCE(info, ''), 60) FROM performance_schema.processlist WHERE info LIKE 'SELECT WAIT_FOR_EXECUTED_GTID_SET%'")
	if err != nil {
		return nil, fmt.Errorf("processlist of %s: %w", n.Name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// TestHugeTokenWaitBounded: the token (60,000 intervals, admitted
// with max_token_bytes raised to 1 MiB), which no server holds, with a
// 400 ms budget: four such reads at once are refused, each wait given up
// by the proxy at its bound while the replica still parses the set
// (counted; each read took 9-10 s here before the waits were bounded,
// the parse's time), another client is served meanwhile, and the waits
// end on the replicas. Several seconds of replica CPU: not in -short.
func TestHugeTokenWaitBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("several seconds of replica CPU per wait")
	}
	testHugeTokenWaitBounded(t, 1<<20, 60000)
}

// TestHugeTokenAtTheLimit: the same with the longest token the default
// max_token_bytes (64 KiB) admits.
func TestHugeTokenAtTheLimit(t *testing.T) {
	testHugeTokenWaitBounded(t, 0, 0)
}

// testHugeTokenWaitBounded runs it with max_token_bytes maxTok (0: the
// default) and a token of n intervals (0: the longest under the limit).
func testHugeTokenWaitBounded(t *testing.T, maxTok, n int) {
	s := startProxy(t, func(c *Config) {
		c.MaxTokenBytes = maxTok
		c.WaitBudget = 400 * time.Millisecond
	})
	const uuid = "5c1e8b3a-0d2f-11f0-9f3c-0242ac120099"
	if n == 0 {
		for n = 1000; len(hugeToken(uuid, n+100)) <= s.cfg.MaxTokenBytes; n += 100 {
		}
	}
	tok := hugeToken(uuid, n)
	t.Logf("token of %d intervals, %d bytes (max_token_bytes %d)", n, len(tok), s.cfg.MaxTokenBytes)
	q := "/* causal_token:" + tok + " */ SELECT 1"
	const huge = 4
	var wg sync.WaitGroup
	took := make([]time.Duration, huge)
	errs := make([]error, huge)
	for i := range huge {
		wg.Go(func() {
			db := openDB(t, s, "tls=skip-verify")
			db.SetMaxOpenConns(1)
			t0 := time.Now()
			var one int
			errs[i] = db.QueryRow(q).Scan(&one)
			took[i] = time.Since(t0)
		})
	}
	// Another client's SELECT 1 while the huge-token reads run.
	other := openDB(t, s, "tls=skip-verify")
	other.SetMaxOpenConns(1)
	var one int
	if err := other.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	if err := other.QueryRow("SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	otherTook := time.Since(t0)
	wg.Wait()
	for i := range huge {
		t.Logf("huge-token read %d: %v after %v", i, errs[i], took[i])
		var me *gomysql.MySQLError
		if !errors.As(errs[i], &me) || !strings.Contains(me.Message, "cannot serve") {
			t.Errorf("huge-token read %d: %v, want the router's refusal (nobody holds the token)", i, errs[i])
		}
	}
	// That no read waited for the replica's parse is counted. A wait
	// ends as the router's wait_seconds{result}: "error" when the proxy
	// cut it (the watchdog, once the position source reports the busy
	// replica unhealthy: unresponsive; or its connection's set-up cut
	// likewise), "timeout" when it was given up at its socket's bound
	// (budget + 100 ms; counted backend_errors{op="wait-overran"} too) or
	// when the server answered its own timeout. The set takes
	// MySQL seconds to parse (2.2-2.7 s unloaded, longer under load), so
	// no wait may be one the server answered: every "timeout" is an
	// overrun one (a shorter token's may be answered in time). (It was a
	// 4 s bound on each read, which a loaded machine could pass.)
	m := metricText(t, s)
	t.Log(grepLines(m, "backend_errors", "reads_total", "node_errors", "wait_seconds_count"))
	if n >= 60000 {
		overran := 0.0
		for _, r := range s.cfg.Replicas {
			overran += testutil.ToFloat64(s.m.backendErrors.WithLabelValues(r.Name, "wait-overran"))
		}
		timeouts, cut := waitCount(t, s, "timeout"), waitCount(t, s, "error")
		if timeouts != overran {
			t.Errorf("%v waits ended as timed out, %v of them given up at their bound: the server answered %v after parsing the set", timeouts, overran, timeouts-overran)
		}
		if timeouts+cut < huge {
			t.Errorf("%v waits for %d huge-token reads", timeouts+cut, huge)
		}
	}
	// A generous bound, with the reason: unbounded, four such reads held
	// another client's SELECT 1 for 11.3 s (issue 13); bounded it takes
	// 0.4 ms-0.6 s here, and a SELECT 1 does no work a loaded machine
	// stretches to seconds. (It was 3 s.)
	t.Logf("another client's SELECT 1 meanwhile: %v", otherTook)
	if otherTook > 6*time.Second {
		t.Errorf("another client's SELECT 1 took %v while huge-token reads waited", otherTook)
	}
	// The waits end on the replicas (killed; a server parsing a huge set
	// notices the kill only once the parse is done). A generous bound,
	// with the reason: the parses' CPU (seconds per set unloaded) stretches
	// with load, and the processlist query waits its turn too: at load 25
	// here a replica did not answer it within 30 s.
	deadline := time.Now().Add(3 * time.Minute)
	for _, n := range topo.Replicas() {
		for {
			w, err := waitsOn(t, n)
			if err == nil && len(w) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s still runs %d waits after the reads returned (%v): %q", n.Name, len(w), err, w)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// waitCount is the number of waits the router counted with result res
// (causallab_router_wait_seconds).
func waitCount(t *testing.T, s *Server, res string) float64 {
	t.Helper()
	mfs, err := s.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "causallab_router_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == res {
					n += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return n
}

// Issue 13, finding 7: with connections already open to both replicas,
// pausing both (SIGSTOP: the sockets stay open, nothing answers) made the
// session's next read hang until the client gave up (30-90 s). Now a read
// on a replica that does not answer while its position source reports it
// unhealthy is cut, the replica held down, and the read decided again: it
// ends on the primary. A write then a read of it (token-wait: the read
// waits for a paused replica first) ends the same way.
func TestReadOnPausedReplicas(t *testing.T) {
	t.Run("text", func(t *testing.T) { testReadOnPausedReplicas(t, false) })
	// Prepared reads, relayed raw (prepared lazily on each replica).
	t.Run("prepared", func(t *testing.T) { testReadOnPausedReplicas(t, true) })
}

func testReadOnPausedReplicas(t *testing.T, prepared bool) {
	read := func(db *sql.DB, q string, dst *int) error {
		if prepared {
			return db.QueryRow(q+" AND ? = ?", 1, 1).Scan(dst)
		}
		return db.QueryRow(q).Scan(dst)
	}
	var (
		mu    sync.Mutex
		nodes = map[string]int{}
		last  string
	)
	s := startProxy(t, func(c *Config) {
		c.OnRead = func(r ReadRoute) {
			mu.Lock()
			nodes[r.Node]++
			last = r.Node
			mu.Unlock()
		}
	})
	db := openDB(t, s, "tls=skip-verify&readTimeout=30s&writeTimeout=30s")
	db.SetMaxOpenConns(1)
	emptyTable(t, db, "paused", "t", "id INT PRIMARY KEY")
	var one int
	// Open the session's connections to both replicas: under policy any
	// its reads spread over them (a token policy keeps a session on its
	// last replica, router.Session.LastReplica). Wait for both replicas
	// to hold the DDL above first (under load replica2 once stayed behind
	// for all of 500 back-to-back reads).
	if err := topo.WaitReplicated(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("SET @causal_policy = 'any'"); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; {
		if err := read(db, "SELECT 1 FROM DUAL WHERE 1 = 1", &one); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		both := nodes[topo.Replicas()[0].Name] > 0 && nodes[topo.Replicas()[1].Name] > 0
		mu.Unlock()
		if both {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("30 s of reads did not reach both replicas: %v\n%s", nodes,
				grepLines(metricText(t, s), "causallab_router_reads_total", "causallab_router_node_errors", "causallab_proxy_backend_errors", "causallab_proxy_pool_acquire_failures"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := db.Exec("SET @causal_policy = ''"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range topo.Replicas() {
		if err := topo.Pause(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := topo.Resume(context.Background(), r.Name); err != nil {
				t.Errorf("resume %s: %v", r.Name, err)
			}
		})
	}
	check := func(what string, run func() error) {
		t.Helper()
		t0 := time.Now()
		err := run()
		took := time.Since(t0)
		mu.Lock()
		node := last
		mu.Unlock()
		t.Logf("%s: %v on %s after %v", what, err, node, took)
		// A generous bound: each paused replica is given up within about
		// a second (the position source's down-after, 500 ms, plus the
		// watchdog's probe); unbounded, the read hung until the client's
		// read timeout (30 s).
		if took > 20*time.Second {
			t.Fatalf("%s with both replicas paused took %v", what, took)
		}
		if err != nil {
			t.Fatalf("%s with both replicas paused: %v after %v\n%s", what, err, took,
				grepLines(metricText(t, s), "backend_errors", "client_errors", "reads_total", "node_errors"))
		}
		if node != topo.Primary().Name {
			// A replica that stopped between the read's answer and the
			// watermark's (compose's pause can return before every
			// thread is stopped) served the read; its watermark was
			// then taken from the primary, counted.
			if m := metricText(t, s); !strings.Contains(m, `causallab_proxy_watermark_fallbacks_total{source="primary"}`) {
				t.Fatalf("%s with both replicas paused served by %s without a watermark fallback\n%s", what, node,
					grepLines(m, "backend_errors", "watermark", "reads_total"))
			}
		}
	}
	check("a read", func() error { return read(db, "SELECT 1 FROM DUAL WHERE 1 = 1", &one) })
	mustExec(t, db, "INSERT INTO paused.t VALUES (1)")
	check("a read of the session's write", func() error {
		return read(db, "SELECT COUNT(*) FROM paused.t WHERE id = 1", &one)
	})
	if one != 1 {
		t.Fatalf("the session's write read back as %d rows", one)
	}
	t.Log(grepLines(metricText(t, s), "backend_errors", "reads_total", "node_errors", "fallbacks"))
}
