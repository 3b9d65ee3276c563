package compose

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestKillAdoptedReturnsOnceExited: Kill of a server another process
// started (`causallab fault kill` adopts the pids of the state file) must
// return only once the process has exited, and leave no socket lock file
// naming it. It returned as soon as the process's command line read empty,
// which happens while a killed process's threads still exit, and a zombie
// nobody reaps yet still exists for mysqld's check of the lock file: the
// restart that followed failed 2 times in 4 ("Another process with pid N
// is using unix socket file"). The stand-in here is a helper process we
// never reap: it stays a zombie, deterministically.
func TestKillAdoptedReturnsOnceExited(t *testing.T) {
	localOnly(t)
	if os.Getenv("COMPOSE_HELPER") != "" {
		t.Skip("helper")
	}
	node := filepath.Join(t.TempDir(), "n1")
	if err := os.Mkdir(node, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSleep$", "-test.short", "--", "--defaults-file="+node+"/my.cnf")
	cmd.Env = append(os.Environ(), "COMPOSE_HELPER=sleep")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); !pidIsOurs(pid, node); {
		if time.Now().After(deadline) {
			t.Fatal("helper not running")
		}
		time.Sleep(10 * time.Millisecond)
	}
	lock := filepath.Join(node, "mysql.sock.lock")
	if err := os.WriteFile(lock, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &localServer{name: "n1", hostDir: node, inDir: node, pid: pid} // adopted: no done channel
	b := &localBackend{servers: []*localServer{s}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.kill(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := bytes.LastIndexByte(stat, ')'); err == nil && (i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z') {
		t.Fatalf("Kill returned while the process runs: %s", stat)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Fatalf("Kill left the socket lock file naming the exited pid %d (a restarted mysqld refuses to start): %v", pid, err)
	}
	if pid, _ := s.alive(); pid != 0 {
		t.Fatalf("killed server still alive as pid %d", pid)
	}
}

// TestHelperSleep is the stand-in server of TestKillAdoptedReturnsOnceExited.
func TestHelperSleep(t *testing.T) {
	if os.Getenv("COMPOSE_HELPER") != "sleep" {
		t.Skip("only runs as a helper process")
	}
	time.Sleep(10 * time.Minute)
}

// TestDockerKillReturnsOnceExited: the docker backend's Kill returns once
// the container (mysqld, its process 1) has stopped running, not once the
// signal is sent.
func TestDockerKillReturnsOnceExited(t *testing.T) {
	if testing.Short() || os.Getenv("CAUSALLAB_TEST_BACKEND") != string(BackendDocker) {
		t.Skip("runs with CAUSALLAB_TEST_BACKEND=docker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topo, err := Start(ctx, Config{Backend: BackendDocker, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Down(context.Background())
	b := topo.be.(*dockerBackend)
	for range 3 {
		if err := topo.Kill(ctx, "replica1"); err != nil {
			t.Fatal(err)
		}
		s, err := b.server("replica1")
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.containerState(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if st.Running {
			t.Fatalf("Kill returned with the container running: %+v", st)
		}
		if err := topo.Restart(ctx, "replica1"); err != nil {
			t.Fatal(err)
		}
	}
}
