package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/causallab/causallab/sim"
)

// The published harness's figures (a PostgreSQL 16 primary and standby in
// Docker, 250 ms recovery_min_apply_delay, 300 users, 3,788 reads; the
// reference text in the project's background reading), printed beside
// the lab's: naive 1,425 of 3,788 reads stale (37.6 %), gated none, 62.4 %
// of gated reads on the standby; D-sweep 100 % stale below 250 ms, 4.7 %
// at 250 ms, 0 past it.
const publishedGated = "published harness (PostgreSQL 16, 250 ms): naive 37.6 % stale (1,425 of 3,788), gated 0 % with 62.4 % on the standby; by D: 100 % below 250 ms, 4.7 % at 250 ms, 0 past it."

func pctOf(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

// GatedEngineTables are the experiment's two tables: naive against gated,
// and the D-sweep.
func GatedEngineTables(res *GatedEngineResult) []*sim.Table {
	n := func(v int64) sim.Cell { return sim.N(float64(v)) }
	rt := &sim.Table{Name: "gated-" + string(res.Engine),
		Title: fmt.Sprintf("lab gated --engine %s: naive against gated, %g ms apply delay", res.Engine, res.ApplyDelayMs),
		Columns: []sim.Column{{Key: "router", Header: "router"}, {Key: "reads", Header: "reads"}, {Key: "stale", Header: "stale"},
			{Key: "stale_pct", Header: "stale %", Prec: 1}, {Key: "replica_pct", Header: "replica %", Prec: 1},
			{Key: "read_own_stale", Header: "own stale"}, {Key: "p99_ms", Header: "p99 ms", Prec: 1}, {Key: "errors", Header: "errors"}}}
	for _, r := range res.Rows {
		rt.Rows = append(rt.Rows, []sim.Cell{sim.L(r.Router), n(r.Reads), n(r.Stale), sim.N(pctOf(r.Stale, r.Served)),
			sim.N(pctOf(r.OnReplica, r.Served)), n(r.ReadOwnStale), sim.N(r.P99Ms), n(r.Errors + r.WriteErrors)})
	}
	var writes, reads, readOwn int64
	if len(res.Rows) > 0 {
		writes, reads, readOwn = res.Rows[0].Writes+res.Rows[0].WriteErrors, res.Rows[0].Reads, res.Rows[0].ReadOwn
	}
	rt.Notes = append(rt.Notes,
		fmt.Sprintf("%s, one primary and one replica (apply delay %g ms), %d users; one seeded stream (seed %d) of %d writes and %d reads "+
			"(%d of them the writer reading its own row at once), exponential pauses of mean %g ms, run through both routers at once "+
			"(router/live, %s flavor; gated = token-ryw over positions polled every few ms) in %.1f s.",
			res.Engine, res.ApplyDelayMs, res.Users, res.Seed, writes, reads, readOwn, res.OpGapMs, res.Flavor, res.StreamSeconds),
		"stale: served without the value of the user's last acknowledged write (ground truth, not the token); % of served reads.")
	if len(res.Rows) == 2 {
		nv, g := res.Rows[0], res.Rows[1]
		rt.Notes = append(rt.Notes, fmt.Sprintf("Naive reads were fresh on %.1f %%: about what a perfect gate keeps on the replica (the routers ran the same stream "+
			"at once, each with its own sessions and rows, so not at the very same moments); gated kept %.1f %%.",
			pctOf(nv.Served-nv.Stale, nv.Served), pctOf(g.OnReplica, g.Served)))
	}
	for _, r := range res.Rows {
		if r.PrimaryNoReplicaUp > 0 {
			rt.Notes = append(rt.Notes, fmt.Sprintf("%s: %d of its %d reads on the primary went there because the router saw no replica up "+
				"(its position not read within the health bound, or a failed read holding it down).", r.Router, r.PrimaryNoReplicaUp, r.OnPrimary))
		}
	}
	if res.Engine == "postgres" && res.ApplyDelayMs == 250 {
		rt.Notes = append(rt.Notes, publishedGated)
	}
	st := &sim.Table{Name: "gated-sweep-" + string(res.Engine),
		Title: fmt.Sprintf("lab gated --engine %s: stale reads by D, the wait after the write", res.Engine),
		Columns: []sim.Column{{Key: "delay_ms", Header: "D ms"}, {Key: "trials", Header: "trials"}, {Key: "stale", Header: "stale"},
			{Key: "stale_pct", Header: "stale %", Prec: 1}, {Key: "waited_p50_ms", Header: "waited p50", Prec: 1},
			{Key: "waited_p99_ms", Header: "waited p99", Prec: 1}, {Key: "by_waited_stale_pct", Header: "by waited %", Prec: 1},
			{Key: "off_replica", Header: "off replica"}, {Key: "errors", Header: "errors"}}}
	for _, r := range res.Sweep {
		bw := sim.N(pctOf(r.ByWaitedStale, r.ByWaited))
		if r.ByWaited == 0 {
			bw = sim.NA()
		}
		st.Rows = append(st.Rows, []sim.Cell{sim.N(r.DelayMs), n(r.Trials), n(r.Stale), sim.N(pctOf(r.Stale, r.Trials-r.Errors-r.OffReplica)),
			sim.N(r.MeasuredP50Ms), sim.N(r.MeasuredP99Ms), bw, n(r.OffReplica), n(r.Errors)})
	}
	if len(res.Sweep) > 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("Each trial writes its own row on the primary, waits D from the write's acknowledgement and reads the row "+
			"through the naive router (the replica); trials start every few ms in a seeded shuffled order of D, so every D ran under the same load; "+
			"%.1f s. stale %%: of the reads the replica served at nominal D. waited p50/p99 (ms): the wait achieved, acknowledgement to the read's start. "+
			"by waited %%: the stale share of the trials whose achieved wait fell in [D, D+step), whatever their nominal D.", res.SweepSeconds))
	}
	var early, explained int64
	for _, r := range res.Sweep {
		early, explained = early+r.EarlyFresh, explained+r.EarlyExplained
	}
	if early > 0 {
		st.Notes = append(st.Notes, fmt.Sprintf("%d reads were fresh although their wait was below the apply delay; for %d of them the write and the read "+
			"took long enough (write latency + wait + read latency >= the delay): the commit can come that much before the acknowledgement "+
			"(the router reads the token on the write's connection after COMMIT) and the read's snapshot that much after its start.", early, explained))
	}
	return []*sim.Table{rt, st}
}

