package proxy

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/router"
)

// TestScale is the scale harness (issue 19): CAUSALLAB_PROXY_SCALE_CLIENTS
// (default 2,000) client connections through one in-process proxy, each a
// lab session doing point reads and an occasional write, judged against
// the lab's ground truth (read-your-writes, monotonic reads). The clients
// run in a child process (TestScaleClients, the same test binary) so that
// this process's heap is the proxy's. It reports:
//
//   - refusals: clients that could not connect (or finish their warm-up
//     write and read) and statements that failed during the load;
//   - read-your-writes and monotonic-reads violations (lab.Checker);
//   - backend connections per node, counted on each server
//     (information_schema.PROCESSLIST, the proxy's account; the
//     topology runs with performance_schema off, minus what
//     was open before the proxy started): with the clients idle and the
//     highest seen during the load, sampled every 2 s and exactly (the
//     server's Max_used_connections since a FLUSH STATUS before the
//     proxy started, minus the connections open then); with multiplexing
//     every one of them must be within Server.BackendConnectionLimit
//     (pool_size plus the proxy's own: docs/proxy-sessions.md, "Multiplexing"),
//     or the test fails;
//   - the proxy's live heap per idle client: (live heap with every client
//     connected and idle - live heap with none) / clients, each read after
//     a forced GC (runtime/metrics /gc/heap/live:bytes).
//
// It runs only with CAUSALLAB_PROXY_SCALE=1 (scripts/proxy-scale.sh):
//
//	CAUSALLAB_PROXY_SCALE=1 go test -count=1 -timeout 30m -run '^TestScale$' -v ./proxy/
//
// Knobs: CAUSALLAB_PROXY_SCALE_CLIENTS, _SECONDS (load, default 60), _QPS
// (per client, default 1), _WRITE_EVERY (one statement in N is a write,
// default 10), _POLICY (default token-ryw-mr), _WATERMARK (default
// query: the sound one), _MAX_CONNECTIONS (each server's max_connections for the run;
// default: the topology's, restored after), _HEAPPROFILE (a file: the
// proxy's heap profile with the clients idle), _MULTIPLEX=1 (Config.Multiplex),
// _POOL_SIZE, _POOL_WAIT, _POOL_MAX_WAITERS (Config.PoolSize, PoolWait,
// PoolMaxWaiters), _MAX_BACKEND (when set, the
// test fails above that many backend connections on any node, or on any
// refusal), _TASKSET=P:R (the proxy pinned to CPU list P, the clients to R;
// scripts/proxy-scale.sh then starts the whole test, servers included, on
// R). Violations always fail it; each of the first ten is reported with
// the session's proxy connection, the hot rows it read and had seen, its
// previous read, and the routes the proxy gave its last reads
// (Config.OnRead: node and reason, times from the load's start).
func TestScale(t *testing.T) {
	if os.Getenv("CAUSALLAB_PROXY_SCALE") != "1" {
		t.Skip("scale run: set CAUSALLAB_PROXY_SCALE=1 (scripts/proxy-scale.sh)")
	}
	composetest.Need(t, topo)
	clients := envInt(t, "CAUSALLAB_PROXY_SCALE_CLIENTS", 2000)
	seconds := envInt(t, "CAUSALLAB_PROXY_SCALE_SECONDS", 60)
	policy := envStr("CAUSALLAB_PROXY_SCALE_POLICY", router.PolicyTokenRYWMR.String())
	wm := envStr("CAUSALLAB_PROXY_SCALE_WATERMARK", "query")
	ctx := context.Background()

	nodes := scaleNodes(t)
	if v := os.Getenv("CAUSALLAB_PROXY_SCALE_MAX_CONNECTIONS"); v != "" {
		n := envInt(t, "CAUSALLAB_PROXY_SCALE_MAX_CONNECTIONS", 0)
		for _, nd := range nodes {
			var old int
			if err := nd.db.QueryRowContext(ctx, "SELECT @@GLOBAL.max_connections").Scan(&old); err != nil {
				t.Fatal(err)
			}
			mustExec(t, nd.db, "SET GLOBAL max_connections = "+strconv.Itoa(n))
			t.Cleanup(func() { _, _ = nd.db.Exec("SET GLOBAL max_connections = " + strconv.Itoa(old)) })
		}
	}
	maxConns := map[string]int{}
	base := map[string]int{}
	for _, nd := range nodes {
		var mc int
		if err := nd.db.QueryRowContext(ctx, "SELECT @@GLOBAL.max_connections").Scan(&mc); err != nil {
			t.Fatal(err)
		}
		maxConns[nd.name] = mc
		base[nd.name] = mustCount(t, nd)
	}

	// The exact peak: each server's Max_used_connections from here on
	// (FLUSH STATUS resets it to the connections open now), minus those.
	threads0 := map[string]int{}
	for _, nd := range nodes {
		if _, err := nd.db.ExecContext(ctx, "FLUSH STATUS"); err != nil {
			t.Logf("%s: FLUSH STATUS: %v (no exact peak)", nd.name, err)
			continue
		}
		threads0[nd.name] = mustStatus(t, nd, "Threads_connected")
	}
	routes := newScaleRoutes(8)
	s := startProxy(t, func(c *Config) {
		c.OnRead = routes.add
		c.AuthMethod, c.Policy, c.WatermarkSource = "mysql_native_password", policy, wm
		c.MaxConnections = clients + 64
		c.Multiplex = os.Getenv("CAUSALLAB_PROXY_SCALE_MULTIPLEX") == "1"
		if v := os.Getenv("CAUSALLAB_PROXY_SCALE_POOL_SIZE"); v != "" {
			c.PoolSize = envInt(t, "CAUSALLAB_PROXY_SCALE_POOL_SIZE", 64)
		}
		if v := os.Getenv("CAUSALLAB_PROXY_SCALE_POOL_WAIT"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("CAUSALLAB_PROXY_SCALE_POOL_WAIT=%q: %v", v, err)
			}
			c.PoolWait = d
		}
		if v := os.Getenv("CAUSALLAB_PROXY_SCALE_POOL_MAX_WAITERS"); v != "" {
			c.PoolMaxWaiters = envInt(t, "CAUSALLAB_PROXY_SCALE_POOL_MAX_WAITERS", 0)
		}
	})
	heap0, gor0 := proxyHeap()

	childArgs := []string{os.Args[0], "-test.run=^TestScaleClients$", "-test.short", "-test.count=1", "-test.v", "-test.timeout=0"}
	if v := os.Getenv("CAUSALLAB_PROXY_SCALE_TASKSET"); v != "" {
		// "P:R": this process (the proxy) on CPU list P, the clients on
		// R; the script started the whole test (the servers with it)
		// on R.
		proxyCPUs, rest, ok := strings.Cut(v, ":")
		if !ok || proxyCPUs == "" || rest == "" {
			t.Fatalf("CAUSALLAB_PROXY_SCALE_TASKSET=%q: want PROXY_CPUS:REST_CPUS", v)
		}
		if out, err := exec.Command("taskset", "-a", "-p", "-c", proxyCPUs, strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
			t.Fatalf("taskset of the proxy: %v: %s", err, out)
		}
		childArgs = append([]string{"taskset", "-c", rest}, childArgs...)
		t.Logf("taskset: proxy on CPUs %s (GOMAXPROCS %d), clients and servers on %s", proxyCPUs, runtime.GOMAXPROCS(0), rest)
	}
	child := exec.Command(childArgs[0], childArgs[1:]...)
	child.Env = append(os.Environ(), "CAUSALLAB_SCALE_CHILD=1", "CAUSALLAB_SCALE_ADDR="+s.Addr(),
		"CAUSALLAB_SCALE_CLIENTS="+strconv.Itoa(clients), "CAUSALLAB_SCALE_SECONDS="+strconv.Itoa(seconds),
		"CAUSALLAB_SCALE_QPS="+envStr("CAUSALLAB_PROXY_SCALE_QPS", "1"),
		"CAUSALLAB_SCALE_WRITE_EVERY="+envStr("CAUSALLAB_PROXY_SCALE_WRITE_EVERY", "10"))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	lines := make(chan string)
	var childOut strings.Builder
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if strings.HasPrefix(l, "SCALE ") {
				lines <- strings.TrimPrefix(l, "SCALE ")
			} else {
				childOut.WriteString(l + "\n")
			}
		}
	}()
	next := func(kind string, v any) {
		t.Helper()
		l, ok := <-lines
		if !ok {
			_ = child.Wait()
			killed = true
			t.Fatalf("the client process ended before its %q report:\n%s", kind, childOut.String())
		}
		rest, found := strings.CutPrefix(l, kind+" ")
		if !found {
			t.Fatalf("client process: want a %q report, got %q", kind, l)
		}
		if err := json.Unmarshal([]byte(rest), v); err != nil {
			t.Fatalf("client process %q report: %v", kind, err)
		}
	}

	var idle struct {
		Connected int            `json:"connected"`
		Refused   int            `json:"refused"`
		Errors    map[string]int `json:"errors"`
		FirstErr  string         `json:"first_error"`
	}
	next("idle", &idle)
	heap1, gor1 := proxyHeap()
	idleBackends := map[string]int{}
	for _, nd := range nodes {
		idleBackends[nd.name] = mustCount(t, nd) - base[nd.name]
	}
	if f := os.Getenv("CAUSALLAB_PROXY_SCALE_HEAPPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	perClient := 0.0
	if idle.Connected > 0 {
		perClient = float64(int64(heap1)-int64(heap0)) / float64(idle.Connected)
	}
	t.Logf("idle: %d of %d clients connected, %d refused %v (first: %s)", idle.Connected, clients, idle.Refused, idle.Errors, idle.FirstErr)
	t.Logf("idle: proxy live heap %.1f MiB -> %.1f MiB: %.1f KiB per idle client; goroutines %d -> %d (%.2f per client)",
		mib(heap0), mib(heap1), perClient/1024, gor0, gor1, float64(gor1-gor0)/float64(max(idle.Connected, 1)))
	t.Logf("idle: backend connections per node (from the servers): %v; max_connections %v", idleBackends, maxConns)

	// The load: sample the servers' counts while it runs.
	sched0, cpu0 := schedLatencies(), processCPU()
	start := time.Now()
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	peak := map[string]int{}
	var peakMu sync.Mutex
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			for _, nd := range nodes {
				n, err := backendCount(nd)
				if err != nil {
					t.Log(err) // a loaded server: the peak is a lower bound
					continue
				}
				n -= base[nd.name]
				peakMu.Lock()
				peak[nd.name] = max(peak[nd.name], n)
				peakMu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	var done struct {
		Tally struct {
			Reads     int64                     `json:"Reads"`
			ByOutcome [router.NumOutcomes]int64 `json:"ByOutcome"`
			RYW       int64                     `json:"RYW"`
			MR        int64                     `json:"MR"`
		} `json:"tally"`
		Writes      int64          `json:"writes"`
		WriteErrors int64          `json:"write_errors"`
		ReadErrors  int64          `json:"read_errors"`
		Reconnects  int64          `json:"reconnects"`
		Refused     int64          `json:"refused"`
		Errors      map[string]int `json:"errors"`
		FirstErr    string         `json:"first_error"`
		Seconds     float64        `json:"seconds"`
		Violations  []string       `json:"violations"`
		ViolConns   []uint32       `json:"violation_conns"`
	}
	next("done", &done)
	sched1, cpu1 := schedLatencies(), processCPU()
	stopSampling()
	sampler.Wait()
	if err := child.Wait(); err != nil {
		t.Errorf("client process: %v\n%s", err, childOut.String())
	}
	killed = true
	served := done.Tally.ByOutcome[router.OutProxied]
	t.Logf("load: %.0f s, %d reads (%d served, %.0f/s), %d writes; read errors %d, write errors %d, reconnects %d, refused reconnects %d %v (first: %s)",
		done.Seconds, done.Tally.Reads, served, float64(served)/done.Seconds, done.Writes, done.ReadErrors, done.WriteErrors, done.Reconnects, done.Refused, done.Errors, done.FirstErr)
	t.Logf("load: violations: read-your-writes %d, monotonic reads %d", done.Tally.RYW, done.Tally.MR)
	for i, v := range done.Violations {
		t.Logf("load: violation: %s", v)
		if i < len(done.ViolConns) {
			t.Logf("load: violation: the proxy's routes of connection %d's last reads (oldest first): %s", done.ViolConns[i], routes.get(done.ViolConns[i], start))
		}
	}
	t.Logf("load: peak backend connections per node (from the servers, sampled every 2 s): %v", peak)
	exact := map[string]int{}
	for _, nd := range nodes {
		if t0, ok := threads0[nd.name]; ok {
			exact[nd.name] = mustStatus(t, nd, "Max_used_connections") - t0
		}
	}
	t.Logf("load: peak backend connections per node (the servers' Max_used_connections since the proxy started, minus the connections open before): %v", exact)
	if c := s.cfg; c.Multiplex {
		mt := metricText(t, s)
		for _, nd := range nodes {
			limit := s.BackendConnectionLimit(nd.name)
			// Faults whose server side the proxy cannot see end: a dial
			// that failed after connecting (the server counts it until its
			// own connect_timeout ends the handshake), a cut connection
			// whose KILL QUERY failed or was given up. Each may be counted
			// by the server for a while beyond the bound.
			// Connections pool.detach gave sessions pinned past
			// max_pinned_share as their own are outside the pool too
			// (every one made during the run: an upper bound).
			unseen := metricSum(mt, `causallab_proxy_backend_errors_total{backend="`+nd.name+`",op="connect"}`) +
				metricSum(mt, `causallab_proxy_pool_pinned_own_total{backend="`+nd.name+`"}`) +
				metricSum(mt, `causallab_proxy_pool_cut_kills_total{backend="`+nd.name+`",result="failed"}`) +
				metricSum(mt, `causallab_proxy_pool_cut_kills_total{backend="`+nd.name+`",result="gave-up"}`)
			t.Logf("load: %s: the proxy's bound %d (pool_size %d + the position source's %d%s); faults whose server side may outlive the proxy's view, and connections pinned past max_pinned_share: %d",
				nd.name, limit, c.PoolSize, positionConns,
				map[bool]string{true: fmt.Sprintf(" + the router's %d", routerPrimaryConns)}[nd.name == c.Primary.Name], unseen)
			for what, n := range map[string]int{"idle": idleBackends[nd.name], "sampled peak": peak[nd.name], "exact peak": exact[nd.name]} {
				if n > limit+unseen {
					t.Errorf("node %s: %d backend connections (%s) above the proxy's bound %d (+%d faults)", nd.name, n, what, limit, unseen)
				} else if n > limit {
					t.Logf("load: node %s: %d backend connections (%s) above the bound %d, within its %d faults", nd.name, n, what, limit, unseen)
				}
			}
		}
	}
	t.Logf("%s", noBuckets(grepLines(metricText(t, s), "causallab_proxy_connections_total", "causallab_proxy_backend_errors_total", "causallab_proxy_pool_", "causallab_proxy_watermark_fallbacks_total",
		"causallab_proxy_statements_total", "causallab_proxy_primary_statements_total", "causallab_proxy_client_errors_total", "causallab_router_")))
	t.Logf("%s", histSummaries(metricText(t, s), "causallab_proxy_pool_hold_seconds", "causallab_proxy_pool_wait_seconds", "causallab_proxy_pool_reset_seconds", "causallab_proxy_pool_reset_wait_seconds"))
	stmts := done.Tally.Reads + done.Writes + done.ReadErrors + done.WriteErrors
	t.Logf("load: proxy CPU %.1f s (%.0f µs per statement, %.2f cores); goroutine run-queue latency %s",
		(cpu1 - cpu0).Seconds(), float64((cpu1-cpu0).Microseconds())/float64(max(stmts, 1)), (cpu1-cpu0).Seconds()/done.Seconds, sched1.since(sched0))
	t.Logf("machine load: %s", loadavg())
	if done.Tally.RYW > 0 || done.Tally.MR > 0 {
		t.Errorf("violations: %d read-your-writes, %d monotonic reads", done.Tally.RYW, done.Tally.MR)
	}
	if served == 0 {
		t.Errorf("no read was served")
	}
	if os.Getenv("CAUSALLAB_PROXY_SCALE_MAX_BACKEND") != "" {
		limit := envInt(t, "CAUSALLAB_PROXY_SCALE_MAX_BACKEND", 64)
		for n, c := range peak {
			if c > limit || idleBackends[n] > limit {
				t.Errorf("node %s: %d backend connections idle, %d at peak (limit %d)", n, idleBackends[n], c, limit)
			}
		}
		if refused := int64(idle.Refused) + done.Refused + done.ReadErrors + done.WriteErrors; refused > 0 {
			t.Errorf("%d refusals or failed statements", refused)
		}
	}
}

// scaleRoutes keeps the last few routes the proxy gave each client
// connection's reads (Config.OnRead), for a violation's report.
type scaleRoutes struct {
	mu   sync.Mutex
	n    int
	byID map[uint32][]routeAt
}

type routeAt struct {
	at time.Time
	r  ReadRoute
}

func newScaleRoutes(n int) *scaleRoutes { return &scaleRoutes{n: n, byID: map[uint32][]routeAt{}} }

func (l *scaleRoutes) add(r ReadRoute) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.byID[r.Conn]
	if len(rs) == l.n {
		copy(rs, rs[1:])
		rs = rs[:l.n-1]
	}
	l.byID[r.Conn] = append(rs, routeAt{at: now, r: r})
}

