package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// Options are the knobs every experiment shares; zero fields take the
// experiment's defaults.
type Options struct {
	// Base is the common configuration (seed, trials, replicas, writes/s,
	// world, poll, cap...). Zero fields take each experiment's defaults.
	Base Config
	// Window is the window router's W. Default 500ms.
	Window time.Duration
	// WaitBudget is token-wait's B. Default 400ms.
	WaitBudget time.Duration
	// HashMode is the affinity router's hashroute mode in `routers`.
	HashMode hashroute.Mode
	// Progress, when non-nil, is told about finished trials.
	Progress Progress
}

// Report is what an experiment produced.
type Report struct {
	// Tables in print order.
	Tables []*Table
	// Plots are the experiment's pictures (drawn by WritePlots).
	Plots []Plot
}

// Plot is a line chart's data.
type Plot struct {
	// Name is the file stem ("load-primary-share").
	Name string
	// Title, X and Y label the chart.
	Title, X, Y string
	// Lines are the series.
	Lines []Line
	// Strip, when non-nil, makes this plot the one-trial strip instead.
	Strip *Trace
}

// Line is one series.
type Line struct {
	Name string
	X, Y []float64
}

// Experiment is one `causallab sim` subcommand.
type Experiment struct {
	// Name is the subcommand ("routers").
	Name string
	// Short is the one-line help.
	Short string
	// Run runs it.
	Run func(ctx context.Context, o Options) (*Report, error)
}

// Experiments lists every experiment in the order `sim all` runs them.
func Experiments() []Experiment {
	return []Experiment{
		{"routers", "all seven routers side by side (5 replicas, 600 writes/s, default world)", Routers},
		{"window", "the window dial: W from 0 to 4 s", WindowExp},
		{"load", "offered writes/s from 200 to 2000 under token-ryw-mr", Load},
		{"worlds", "the four worlds: RYW under any, cost under token-ryw-mr", WorldsExp},
		{"fleet", "2..6 replicas in the identical, straggler and straggler+heavy worlds", Fleet},
		{"contention", "primary reads share the write FIFO at 1400 writes/s", Contention},
		{"wait", "token-wait and global budgets B from 0 to 1600 ms", Wait},
		{"lagwait", "token-wait and global with a small budget (50 ms) on replicas lagging 0 to 2 s: futile waits", LagWait},
		{"failover", "scalar, GTID-set and epoch tokens through a failover", Failover},
		{"workorder", "the request-stream model (Park–Miller) with fixed lag", Workorder},
		{"hashing", "affinity hashing modes under a replica outage and load drift", Hashing},
		{"cap", "the primary fallback cap C and defer under a fleet-wide lag spike (token-ryw-mr)", CapExp},
	}
}

// ExperimentByName finds an experiment.
func ExperimentByName(name string) (Experiment, error) {
	for _, e := range Experiments() {
		if e.Name == name {
			return e, nil
		}
	}
	return Experiment{}, fmt.Errorf("sim: unknown experiment %q", name)
}

// base is o.Base with the experiment's default trial count when none is set
// (16 for routers and failover as the specification asks; fewer for the
// sweeps, so `sim all` stays within seconds on two cores).
func (o *Options) base(trials int) Config {
	c := o.Base
	if c.Trials == 0 {
		c.Trials = trials
	}
	return c
}

func (o *Options) window() time.Duration {
	if o.Window > 0 {
		return o.Window
	}
	return router.DefaultWindow
}

func (o *Options) budget() time.Duration {
	if o.WaitBudget > 0 {
		return o.WaitBudget
	}
	return router.DefaultWaitBudget
}

// sevenRouters are the specification's six routers and global (read-all-
// writes), with o's knobs.
func (o *Options) sevenRouters() []RouterSpec {
	w := router.Policy{Kind: router.PolicyWindow, Window: o.window()}
	tw := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: o.budget()}
	af := router.Policy{Kind: router.PolicyAffinity, HashMode: o.HashMode}
	return []RouterSpec{
		{Name: "any", Policy: router.Policy{Kind: router.PolicyAny}},
		{Name: af.String(), Policy: af},
		{Name: w.String(), Policy: w},
		{Name: "token-ryw", Policy: router.Policy{Kind: router.PolicyTokenRYW}},
		{Name: "token-ryw-mr", Policy: router.Policy{Kind: router.PolicyTokenRYWMR}},
		{Name: tw.String(), Policy: tw},
		spec(o.global()),
	}
}

// global is the read-all-writes router with token-wait's budget.
func (o *Options) global() router.Policy {
	return router.Policy{Kind: router.PolicyGlobal, WaitBudget: o.budget()}
}

func spec(p router.Policy) RouterSpec { return RouterSpec{Name: p.String(), Policy: p} }