// GatedSweepPlot is the D-sweep's picture: stale % by D, with the apply
// delay marked.
func GatedSweepPlot(res *GatedEngineResult) sim.Plot {
	nominal := sim.Line{Name: "stale % at nominal D"}
	waited := sim.Line{Name: "stale % by the wait achieved"}
	for _, r := range res.Sweep {
		nominal.X = append(nominal.X, r.DelayMs)
		nominal.Y = append(nominal.Y, pctOf(r.Stale, r.Trials-r.Errors-r.OffReplica))
		if r.ByWaited > 0 {
			waited.X = append(waited.X, r.DelayMs)
			waited.Y = append(waited.Y, pctOf(r.ByWaitedStale, r.ByWaited))
		}
	}
	mark := sim.Line{Name: fmt.Sprintf("apply delay %g ms", res.ApplyDelayMs), X: []float64{res.ApplyDelayMs, res.ApplyDelayMs}, Y: []float64{0, 100}}
	return sim.Plot{Name: "lab-gated-sweep-" + string(res.Engine), Title: fmt.Sprintf("%s: stale reads by the wait after a write", res.Engine),
		X: "D: wait after the write's acknowledgement (ms)", Y: "stale %", Lines: []sim.Line{nominal, waited, mark}}
}

// WriteGatedEngineOut writes res's tables (md, csv, json), the whole
// result as JSON and the D-sweep's picture (SVG and PNG) into dir.
func WriteGatedEngineOut(dir string, res *GatedEngineResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, t := range GatedEngineTables(res) {
		for _, f := range []sim.Format{sim.FormatMarkdown, sim.FormatCSV, sim.FormatJSON} {
			ext := map[sim.Format]string{sim.FormatMarkdown: ".md", sim.FormatCSV: ".csv", sim.FormatJSON: ".json"}[f]
			fh, err := os.Create(filepath.Join(dir, t.Name+ext))
			if err != nil {
				return err
			}
			err = t.Write(fh, f)
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "gated-"+string(res.Engine)+"-result.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if len(res.Sweep) == 0 {
		return nil
	}
	_, err = sim.WritePlots(dir, []sim.Plot{GatedSweepPlot(res)})
	return err
}
