package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/causallab/causallab/lab"
)

// leafCommands are the runnable commands that do work (not groups, not
// cobra's help and completion), by path without "causallab ".
func leafCommands(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, c := range allCommands(newRootCmd()) {
		path := strings.TrimPrefix(c.CommandPath(), "causallab")
		path = strings.TrimSpace(path)
		if path == "" || c.HasSubCommands() || strings.HasPrefix(path, "help") || strings.HasPrefix(path, "completion") {
			continue
		}
		out = append(out, path)
	}
	return out
}

// badUsage is, for every command, a command line whose flags or arguments
// are wrong in a way only that command can tell: each must exit 2 at once,
// before anything starts (no topology, no connection, no run).
var badUsage = map[string][]string{
	"down":           {"--state"},
	"fault":          {"kill"},
	"gtid contains":  {"3e11fa47-71ca-11e1-9e33-c80aa9429562:0", ""},
	"gtid intersect": {"x", ""},
	"gtid normalize": {"3e11fa47-71ca-11e1-9e33-c80aa9429562:5-3"},
	"gtid subset":    {"-", "-"},
	"gtid subtract":  {"a"},
	"gtid union":     {"a", "b", "c"},
	"hash explain":   {"--servers", "a:1", "--id", "x", "--mode", "modulo"},
	"hash remap":     {"--servers", "a:1,b:1", "--format", "table", "--down", "a"},
	"image":          {"--engine", "oracle"},
	"lab chaos":      {"--every", "-1s", "--fail-on", "ryw>>0"},
	"lab failover":   {"--promote", "replica9"},
	"lab gated":      {"--via", "carrier-pigeon"},
	"lab hash":       {"--down", "replica7"},
	"lab routers":    {"--fail-on", "bogus:ryw>0"},
	"lab scenario":   {"nope"},
	"mysql":          {"primary", "replica1"},
	"proxy":          {"--config", "a.yaml", "--topology", "b.json"},
	"sim all":        {"--format", "xml"},
	"sim cap":        {"--cap-behavior", "nope"},
	"sim contention": {"--trials", "-1"},
	"sim failover":   {"--window", "-1s"},
	"sim fleet":      {"--world", "mars"},
	"sim hashing":    {"--hash-mode", "modulo"},
	"sim lagwait":    {"--budget", "-5ms"},
	"sim load":       {"--workload", "x"},
	"sim routers":    {"--replicas", "500"},
	"sim wait":       {"--budget", "2h"},
	"sim window":     {"--duration", "-1s"},
	"sim workorder":  {"--cap", "-1"},
	"sim worlds":     {"--sessions", "-5"},
	"status":         {"extra"},
	"up":             {"--backend", "vm"},
	"watch":          {"--replica", "r1=u:p@tcp(127.0.0.1:1)/", "--format", "xml"},
}