var (
	fRYW     = func(r *Result) float64 { return r.RYWPct }
	fMR      = func(r *Result) float64 { return r.MRPct }
	fAll     = func(r *Result) float64 { return r.AllWritesPct }
	fPrim    = func(r *Result) float64 { return r.PrimaryPct }
	fWorst   = func(r *Result) float64 { return r.WorstBinPct }
	fPeak    = func(r *Result) float64 { return r.PeakPrimaryPerSec }
	fRMean   = func(r *Result) float64 { return r.ReadMean }
	fRP50    = func(r *Result) float64 { return r.ReadP50 }
	fRP99    = func(r *Result) float64 { return r.ReadP99 }
	fWMean   = func(r *Result) float64 { return r.WriteMean }
	fWP99    = func(r *Result) float64 { return r.WriteP99 }
	fLagMean = func(r *Result) float64 { return r.LagMean }
	fLagP99  = func(r *Result) float64 { return r.LagP99 }
	fWaited  = func(r *Result) float64 { return pct(r.Waited, r.Reads) }
	fTimeout = func(r *Result) float64 { return pct(r.Timeouts, r.Reads) }
	fFailed  = func(r *Result) float64 { return pct(r.Failed, r.Reads) }
	fFutile  = func(r *Result) float64 { return pct(r.Reasons[router.ReasonWaitFutile], r.Reads) }
	fWaitPR  = func(r *Result) float64 { return r.WaitPerRead }
	fMissed  = func(r *Result) float64 { return pct(r.FutileMissed, r.Reads) }
)

// lagNote is the achieved-lag line printed under a table: the lag of every
// record on every replica, pooled over the trials.
func lagNote(cfg *Config, rs []Result, pool *hist) string {
	m := lagMean(rs, pool)
	n := fmt.Sprintf("Achieved replica lag (commit to apply, every record on every replica of every trial): mean %.0f ms (SD of trial means %.0f), p99 %.0f ms (%s world, %g writes/s, %d replicas).",
		m.Mean, m.SD, lagP99(pool), cfg.World, cfg.WritesPerSec, cfg.Replicas)
	if cfg.Replicas > 1 && len(rs) > 0 {
		n += fmt.Sprintf(" Replica spread (first to last replica applying a record): mean %.0f ms, p99 %.0f ms (means of the trials').",
			stat(rs, func(r *Result) float64 { return r.SpreadMean }).Mean, stat(rs, func(r *Result) float64 { return r.SpreadP99 }).Mean)
	}
	return n
}

// lagMean is the pooled mean lag (ms) with the SD of the trials' means.
func lagMean(rs []Result, pool *hist) Stat {
	return Stat{Mean: pool.mean() / 1000, SD: stat(rs, fLagMean).SD}
}

// lagP99 is the pooled 99th percentile of the lag (ms). A trial holds few
// heavy records, so a per-trial p99 swings between "no heavy record" and
// "one heavy record" and their mean is no percentile of anything; the
// pooled one is the lag 1% of all records exceed.
func lagP99(pool *hist) float64 { return pool.quantile(0.99) / 1000 }

func setupNote(cfg *Config) string {
	v := "perfect router view"
	if cfg.Poll > 0 {
		v = fmt.Sprintf("router view polled every %v", cfg.Poll)
	}
	return fmt.Sprintf("Setup: seed %d, %d trials of %v offered writes, %d sessions, %d reads per write (%s workload), RTT %v, %s. Cells: trial mean ± sample SD.",
		cfg.Seed, cfg.Trials, cfg.Duration, cfg.Sessions, cfg.ReadsPerWrite, cfg.Workload, cfg.RTT, v)
}

var routerColumns = []Column{
	{"router", "router", 0},
	{"ryw_pct", "RYW viol. %", 2},
	{"mr_pct", "MR viol. %", 2},
	{"all_writes_pct", "all-writes viol. %", 2},
	{"primary_pct", "primary %", 1},
	{"worst_100ms_pct", "worst 100 ms %", 1},
	{"peak_primary_rps", "peak primary r/s", 0},
	{"read_mean_ms", "read mean ms", 1},
	{"read_p50_ms", "read p50 ms", 1},
	{"read_p99_ms", "read p99 ms", 1},
	{"waited_pct", "waited %", 2},
	{"timeouts_pct", "timeouts %", 2},
}

// capColumns are added to router tables when a fallback cap is configured.
var capColumns = []Column{
	{"cap_stale_pct", "cap: served stale %", 2},
	{"cap_failed_pct", "cap: failed %", 2},
	{"cap_waited_pct", "cap: waited %", 2},
}

var (
	fCapStale  = func(r *Result) float64 { return pct(r.Stale, r.Reads) }
	fCapFailed = func(r *Result) float64 { return pct(r.CapFailed, r.Reads) }
	fCapWaited = func(r *Result) float64 { return pct(r.CapWaited, r.Reads) }
)

func capCells(rs []Result) []Cell {
	return []Cell{S(stat(rs, fCapStale)), S(stat(rs, fCapFailed)), S(stat(rs, fCapWaited))}
}

// deferColumns are added to router tables when reads can be deferred
// (CapDefer, or a policy with Defer).
var deferColumns = []Column{
	{"deferred_pct", "deferred %", 2},
	{"retries_per_deferred", "retries per deferred", 2},
	{"deferred_mean_ms", "deferred: read mean ms", 0},
	{"deferred_p99_ms", "deferred: read p99 ms", 0},
}

