package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatedEngineFlags: `lab gated --engine` and `lab failover`'s engine
// mode check their flags before anything starts; on a machine without
// the engine they build it first (here with a cancelled context, so that
// the build fails at once: the error names the command that builds it),
// and --engines auto names every engine it skips and how to build it.
func TestGatedEngineFlags(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CAUSALLAB_STATE", filepath.Join(dir, "none.json"))
	t.Setenv("CAUSALLAB_CACHE", filepath.Join(dir, "empty-cache")) // no root filesystem: nothing can start
	t.Setenv("CAUSALLAB_ROOTFS", "")
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		args  []string
		code  int
		want  []string
		build bool // it builds: run with the cancelled context
	}{
		{[]string{"lab", "gated", "--engine", "oracle"}, exitUsage, []string{`unknown engine "oracle"`}, false},
		{[]string{"lab", "gated", "--engine", "mysql", "--apply-delay", "250ms"}, exitUsage, []string{"whole seconds"}, false},
		{[]string{"lab", "gated", "--engine", "postgres", "--trials", "-5"}, exitUsage, []string{"trials"}, false},
		{[]string{"lab", "gated", "--engine", "postgres", "--via", "proxy"}, exitUsage, []string{"does not take --via"}, false},
		{[]string{"lab", "gated", "--engine", "postgres", "--format", "xml"}, exitUsage, []string{"format"}, false},
		{[]string{"lab", "gated", "--reads", "10"}, exitUsage, []string{"--reads is a flag of the seed harness: it needs --engine"}, false},
		{[]string{"lab", "gated", "--engine", "postgres", "--backend", "local", "--no-progress"}, exitFailure,
			[]string{"building the PostgreSQL root filesystem first", "run `causallab image --engine postgres`"}, true},
		{[]string{"lab", "failover", "--engines", "mysql", "--fail-on", "ryw>0"}, exitUsage, []string{"--engines does not take --fail-on"}, false},
		{[]string{"lab", "failover", "--backend", "local", "--no-progress"}, exitFailure,
			[]string{"engines mysql (auto: MySQL and every other engine built for the local backend; building mysql first)",
				"skipped mariadb (not built: causallab image --engine mariadb); postgres (not built: causallab image --engine postgres)",
				"--engines mysql,mariadb,postgres builds every one first", "building the MySQL root filesystem first"}, true},
		{[]string{"lab", "failover", "--engines", "mariadb,postgres", "--backend", "local", "--no-progress"}, exitFailure,
			[]string{"engines mariadb,postgres (--engines; each built first when missing)", "building the MariaDB root filesystem first",
				"run `causallab image --engine mariadb`"}, true},
	} {
		run := ctx
		if c.build {
			run = cancelled
		}
		r := runCLI(t, run, c.args...)
		if r.code != c.code || r.stdout != "" {
			t.Errorf("%q: want exit %d and no output: %s", c.args, c.code, r)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%q: stderr lacks %q: %s", c.args, w, r)
			}
		}
	}
}
