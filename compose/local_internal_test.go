package compose

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.Replicas != DefaultReplicas || c.Backend != BackendLocal || c.User != DefaultUser || c.StartTimeout != time.Minute || c.RootFS == "" || !strings.HasPrefix(c.Image, "causallab/mysql:") {
				t.Fatalf("defaults not filled: %+v", c)
			}
		}},
		{name: "primary only", cfg: Config{PrimaryOnly: true}, check: func(t *testing.T, c Config) {
			if c.Replicas != 0 {
				t.Fatalf("replicas %d", c.Replicas)
			}
		}},
		{name: "negative replicas", cfg: Config{Replicas: -1}, wantErr: "impossible replica count -1"},
		{name: "ten replicas", cfg: Config{Replicas: 10}, wantErr: "impossible replica count 10"},
		{name: "primary only with replicas", cfg: Config{Replicas: 2, PrimaryOnly: true}, wantErr: "PrimaryOnly"},
		{name: "unknown backend", cfg: Config{Backend: "kubernetes"}, wantErr: `unknown backend "kubernetes"`},
		{name: "too many replica options", cfg: Config{Replicas: 1, ReplicaOptions: make([]ReplicaOptions, 2)}, wantErr: "2 ReplicaOptions for 1 replicas"},
		{name: "fractional delay", cfg: Config{Replicas: 1, ReplicaOptions: []ReplicaOptions{{ApplyDelay: 1500 * time.Millisecond}}}, wantErr: "replica1 apply delay 1.5s"},
		{name: "bad cnf name", cfg: Config{MyCnf: map[string]string{"a b": "1"}}, wantErr: `bad my.cnf setting name "a b"`},
		{name: "cnf value with newline", cfg: Config{MyCnf: map[string]string{"x": "1\n[client]"}}, wantErr: "line break"},
		{name: "quote in password", cfg: Config{Password: "a'b"}, wantErr: "must not contain"},
		{name: "negative timeout", cfg: Config{StartTimeout: -time.Second}, wantErr: "negative StartTimeout"},
		{name: "external without dsn", cfg: Config{Backend: BackendExternal}, wantErr: "External.PrimaryDSN"},
		{name: "dsn without external", cfg: Config{External: ExternalConfig{PrimaryDSN: "a:b@tcp(h:1)/"}}, wantErr: "backend is local"},
		{name: "external counts replicas", cfg: Config{Backend: BackendExternal, External: ExternalConfig{PrimaryDSN: "x", ReplicaDSNs: []string{"y"}}}, check: func(t *testing.T, c Config) {
			if c.Replicas != 1 {
				t.Fatalf("replicas %d", c.Replicas)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			err := c.validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestMyCnfOverrides(t *testing.T) {
	c := Config{MyCnf: map[string]string{"innodb_buffer_pool_size": "128M", "binlog_format": "ROW"}}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	s := c.myCnf(3, 4000, "/tmp/x/replica2", "127.0.0.1")
	for _, want := range []string{"[mysqld]\n", "server-id=3\n", "port=4000\n", "innodb_buffer_pool_size=128M\n", "binlog_format=ROW\n", "datadir=/tmp/x/replica2/data\n", "gtid-mode=ON\n", "mysqlx=OFF\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("my.cnf lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, "innodb_buffer_pool_size") != 1 {
		t.Errorf("override duplicated:\n%s", s)
	}
}

func TestNoRootFS(t *testing.T) {
	_, err := Start(context.Background(), Config{RootFS: "/nonexistent/rootfs", Replicas: 1})
	if !errors.Is(err, ErrNoRootFS) || !strings.Contains(err.Error(), "causallab image") {
		t.Fatalf("err = %v, want ErrNoRootFS naming `causallab image`", err)
	}
}

// ourDirs lists the topology directories this process owns.
func ourDirs(t *testing.T) map[string]bool {
	t.Helper()
	base := filepath.Join(DefaultRootFS(), "tmp")
	out := map[string]bool{}
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(base, e.Name(), "owner"))
		if err == nil && strings.Fields(string(b))[0] == me {
			out[filepath.Join(base, e.Name())] = true
		}
	}
	return out
}

// mysqldUnder lists live processes whose command line names a defaults
// file under dir (as mysqld sees it).
func mysqldUnder(t *testing.T, inDir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pidIsOurs(pid, inDir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func needMySQL(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs MySQL")
	}
	if _, err := os.Stat(filepath.Join(DefaultRootFS(), "usr/sbin/mysqld")); err != nil {
		t.Skip("no root filesystem: run `causallab image`")
	}
}

func TestDownLeavesNothing(t *testing.T) {
	needMySQL(t)
	localOnly(t)
	ctx := context.Background()
	topo, err := Start(ctx, Config{Replicas: 1, ReplicaOptions: []ReplicaOptions{{ApplyDelay: 2 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	lb := topo.be.(*localBackend)
	// The start-up apply delay is in place.
	if st, err := topo.NodeStatus(ctx, "replica1"); err != nil || st.SourceDelay != 2 {
		t.Fatalf("replica1 SOURCE_DELAY: %+v %v", st, err)
	}
	if pids := mysqldUnder(t, lb.inDir); len(pids) != 2 {
		t.Fatalf("%d mysqld processes under %s, want 2", len(pids), lb.inDir)
	}
	if err := topo.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if pids := mysqldUnder(t, lb.inDir); len(pids) != 0 {
		t.Fatalf("processes left after Down: %v", pids)
	}
	if _, err := os.Stat(lb.hostDir); !os.IsNotExist(err) {
		t.Fatalf("%s left after Down (%v)", lb.hostDir, err)
	}
	if err := topo.Down(ctx); err != nil {
		t.Fatalf("second Down: %v", err)
	}
}

func TestFailedStartLeavesNothing(t *testing.T) {
	needMySQL(t)
	localOnly(t)
	cases := map[string]Config{
		// mysqld refuses to initialize.
		"bad setting": {Replicas: 1, MyCnf: map[string]string{"no_such_variable_xyz": "1"}},
		// servers run, then start-up gives up waiting for them.
		"start timeout": {Replicas: 2, StartTimeout: time.Millisecond},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			before := ourDirs(t)
			_, err := Start(context.Background(), cfg)
			if err == nil {
				t.Fatal("Start succeeded")
			}
			t.Logf("error: %v", err)
			after := ourDirs(t)
			for d := range after {
				if !before[d] {
					t.Fatalf("failed Start left %s", d)
				}
			}
			if pids := mysqldUnder(t, "/tmp/causallab-"); len(pids) != 0 {
				// Other topologies of this process may run; only ours count.
				for _, pid := range pids {
					if ppid(pid) == os.Getpid() {
						t.Fatalf("failed Start left mysqld pid %d", pid)
					}
				}
			}
		})
	}
}

func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// TestOwnerDeathKillsServers starts a topology in a child process, kills
// that process with SIGKILL (no cleanup runs), and checks that its mysqld
// processes die with it and that the next Start sweeps its directory.
func TestOwnerDeathKillsServers(t *testing.T) {
	needMySQL(t)
	localOnly(t)
	if os.Getenv("COMPOSE_HELPER") == "1" {
		t.Skip("helper")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartAndHang$", "-test.short")
	cmd.Env = append(os.Environ(), "COMPOSE_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var hostDir, inDir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "TOPOLOGY" {
			hostDir, inDir = f[1], f[2]
			break
		}
	}
	if hostDir == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("helper printed no topology")
	}
	if len(mysqldUnder(t, inDir)) != 2 {
		t.Fatal("helper's servers are not running")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for len(mysqldUnder(t, inDir)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("mysqld of a dead owner still running: %v", mysqldUnder(t, inDir))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cfg := Config{}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	// A killed mysqld can stay a zombie for a moment (or for good, when
	// its new parent does not reap): sweeping waits until none is alive.
	for {
		sweepStale(filepath.Dir(hostDir), &cfg)
		_, err := os.Stat(hostDir)
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sweep left %s (%v)", hostDir, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHelperStartAndHang is the child of TestOwnerDeathKillsServers.
func TestHelperStartAndHang(t *testing.T) {
	if os.Getenv("COMPOSE_HELPER") != "1" {
		t.Skip("only runs as a helper process")
	}
	topo, err := Start(context.Background(), Config{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	lb := topo.be.(*localBackend)
	os.Stdout.WriteString("TOPOLOGY " + lb.hostDir + " " + lb.inDir + "\n")
	time.Sleep(5 * time.Minute)
}

// localOnly skips local clean-up tests in the docker run of the suite
// (make test-docker), where they would only repeat the local run.
func localOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("CAUSALLAB_TEST_BACKEND") == string(BackendDocker) {
		t.Skip("local backend test; the docker run of the suite covers docker")
	}
}

func TestDockerDownLeavesNothing(t *testing.T) {
	if testing.Short() || os.Getenv("CAUSALLAB_TEST_BACKEND") != string(BackendDocker) {
		t.Skip("runs with CAUSALLAB_TEST_BACKEND=docker")
	}
	ctx := context.Background()
	topo, err := Start(ctx, Config{Backend: BackendDocker, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	db := topo.be.(*dockerBackend)
	cli := db.cli
	ids := []string{db.servers[0].id, db.servers[1].id}
	if err := topo.Down(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil {
			t.Fatalf("container %s left after Down", id)
		}
	}
	if _, err := cli.NetworkInspect(ctx, db.networkID, client.NetworkInspectOptions{}); err == nil {
		t.Fatalf("network %s left after Down", db.network)
	}
	// A failed start (mysqld refuses a setting) removes what it created:
	// no container is left with its topology label. (Other topologies run
	// on this engine meanwhile, this suite's other packages' among them,
	// with containers killed on purpose: only this one's are looked at.)
	cfg := Config{Backend: BackendDocker, Replicas: 1, StartTimeout: 20 * time.Second, MyCnf: map[string]string{"no_such_variable_xyz": "1"}}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	failed := newDockerBackend(&cfg)
	if _, err := failed.start(ctx); err == nil {
		t.Fatal("start with a bad setting succeeded")
	} else {
		t.Logf("error: %v", err)
	}
	if failed.topologyID == "" {
		t.Fatal("the failed start made no topology id")
	}
	res, lerr := cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, c := range res.Items {
		if c.Labels["causallab.topology"] == failed.topologyID {
			t.Fatalf("failed start left container %s (%s)", c.ID, c.State)
		}
	}
}

func TestNoDockerEngine(t *testing.T) {
	cfg := Config{Backend: BackendDocker, Replicas: 1}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	b := newDockerBackend(&cfg)
	b.hostOverride = "unix:///nonexistent/docker.sock"
	_, err := b.start(context.Background())
	t.Logf("error: %v", err)
	if !errors.Is(err, ErrNoDocker) || !strings.Contains(err.Error(), "--backend local") {
		t.Fatalf("err = %v, want ErrNoDocker suggesting --backend local", err)
	}
}

// TestDockerImageInitializesItself runs an image that is not the local root
// filesystem's (here a second tag of it, which compose cannot know is the
// same build): each container initializes its own data directory, the path
// a user's image such as mysql:9.7 takes.
func TestDockerImageInitializesItself(t *testing.T) {
	if testing.Short() || os.Getenv("CAUSALLAB_TEST_BACKEND") != string(BackendDocker) {
		t.Skip("runs with CAUSALLAB_TEST_BACKEND=docker")
	}
	ctx := context.Background()
	probe := &dockerBackend{cfg: &Config{}}
	cli, err := probe.client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tag := "causallab-selfinit/mysql:test"
	if _, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: DefaultImage(DefaultRootFS()), Target: tag}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{}) })
	topo, err := Start(ctx, Config{Backend: BackendDocker, Replicas: 1, Image: tag})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Down(ctx)
	p := topo.Primary()
	if err := topo.exec(ctx, p, "CREATE DATABASE selfinit"); err != nil {
		t.Fatal(err)
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r, _ := topo.Node("replica1")
	uuidP, _ := topo.queryString(ctx, p, "SELECT @@server_uuid")
	uuidR, _ := topo.queryString(ctx, r, "SELECT @@server_uuid")
	if uuidP == "" || uuidP == uuidR {
		t.Fatalf("server_uuids %q %q", uuidP, uuidR)
	}
}

// TestPortTakenIsRetried hands the first server a port another program
// holds: mysqld fails to bind, compose sees it in the error log and starts
// the server on another port.
func TestPortTakenIsRetried(t *testing.T) {
	needMySQL(t)
	localOnly(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	cfg := Config{PrimaryOnly: true}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	b := newLocalBackend(&cfg)
	var mu sync.Mutex
	calls := 0
	b.pickPort = func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return taken, nil
		}
		return freePort()
	}
	began := time.Now()
	nodes, err := b.start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer b.down(context.Background())
	t.Logf("start with one taken port: %v", time.Since(began))
	began = time.Now()
	if nodes[0].Port == taken || calls != 2 {
		t.Fatalf("primary on port %d (taken %d) after %d picks", nodes[0].Port, taken, calls)
	}
	// With every pick taken, the error names the port in use.
	b2 := newLocalBackend(&cfg)
	b2.pickPort = func() (int, error) { return taken, nil }
	_, err = b2.start(context.Background())
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), strconv.Itoa(taken)) {
		t.Fatalf("err = %v, want ErrPortInUse naming %d", err, taken)
	}
	t.Logf("start with every port taken: %v", time.Since(began))
}

// TestWaitReadyRejectsAnotherServer: a server of another topology (same
// account) answering on the port picked for ours is not taken for ours
// (it was: a replica then "replicated" from the primary's own port and
// MySQL refused equal server ids).
func TestWaitReadyRejectsAnotherServer(t *testing.T) {
	needMySQL(t)
	localOnly(t)
	cfg := Config{PrimaryOnly: true}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	other := newLocalBackend(&cfg)
	nodes, err := other.start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer other.down(context.Background())
	b := newLocalBackend(&cfg)
	b.hostDir = t.TempDir()
	s := &localServer{name: "primary", port: nodes[0].Port, hostDir: filepath.Join(b.hostDir, "primary")}
	done := make(chan struct{})
	go func() { time.Sleep(200 * time.Millisecond); close(done) }()
	err = b.waitReady(context.Background(), s, done)
	if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), strconv.Itoa(nodes[0].Port)) {
		t.Fatalf("waitReady with another server on the port = %v, want ErrPortInUse naming %d", err, nodes[0].Port)
	}
	// Its own server is accepted.
	own := other.servers[0]
	if err := other.waitReady(context.Background(), own, make(chan struct{})); err != nil {
		t.Fatalf("waitReady of the server itself: %v", err)
	}
}

// TestProbeDocker: the probe behind the CLI's `up --backend auto`.
func TestProbeDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := probeDocker(ctx, "", "unix:///nonexistent/docker.sock")
	if p.Engine || p.Usable() || !strings.Contains(p.Reason, "no Docker engine") {
		t.Fatalf("probe of a missing engine: %+v", p)
	}
	real := probeDocker(ctx, "causallab/nosuch:0", "")
	if !real.Engine {
		t.Skipf("no Docker engine here (%s): the rest needs one", real.Reason)
	}
	if real.Image || !real.Buildable || !real.Usable() {
		t.Fatalf("probe of a missing causallab image: %+v", real)
	}
	if p := probeDocker(ctx, "someone/nosuch:0", ""); p.Usable() || !strings.Contains(p.Reason, "someone/nosuch:0") {
		t.Fatalf("probe of a missing foreign image: %+v", p)
	}
	img := DefaultImage(DefaultRootFS())
	if p := probeDocker(ctx, img, ""); !p.Image {
		t.Logf("default image %s not built here: %+v", img, p)
	} else if !p.Usable() || p.Reason != "" {
		t.Fatalf("probe of the present image %s: %+v", img, p)
	}
}