// get describes conn's routes, their times from start.
func (l *scaleRoutes) get(conn uint32, start time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, ra := range l.byID[conn] {
		fmt.Fprintf(&b, "[%.3fs %s %s] ", ra.at.Sub(start).Seconds(), ra.r.Node, ra.r.Reason)
	}
	return b.String()
}

// metricSum is the value of the series named exactly (name and labels)
// in a metrics text, 0 when absent.
func metricSum(text, series string) int {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(f)
			}
		}
	}
	return 0
}

// mustStatus reads a global status variable of n.
func mustStatus(t *testing.T, n scaleNode, name string) int {
	t.Helper()
	var k string
	var v int
	if err := n.db.QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&k, &v); err != nil {
		t.Fatalf("%s: %s: %v", n.name, name, err)
	}
	return v
}

func envStr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// proxyHeap forces two collections and returns the live heap and the
// goroutine count.
func proxyHeap() (uint64, int) {
	runtime.GC()
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64(), runtime.NumGoroutine()
}

// scaleNode is one server the harness counts connections on.
type scaleNode struct {
	name, user string
	db         *sql.DB
}

func scaleNodes(t *testing.T) []scaleNode {
	t.Helper()
	var out []scaleNode
	for _, n := range topo.Nodes() {
		db, err := sql.Open("mysql", n.User+":"+n.Password+"@tcp("+n.Addr()+")/")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		out = append(out, scaleNode{name: n.Name, user: n.User, db: db})
	}
	return out
}

