package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// externalProxies starts one `causallab proxy` process per entry of
// CAUSALLAB_PROXY_BENCH_BINARIES ("name=path,name=path": causallab
// binaries, e.g. one built at an older commit and one at this one; a path
// may end in ":policy:watermark_source:workers:poll_interval:poll_idle_interval:socket_io"
// to set those; a build older than a key refuses it, so leave it empty
// there), each
// with the in-process proxy target's settings (mysql_native_password, the
// run's position source, default policy) against the shared topology,
// so that two builds are measured in one run beside the other targets.
// It returns each one's name, port and pid (for the hop's CPU).
func externalProxies(t *testing.T, positions string) (names []string, ports []int, pids []int) {
	t.Helper()
	v := os.Getenv("CAUSALLAB_PROXY_BENCH_BINARIES")
	if v == "" {
		return nil, nil, nil
	}
	p := topo.Primary()
	type backend struct {
		Name     string `yaml:"name,omitempty"`
		Addr     string `yaml:"addr"`
		User     string `yaml:"user"`
		Password string `yaml:"password"`
	}
	for _, entry := range strings.Split(v, ",") {
		name, bin, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok || name == "" || bin == "" {
			t.Fatalf("CAUSALLAB_PROXY_BENCH_BINARIES: %q is not name=path", entry)
		}
		// path:policy:watermark_source:workers:poll_interval:poll_idle_interval:socket_io:gomaxprocs
		// sets those (any may be empty: the default).
		bin, settings, _ := strings.Cut(bin, ":")
		policy, wms, _ := strings.Cut(settings, ":")
		wms, workers, _ := strings.Cut(wms, ":")
		workers, poll, _ := strings.Cut(workers, ":")
		poll, idle, _ := strings.Cut(poll, ":")
		idle, sio, _ := strings.Cut(idle, ":")
		sio, gmp, _ := strings.Cut(sio, ":")
		port := freePort(t)
		cfg := map[string]any{
			"listen":      "127.0.0.1:" + strconv.Itoa(port),
			"http_listen": "",
			"users":       []map[string]string{{"name": "app", "password": "apppw"}},
			"auth_method": "mysql_native_password",
			"primary":     backend{Addr: p.Addr(), User: p.User, Password: p.Password},
		}
		if positions != "" {
			cfg["positions"] = positions
		}
		if policy != "" {
			cfg["policy"] = policy
		}
		if wms != "" {
			cfg["watermark_source"] = wms
		}
		if workers != "" {
			n, err := strconv.Atoi(workers)
			if err != nil {
				t.Fatalf("CAUSALLAB_PROXY_BENCH_BINARIES: %q: workers %q", entry, workers)
			}
			cfg["workers"] = n
		}
		if poll != "" {
			if _, err := time.ParseDuration(poll); err != nil {
				t.Fatalf("CAUSALLAB_PROXY_BENCH_BINARIES: %q: poll_interval %q: %v", entry, poll, err)
			}
			cfg["poll_interval"] = poll
		}
		if idle != "" {
			if _, err := time.ParseDuration(idle); err != nil {
				t.Fatalf("CAUSALLAB_PROXY_BENCH_BINARIES: %q: poll_idle_interval %q: %v", entry, idle, err)
			}
			cfg["poll_idle_interval"] = idle
		}
		if sio != "" {
			cfg["socket_io"] = sio
		}
		if gmp != "" {
			cfg["gomaxprocs"] = gmp
		}
		var reps []backend
		for _, r := range topo.Replicas() {
			reps = append(reps, backend{Name: r.Name, Addr: r.Addr(), User: r.User, Password: r.Password})
		}
		cfg["replicas"] = reps
		data, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "proxy.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "proxy", "--config", path, "--http", "")
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		// Its own process group: TestSysbenchSpeed stops the proxies
		// whose turn it is not (SIGSTOP), and a group holding a stopped
		// process gets SIGHUP from the kernel when it becomes orphaned
		// (POSIX), as the test's group does when the shell that started
		// the test exits before it: the proxies died of it mid-run. Their
		// own group's parent, this process, outlives them.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("start %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			// A proxy that ended on its own before the run did says how.
			early := ""
			select {
			case <-exited:
				early = fmt.Sprintf(" (it ended before the run did: %s)", cmd.ProcessState)
			default:
			}
			cancel()
			<-exited
			if t.Failed() || early != "" {
				t.Logf("%s's output%s:\n%s", name, early, out)
			}
		})
		deadline := time.Now().Add(30 * time.Second)
		for {
			if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
				c.Close()
				break
			}
			select {
			case <-exited:
				t.Fatalf("%s exited: %s", bin, out)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not listen on %d: %s", bin, port, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		names, ports, pids = append(names, name), append(ports, port), append(pids, cmd.Process.Pid)
	}
	return names, ports, pids
}
