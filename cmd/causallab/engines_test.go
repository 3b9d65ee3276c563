package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/causallab/causallab/compose"
)

// TestEnginesFlags: --engines and up's --engine are checked before
// anything starts, with errors naming what was wrong.
func TestEnginesFlags(t *testing.T) {
	t.Setenv("CAUSALLAB_STATE", filepath.Join(t.TempDir(), "none.json"))
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "failover", "--engines", "mysql,oracle"}, `"oracle" is not an engine`},
		{[]string{"lab", "failover", "--engines", "mariadb,mariadb"}, "mariadb named twice"},
		{[]string{"lab", "failover", "--engines", "mysql", "--format", "xml"}, "format"},
		{[]string{"lab", "failover", "--engines", "mysql", "--backend", "vm"}, `--backend "vm"`},
		{[]string{"lab", "failover", "--engines", "postgres", "--primary-dsn", "u:p@tcp(127.0.0.1:1)/"}, "--primary-dsn does not apply"},
		{[]string{"up", "--engine", "oracle"}, `--engine "oracle"`},
	} {
		r := runCLI(t, ctx, c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: want exit 2 and %q: %s", c.args, c.want, r)
		}
	}
	es, err := parseEngines("mysql, mariadb,postgres")
	if err != nil || len(es) != 3 || es[0] != compose.EngineMySQL || es[2] != compose.EnginePostgres {
		t.Errorf("parseEngines: %v %v", es, err)
	}
}