// backendCount is the number of client connections of the proxy's
// account open on the server, its own and replication's left out.
func backendCount(n scaleNode) (int, error) {
	var c int
	err := n.db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE USER = ? AND ID <> CONNECTION_ID() AND COMMAND NOT LIKE 'Binlog Dump%'`, n.user).Scan(&c)
	if err != nil {
		return 0, fmt.Errorf("%s: counting connections: %w", n.name, err)
	}
	return c, nil
}

func mustCount(t *testing.T, n scaleNode) int {
	t.Helper()
	c, err := backendCount(n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// noBuckets drops histogram bucket lines from a metrics excerpt.
func noBuckets(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "_bucket{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedHist is a copy of the runtime's /sched/latencies:seconds
// histogram: how long goroutines waited runnable before they ran.
type schedHist struct {
	counts  []uint64
	buckets []float64
}

func schedLatencies() schedHist {
	s := []rtmetrics.Sample{{Name: "/sched/latencies:seconds"}}
	rtmetrics.Read(s)
	h := s[0].Value.Float64Histogram()
	return schedHist{counts: append([]uint64(nil), h.Counts...), buckets: h.Buckets}
}

// since summarises the latencies recorded after old: p50, p90, p99, max
// bucket.
func (h schedHist) since(old schedHist) string {
	d := make([]uint64, len(h.counts))
	var n uint64
	for i := range h.counts {
		d[i] = h.counts[i]
		if i < len(old.counts) {
			d[i] -= old.counts[i]
		}
		n += d[i]
	}
	if n == 0 {
		return "(none)"
	}
	q := func(f float64) string {
		want := uint64(f * float64(n))
		var c uint64
		for i, v := range d {
			c += v
			if c > want {
				return time.Duration(h.buckets[i+1] * 1e9).Round(time.Microsecond).String()
			}
		}
		return "inf"
	}
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s, p99.9 %s (%d samples)", q(0.5), q(0.9), q(0.99), q(0.999), n)
}

// histSummaries summarises each series of the named histograms in a
// metrics text: count, mean, and the buckets holding p50, p90 and p99.
func histSummaries(text string, names ...string) string {
	type series struct {
		les    []string
		counts []float64
		sum    float64
		count  float64
	}
	all := map[string]*series{}
	var order []string
	get := func(k string) *series {
		if all[k] == nil {
			all[k] = &series{}
			order = append(order, k)
		}
		return all[k]
	}
	for _, l := range strings.Split(text, "\n") {
		for _, name := range names {
			rest, ok := strings.CutPrefix(l, name)
			if !ok {
				continue
			}
			sp := strings.LastIndexByte(rest, ' ')
			if sp < 0 {
				continue
			}
			v, err := strconv.ParseFloat(rest[sp+1:], 64)
			if err != nil {
				continue
			}
			lab, kind := rest[:sp], ""
			switch {
			case strings.HasPrefix(lab, "_bucket"):
				kind, lab = "bucket", strings.TrimPrefix(lab, "_bucket")
			case strings.HasPrefix(lab, "_sum"):
				kind, lab = "sum", strings.TrimPrefix(lab, "_sum")
			case strings.HasPrefix(lab, "_count"):
				kind, lab = "count", strings.TrimPrefix(lab, "_count")
			default:
				continue
			}
			le := ""
			if i := strings.Index(lab, `,le="`); i >= 0 {
				le = strings.TrimSuffix(lab[i+5:], `"}`)
				lab = lab[:i] + "}"
			} else if i := strings.Index(lab, `le="`); i >= 0 {
				le = strings.TrimSuffix(lab[i+4:], `"}`)
				lab = ""
			}
			sr := get(name + lab)
			switch kind {
			case "bucket":
				sr.les, sr.counts = append(sr.les, le), append(sr.counts, v)
			case "sum":
				sr.sum = v
			case "count":
				sr.count = v
			}
		}
	}
	var b strings.Builder
	for _, k := range order {
		sr := all[k]
		if sr.count == 0 {
			continue
		}
		q := func(f float64) string {
			for i, c := range sr.counts {
				if c >= f*sr.count {
					return "<=" + sr.les[i]
				}
			}
			return "?"
		}
		fmt.Fprintf(&b, "%s: n=%.0f mean=%.4fs p50%s p90%s p99%s\n", k, sr.count, sr.sum/sr.count, q(0.5), q(0.9), q(0.99))
	}
	return b.String()
}