var (
	fDeferred    = func(r *Result) float64 { return pct(r.Deferred, r.Reads) }
	fRetries     = func(r *Result) float64 { return ratio(r.Deferrals, r.Deferred) }
	fDeferredLat = func(r *Result) float64 { return r.DeferredMean }
	fDeferredP99 = func(r *Result) float64 { return r.DeferredP99 }
)

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func deferCells(rs []Result) []Cell {
	return []Cell{S(stat(rs, fDeferred)), S(stat(rs, fRetries)), S(stat(rs, fDeferredLat)), S(stat(rs, fDeferredP99))}
}

// defers reports whether reads can be deferred under cfg and specs.
func defers(cfg *Config, specs []RouterSpec) bool {
	if cfg.Cap.PerSecond > 0 && cfg.Cap.Behavior == router.CapDefer {
		return true
	}
	for _, s := range specs {
		if s.Policy.Defer {
			return true
		}
	}
	return false
}

func capNote(cfg *Config) string {
	return fmt.Sprintf("Fallback cap: %g primary fallbacks/s, above it %s (extra wait %v). Cap columns: reads served labelled stale, reads failed because the cap was spent (at once under fail-fast, after the extra wait under wait-longer), reads that waited because of the cap.",
		cfg.Cap.PerSecond, cfg.Cap.Behavior, cfg.Cap.ExtraWait)
}

// deferNote explains the defer columns.
const deferNote = "Deferred reads: the router answers \"retry after T\" (T: the least time lag among the up replicas, at least 10 ms) instead of sending the read to the primary; the client retries after T as a new attempt with a fresh budget. Deferred %: reads deferred at least once; retries per deferred read; their read mean and p99: issue to answer, every deferral and retry included."

func routerRow(name string, rs []Result) []Cell {
	return []Cell{L(name), S(stat(rs, fRYW)), S(stat(rs, fMR)), S(stat(rs, fAll)), S(stat(rs, fPrim)), S(stat(rs, fWorst)),
		S(stat(rs, fPeak)), S(stat(rs, fRMean)), S(stat(rs, fRP50)), S(stat(rs, fRP99)), S(stat(rs, fWaited)), S(stat(rs, fTimeout))}
}

// RoutersTable runs specs on cfg and tabulates them.
func RoutersTable(ctx context.Context, name, title string, cfg Config, specs []RouterSpec, progress Progress) (*Table, [][]Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	res, pool, err := runTrials(ctx, cfg, specs, progress)
	if err != nil {
		return nil, nil, err
	}
	capped, deferring := cfg.Cap.PerSecond > 0, defers(&cfg, specs)
	cols := slices.Clone(routerColumns)
	if capped {
		cols = append(cols, capColumns...)
	}
	if deferring {
		cols = append(cols, deferColumns...)
	}
	t := &Table{Name: name, Title: title, Columns: cols}
	t.Brief = []BriefColumn{{Key: "router"}, {Key: "ryw_pct", Header: "RYW %", SD: true}, {Key: "mr_pct", Header: "MR %", SD: true},
		{Key: "all_writes_pct", Header: "all-writes %"}, {Key: "primary_pct"}, {Key: "worst_100ms_pct", Header: "worst 100ms %"},
		{Key: "read_p99_ms", Header: "p99 ms"}}
	for k, s := range specs {
		row := routerRow(s.Name, res[k])
		if capped {
			row = append(row, capCells(res[k])...)
		}
		if deferring {
			row = append(row, deferCells(res[k])...)
		}
		t.Rows = append(t.Rows, row)
	}
	t.Notes = []string{setupNote(&cfg), lagNote(&cfg, res[0], pool)}
	if capped {
		t.Notes = append(t.Notes, capNote(&cfg))
	}
	if deferring {
		t.Notes = append(t.Notes, deferNote)
	}
	t.Notes = append(t.Notes, allWritesNote)
	return t, res, nil
}

// allWritesNote explains the all-writes column.
const allWritesNote = "All-writes violation: a read that misses a write acknowledged, to any session, before the read was issued (read-all-writes, the guarantee of global: its token is the primary's position when the read begins)."

// Routers is the `routers` experiment.
func Routers(ctx context.Context, o Options) (*Report, error) {
	cfg := o.base(16)
	t, _, err := RoutersTable(ctx, "routers", "Routers: violations and cost", cfg, o.sevenRouters(), o.Progress)
	if err != nil {
		return nil, err
	}
	// The strip: one trial of token-ryw-mr, every read over time.
	sp := spec(router.Policy{Kind: router.PolicyTokenRYWMR})
	tr, _, err := TraceTrial(ctx, cfg, sp, 0)
	if err != nil {
		return nil, err
	}
	pl := Plot{Name: "strip-token-ryw-mr", Title: "One trial under token-ryw-mr: where reads went, under the lag curve", Strip: tr}
	return &Report{Tables: []*Table{t}, Plots: []Plot{pl}}, nil
}

