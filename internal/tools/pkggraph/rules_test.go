package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps is `go list -deps` of pkg (module-relative), run from the module
// root.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "github.com/causallab/causallab/"+pkg)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestPureCore checks the rules docs/architecture.md states: the decision
// core and the simulator link no MySQL driver, TiDB parser or Prometheus;
// gtid imports nothing of the module and no driver.
func TestPureCore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	banned := []string{"github.com/go-mysql-org/", "github.com/go-sql-driver/", "github.com/pingcap/", "github.com/prometheus/", "github.com/jackc/"}
	for _, pkg := range []string{"router", "sim", "gtid", "hashroute"} {
		for _, d := range deps(t, pkg) {
			for _, b := range banned {
				if strings.HasPrefix(d, b) {
					t.Errorf("%s links %s", pkg, d)
				}
			}
		}
	}
	for _, d := range deps(t, "gtid") {
		if strings.HasPrefix(d, "github.com/causallab/causallab/") && d != "github.com/causallab/causallab/gtid" {
			t.Errorf("gtid imports %s", d)
		}
	}
}

// TestLiveImporters: only the proxy and the lab build on the live layer.
func TestLiveImporters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	g, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Pkgs) < 10 {
		t.Fatalf("go list found only %v", g.Pkgs)
	}
	for _, p := range g.Pkgs {
		if slices.Contains(g.Internal[p], "router/live") && p != "proxy" && p != "lab" {
			t.Errorf("%s imports router/live", p)
		}
	}
}
