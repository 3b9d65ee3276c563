package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/proxy"
)

// cliResult is what one in-process run of the CLI produced.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs the cobra command tree in-process with args and returns its
// output and the exit code main would use.
func runCLI(t *testing.T, ctx context.Context, args ...string) cliResult {
	t.Helper()
	return runCLIWithInput(t, ctx, "", args...)
}

// runCLIWithInput is runCLI with stdin.
func runCLIWithInput(t *testing.T, ctx context.Context, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return cliResult{stdout: out.String(), stderr: errb.String(), code: code}
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// cliStatus is the part of `status --json` the tests read.
type cliStatus struct {
	Backend string               `json:"backend"`
	Epoch   int64                `json:"epoch"`
	Nodes   []compose.NodeStatus `json:"nodes"`
}

func (s cliStatus) node(t *testing.T, name string) compose.NodeStatus {
	t.Helper()
	for _, n := range s.Nodes {
		if n.Node.Name == name {
			return n
		}
	}
	t.Fatalf("status has no node %s: %+v", name, s.Nodes)
	return compose.NodeStatus{}
}

// localProcs is what the state file says about local processes (read as
// JSON: the backend's own types are not exported).
type localProcs struct {
	Internal struct {
		Local struct {
			HostDir string `json:"host_dir"`
			Servers []struct {
				Name string `json:"name"`
				Pid  int    `json:"pid"`
			} `json:"servers"`
		} `json:"local"`
	} `json:"internal"`
}

// TestComposeCLI drives up, status, fault, down and image in-process on
// one local topology (1 primary + 2 replicas) recorded in a temporary
// state file.
func TestComposeCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MySQL (skipped under -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	state := filepath.Join(t.TempDir(), "topology.json")
	st := func(args ...string) []string { return append(args, "--state", state) }

	up := runCLI(t, ctx, st("up", "--backend", "local", "--replicas", "2")...)
	if up.code != 0 {
		t.Fatalf("up: %s", up)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(state); err == nil {
			runCLI(t, context.Background(), st("down")...)
		}
	})
	if got := strings.Count(up.stdout, "causallab:causallab@tcp(127.0.0.1:"); got != 3 {
		t.Fatalf("up printed %d DSNs, want 3:\n%s", got, up)
	}
	if !strings.Contains(up.stderr, "local topology up") {
		t.Fatalf("up does not say which backend ran:\n%s", up)
	}
	raw, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var procs localProcs
	if err := json.Unmarshal(raw, &procs); err != nil {
		t.Fatal(err)
	}
	if procs.Internal.Local.HostDir == "" || len(procs.Internal.Local.Servers) != 3 {
		t.Fatalf("state file lacks the local process table: %s", raw)
	}

	status := func(t *testing.T) cliStatus {
		t.Helper()
		r := runCLI(t, ctx, st("status", "--json")...)
		if r.code != 0 {
			t.Fatalf("status: %s", r)
		}
		var s cliStatus
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r)
		}
		return s
	}
	waitHealth := func(t *testing.T, node string, want compose.Health) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			n := status(t).node(t, node)
			if n.Health == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s health %s, want %s: %+v", node, n.Health, want, n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	fault := func(t *testing.T, wantCode int, args ...string) cliResult {
		t.Helper()
		r := runCLI(t, ctx, st(append([]string{"fault"}, args...)...)...)
		if r.code != wantCode {
			t.Fatalf("fault %v: want exit %d, got %s", args, wantCode, r)
		}
		return r
	}

	t.Run("second up refused", func(t *testing.T) {
		r := runCLI(t, ctx, st("up", "--backend", "local", "--replicas", "1")...)
		if r.code != 2 || !strings.Contains(r.stderr, "already running") || !strings.Contains(r.stderr, "causallab down") {
			t.Fatalf("second up: %s", r)
		}
	})

	t.Run("status shows every node", func(t *testing.T) {
		r := runCLI(t, ctx, st("status")...)
		if r.code != 0 {
			t.Fatalf("status: %s", r)
		}
		for _, name := range []string{"primary", "replica1", "replica2"} {
			if !strings.Contains(r.stdout, "\n"+name+" ") {
				t.Fatalf("status table lacks %s:\n%s", name, r.stdout)
			}
		}
		s := status(t)
		if s.Backend != "local" || len(s.Nodes) != 3 || s.Epoch != compose.FirstEpoch {
			t.Fatalf("status --json: %+v", s)
		}
		if !strings.HasPrefix(r.stdout, fmt.Sprintf("backend local, epoch %d\n", compose.FirstEpoch)) {
			t.Fatalf("status table header: %s", r.stdout)
		}
		for _, n := range s.Nodes {
			if n.Health != compose.HealthOK || n.ServerUUID == "" {
				t.Fatalf("%s: %+v", n.Node.Name, n)
			}
		}
	})

	t.Run("up bad backend", func(t *testing.T) {
		// The state file exists: remove nothing, check the flag first on a
		// second state path.
		r := runCLI(t, ctx, "up", "--backend", "bogus", "--state", state+".other")
		if r.code != 2 || !strings.Contains(r.stderr, "want auto, docker or local") {
			t.Fatalf("up --backend bogus: %s", r)
		}
		if _, err := os.Stat(state + ".other"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("refused up wrote a state file: %v", err)
		}
	})

	t.Run("bad input exits 2", func(t *testing.T) {
		for _, args := range [][]string{
			{"kill", "nosuch"},
			{"bogus", "replica1"},
			{"stop-applier", "primary"},
			{"apply-delay", "replica1", "1.5"},
			{"apply-delay", "replica1"},
			{"heavy", "many"},
		} {
			r := fault(t, 2, args...)
			// Bad arguments (caught before attaching) print the kinds;
			// the topology's refusals are one line.
			lines := strings.Count(strings.TrimSpace(r.stderr), "\n")
			if byParse := !strings.Contains(r.stderr, "unknown node") && !strings.Contains(r.stderr, "wrong role"); byParse != (lines > 0) {
				t.Fatalf("fault %v: %d more error lines:\n%s", args, lines, r)
			}
		}
		if r := fault(t, 2, "kill", "nosuch"); !strings.Contains(r.stderr, `unknown node "nosuch"`) {
			t.Fatalf("unknown node message: %s", r)
		}
		if r := runCLI(t, ctx, "status", "--state", state+".missing"); r.code != 2 || !strings.Contains(r.stderr, "causallab up") {
			t.Fatalf("status without a topology: %s", r)
		}
	})

	t.Run("kill and restart", func(t *testing.T) {
		fault(t, 0, "kill", "replica1")
		if n := status(t).node(t, "replica1"); n.Health != compose.HealthUnreachable {
			t.Fatalf("killed replica1: %+v", n)
		}
		fault(t, 0, "kill", "replica1") // a dead node: no-op
		fault(t, 0, "restart", "replica1")
		waitHealth(t, "replica1", compose.HealthOK)
	})

	t.Run("pause and resume", func(t *testing.T) {
		fault(t, 0, "pause", "replica2")
		if n := status(t).node(t, "replica2"); n.Health != compose.HealthUnreachable {
			t.Fatalf("paused replica2: %+v", n)
		}
		fault(t, 0, "resume", "replica2")
		waitHealth(t, "replica2", compose.HealthOK)
	})

	t.Run("mysql client", func(t *testing.T) { testMySQLClient(t, ctx, state) })
	t.Run("proxy workers", func(t *testing.T) { testProxyWorkers(t, ctx, state) })

	t.Run("lab exit codes", func(t *testing.T) {
		// lab attaches to this topology through its state file; a --fail-on
		// rule that holds is exit 3 after the table is printed.
		t.Setenv("CAUSALLAB_STATE", state)
		args := []string{"lab", "routers", "--routers", "any,token-ryw-mr", "--condition", "identical", "--duration", "1s",
			"--write-rate", "20", "--sessions", "20", "--reads-per-write", "1", "--no-sim"}
		r := runCLI(t, ctx, append(args, "--fail-on", "any:errors>=0")...)
		if r.code != exitViolation || !strings.Contains(r.stdout, "| token-ryw-mr |") || !strings.Contains(r.stderr, "rule(s) hold") {
			t.Fatalf("a rule that holds: want exit 3 after the table: %s", r)
		}
		for _, phase := range []string{"set-up", "workload", "drain"} {
			if !strings.Contains(r.stderr, `msg="lab routers: `+phase+`"`) {
				t.Errorf("no log line for phase %s:\n%s", phase, r.stderr)
			}
		}
		if r := runCLI(t, ctx, append(args, "--fail-on", "errors<0")...); r.code != exitOK {
			t.Fatalf("a rule that does not hold: want exit 0: %s", r)
		}
		// --engine names the engine of a topology the run starts: an
		// attached one of another engine is refused, never used instead.
		r = runCLI(t, ctx, append(args, "--engine", "mariadb")...)
		if r.code == exitOK || !strings.Contains(r.stderr, "--engine mariadb, but the topology runs mysql") {
			t.Fatalf("--engine mariadb on the attached MySQL topology: %s", r)
		}
		if n := status(t).node(t, "primary"); n.Health != compose.HealthOK {
			t.Fatalf("the attached topology after the refusal: %+v", n)
		}
	})

	t.Run("applier and delay", func(t *testing.T) {
		if r := fault(t, 0, "stop-applier", "replica2"); r.stdout != "stopped the applier (SQL thread) of replica2\nundo: causallab fault start-applier replica2\n" {
			t.Fatalf("stop-applier says: %s", r)
		}
		if n := status(t).node(t, "replica2"); n.SQLRunning != "No" || n.Health != compose.HealthStopped {
			t.Fatalf("replica2 with applier stopped: %+v", n)
		}
		fault(t, 0, "start-applier", "replica2")
		fault(t, 0, "apply-delay", "replica2", "3")
		if n := status(t).node(t, "replica2"); n.SourceDelay != 3 || n.SQLRunning != "Yes" {
			t.Fatalf("replica2 with delay: %+v", n)
		}
		if r := fault(t, 0, "apply-delay", "replica2", "0"); !strings.Contains(r.stdout, "removed the apply delay of replica2") {
			t.Fatalf("apply-delay 0 says: %s", r)
		}
		waitHealth(t, "replica2", compose.HealthOK)
	})

	t.Run("partition heal heavy", func(t *testing.T) {
		r := fault(t, 0, "partition", "replica1")
		if !strings.Contains(r.stdout, "partitioned replica1 (io-thread)") || !strings.Contains(r.stdout, "weaker") {
			t.Fatalf("partition output: %s", r)
		}
		if n := status(t).node(t, "replica1"); n.IORunning != "No" {
			t.Fatalf("partitioned replica1: %+v", n)
		}
		fault(t, 0, "heal", "replica1")
		r = fault(t, 0, "heavy", "1000")
		if !strings.Contains(r.stdout, "inserted 1000 rows") {
			t.Fatalf("heavy output: %s", r)
		}
		waitHealth(t, "replica1", compose.HealthOK)
	})

	t.Run("failover with a paused replica", func(t *testing.T) {
		fault(t, 0, "pause", "replica1")
		r := fault(t, 0, "failover", "replica2")
		if !strings.Contains(r.stdout, "new primary replica2 (epoch 2)") || !strings.Contains(r.stdout, "deferred replica1 (paused)") {
			t.Fatalf("failover output: %s", r)
		}
		if !strings.Contains(r.stderr, "fault: failover replica2") { // its phase, as a log line off a terminal
			t.Fatalf("failover shows no phase: %s", r)
		}
		s := status(t)
		if s.Epoch != compose.FirstEpoch+1 || s.node(t, "replica2").Node.Role != compose.RolePrimary || s.node(t, "primary").Node.Role != compose.RoleRetired {
			t.Fatalf("status after failover: %+v", s)
		}
		if n := s.node(t, "replica1"); n.PendingRepoint != "paused" {
			t.Fatalf("replica1 after failover: %+v", n)
		}
		// A separate process (this run) resumes it: the pending mark came
		// through the state file, and replica1 now follows replica2.
		fault(t, 0, "resume", "replica1")
		n := status(t).node(t, "replica1")
		p := status(t).node(t, "replica2").Node
		if n.PendingRepoint != "" || n.Source != fmt.Sprintf("%s:%d", p.PeerHost, p.PeerPort) {
			t.Fatalf("resumed replica1: %+v", n)
		}
		waitHealth(t, "replica1", compose.HealthOK)
	})

	t.Run("image", func(t *testing.T) {
		r := runCLI(t, ctx, "image", "--no-docker")
		if r.code != 0 {
			t.Fatalf("image: %s", r)
		}
		var rootfs string
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if v, ok := strings.CutPrefix(line, "rootfs="); ok {
				rootfs = v
			}
		}
		if rootfs == "" || !strings.Contains(r.stdout, "version=9.") {
			t.Fatalf("image output: %s", r)
		}
		if _, err := os.Stat(filepath.Join(rootfs, "usr/sbin/mysqld")); err != nil {
			t.Fatalf("image: rootfs %s has no mysqld: %v", rootfs, err)
		}
	})

	// down removes every process and the directory.
	raw, err = os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &procs); err != nil {
		t.Fatal(err)
	}
	down := runCLI(t, ctx, st("down")...)
	if down.code != 0 || !strings.Contains(down.stderr, "topology removed") || !strings.Contains(down.stderr, "down: topology down") {
		t.Fatalf("down: %s", down)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state file left after down: %v", err)
	}
	if _, err := os.Stat(procs.Internal.Local.HostDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory %s left after down: %v", procs.Internal.Local.HostDir, err)
	}
	for _, s := range procs.Internal.Local.Servers {
		if s.Pid == 0 {
			t.Fatalf("state recorded no pid for %s: %s", s.Name, raw)
		}
		// Signal 0 only checks existence; a pid reused by an unrelated
		// process is told apart by the cmdline, which names the topology's
		// directory (as seen inside the chroot: same base name).
		if err := syscall.Kill(s.Pid, 0); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.Pid)); bytes.Contains(b, []byte(filepath.Base(procs.Internal.Local.HostDir)+"/")) {
				t.Fatalf("%s (pid %d) still runs after down: %q", s.Name, s.Pid, b)
			}
		}
	}
	if r := runCLI(t, ctx, st("down")...); r.code != 2 {
		t.Fatalf("second down: %s", r)
	}
}