// sweep runs one configuration per point (built by mk) under specs, all
// trials of all points in one parallel batch.
func sweep(ctx context.Context, n int, mk func(i int) Config, specs func(i int) []RouterSpec, progress Progress) ([]Config, [][][]Result, []*hist, error) {
	cfgs := make([]Config, n)
	var jobs []*job
	for i := range n {
		cfgs[i] = mk(i)
		if err := cfgs[i].validate(); err != nil {
			return nil, nil, nil, err
		}
	}
	for i := range n {
		sp := specs(i)
		for t := range cfgs[i].Trials {
			jobs = append(jobs, &job{cfg: &cfgs[i], trial: t, specs: sp, out: make([]Result, len(sp))})
		}
	}
	if err := runJobs(ctx, jobs, progress); err != nil {
		return nil, nil, nil, err
	}
	out := make([][][]Result, n)
	pools := make([]*hist, n)
	k := 0
	for i := range n {
		sp := specs(i)
		out[i] = make([][]Result, len(sp))
		for r := range sp {
			out[i][r] = make([]Result, cfgs[i].Trials)
		}
		pools[i] = poolLag(jobs[k : k+cfgs[i].Trials])
		for t := range cfgs[i].Trials {
			for r := range sp {
				out[i][r][t] = jobs[k].out[r]
			}
			k++
		}
	}
	return cfgs, out, pools, nil
}

// WindowExp is the `window` experiment: the window dial.
func WindowExp(ctx context.Context, o Options) (*Report, error) {
	ws := []time.Duration{0, 100, 250, 500, 1000, 2000, 4000}
	cfgs, res, pools, err := sweep(ctx, len(ws), func(int) Config { return o.base(8) },
		func(i int) []RouterSpec {
			return []RouterSpec{spec(router.Policy{Kind: router.PolicyWindow, Window: ws[i] * time.Millisecond})}
		}, o.Progress)
	if err != nil {
		return nil, err
	}
	t := &Table{Name: "window", Title: "Window dial: primary share against protection", Columns: []Column{
		{"window_ms", "W ms", 0}, {"primary_pct", "primary %", 1}, {"ryw_pct", "RYW viol. %", 2}, {"mr_pct", "MR viol. %", 2},
		{"worst_100ms_pct", "worst 100 ms %", 1}, {"lag_mean_ms", "lag mean ms", 0}, {"lag_p99_ms", "lag p99 ms", 0}}}
	t.Brief = []BriefColumn{{Key: "window_ms"}, {Key: "primary_pct", SD: true}, {Key: "ryw_pct", Header: "RYW %", SD: true},
		{Key: "mr_pct", Header: "MR %", SD: true}, {Key: "worst_100ms_pct", Header: "worst 100ms %"}, {Key: "lag_mean_ms"}}
	pl := Plot{Name: "window-dial", Title: "The window dial", X: "window W (ms)", Y: "% of reads",
		Lines: []Line{{Name: "primary share %"}, {Name: "RYW kept %"}}}
	for i, w := range ws {
		rs := res[i][0]
		t.Rows = append(t.Rows, []Cell{N(float64(w)), S(stat(rs, fPrim)), S(stat(rs, fRYW)), S(stat(rs, fMR)),
			S(stat(rs, fWorst)), S(lagMean(rs, pools[i])), N(lagP99(pools[i]))})
		pl.Lines[0].X, pl.Lines[0].Y = append(pl.Lines[0].X, float64(w)), append(pl.Lines[0].Y, stat(rs, fPrim).Mean)
		pl.Lines[1].X, pl.Lines[1].Y = append(pl.Lines[1].X, float64(w)), append(pl.Lines[1].Y, 100-stat(rs, fRYW).Mean)
	}
	t.Notes = []string{setupNote(&cfgs[0]), lagNote(&cfgs[0], res[0][0], pools[0])}
	return &Report{Tables: []*Table{t}, Plots: []Plot{pl}}, nil
}

// Load is the `load` experiment.
func Load(ctx context.Context, o Options) (*Report, error) {
	rates := []float64{200, 600, 1200, 1600, 2000}
	targets := [][2]float64{{116, 860}, {315, 2910}, {891, 7437}, {1148, 9234}, {1507, 10246}}
	cfgs, res, pools, err := sweep(ctx, len(rates), func(i int) Config { c := o.base(8); c.WritesPerSec = rates[i]; return c },
		func(int) []RouterSpec { return []RouterSpec{spec(router.Policy{Kind: router.PolicyTokenRYWMR})} }, o.Progress)
	if err != nil {
		return nil, err
	}
	t := &Table{Name: "load", Title: "Load: token-ryw-mr as offered writes grow", Columns: []Column{
		{"writes_per_sec", "writes/s", 0}, {"lag_mean_ms", "lag mean ms", 0}, {"lag_p99_ms", "lag p99 ms", 0},
		{"target_lag_mean_ms", "target mean", 0}, {"target_lag_p99_ms", "target p99", 0},
		{"primary_pct", "primary %", 1}, {"worst_100ms_pct", "worst 100 ms %", 1}, {"peak_primary_rps", "peak primary r/s", 0}}}
	t.Brief = []BriefColumn{{Key: "writes_per_sec"}, {Key: "lag_mean_ms"}, {Key: "lag_p99_ms"}, {Key: "primary_pct", SD: true},
		{Key: "worst_100ms_pct", Header: "worst 100ms %"}, {Key: "peak_primary_rps", Header: "peak r/s"}}
	pl := Plot{Name: "load-primary-share", Title: "Primary share against offered load (token-ryw-mr)", X: "offered writes/s", Y: "% of reads",
		Lines: []Line{{Name: "primary share %"}, {Name: "worst 100 ms %"}}}
	for i, r := range rates {
		rs := res[i][0]
		t.Rows = append(t.Rows, []Cell{N(r), S(lagMean(rs, pools[i])), N(lagP99(pools[i])), N(targets[i][0]), N(targets[i][1]),
			S(stat(rs, fPrim)), S(stat(rs, fWorst)), S(stat(rs, fPeak))})
		pl.Lines[0].X, pl.Lines[0].Y = append(pl.Lines[0].X, r), append(pl.Lines[0].Y, stat(rs, fPrim).Mean)
		pl.Lines[1].X, pl.Lines[1].Y = append(pl.Lines[1].X, r), append(pl.Lines[1].Y, stat(rs, fWorst).Mean)
	}
	t.Notes = []string{setupNote(&cfgs[0]), "Lag targets are calibration inputs (the specification's); the lag columns are achieved: every record on every replica of every trial, pooled (mean ± SD of the trial means; p99 pooled)."}
	return &Report{Tables: []*Table{t}, Plots: []Plot{pl}}, nil
}

