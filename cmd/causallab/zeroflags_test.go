package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestZeroIsNotTheDefault: every numeric flag whose 0 the libraries read
// as "the default" refuses an explicit 0 with exit 2 before anything
// starts, naming the smallest value and the default, on every command
// that has it; the zeros that mean something still run.
func TestZeroIsNotTheDefault(t *testing.T) {
	t.Setenv("CAUSALLAB_STATE", filepath.Join(t.TempDir(), "none.json"))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel() // anything that starts work fails on it: exit 1, not 2
	// Which list each command refuses (by path prefix), and the flags a
	// command needs before its own code runs.
	lists := []struct {
		prefix string
		flags  []defaultIfZero
		extra  []string
	}{
		{"sim", simZeroDefaults, nil},
		{"lab gated", gatedZeroDefaults, nil},
		{"lab scenario", labZeroDefaults, []string{"routers"}},
		{"lab ", labZeroDefaults, nil},
		{"proxy", proxyZeroDefaults, nil},
		{"hash", []defaultIfZero{{name: "factor"}}, []string{"--servers", "a:1"}},
		{"watch", []defaultIfZero{{name: "heartbeat"}}, []string{"--replica", "r1=u:p@tcp(127.0.0.1:1)/"}},
	}
	tested := map[string]bool{}
	for _, c := range allCommands(newRootCmd()) {
		path := strings.Fields(c.CommandPath())[1:]
		if c.HasSubCommands() {
			continue
		}
		for _, l := range lists {
			p := strings.Join(path, " ")
			if !strings.HasPrefix(p, l.prefix) || (l.prefix == "lab " && p == "lab scenario") {
				continue
			}
			for _, z := range l.flags {
				fl := c.LocalFlags().Lookup(z.name)
				if fl == nil {
					continue
				}
				zero := "0"
				if fl.Value.Type() == "duration" {
					zero = "0s"
				}
				args := append(append(slices.Clone(path), l.extra...), "--"+z.name, zero)
				r := runCLI(t, cancelled, args...)
				want := "--" + z.name + " " + zero + ": want "
				if r.code != exitUsage || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "leave it out for the default, ") {
					t.Errorf("%q: want exit 2 and %q: %s", args, want, r)
				}
				tested[z.name] = true
			}
		}
	}
	for _, l := range lists {
		for _, z := range l.flags {
			if !tested[z.name] {
				t.Errorf("--%s: no command has it", z.name)
			}
		}
	}
	r := runCLI(t, cancelled, "lab", "routers", "--sessions", "0")
	if want := "causallab lab routers: --sessions 0: want 1 or more (leave it out for the default, 2000)"; !strings.Contains(r.stderr, want) {
		t.Errorf("want %q: %s", want, r)
	}
	r = runCLI(t, cancelled, "sim", "routers", "--trials", "0")
	if want := "--trials 0: want 1 or more (leave it out for the default, the experiment's, 16)"; !strings.Contains(r.stderr, want) {
		t.Errorf("want %q: %s", want, r)
	}
	// Zeros that mean something run: a perfect view, no cap.
	if r := runCLI(t, context.Background(), "sim", "routers", "--poll", "0", "--cap", "0", "--trials", "1", "--duration", "1s", "--no-progress"); r.code != exitOK {
		t.Errorf("sim --poll 0 --cap 0: %s", r)
	}
	// up --replicas 0 is a primary alone, and says so.
	if r := runCLI(t, context.Background(), "up", "--help"); !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), "0: a primary alone") {
		t.Errorf("up --help does not say what --replicas 0 does:\n%s", r.stdout)
	}
}