// TestExitCodes: one convention for the whole CLI. Every command documents
// it in --help (exit 0), refuses an unknown flag and its own bad usage with
// 2 before doing anything, and every group refuses an unknown command.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CAUSALLAB_STATE", filepath.Join(dir, "none.json")) // nothing runs: a lab would start one
	ctx := context.Background()
	leaves := leafCommands(t)
	if len(leaves) < 30 {
		t.Fatalf("only %d commands found: %v", len(leaves), leaves)
	}
	for _, path := range leaves {
		args := strings.Fields(path)
		t.Run(path, func(t *testing.T) {
			if r := runCLI(t, ctx, append(args, "--help")...); r.code != exitOK || strings.Count(r.stdout, "Exit codes: 0 ok, 1 failure, 2 usage") != 1 {
				t.Errorf("--help: want the exit codes once: %s", r)
			}
			if r := runCLI(t, ctx, append(args, "--no-such-flag")...); r.code != exitUsage || !strings.Contains(r.stderr, "causallab "+path+": unknown flag: --no-such-flag") {
				t.Errorf("unknown flag: %s", r)
			}
			bad, ok := badUsage[path]
			if !ok {
				t.Fatalf("no bad-usage case for %q: add one to badUsage", path)
			}
			// Refused before any work: with a context already cancelled,
			// any work begun (a dial, a topology's start, a simulation's
			// run) fails on it, which is exit 1 and says so; a refusal
			// made first is exit 2 whatever the context. (It was a 20 s
			// wall-time bound.)
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			r := runCLI(t, cancelled, append(args, bad...)...)
			if r.code != exitUsage || r.stdout != "" || !strings.HasPrefix(r.stderr, "causallab "+path+": ") {
				t.Errorf("%q: want exit 2, no output, an error naming the command: %s", bad, r)
			}
			if strings.Contains(r.stderr, "starting") || strings.Contains(r.stderr, "topology up") {
				t.Errorf("%q: refused after starting a topology: %s", bad, r)
			}
			if strings.Contains(r.stderr, context.Canceled.Error()) {
				t.Errorf("%q: refused after work that met the cancelled context: %s", bad, r)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("%q left %v", bad, entries)
			}
		})
	}
	if r := runCLI(t, ctx, "--help"); r.code != exitOK || strings.Count(r.stdout, "Exit codes: 0 ok, 1 failure, 2 usage") != 1 {
		t.Errorf("causallab --help: want the exit codes once: %s", r)
	}
	for _, c := range allCommands(newRootCmd()) {
		if !c.HasSubCommands() {
			continue
		}
		path := strings.Fields(c.CommandPath())[1:]
		r := runCLI(t, ctx, append(path, "nope")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "nope" for "`+c.CommandPath()+`"`) || strings.Contains(r.stdout, "Usage:") {
			t.Errorf("%v nope: want exit 2 and no help: %s", path, r)
		}
		if r := runCLI(t, ctx, path...); r.code != exitOK || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("%v alone: want its help, exit 0: %s", path, r)
		}
	}
}

// TestErrorLine: one prefix, the command's path, never doubled.
func TestErrorLine(t *testing.T) {
	cmd := &cobra.Command{Use: "proxy"}
	root := &cobra.Command{Use: "causallab"}
	root.AddCommand(cmd)
	for in, want := range map[string]string{
		"proxy: listen tcp: address in use": "causallab proxy: listen tcp: address in use",
		"compose: unknown node":             "causallab proxy: compose: unknown node",
		"proxying: x":                       "causallab proxy: proxying: x",
	} {
		if got := errorLine(cmd, errString(in)); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	sub := &cobra.Command{Use: "routers"}
	lab := &cobra.Command{Use: "lab"}
	root.AddCommand(lab)
	lab.AddCommand(sub)
	if got := errorLine(sub, errString("lab: bad config: x")); got != "causallab lab routers: bad config: x" {
		t.Errorf("lab routers: %q", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestBackendRuleAndRootFSHelp: up and lab choose the backend by one rule,
// and say so; --rootfs shows the default the environment makes.
func TestBackendRuleAndRootFSHelp(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("CAUSALLAB_CACHE", cache)
	t.Setenv("CAUSALLAB_ROOTFS", "")
	ctx := context.Background()
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") } // help is folded to 80 columns
	up := runCLI(t, ctx, "up", "--help")
	if !strings.Contains(flat(up.stdout), autoBackendRule) || !strings.Contains(flat(up.stdout), "(default "+filepath.Join(cache, "mysql-rootfs")) {
		t.Errorf("up --help:\n%s", up.stdout)
	}
	for _, x := range experiments {
		if r := runCLI(t, ctx, "lab", x.name, "--help"); !strings.Contains(flat(r.stdout), autoBackendRule) || !strings.Contains(r.stdout, `--backend string `) {
			t.Errorf("lab %s --help lacks the backend rule:\n%s", x.name, r.stdout)
		}
	}
}

// TestReporterLogLines: without a terminal each phase is one log line, in
// order, and the workload's 250 ms updates add none.
func TestReporterLogLines(t *testing.T) {
	var logs, errw bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	rep := newReporter(&errw, "lab routers", false)
	cb := progress(rep)
	cb(lab.Progress{Phase: lab.PhaseSetUp})
	for i := range 8 {
		cb(lab.Progress{Phase: lab.PhaseWorkload, Total: 2 * time.Second, Elapsed: time.Duration(i) * 250 * time.Millisecond, Reads: int64(i)})
	}
	for range 3 {
		cb(lab.Progress{Phase: lab.PhaseDrain, Reads: 10})
	}
	cb(lab.Progress{Phase: lab.PhaseFit})
	cb(lab.Progress{Phase: lab.PhaseSimulation})
	rep.Done()
	var phases []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		_, msg, _ := strings.Cut(l, `msg="lab routers: `)
		phase, _, _ := strings.Cut(msg, `"`)
		phases = append(phases, phase)
	}
	if got := strings.Join(phases, ","); got != "set-up,workload,drain,fit,simulation" {
		t.Errorf("phases logged %q:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "writes_offered_for=2s") || errw.Len() != 0 {
		t.Errorf("log:\n%s\nstderr: %q", logs.String(), errw.String())
	}
	// compose's notes: building and starting begin phases, the rest are lines.
	logs.Reset()
	rep = newReporter(&errw, "up", false)
	b := rep.buildOptions()
	b.Notify("building the MySQL root filesystem first (causallab image; cached, once)")
	_, _ = b.Progress.Write([]byte("I: downloading packages\nI: extracting\n"))
	b.Notify("starting MySQL on the root filesystem just built...")
	b.Notify("topology up in 4.9s")
	if n := strings.Count(logs.String(), "\n"); n != 3 || !strings.Contains(logs.String(), `msg="up: image build"`) || !strings.Contains(logs.String(), `msg="up: topology up in 4.9s"`) || strings.Contains(logs.String(), "downloading") {
		t.Errorf("compose's notes logged as:\n%s", logs.String())
	}
}

// TestSimCompactAndWide: on its default format a wide table prints in its
// compact view, every line within 80 columns, and says what --wide adds;
// --wide prints every column.
func TestSimCompactAndWide(t *testing.T) {
	ctx := context.Background()
	args := []string{"sim", "routers", "--trials", "2", "--duration", "1s", "--no-progress"}
	r := runCLI(t, ctx, args...)
	if r.code != exitOK {
		t.Fatalf("sim routers: %s", r)
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("compact line of %d characters: %q", n, l)
		}
	}
	if !strings.Contains(r.stdout, "--wide shows them") || strings.Contains(r.stdout, "peak primary r/s |") {
		t.Errorf("compact output:\n%s", r.stdout)
	}
	w := runCLI(t, ctx, append(args, "--wide")...)
	if w.code != exitOK || !strings.Contains(w.stdout, "| peak primary r/s |") || !strings.Contains(w.stdout, " ± ") {
		t.Errorf("--wide output: %s", w)
	}
}