// WorldsExp is the `worlds` experiment.
func WorldsExp(ctx context.Context, o Options) (*Report, error) {
	targets := map[World][2]float64{WorldInstant: {0, 0}, WorldIdentical: {11, 14}, WorldStraggler: {49, 547}, WorldStragglerHeavy: {320, 2640}}
	cfgs, res, pools, err := sweep(ctx, len(Worlds), func(i int) Config { c := o.base(8); c.World = Worlds[i]; return c },
		func(int) []RouterSpec {
			return []RouterSpec{spec(router.Policy{Kind: router.PolicyAny}), spec(router.Policy{Kind: router.PolicyTokenRYWMR})}
		}, o.Progress)
	if err != nil {
		return nil, err
	}
	t := &Table{Name: "worlds", Title: "Worlds: the cost of lag", Columns: []Column{
		{"world", "world", 0}, {"lag_mean_ms", "lag mean ms", 0}, {"lag_p99_ms", "lag p99 ms", 0},
		{"target_lag_mean_ms", "target mean", 0}, {"target_lag_p99_ms", "target p99", 0},
		{"any_ryw_pct", "any: RYW viol. %", 2}, {"any_mr_pct", "any: MR viol. %", 2},
		{"mr_primary_pct", "token-ryw-mr: primary %", 1}, {"mr_worst_100ms_pct", "token-ryw-mr: worst 100 ms %", 1}}}
	for i, w := range Worlds {
		t.Brief = []BriefColumn{{Key: "world"}, {Key: "lag_mean_ms"}, {Key: "lag_p99_ms"}, {Key: "any_ryw_pct", Header: "any RYW %"},
			{Key: "any_mr_pct", Header: "any MR %"}, {Key: "mr_primary_pct", Header: "ryw-mr primary %"}}
		a, m := res[i][0], res[i][1]
		t.Rows = append(t.Rows, []Cell{L(string(w)), S(lagMean(a, pools[i])), N(lagP99(pools[i])), N(targets[w][0]), N(targets[w][1]),
			S(stat(a, fRYW)), S(stat(a, fMR)), S(stat(m, fPrim)), S(stat(m, fWorst))})
	}
	t.Notes = []string{setupNote(&cfgs[0])}
	return &Report{Tables: []*Table{t}}, nil
}

// Fleet is the `fleet` experiment.
func Fleet(ctx context.Context, o Options) (*Report, error) {
	worlds := []World{WorldIdentical, WorldStraggler, WorldStragglerHeavy}
	type pt struct {
		w World
		n int
	}
	var pts []pt
	for _, w := range worlds {
		for n := 2; n <= 6; n++ {
			pts = append(pts, pt{w, n})
		}
	}
	cfgs, res, pools, err := sweep(ctx, len(pts), func(i int) Config { c := o.base(4); c.World, c.Replicas = pts[i].w, pts[i].n; return c },
		func(int) []RouterSpec {
			return []RouterSpec{spec(router.Policy{Kind: router.PolicyAny}), spec(router.Policy{Kind: router.PolicyTokenRYWMR})}
		}, o.Progress)
	if err != nil {
		return nil, err
	}
	t := &Table{Name: "fleet", Title: "Fleet size", Columns: []Column{
		{"world", "world", 0}, {"replicas", "replicas", 0}, {"lag_mean_ms", "lag mean ms", 0}, {"lag_p99_ms", "lag p99 ms", 0},
		{"any_ryw_pct", "any: RYW viol. %", 2}, {"any_mr_pct", "any: MR viol. %", 2},
		{"mr_primary_pct", "token-ryw-mr: primary %", 1}, {"mr_worst_100ms_pct", "token-ryw-mr: worst 100 ms %", 1}}}
	for i, p := range pts {
		t.Brief = []BriefColumn{{Key: "world"}, {Key: "replicas"}, {Key: "lag_mean_ms"}, {Key: "any_ryw_pct", Header: "any RYW %"},
			{Key: "any_mr_pct", Header: "any MR %"}, {Key: "mr_primary_pct", Header: "ryw-mr primary %"}}
		a, m := res[i][0], res[i][1]
		t.Rows = append(t.Rows, []Cell{L(string(p.w)), N(float64(p.n)), S(lagMean(a, pools[i])), N(lagP99(pools[i])),
			S(stat(a, fRYW)), S(stat(a, fMR)), S(stat(m, fPrim)), S(stat(m, fWorst))})
	}
	t.Notes = []string{setupNote(&cfgs[0])}
	return &Report{Tables: []*Table{t}}, nil
}

