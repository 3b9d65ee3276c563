package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatedEngineFlags: `lab gated --engine` and `lab failover`'s engine
// mode check their flags before anything starts, and --engines auto
// names every engine it skips.
func TestGatedEngineFlags(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CAUSALLAB_STATE", filepath.Join(dir, "none.json"))
	t.Setenv("CAUSALLAB_CACHE", filepath.Join(dir, "empty-cache")) // no root filesystem: nothing can start
	t.Setenv("CAUSALLAB_ROOTFS", "")
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"lab", "gated", "--engine", "oracle"}, exitUsage, []string{`unknown engine "oracle"`}},
		{[]string{"lab", "gated", "--engine", "mysql", "--apply-delay", "250ms"}, exitUsage, []string{"whole seconds"}},
		{[]string{"lab", "gated", "--engine", "postgres", "--trials", "-5"}, exitUsage, []string{"trials"}},
		{[]string{"lab", "gated", "--engine", "postgres", "--via", "proxy"}, exitUsage, []string{"does not take --via"}},
		{[]string{"lab", "gated", "--engine", "postgres", "--format", "xml"}, exitUsage, []string{"format"}},
		{[]string{"lab", "gated", "--reads", "10"}, exitUsage, []string{"--reads is a flag of the seed harness: it needs --engine"}},
		{[]string{"lab", "gated", "--engine", "postgres", "--backend", "local"}, exitFailure, []string{"causallab image --engine postgres"}},
		{[]string{"lab", "failover", "--engines", "mysql", "--fail-on", "ryw>0"}, exitUsage, []string{"--engines does not take --fail-on"}},
		{[]string{"lab", "failover", "--backend", "local", "--no-progress"}, exitFailure,
			[]string{"no engine is installed for the local backend", "mysql skipped", "mariadb skipped", "postgres skipped"}},
	} {
		r := runCLI(t, ctx, c.args...)
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
