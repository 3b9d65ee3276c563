// Package gatedtest runs lab.RunGatedEngine (`causallab lab gated
// --engine`) on real PostgreSQL and MySQL topologies, small: the
// experiment starts and removes one topology per run.
package gatedtest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/lab"
)

// TestGatedEngine: on each engine, every read of the stream is accounted
// for, the gated router never served a read without the user's own write
// while the naive one did (the reads right after a write, at least), and
// the window is real: a read at once after the write is stale (unless
// its own latency spans the delay), one long after the delay mostly fresh.
func TestGatedEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real PostgreSQL and MySQL topologies")
	}
	for _, c := range []struct {
		engine compose.Engine
		delay  time.Duration
	}{{compose.EnginePostgres, 200 * time.Millisecond}, {compose.EngineMySQL, time.Second}} {
		t.Run(string(c.engine), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			long := 5 * c.delay // past the window (MySQL's ends near twice its delay) with room for a loaded machine
			res, err := lab.RunGatedEngine(ctx, lab.GatedEngineConfig{Engine: c.engine, Backend: compose.BackendLocal, ApplyDelay: c.delay,
				Users: 40, Reads: 300, Trials: 40, SweepMax: long, SweepStep: long, SweepEvery: 5 * time.Millisecond, RecordHistory: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Rows) != 2 || len(res.Sweep) != 2 {
				t.Fatalf("%d router rows and %d sweep rows, want 2 and 2", len(res.Rows), len(res.Sweep))
			}
			naive, gated := res.Rows[0], res.Rows[1]
			recounted(t, res)
			for _, r := range res.Rows {
				t.Logf("%+v", r)
				if r.Reads != 300 || r.Served+r.Errors != r.Reads || r.OnReplica+r.OnPrimary != r.Served || r.Writes == 0 {
					t.Errorf("%s: reads do not add up: %+v", r.Router, r)
				}
			}
			// The naive router reads the replica whenever its view has it
			// up; on a loaded machine a position poll can miss the health
			// bound (a CI run at load 13 sent 6 of 300 reads to the
			// primary), and those reads, only those, go to the primary.
			if naive.OnPrimary != naive.PrimaryNoReplicaUp {
				t.Errorf("naive served %d reads on the primary, %d of them with no replica up; the others had the replica", naive.OnPrimary, naive.PrimaryNoReplicaUp)
			}
			if naive.PrimaryNoReplicaUp > 0 {
				t.Logf("naive: %d reads on the primary with no replica up in the router's view (a position poll missed its health bound)", naive.PrimaryNoReplicaUp)
			}
			if naive.ReadOwn == 0 || naive.ReadOwnStale == 0 || naive.Stale < naive.ReadOwnStale {
				t.Errorf("naive: %d of %d own reads stale (%d stale in all); a read at once after the write meets the apply delay", naive.ReadOwnStale, naive.ReadOwn, naive.Stale)
			}
			if gated.Stale != 0 || gated.OnPrimary == 0 || gated.OnReplica == 0 {
				t.Errorf("gated: %d stale, %d on the primary, %d on the replica; want 0 stale and both nodes used", gated.Stale, gated.OnPrimary, gated.OnReplica)
			}
			now, later := res.Sweep[0], res.Sweep[1]
			t.Logf("sweep: %+v %+v", now, later)
			// A read at once after the write is stale unless the write and
			// the read themselves took the delay (a loaded machine can
			// stall either): the commit comes no earlier than the write's
			// start, the read's snapshot no later than its end; or unless
			// the read began only after the delay had passed (the
			// achieved wait, not the nominal 0: on a loaded machine the
			// D=0 reads' achieved waits reached 170 ms at the median).
			// So every fresh D=0 trial whose achieved wait is below the
			// delay is explained by its own latency (EarlyFresh ==
			// EarlyExplained, checked below for every D), and at least
			// one is stale (a share would depend on the machine's load).
			if now.Trials != 40 || now.Errors != 0 || now.OffReplica != 0 || now.Stale == 0 {
				t.Errorf("D=0: %+v; want 40 trials served by the replica, at least one stale", now)
			}
			for _, r := range res.Sweep {
				if r.EarlyFresh != r.EarlyExplained {
					t.Errorf("D=%v ms: %d reads fresh before the apply delay that their own latency does not explain: %+v", r.DelayMs, r.EarlyFresh-r.EarlyExplained, r)
				}
			}
			if later.Trials != 40 || later.Errors != 0 || later.Stale > later.Trials/2 {
				t.Errorf("D=%v ms: %+v; want most of 40 trials fresh", later.DelayMs, later)
			}
		})
	}
}

// recounted: the exported history, judged again from the JSON lines
// alone (lab.Recount), gives each router's reads, served and stale reads,
// and the sweep's stale trials (the replica's, every trial's read).
func recounted(t *testing.T, res *lab.GatedEngineResult) {
	t.Helper()
	recount := func(h lab.EngineHistory) map[string]lab.RecountRow {
		var js bytes.Buffer
		if err := lab.WriteHistoryJSON(&js, h.Ops); err != nil {
			t.Fatal(err)
		}
		rows, err := lab.Recount(&js, h.Sessions, h.HotRows)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	rows := recount(res.History)
	for _, r := range res.Rows {
		got := rows[r.Router]
		if got.Reads != r.Reads || got.Served != r.Served || got.RYW != r.Stale {
			t.Errorf("%s: recounted from the history %+v; the table: %d reads, %d served, %d stale", r.Router, got, r.Reads, r.Served, r.Stale)
		}
	}
	var stale, trials int64
	for _, r := range res.Sweep {
		stale, trials = stale+r.Stale, trials+r.Trials-r.Errors
	}
	if sw := recount(res.SweepHistory)["naive"]; sw.RYW < stale || sw.Served != trials {
		t.Errorf("sweep: recounted from the history %+v; the table: %d trials served, %d stale on the replica", sw, trials, stale)
	}
}