// Contention is the `contention` experiment.
func Contention(ctx context.Context, o Options) (*Report, error) {
	cfg := o.base(8)
	cfg.Contention = true
	if cfg.WritesPerSec == 0 {
		cfg.WritesPerSec = 1400
	}
	specs := []RouterSpec{spec(router.Policy{Kind: router.PolicyAny}),
		spec(router.Policy{Kind: router.PolicyWindow, Window: o.window()}), spec(router.Policy{Kind: router.PolicyTokenRYWMR}),
		spec(o.global())}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res, pool, err := runTrials(ctx, cfg, specs, o.Progress)
	if err != nil {
		return nil, err
	}
	t := &Table{Name: "contention", Title: "Contention: primary reads share the write FIFO", Columns: []Column{
		{"router", "router", 0}, {"write_mean_ms", "write mean ms", 2}, {"write_p99_ms", "write p99 ms", 2},
		{"primary_pct", "primary %", 1}, {"peak_primary_rps", "peak primary r/s", 0}, {"ryw_pct", "RYW viol. %", 2}, {"read_p99_ms", "read p99 ms", 1}}}
	t.Brief = []BriefColumn{{Key: "router"}, {Key: "write_mean_ms", Header: "write ms"}, {Key: "write_p99_ms", Header: "write p99"},
		{Key: "primary_pct"}, {Key: "ryw_pct", Header: "RYW %"}, {Key: "read_p99_ms", Header: "read p99"}}
	for k, s := range specs {
		rs := res[k]
		t.Rows = append(t.Rows, []Cell{L(s.Name), S(stat(rs, fWMean)), S(stat(rs, fWP99)), S(stat(rs, fPrim)), S(stat(rs, fPeak)),
			S(stat(rs, fRYW)), S(stat(rs, fRP99))})
	}
	t.Notes = []string{setupNote(&cfg), fmt.Sprintf("Primary FIFO capacity %g ops/s shared by writes and primary reads.", cfg.PrimaryCapacity), lagNote(&cfg, res[0], pool)}
	return &Report{Tables: []*Table{t}}, nil
}

// Wait is the `wait` experiment: token-wait(B) and global(B) over budgets.
func Wait(ctx context.Context, o Options) (*Report, error) {
	bs := []time.Duration{0, 100, 400, 800, 1600}
	kinds := []router.PolicyKind{router.PolicyTokenWait, router.PolicyGlobal}
	cfgs, res, pools, err := sweep(ctx, len(bs), func(int) Config { return o.base(8) },
		func(i int) []RouterSpec {
			sp := make([]RouterSpec, len(kinds))
			for k, kind := range kinds {
				sp[k] = RouterSpec{Name: kind.String(), Policy: router.Policy{Kind: kind, WaitBudget: bs[i] * time.Millisecond}}
			}
			return sp
		}, o.Progress)
	if err != nil {
		return nil, err
	}
	t := &Table{Name: "wait", Title: "Wait budget: token-wait(B) and global(B)", Columns: []Column{
		{"router", "router", 0}, {"budget_ms", "B ms", 0}, {"primary_pct", "primary %", 1}, {"waited_pct", "waited %", 2}, {"timeouts_pct", "timeouts %", 2},
		{"read_mean_ms", "read mean ms", 1}, {"read_p50_ms", "read p50 ms", 1}, {"read_p99_ms", "read p99 ms", 1},
		{"worst_100ms_pct", "worst 100 ms %", 1}, {"ryw_pct", "RYW viol. %", 2}, {"mr_pct", "MR viol. %", 2}, {"all_writes_pct", "all-writes viol. %", 2}}}
	t.Brief = []BriefColumn{{Key: "router"}, {Key: "budget_ms"}, {Key: "primary_pct"}, {Key: "waited_pct"}, {Key: "timeouts_pct"},
		{Key: "read_p50_ms", Header: "p50 ms"}, {Key: "read_p99_ms", Header: "p99 ms"}, {Key: "all_writes_pct", Header: "all-writes %"}}
	// The p99 of both is the budget itself (more than 1% of reads wait it
	// out), so the picture shows the mean and the median.
	pl := Plot{Name: "wait-budget", Title: "Wait budget: read latency (p99 = B for both)", X: "budget B (ms)", Y: "read latency (ms)"}
	for k, kind := range kinds {
		mean, p50 := Line{Name: kind.String() + " mean"}, Line{Name: kind.String() + " median"}
		for i, b := range bs {
			rs := res[i][k]
			t.Rows = append(t.Rows, []Cell{L(kind.String()), N(float64(b)), S(stat(rs, fPrim)), S(stat(rs, fWaited)), S(stat(rs, fTimeout)),
				S(stat(rs, fRMean)), S(stat(rs, fRP50)), S(stat(rs, fRP99)), S(stat(rs, fWorst)), S(stat(rs, fRYW)), S(stat(rs, fMR)), S(stat(rs, fAll))})
			mean.X, mean.Y = append(mean.X, float64(b)), append(mean.Y, stat(rs, fRMean).Mean)
			p50.X, p50.Y = append(p50.X, float64(b)), append(p50.Y, stat(rs, fRP50).Mean)
		}
		pl.Lines = append(pl.Lines, mean, p50)
	}
	t.Notes = []string{setupNote(&cfgs[0]), lagNote(&cfgs[0], res[0][0], pools[0]), allWritesNote}
	return &Report{Tables: []*Table{t}, Plots: []Plot{pl}}, nil
}

