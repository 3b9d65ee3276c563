package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/causallab/causallab/internal/rawnet"
)

// TestSysbenchSpeed measures sysbench oltp_point_select (prepared
// statements) side by side in one run: directly against the replicas
// (sysbench spreads its connections over both), through the proxy, and
// through MySQL Router in plain routing mode (round-robin over the same
// replicas) when CAUSALLAB_MYSQLROUTER_ROOTFS names a root filesystem
// holding it (scripts/install-bench-tools.sh --mysql-router). Targets take
// turns, round after round, so a change of the machine's load hits them
// alike. Not a correctness test: it runs only with CAUSALLAB_PROXY_BENCH=1.
//
//	CAUSALLAB_PROXY_BENCH=1 go test -count=1 -run TestSysbenchSpeed -v ./proxy/
//
// Knobs: CAUSALLAB_PROXY_BENCH_TIME (seconds per run, default 10),
// CAUSALLAB_PROXY_BENCH_ROUNDS (default 3), CAUSALLAB_PROXY_BENCH_THREADS
// (comma list, default "1,4,16"), CAUSALLAB_PROXY_BENCH_POSITIONS (poll or
// binlog), CAUSALLAB_PROXY_BENCH_POLICIES, CAUSALLAB_PROXY_BENCH_SOCKETIO and
// CAUSALLAB_PROXY_BENCH_WATERMARK (comma lists: one proxy target per
// combination), CAUSALLAB_PROXY_BENCH_TASKSET (HOP:REST CPU lists: the hops
// on one, sysbench and the mysqld on the other),
// CAUSALLAB_PROXY_BENCH_BINARIES (name=path,...: causallab
// binaries run as `causallab proxy` processes, one target each, e.g. two
// builds compared in one run; each is stopped (SIGSTOP) while another
// target runs, so that its pollers load nobody's run), POLICIES=none (no
// in-process proxy target: only those processes), CAUSALLAB_PROXY_BENCH_HOOK (a shell command
// started as each run starts and waited for after it, with BENCH_TARGET,
// BENCH_PID, BENCH_THREADS and BENCH_ROUND set: e.g. a `perf sched record`
// of a few seconds of one target's run), CAUSALLAB_PROXY_PROFILE (write a CPU profile of the proxy's
// first run to this file), CAUSALLAB_PROXY_BENCH_ROTATE=0 (run the targets in
// the listed order every round; by default round r starts at target r mod n,
// benchOrder).
func TestSysbenchSpeed(t *testing.T) {
	if os.Getenv("CAUSALLAB_PROXY_BENCH") != "1" {
		t.Skip("speed run: set CAUSALLAB_PROXY_BENCH=1")
	}
	bin := needSysbench(t)
	secs := envInt(t, "CAUSALLAB_PROXY_BENCH_TIME", 10)
	rounds := envInt(t, "CAUSALLAB_PROXY_BENCH_ROUNDS", 3)
	threads := []int{1, 4, 16}
	if v := os.Getenv("CAUSALLAB_PROXY_BENCH_THREADS"); v != "" {
		threads = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("CAUSALLAB_PROXY_BENCH_THREADS: %q", v)
			}
			threads = append(threads, n)
		}
	}
	ctx := context.Background()
	positions := os.Getenv("CAUSALLAB_PROXY_BENCH_POSITIONS") // poll (default) or binlog
	// CAUSALLAB_PROXY_BENCH_POLICIES: comma-separated proxy policies, one
	// proxy target each (default: the config's default, token-wait).
	policies := []string{""}
	if v := os.Getenv("CAUSALLAB_PROXY_BENCH_POLICIES"); v == "none" {
		policies = nil // only the external proxies (CAUSALLAB_PROXY_BENCH_BINARIES)
	} else if v != "" {
		policies = strings.Split(v, ",")
	}
	t.Logf("proxy positions: %q (empty: poll), policies %q", positions, policies)
	direct := primaryDB(t, topo)
	const db, tableSize = "sb_speed", 10000
	mustExec(t, direct, "DROP DATABASE IF EXISTS "+db)
	mustExec(t, direct, "CREATE DATABASE "+db)
	t.Cleanup(func() { _, _ = direct.Exec("DROP DATABASE IF EXISTS " + db) })
	p := topo.Primary()
	ph, pp, _ := strings.Cut(p.Addr(), ":")
	prim := sysbenchTarget{host: ph, port: pp, user: p.User, password: p.Password}
	common := []string{"--tables=1", fmt.Sprintf("--table-size=%d", tableSize), "--db-ps-mode=auto"}
	if _, err := runSysbench(ctx, t, bin, "", append(append([]string{"oltp_point_select"}, prim.args(db)...), append(common, "prepare")...)...); err != nil {
		t.Fatal(err)
	}
	if err := topo.WaitReplicated(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	var hosts, ports []string
	for _, r := range topo.Replicas() {
		h, pt, _ := strings.Cut(r.Addr(), ":")
		hosts, ports = append(hosts, h), append(ports, pt)
	}
	r0 := topo.Replicas()[0]
	// pid: the process whose CPU time and context switches count against
	// the target (0: none; the proxy and the Go forwarder run in this one).
	self := os.Getpid()
	targets := []struct {
		name string
		tg   sysbenchTarget
		pid  int
	}{
		{"direct", sysbenchTarget{host: strings.Join(hosts, ","), port: strings.Join(ports, ","), user: r0.User, password: r0.Password}, 0},
	}
	// CAUSALLAB_PROXY_BENCH_SOCKETIO: comma-separated Config.SocketIO
	// values, one proxy target each per policy (default: the default, raw).
	socketIOs := []string{""}
	if v := os.Getenv("CAUSALLAB_PROXY_BENCH_SOCKETIO"); v != "" {
		socketIOs = strings.Split(v, ",")
	}
	// CAUSALLAB_PROXY_BENCH_WATERMARK: comma-separated
	// Config.WatermarkSource values (lazy, query, all-gtids), one proxy
	// target each per policy and socket I/O (default: the default, lazy
	// with poll positions).
	wmSources := []string{""}
	if v := os.Getenv("CAUSALLAB_PROXY_BENCH_WATERMARK"); v != "" {
		wmSources = strings.Split(v, ",")
	}
	for _, pol := range policies {
		for _, sio := range socketIOs {
			for _, wms := range wmSources {
				s := startProxy(t, func(c *Config) {
					c.AuthMethod, c.Positions, c.Policy, c.SocketIO, c.WatermarkSource = "mysql_native_password", positions, pol, sio, wms
				})
				var tags []string
				for _, tag := range []string{pol, sio, wms} {
					if tag != "" {
						tags = append(tags, tag)
					}
				}
				name := "causallab-proxy"
				if len(tags) > 0 {
					name += "(" + strings.Join(tags, ",") + ")"
				}
				targets = append(targets, struct {
					name string
					tg   sysbenchTarget
					pid  int
				}{name, proxyTarget(t, s, false), self})
			}
		}
	}
	names, eports, epids := externalProxies(t, positions) // CAUSALLAB_PROXY_BENCH_BINARIES
	for i, name := range names {
		targets = append(targets, struct {
			name string
			tg   sysbenchTarget
			pid  int
		}{name, sysbenchTarget{host: "127.0.0.1", port: strconv.Itoa(eports[i]), user: "app", password: "apppw"}, epids[i]})
	}
	if rootfs := os.Getenv("CAUSALLAB_MYSQLROUTER_ROOTFS"); rootfs != "" {
		port, pid := startMySQLRouter(t, rootfs, hosts, ports)
		targets = append(targets, struct {
			name string
			tg   sysbenchTarget
			pid  int
		}{"mysql-router", sysbenchTarget{host: "127.0.0.1", port: strconv.Itoa(port), user: r0.User, password: r0.Password}, pid})
	} else {
		t.Log("MySQL Router not measured: CAUSALLAB_MYSQLROUTER_ROOTFS unset")
	}
	if os.Getenv("CAUSALLAB_PROXY_BENCH_FORWARDER") == "1" {
		for _, raw := range []bool{false, true} {
			port, name := startGoForwarder(t, hosts, ports, raw), "go-forwarder"
			if raw {
				name += "(raw)"
			}
			targets = append(targets, struct {
				name string
				tg   sysbenchTarget
				pid  int
			}{name, sysbenchTarget{host: "127.0.0.1", port: strconv.Itoa(port), user: r0.User, password: r0.Password}, self})
		}
	}
	// CAUSALLAB_PROXY_BENCH_TASKSET=HOP:REST (CPU lists, e.g. 1:0): every
	// hop (this process, with the in-process proxy and Go forwarders;
	// MySQL Router; the external proxies) runs on HOP, sysbench and every
	// other process this one started (the mysqld) on REST.
	sysbench, pre := bin, []string(nil)
	if v := os.Getenv("CAUSALLAB_PROXY_BENCH_TASKSET"); v != "" {
		hop, rest, ok := strings.Cut(v, ":")
		if !ok || hop == "" || rest == "" {
			t.Fatalf("CAUSALLAB_PROXY_BENCH_TASKSET %q: want HOP:REST", v)
		}
		hops := map[int]bool{self: true}
		for _, tg := range targets {
			if tg.pid != 0 {
				hops[tg.pid] = true
			}
			if tg.pid != 0 && tg.pid != self {
				// A `--workers` supervisor's worker processes are the hop
				// too (they are this process's descendants as well).
				for _, d := range descendants(t, tg.pid) {
					hops[d] = true
				}
			}
		}
		for _, pid := range append([]int{self}, descendants(t, self)...) {
			cpus := rest
			if hops[pid] {
				cpus = hop
			}
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil {
				t.Fatalf("taskset %d (%s): %v\n%s", pid, strings.TrimSpace(string(comm)), err, out)
			}
			t.Logf("taskset: pid %d (%s) on CPU %s", pid, strings.TrimSpace(string(comm)), cpus)
		}
		sysbench, pre = "taskset", []string{"-c", rest, bin}
	}
	var prof *os.File
	if path := os.Getenv("CAUSALLAB_PROXY_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		prof = f
	}
	type key struct {
		target  string
		threads int
	}
	results := map[key][]sysbenchResult{}
	profiling := false
	// CAUSALLAB_PROXY_PROFILE_TARGET: which in-process target the profile
	// covers (a name prefix; default causallab-proxy, or go-forwarder).
	profTarget := "causallab-proxy"
	if v := os.Getenv("CAUSALLAB_PROXY_PROFILE_TARGET"); v != "" {
		profTarget = v
	}
	// Stopped proxies (below) are let go on before they are killed, so
	// that their workers can act on their supervisor's death.
	t.Cleanup(func() {
		for _, pid := range epids {
			for _, p := range append([]int{pid}, descendants(t, pid)...) {
				_ = syscall.Kill(p, syscall.SIGCONT)
			}
		}
	})
	rotate := os.Getenv("CAUSALLAB_PROXY_BENCH_ROTATE") != "0"
	for round := 0; round < rounds; round++ {
		for _, th := range threads {
			order := benchOrder(len(targets), round, rotate)
			var names []string
			for _, i := range order {
				names = append(names, targets[i].name)
			}
			t.Logf("round %d threads %d order: %s", round+1, th, strings.Join(names, ", "))
			for _, i := range order {
				tg := targets[i]
				if prof != nil && strings.HasPrefix(tg.name, profTarget) && !profiling {
					if err := pprof.StartCPUProfile(prof); err != nil {
						t.Fatal(err)
					}
					profiling = true
				}
				args := append(append([]string{"oltp_point_select"}, tg.tg.args(db)...), common...)
				args = append(args, fmt.Sprintf("--threads=%d", th), fmt.Sprintf("--time=%d", secs),
					"--percentile=99", "--report-interval=0", "--histogram=off", "run")
				// Only the external proxy whose turn it is runs: the
				// others are stopped (SIGSTOP, with their workers), so
				// that their pollers do not load the servers and the
				// cores under another target's run.
				for _, pid := range epids {
					sig := syscall.SIGSTOP
					if pid == tg.pid {
						sig = syscall.SIGCONT
					}
					for _, p := range append([]int{pid}, descendants(t, pid)...) {
						_ = syscall.Kill(p, sig)
					}
				}
				if slices.Contains(epids, tg.pid) {
					// Its pollers' first polls after the stop (the
					// positions went stale while it was stopped).
					time.Sleep(300 * time.Millisecond)
				}
				hook := startBenchHook(t, tg.name, tg.pid, th, round+1)
				before, mBefore := hopStats(t, tg.pid, self), readMachineStats()
				r, err := runSysbench(ctx, t, sysbench, "", append(slices.Clone(pre), args...)...)
				after, mAfter := hopStats(t, tg.pid, self), readMachineStats()
				hook()
				if strings.HasPrefix(tg.name, profTarget) && profiling {
					pprof.StopCPUProfile()
					profiling, prof = false, nil // one profiled run is enough
				}
				if err != nil {
					t.Fatal(err)
				}
				if r.ignoredErrors != 0 || r.reconnects != 0 {
					t.Fatalf("%s: %d ignored errors, %d reconnects:\n%s", tg.name, r.ignoredErrors, r.reconnects, r.out)
				}
				if r.queries > 0 {
					busy, idle := mAfter.busy-mBefore.busy, mAfter.idle-mBefore.idle
					r.machineCPUPerQueryUS = float64(busy) * 1e6 / float64(clockTicks) / float64(r.queries)
					if busy+idle > 0 {
						r.machineIdle = float64(idle) / float64(busy+idle)
					}
				}
				if tg.pid != 0 && r.queries > 0 {
					r.cpuPerQueryUS = float64(after.cpuTicks-before.cpuTicks) * 1e6 / float64(clockTicks) / float64(r.queries)
					r.switchesPerQuery = float64(after.switches-before.switches) / float64(r.queries)
				}
				results[key{tg.name, th}] = append(results[key{tg.name, th}], r)
				t.Logf("round %d threads %d %-16s %8.0f qps  avg %.3f ms  p99 %.3f ms  cpu %.1f µs/q  switches %.2f/q  machine %.1f µs/q idle %.0f%%", round+1, th, tg.name, r.qps, r.latAvgMS, r.latPctMS, r.cpuPerQueryUS, r.switchesPerQuery, r.machineCPUPerQueryUS, 100*r.machineIdle)
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d rounds x %d s per run, GOMAXPROCS %d, load average after: %s", rounds, secs, runtime.GOMAXPROCS(0), strings.TrimSpace(string(load)))
	fmt.Fprintf(&b, "\n| threads | target | qps (median) | ratio to direct | avg ms | p99 ms (median) | added p99 µs | hop CPU µs/query | hop switches/query | machine CPU µs/query | machine idle |\n|---|---|---|---|---|---|---|---|---|---|---|")
	for _, th := range threads {
		d := medians(results[key{"direct", th}])
		for _, tg := range targets {
			m := medians(results[key{tg.name, th}])
			cpu, sw := "-", "-"
			if tg.pid != 0 {
				cpu, sw = fmt.Sprintf("%.1f", m.cpuPerQueryUS), fmt.Sprintf("%.2f", m.switchesPerQuery)
			}
			fmt.Fprintf(&b, "\n| %d | %s | %.0f | %.0f%% | %.3f | %.3f | %+.0f | %s | %s | %.1f | %.0f%% |", th, tg.name, m.qps, 100*m.qps/d.qps, m.latAvgMS, m.latPctMS, 1000*(m.latPctMS-d.latPctMS), cpu, sw, m.machineCPUPerQueryUS, 100*m.machineIdle)
		}
	}
	t.Log(b.String())
}

// descendants returns the processes whose parent chain reaches pid.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[p] = pp
		}
	}
	var out []int
	for p := range parent {
		for q, n := parent[p], 0; q != 0 && n < 64; q, n = parent[q], n+1 {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// medians returns the per-field medians of several runs.
func medians(rs []sysbenchResult) sysbenchResult {
	med := func(f func(sysbenchResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if n := len(v); n%2 == 0 {
			// An even count's median is the mean of the middle two (the
			// upper one alone made a two-round table mix rounds).
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	return sysbenchResult{
		qps:                  med(func(r sysbenchResult) float64 { return r.qps }),
		latAvgMS:             med(func(r sysbenchResult) float64 { return r.latAvgMS }),
		latPctMS:             med(func(r sysbenchResult) float64 { return r.latPctMS }),
		cpuPerQueryUS:        med(func(r sysbenchResult) float64 { return r.cpuPerQueryUS }),
		switchesPerQuery:     med(func(r sysbenchResult) float64 { return r.switchesPerQuery }),
		machineCPUPerQueryUS: med(func(r sysbenchResult) float64 { return r.machineCPUPerQueryUS }),
		machineIdle:          med(func(r sysbenchResult) float64 { return r.machineIdle }),
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// startMySQLRouter runs MySQL Router from rootfs (chroot) in plain routing
// mode: a static round-robin route over the replicas, classic protocol, TLS
// passed through (no bootstrap, no metadata cache). It returns the port and
// the process id.
func startMySQLRouter(t *testing.T, rootfs string, hosts, ports []string) (int, int) {
	t.Helper()
	port := freePort(t)
	var dests []string
	for i := range hosts {
		dests = append(dests, hosts[i]+":"+ports[i])
	}
	dir, err := os.MkdirTemp(filepath.Join(rootfs, "tmp"), "causallab-router-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	inside := strings.TrimPrefix(dir, rootfs)
	conf := fmt.Sprintf(`[DEFAULT]
logging_folder=%[1]s
runtime_folder=%[1]s
data_folder=%[1]s

[logger]
level=WARNING

[routing:replicas]
bind_address=127.0.0.1
bind_port=%[2]d
destinations=%[3]s
routing_strategy=round-robin
protocol=classic
max_connections=1024
`, inside, port, strings.Join(dests, ","))
	if err := os.WriteFile(filepath.Join(dir, "router.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "chroot", rootfs, "mysqlrouter", "--user=root", "-c", inside+"/router.conf")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start mysqlrouter: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
			c.Close()
			return port, cmd.Process.Pid // chroot execs mysqlrouter: same pid
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "mysqlrouter.log"))
			t.Fatalf("mysqlrouter exited: %s\n%s", out, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mysqlrouter did not listen on %d: %s", port, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startGoForwarder runs the floor any Go proxy hop has on this machine: a
// byte forwarder with no protocol logic (one goroutine per direction, a
// plain read/write loop, each client connection dialed to the next replica
// round-robin), the Go counterpart of MySQL Router's plain routing. It
// returns the port. Measured beside the proxy so its overhead splits into
// what any Go hop costs and what the proxy's own work adds.
func startGoForwarder(t testing.TB, hosts, ports []string, raw bool) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pump := func(dst, src net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", hosts[i%len(hosts)]+":"+ports[i%len(ports)])
			if err != nil {
				c.Close()
				continue
			}
			if raw {
				rc, rb := rawnet.Wrap(c), rawnet.Wrap(b)
				go pump(rb, rc)
				go pump(rc, rb)
				continue
			}
			go pump(b, c)
			go pump(c, b)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// procStats is what a process has used so far: CPU time (user + system,
// in clock ticks) and context switches (voluntary + involuntary), summed
// over its live threads.
type procStats struct {
	cpuTicks, switches int64
}

// machineStats is what every CPU has spent so far (/proc/stat's cpu line,
// clock ticks): busy (user, nice, system, irq, softirq, steal) and idle
// (idle, iowait).
type machineStats struct {
	busy, idle int64
}

// readMachineStats reads /proc/stat; zeros when it cannot.
func readMachineStats() machineStats {
	var m machineStats
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return m
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return m
	}
	for i, v := range f[1:9] {
		n, _ := strconv.ParseInt(v, 10, 64)
		switch i {
		case 3, 4: // idle, iowait
			m.idle += n
		default:
			m.busy += n
		}
	}
	return m
}

// readProcStats reads /proc/<pid>/task/*/{stat,status}; pid 0 gives zeros.
// Threads that exited between two readings are lost (neither Go nor MySQL
// Router ends threads while serving).
// hopStats is a hop's CPU and switches: its process's, with its child
// processes' (a `causallab proxy --workers` supervisor's workers) unless
// it is this process (whose children are the servers).
func hopStats(t *testing.T, pid, self int) procStats {
	ps := readProcStats(pid)
	if pid == 0 || pid == self {
		return ps
	}
	for _, c := range descendants(t, pid) {
		cs := readProcStats(c)
		ps.cpuTicks += cs.cpuTicks
		ps.switches += cs.switches
	}
	return ps
}

func readProcStats(pid int) procStats {
	var ps procStats
	if pid == 0 {
		return ps
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		if b, err := os.ReadFile(task + "/stat"); err == nil {
			// Fields after the parenthesised command: state is field 3,
			// utime 14 and stime 15.
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
				f := strings.Fields(string(b[i+1:]))
				if len(f) > 12 {
					u, _ := strconv.ParseInt(f[11], 10, 64)
					s, _ := strconv.ParseInt(f[12], 10, 64)
					ps.cpuTicks += u + s
				}
			}
		}
		if b, err := os.ReadFile(task + "/status"); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					ps.switches += n
				}
			}
		}
	}
	return ps
}

// startBenchHook starts CAUSALLAB_PROXY_BENCH_HOOK (when set) for one run
// and returns the function that waits for it to end.
func startBenchHook(t *testing.T, target string, pid, threads, round int) func() {
	t.Helper()
	v := os.Getenv("CAUSALLAB_PROXY_BENCH_HOOK")
	if v == "" {
		return func() {}
	}
	cmd := exec.Command("sh", "-c", v)
	cmd.Env = append(os.Environ(), "BENCH_TARGET="+target, "BENCH_PID="+strconv.Itoa(pid),
		"BENCH_THREADS="+strconv.Itoa(threads), "BENCH_ROUND="+strconv.Itoa(round))
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("CAUSALLAB_PROXY_BENCH_HOOK: %v", err)
	}
	return func() {
		if err := cmd.Wait(); err != nil {
			t.Errorf("CAUSALLAB_PROXY_BENCH_HOOK for %s: %v\n%s", target, err, out)
		} else if out.Len() > 0 {
			t.Logf("hook for %s: %s", target, strings.TrimSpace(out.String()))
		}
	}
}

// benchOrder is the order of n targets in a round (0-based): with rotate,
// round r starts at target r mod n and wraps, so that no target always runs
// first after the machine changed load, or always right after the same
// neighbour; without it, the listed order.
func benchOrder(n, round int, rotate bool) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if rotate {
			order[i] = (i + round) % n
		}
	}
	return order
}

// TestMedians checks the bench's summary: an odd count takes the middle
// run, an even count the mean of the middle two.
func TestMedians(t *testing.T) {
	rs := []sysbenchResult{{qps: 4977}, {qps: 5384}}
	if got := medians(rs).qps; got != (4977+5384)/2.0 {
		t.Fatalf("two rounds: median qps %v, want %v", got, (4977+5384)/2.0)
	}
	rs = append(rs, sysbenchResult{qps: 100})
	if got := medians(rs).qps; got != 4977 {
		t.Fatalf("three rounds: median qps %v, want 4977", got)
	}
}

// TestBenchOrder checks the rotation: every target runs once per round,
// and over n rounds each one is first once.
func TestBenchOrder(t *testing.T) {
	if got := benchOrder(3, 1, false); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("no rotation: %v", got)
	}
	first := map[int]int{}
	for r := 0; r < 4; r++ {
		got := benchOrder(4, r, true)
		s := slices.Sorted(slices.Values(got))
		if !slices.Equal(s, []int{0, 1, 2, 3}) {
			t.Fatalf("round %d: %v is not each target once", r, got)
		}
		first[got[0]]++
	}
	if len(first) != 4 {
		t.Fatalf("first targets over 4 rounds: %v, want each once", first)
	}
}
