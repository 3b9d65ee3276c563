// Package postgrestest runs the lab's driver (lab.Run) on a real
// PostgreSQL topology: every router through live.PGRouter, the lab's own
// workload in PostgreSQL's SQL, judged by the same ground truth as on
// MySQL.
package postgrestest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/lab"
)

// startPostgres starts a local PostgreSQL topology of a primary and two
// standbys for one test (skipped under -short), removed when it ends,
// with a context bounding the test to 5 minutes.
func startPostgres(t *testing.T) (context.Context, *compose.Topology) {
	t.Helper()
	topo := composetest.Start(t, compose.Config{Engine: compose.EnginePostgres, Replicas: 2, Backend: compose.BackendLocal})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx, topo
}

// TestLabPostgres: with every standby's replay held 1 s behind
// (recovery_min_apply_delay), any serves reads without the session's own
// write while token-ryw-mr and token-wait serve none and never go back
// in time; the instruments measure the lag from the standbys' replay
// LSNs; the prefix check says it judged nothing (a PostgreSQL write's
// token orders no commits); and the run's history is written in both
// formats.
func TestLabPostgres(t *testing.T) {
	ctx, topo := startPostgres(t)
	cond, err := lab.ParseCondition("apply-delay")
	if err != nil {
		t.Fatal(err)
	}
	routers, err := lab.ParseRouters("any,token-ryw-mr,token-wait")
	if err != nil {
		t.Fatal(err)
	}
	res, err := lab.Run(ctx, topo, lab.Config{Sessions: 300, Routers: routers, WriteRate: 60, Duration: 6 * time.Second,
		GapMax: 2 * time.Second, Condition: cond, RecordHistory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lag %+v; config %+v", res.Lag, res.Config)
	if res.Config.Engine != "postgres" || res.Lag.Samples == 0 || res.Lag.MeanMs < 500 {
		t.Fatalf("engine %q, %d lag samples, mean %.0f ms: the run did not measure PostgreSQL under a 1 s apply delay", res.Config.Engine, res.Lag.Samples, res.Lag.MeanMs)
	}
	for _, r := range res.Routers {
		t.Logf("%-14s reads %5d served %5d ryw %4d mr %4d fallbacks %4d outcomes %v", r.Name, r.Reads, r.Served, r.RYW, r.MR, r.Fallbacks, r.Outcomes)
		if r.Writes == 0 || r.Served == 0 || r.WriteErrors != 0 {
			t.Errorf("%s: %d writes (%d failed), %d served reads", r.Name, r.Writes, r.WriteErrors, r.Served)
		}
		if r.NonPrefixJudged != 0 {
			t.Errorf("%s: the prefix check judged %d reads from PostgreSQL tokens", r.Name, r.NonPrefixJudged)
		}
		switch r.Name {
		case "any":
			if r.RYW == 0 {
				t.Errorf("any: no read without its own write under lag %+v", res.Lag)
			}
		default:
			if r.RYW != 0 || r.MR != 0 {
				t.Errorf("%s: %d RYW, %d MR violations", r.Name, r.RYW, r.MR)
			}
			if r.Outcomes["replica"] == 0 {
				t.Errorf("%s: no read served by a standby (%v)", r.Name, r.Outcomes)
			}
		}
	}
	if !strings.Contains(strings.Join(res.Notes, " "), "not judged on PostgreSQL") {
		t.Errorf("no note says the prefix check judged nothing: %q", res.Notes)
	}
	dir := t.TempDir()
	if err := lab.WriteHistory(dir, []*lab.Result{res}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var sizes []string
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil || st.Size() == 0 {
			t.Errorf("history file %s: %v, empty", f, err)
		}
		sizes = append(sizes, filepath.Base(f))
	}
	if len(files) < 2 {
		t.Fatalf("history wrote %v, want the JSON lines and the EDN", sizes)
	}
}