// LagWait is the `lagwait` experiment: token-wait(B) and global(B) with a
// small budget (default 50 ms) on replicas whose lag is far past it (a
// standing delay on every replica of the identical world: 0, 100 ms,
// 500 ms, 2 s; and the default straggler+heavy world), with token-ryw-mr
// (the same guarantee, never waiting) as the peer. A wait that cannot
// succeed only adds latency before the primary serves the read anyway;
// rule 4's futile-wait test (router.ReasonWaitFutile) skips it.
func LagWait(ctx context.Context, o Options) (*Report, error) {
	b := o.WaitBudget
	if b <= 0 {
		b = 50 * time.Millisecond
	}
	type pt struct {
		world  World
		delay  time.Duration
		budget time.Duration
	}
	pts := []pt{{WorldIdentical, 0, b}, {WorldIdentical, 100 * time.Millisecond, b}, {WorldIdentical, 500 * time.Millisecond, b},
		{WorldIdentical, 2 * time.Second, b}, {WorldStragglerHeavy, 0, b}, {WorldStragglerHeavy, 0, router.DefaultWaitBudget}}
	specsAt := func(i int) []RouterSpec {
		b := pts[i].budget
		return []RouterSpec{spec(router.Policy{Kind: router.PolicyTokenRYWMR}),
			spec(router.Policy{Kind: router.PolicyTokenWait, WaitBudget: b}), spec(router.Policy{Kind: router.PolicyTokenWait, WaitBudget: b, SkipFutile: true}),
			spec(router.Policy{Kind: router.PolicyTokenWait, WaitBudget: b, SkipFutile: true, FutileTrend: true}),
			spec(router.Policy{Kind: router.PolicyGlobal, WaitBudget: b}), spec(router.Policy{Kind: router.PolicyGlobal, WaitBudget: b, SkipFutile: true}),
			spec(router.Policy{Kind: router.PolicyGlobal, WaitBudget: b, SkipFutile: true, FutileTrend: true})}
	}
	cfgs, res, pools, err := sweep(ctx, len(pts), func(i int) Config {
		c := o.base(8)
		c.World = pts[i].world
		if d := pts[i].delay; d > 0 {
			m := c.World.Model()
			m.ReplicaDelay = make([]time.Duration, max(c.Replicas, 5))
			for r := range m.ReplicaDelay {
				m.ReplicaDelay[r] = d
			}
			c.Model = &m
		}
		return c
	}, specsAt, o.Progress)
	if err != nil {
		return nil, err
	}
	t := &Table{Name: "lagwait", Title: fmt.Sprintf("Futile waits: budget %v on lagging replicas (and %v in the %s world)", b, router.DefaultWaitBudget, WorldStragglerHeavy), Columns: []Column{
		{"replicas", "replicas", 0}, {"world", "world", 0}, {"delay_ms", "delay ms", 0}, {"lag_mean_ms", "lag mean ms", 0}, {"router", "router", 0},
		{"primary_pct", "primary %", 1}, {"waited_pct", "waited %", 2}, {"futile_pct", "wait-futile %", 2}, {"futile_missed_pct", "futile, missed %", 2}, {"timeouts_pct", "timeouts %", 2},
		{"wait_per_read_ms", "wait per read ms", 2}, {"read_mean_ms", "read mean ms", 1}, {"read_p50_ms", "read p50 ms", 1}, {"read_p99_ms", "read p99 ms", 1},
		{"ryw_pct", "RYW viol. %", 2}, {"mr_pct", "MR viol. %", 2}, {"all_writes_pct", "all-writes viol. %", 2}}}
	t.Brief = []BriefColumn{{Key: "replicas"}, {Key: "router"}, {Key: "primary_pct", Header: "prim %"},
		{Key: "futile_pct", Header: "futile %"}, {Key: "futile_missed_pct", Header: "missed %"}, {Key: "wait_per_read_ms", Header: "wait/read"}, {Key: "read_mean_ms", Header: "mean"}}
	for i, p := range pts {
		for k, sp := range specsAt(i) {
			rs := res[i][k]
			name := string(p.world)
			if p.delay > 0 {
				name += " +" + p.delay.String()
			}
			t.Rows = append(t.Rows, []Cell{L(name), L(string(p.world)), N(float64(p.delay / time.Millisecond)), N(lagMean(rs, pools[i]).Mean), L(sp.Name),
				S(stat(rs, fPrim)), S(stat(rs, fWaited)), S(stat(rs, fFutile)), S(stat(rs, fMissed)), S(stat(rs, fTimeout)),
				S(stat(rs, fWaitPR)), S(stat(rs, fRMean)), S(stat(rs, fRP50)), S(stat(rs, fRP99)),
				S(stat(rs, fRYW)), S(stat(rs, fMR)), S(stat(rs, fAll))})
		}
	}
	t.Notes = []string{setupNote(&cfgs[0]),
		fmt.Sprintf("Delay: a standing ship delay added on every replica of the identical world (MySQL's SOURCE_DELAY); the last rows are the %s world with no delay, at the budget and at the default 400 ms. Lag mean: commit to apply, pooled over every record. Wait per read: the time reads spent waiting (every wait of every attempt) over all reads, what the waits add to the mean latency. Wait-futile: reads whose budget wait was skipped because the waited replica's Lag minus the read's need age exceeded the budget left (router.ReasonWaitFutile); the primary served them at once. Futile, missed: of those, the reads a replica would have served within the budget left (the simulator's ground truth; the estimate assumes the lag holds steady, and a replica catching up after a stall or a heavy record beats it). Timeouts: waits that spent the whole budget.", WorldStragglerHeavy),
		allWritesNote}
	return &Report{Tables: []*Table{t}}, nil
}