// testMySQLClient drives `causallab mysql` on the topology of state: a
// node, standard input, an unknown node, and the README's token tour
// through an in-process proxy (write, read the token back, carry it on
// another connection in a comment).
func testMySQLClient(t *testing.T, ctx context.Context, state string) {
	st := func(args ...string) []string { return append([]string{"mysql", "--state", state}, args...) }
	r := runCLI(t, ctx, st("replica1", "--", "-N", "-e", "SELECT @@server_id")...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "2" {
		t.Fatalf("mysql replica1: %s", r)
	}
	if r := runCLIWithInput(t, ctx, "SELECT 40 + 2 AS answer;\n", st()...); r.code != 0 || !strings.Contains(r.stdout, "answer\n42\n") {
		t.Fatalf("mysql (the primary) reading statements from stdin: %s", r)
	}
	if r := runCLI(t, ctx, st("replica7", "-e", "SELECT 1")...); r.code != exitUsage || !strings.Contains(r.stderr, `unknown node "replica7"`) {
		t.Fatalf("mysql replica7: %s", r)
	}
	if r := runCLI(t, ctx, st("-e", "SELECT nonsense")...); r.code != exitFailure || !strings.Contains(r.stderr, "ERROR 1054") {
		t.Fatalf("a failing statement: want the client's error and exit 1: %s", r)
	}

	cfg, err := proxy.ConfigFromTopology(state)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Users = []proxy.User{{Name: "app", Password: "app"}}
	cfg.Listen, cfg.Logger = "127.0.0.1:0", slog.Default()
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := srv.Listen(pctx); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pctx) }()
	defer func() { stop(); <-served }()
	px := func(args ...string) cliResult {
		return runCLI(t, ctx, st(append([]string{"--proxy", srv.Addr(), "proxy"}, args...)...)...)
	}
	if r := runCLI(t, ctx, st("-e", "CREATE DATABASE IF NOT EXISTS tour; CREATE TABLE IF NOT EXISTS tour.notes (id INT PRIMARY KEY AUTO_INCREMENT, body TEXT)")...); r.code != 0 {
		t.Fatalf("create: %s", r)
	}
	r = px("--", "-N", "-e", "INSERT INTO tour.notes (body) VALUES ('written through the proxy'); SELECT @causal_token")
	tok := strings.TrimSpace(r.stdout)
	// The token carries the topology's epoch, the one status prints.
	if r.code != 0 || !strings.HasPrefix(tok, fmt.Sprintf("g1.%d.", compose.FirstEpoch)) {
		t.Fatalf("write and token through the proxy: %s", r)
	}
	r = px("--", "-N", "-e", "/* causal_token:"+tok+" */ SELECT body FROM tour.notes ORDER BY id DESC LIMIT 1")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "written through the proxy" {
		t.Fatalf("read with the token on another connection: %s", r)
	}
	// The comment reaches the proxy (the client keeps comments): a token
	// no server holds is refused, not served stale.
	set, _, _ := strings.Cut(strings.TrimPrefix(tok, fmt.Sprintf("g1.%d.", compose.FirstEpoch)), ":")
	r = px("-e", fmt.Sprintf("/* causal_token:g1.%d.%s:1-999999 */ SELECT 1", compose.FirstEpoch, set))
	if r.code != exitFailure || !strings.Contains(r.stderr, "cannot serve this read consistently") {
		t.Fatalf("a token from the future: %s", r)
	}
}
