package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProxyStateFileAndPorts: with neither --config nor --topology the
// proxy fronts the topology the state file records (CAUSALLAB_STATE), as
// every other command does, and says so; with none running it names the
// state file and `causallab up`. An address another program holds stops
// it before the backends are dialled, naming the flag that moves it.
func TestProxyStateFileAndPorts(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "topology.json")
	t.Setenv("CAUSALLAB_STATE", state)
	ctx := context.Background()

	r := runCLI(t, ctx, "proxy")
	if r.code != exitUsage || !strings.Contains(r.stderr, "no topology is running (no state file at "+state+")") || !strings.Contains(r.stderr, "causallab up") {
		t.Errorf("no state file: %s", r)
	}

	// A state file as `causallab up` writes it (the proxy reads its nodes
	// and epoch); its primary answers nothing.
	if err := os.WriteFile(state, []byte(`{"version":2,"backend":"local","epoch":3,"nodes":[
		{"name":"primary","role":"primary","host":"127.0.0.1","port":1,"user":"u","password":"p"},
		{"name":"replica1","role":"replica","host":"127.0.0.1","port":2,"user":"u","password":"p"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().String()
	fronting := "fronting the topology causallab up runs (state " + state + ": primary 127.0.0.1:1, 1 replica)"

	r = runCLI(t, ctx, "proxy", "--listen", taken, "--http", "")
	if r.code != exitFailure || !strings.Contains(r.stderr, fronting) ||
		!strings.Contains(r.stderr, taken+" is in use") || !strings.Contains(r.stderr, "give --listen HOST:PORT, --listen 127.0.0.1:0 for a free port") {
		t.Errorf("--listen taken: %s", r)
	}
	r = runCLI(t, ctx, "proxy", "--listen", "127.0.0.1:0", "--http", taken)
	if r.code != exitFailure || !strings.Contains(r.stderr, taken+" is in use") || !strings.Contains(r.stderr, `--http "" for none`) {
		t.Errorf("--http taken: %s", r)
	}
	// Workers: each one's metrics address (the --http port + its index).
	r = runCLI(t, ctx, "proxy", "--listen", "127.0.0.1:0", "--http", taken, "--workers", "2")
	if r.code != exitFailure || !strings.Contains(r.stderr, taken+" is in use") {
		t.Errorf("--workers 2, --http taken: %s", r)
	}
	// Free addresses: on to the state file's primary, which refuses.
	r = runCLI(t, ctx, "proxy", "--listen", "127.0.0.1:0", "--http", "")
	if r.code != exitFailure || !strings.Contains(r.stderr, fronting) || !strings.Contains(r.stderr, "127.0.0.1:1") || strings.Contains(r.stderr, "in use") {
		t.Errorf("free addresses: %s", r)
	}
	// --topology and --config still win over the state file.
	if r := runCLI(t, ctx, "proxy", "--topology", filepath.Join(dir, "none.json")); r.code != exitUsage || strings.Contains(r.stderr, "fronting") {
		t.Errorf("--topology missing: %s", r)
	}
}