// CapExp is the `cap` experiment: token-ryw-mr under a fleet-wide lag spike
// (every applier paused 6–8 s) with the fallback cap C at a few values, under
// each behaviour above the cap (wait-longer, fail-fast, serve-stale, defer),
// and token-ryw-mr+defer, which never sends a freshness fallback to the
// primary at all. C = 0 is no cap.
func CapExp(ctx context.Context, o Options) (*Report, error) {
	caps := []float64{0, 400, 200, 100, 50}
	behaviors := router.CapBehaviors()
	type pt struct {
		c     float64
		b     router.CapBehavior
		never bool // token-ryw-mr+defer, no cap
	}
	pts := []pt{{c: 0, b: router.CapWaitLonger}}
	for _, c := range caps[1:] {
		for _, b := range behaviors {
			pts = append(pts, pt{c: c, b: b})
		}
	}
	pts = append(pts, pt{never: true})
	extra := o.Base.Cap.ExtraWait
	if extra <= 0 {
		extra = 200 * time.Millisecond
	}
	cfgs, res, pools, err := sweep(ctx, len(pts), func(i int) Config {
		c := o.base(4)
		c.Spikes = append(slices.Clone(c.Spikes), Spike{From: 6 * time.Second, To: 8 * time.Second})
		c.Cap = router.Cap{PerSecond: pts[i].c, Behavior: pts[i].b, ExtraWait: extra}
		return c
	}, func(i int) []RouterSpec {
		return []RouterSpec{spec(router.Policy{Kind: router.PolicyTokenRYWMR, Defer: pts[i].never})}
	}, o.Progress)
	if err != nil {
		return nil, err
	}
	cols := []Column{
		{"cap_per_sec", "C /s", 0}, {"behavior", "above the cap", 0},
		{"peak_fallbacks_rps", "peak fallbacks/s", 0}, {"primary_pct", "primary %", 1}, {"worst_100ms_pct", "worst 100 ms %", 1},
		{"ryw_pct", "RYW viol. %", 2}, {"mr_pct", "MR viol. %", 2}, {"read_p99_ms", "read p99 ms", 1}}
	cols = append(append(cols, capColumns...), deferColumns...)
	t := &Table{Name: "cap", Title: "Fallback cap and defer under a lag spike (token-ryw-mr)", Columns: cols}
	t.Brief = []BriefColumn{{Key: "cap_per_sec", Header: "C/s"}, {Key: "behavior"}, {Key: "primary_pct"}, {Key: "worst_100ms_pct", Header: "worst %"},
		{Key: "cap_stale_pct", Header: "stale %"}, {Key: "cap_failed_pct", Header: "failed %"}, {Key: "read_p99_ms", Header: "p99 ms"}}
	for i, p := range pts {
		rs := res[i][0]
		b := p.b.String()
		switch {
		case p.never:
			b = "+defer: never the primary"
		case p.c == 0:
			b = "(no cap)"
		}
		row := []Cell{N(p.c), L(b), S(stat(rs, fPeak)), S(stat(rs, fPrim)), S(stat(rs, fWorst)),
			S(stat(rs, fRYW)), S(stat(rs, fMR)), S(stat(rs, fRP99))}
		t.Rows = append(t.Rows, append(append(row, capCells(rs)...), deferCells(rs)...))
	}
	t.Notes = []string{setupNote(&cfgs[0]),
		fmt.Sprintf("Lag spike: every replica's applier paused 6–8 s (replicas stay up). Under token-ryw-mr every primary read is a freshness fallback, so peak fallbacks/s is the peak primary read rate over 1 s windows. Wait-longer's extra wait: %v. Violations appear only where reads are served labelled stale. The last row is token-ryw-mr+defer with no cap: no freshness fallback ever reaches the primary.", extra),
		deferNote,
		lagNote(&cfgs[0], res[0][0], pools[0])}
	return &Report{Tables: []*Table{t}}, nil
}
