package lab

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/internal/chart"

	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

// Format is a table output format: md, csv (the simulator's table
// renderers) or json (the full Result, documented in docs/lab-api.md).
type Format = sim.Format

// ParseFormat checks a format name (md, csv, json).
func ParseFormat(s string) (Format, error) { return sim.ParseFormat(s) }

// na is a cell for a missing prediction.
var na = sim.NA()

func predCell(p *Prediction, f func(*Prediction) float64) sim.Cell {
	if p == nil {
		return na
	}
	return sim.N(f(p))
}

// Table renders a result as the routers table: lab columns with the
// simulator's prediction beside them. Its compact view (sim.Table.Compact,
// what a terminal shows by default) keeps seven columns, each percentage
// as "lab/sim", and two notes: the setup with the lag, and whether the
// simulator's figures agree with the lab's (Disagreements).
func Table(res *Result) *sim.Table {
	t := &sim.Table{
		Name:  "lab-" + res.Experiment,
		Title: fmt.Sprintf("lab %s: real %s beside the simulator (%s, via %s)", res.Experiment, compose.Engine(res.Config.Engine).Display(), res.Condition, res.Via),
		Columns: []sim.Column{
			{Key: "router", Header: "router", Prec: 0},
			{Key: "reads", Header: "reads", Prec: 0},
			{Key: "ryw_pct", Header: "RYW viol. %", Prec: 2},
			{Key: "sim_ryw_pct", Header: "sim RYW %", Prec: 2},
			{Key: "mr_pct", Header: "MR viol. %", Prec: 2},
			{Key: "sim_mr_pct", Header: "sim MR %", Prec: 2},
			{Key: "all_writes_pct", Header: "all-writes viol. %", Prec: 2},
			{Key: "sim_all_writes_pct", Header: "sim all-writes %", Prec: 2},
			{Key: "primary_pct", Header: "primary %", Prec: 1},
			{Key: "sim_primary_pct", Header: "sim primary %", Prec: 1},
			{Key: "worst_100ms_pct", Header: "worst 100 ms %", Prec: 1},
			{Key: "peak_primary_rps", Header: "peak primary r/s", Prec: 0},
			{Key: "read_p50_ms", Header: "read p50 ms", Prec: 2},
			{Key: "read_p99_ms", Header: "read p99 ms", Prec: 1},
			{Key: "sim_read_p99_ms", Header: "sim read p99 ms", Prec: 1},
			{Key: "waited", Header: "waited", Prec: 0},
			{Key: "timed_out", Header: "timed out", Prec: 0},
			{Key: "failed_fast", Header: "failed fast", Prec: 0},
			{Key: "errors", Header: "errors", Prec: 0},
			{Key: "deferred", Header: "deferred", Prec: 0},
		},
	}
	for i := range res.Routers {
		r := &res.Routers[i]
		t.Rows = append(t.Rows, []sim.Cell{
			sim.L(r.Name), sim.N(float64(r.Reads)),
			sim.N(r.RYWPct), predCell(r.Prediction, func(p *Prediction) float64 { return p.RYWPct }),
			sim.N(r.MRPct), predCell(r.Prediction, func(p *Prediction) float64 { return p.MRPct }),
			sim.N(r.AllWritesPct), predCell(r.Prediction, func(p *Prediction) float64 { return p.AllWritesPct }),
			sim.N(r.PrimaryPct), predCell(r.Prediction, func(p *Prediction) float64 { return p.PrimaryPct }),
			sim.N(r.Worst100msPct), sim.N(r.PeakPrimaryPerSec),
			sim.N(r.LatP50Ms), sim.N(r.LatP99Ms), predCell(r.Prediction, func(p *Prediction) float64 { return p.LatP99Ms }),
			sim.N(float64(r.Waited)), sim.N(float64(r.Outcomes[router.OutTimedOut.String()])),
			sim.N(float64(r.Outcomes[router.OutFailedFast.String()])), sim.N(float64(r.Outcomes[router.OutError.String()])),
			sim.N(float64(r.Outcomes[router.OutDeferred.String()])),
		})
	}
	t.Notes = Notes(res)
	predicted := len(res.Routers) > 0 && res.Routers[0].Prediction != nil
	pair := func(k string) string {
		if predicted {
			return "sim_" + k
		}
		return ""
	}
	t.Brief = []sim.BriefColumn{{Key: "router"}, {Key: "reads"},
		{Key: "ryw_pct", Header: "RYW %", Pair: pair("ryw_pct")}, {Key: "mr_pct", Header: "MR %", Pair: pair("mr_pct")},
		{Key: "primary_pct", Header: "primary %", Pair: pair("primary_pct")}}
	for i := range res.Routers {
		if strings.HasPrefix(res.Routers[i].Policy, router.PolicyGlobal.String()) {
			// A global router's guarantee is judged by the all-writes check.
			t.Brief = append(t.Brief, sim.BriefColumn{Key: "all_writes_pct", Header: "all-writes %", Pair: pair("all_writes_pct")})
			break
		}
	}
	// Reads that failed are the result of a failover or a chaos run: their
	// columns come before waited and p99, which give way when the view
	// would be wider than a terminal.
	for _, o := range []struct{ key, outcome string }{{"timed_out", router.OutTimedOut.String()},
		{"failed_fast", router.OutFailedFast.String()}, {"errors", router.OutError.String()}, {"deferred", router.OutDeferred.String()}} {
		for i := range res.Routers {
			if res.Routers[i].Outcomes[o.outcome] > 0 {
				t.Brief = append(t.Brief, sim.BriefColumn{Key: o.key})
				break
			}
		}
	}
	t.Brief = append(t.Brief, sim.BriefColumn{Key: "waited"}, sim.BriefColumn{Key: "read_p99_ms", Header: "p99 ms"})
	t.BriefNotes = briefNotes(res)
	return t
}

// gtidSource says where the GTID-token routers took positions and
// watermarks from (a result from before the setting: binlog streams and
// the pipelined query).
func gtidSource(c ConfigSummary) string {
	pos, wm := c.Positions, c.WatermarkSource
	if pos == "" {
		pos = string(PositionsBinlog)
	}
	if wm == "" {
		wm = string(WatermarkQuery)
	}
	if pos == string(PositionsPoll) {
		return fmt.Sprintf("GTID-token positions polled every %g ms, watermark %s", c.PollMs, wm)
	}
	return "GTID-token positions from binlog streams, watermark " + wm
}

// briefNotes are the compact view's two notes: the setup with the lag
// achieved, then the simulator's agreement and the expectations.
func briefNotes(res *Result) []string {
	c := res.Config
	setup := fmt.Sprintf("%d sessions, %g writes/s for %g s (%s, via %s); lag mean %s, p99 %s",
		c.Sessions, c.WriteRate, c.DurationSec, res.Condition, res.Via, fmtMs(res.Lag.MeanMs), fmtMs(res.Lag.P99Ms))
	var second []string
	if len(res.Routers) > 0 && res.Routers[0].Prediction != nil {
		setup += simLagClause(res) + ". % cells: lab/sim."
		second = append(second, agreementNote(res, briefDisagreements))
	} else {
		setup += "."
	}
	var failed []string
	for _, n := range res.Notes {
		switch {
		case strings.HasPrefix(n, "Expectations of scenario "):
			second = append(second, n)
		case strings.HasPrefix(n, "Expectation failed: "):
			failed = append(failed, n)
		}
	}
	if n := briefPrefix(res.Routers); n != "" {
		second = append(second, n)
	}
	second = append(second, "Every column and note: --wide, or --out DIR.")
	return append([]string{setup, strings.Join(second, " ")}, failed...)
}

// simLagClause is the compact note's clause on the simulator's lag: its
// achieved lag, which a hashing prediction does not fit but builds from
// the standing delays measured per replica (and says so). A prediction
// without a lag recorded (a result written before hashing predictions
// kept it) says that instead of printing zeros.
func simLagClause(res *Result) string {
	p := res.Routers[0].Prediction
	if p.LagMeanMs == 0 && p.LagP99Ms == 0 {
		return "; the simulator's lag not recorded"
	}
	who := "the simulator's"
	if IsHashRun(res) {
		who = "the simulator's, from the measured standing delays"
	}
	return fmt.Sprintf("; %s: mean %s, p99 %s", who, fmtMs(p.LagMeanMs), fmtMs(p.LagP99Ms))
}

// Disagreement is a figure on which the lab and the simulator differ by
// more than the trial spread.
type Disagreement struct {
	Router, Metric string
	// Lab and Sim are the two figures (percent); Tol is the difference
	// the spread allows.
	Lab, Sim, Tol float64
}

// Disagreements compares each router's RYW %, MR % and primary % with the
// simulator's prediction. The spread allowed is two standard deviations
// of the difference: the simulator's over its trials, and the lab's
// sampling error as a binomial share of its served reads (at the two
// figures' mean; the lab ran once, so this is the only spread it has,
// and since a session's reads are not independent it is a lower bound:
// a disagreement is flagged sooner rather than later). Only the lag is
// fitted (Predict): these figures are outputs of the simulator, so a
// disagreement is a real miss of its model.
func Disagreements(res *Result) []Disagreement {
	var out []Disagreement
	for i := range res.Routers {
		r := &res.Routers[i]
		p := r.Prediction
		if p == nil {
			continue
		}
		for _, m := range []struct {
			name         string
			lab, sim, sd float64
		}{{"RYW", r.RYWPct, p.RYWPct, p.RYWSD}, {"MR", r.MRPct, p.MRPct, p.MRSD}, {"primary", r.PrimaryPct, p.PrimaryPct, p.PrimarySD}} {
			q := (m.lab + m.sim) / 200
			se := 0.0
			if r.Served > 0 {
				se = 100 * math.Sqrt(q*(1-q)/float64(r.Served))
			}
			tol := 2 * math.Sqrt(m.sd*m.sd+se*se)
			if math.Abs(m.lab-m.sim) > tol {
				out = append(out, Disagreement{Router: r.Name, Metric: m.name, Lab: m.lab, Sim: m.sim, Tol: tol})
			}
		}
	}
	return out
}

// briefDisagreements is how many disagreements the compact view names (the
// largest, relative to their spread); the full notes name every one.
const briefDisagreements = 3

// agreementNote says in words whether the simulator's violation and
// primary figures agree with the lab's (Disagreements), naming at most
// limit of them, the largest relative to their spread (0: all, in table
// order).
func agreementNote(res *Result, limit int) string {
	ds := Disagreements(res)
	n := 0
	for i := range res.Routers {
		if res.Routers[i].Prediction != nil {
			n += 3
		}
	}
	if len(ds) == 0 {
		return fmt.Sprintf("The simulator agrees with the lab within the trial spread on all %d RYW, MR and primary figures.", n)
	}
	named := ds
	if limit > 0 && len(ds) > limit {
		named = slices.Clone(ds)
		slices.SortStableFunc(named, func(a, b Disagreement) int {
			return cmp.Compare(math.Abs(b.Lab-b.Sim)/b.Tol, math.Abs(a.Lab-a.Sim)/a.Tol)
		})
		named = named[:limit]
	}
	parts := make([]string, len(named))
	for i, d := range named {
		parts[i] = fmt.Sprintf("%s %s %.1f%% lab vs %.1f%% sim", d.Router, d.Metric, d.Lab, d.Sim)
	}
	more := ""
	if len(named) < len(ds) {
		more = fmt.Sprintf("; %d more with --wide", len(ds)-len(named))
	}
	return fmt.Sprintf("The simulator is off beyond the trial spread on %d of %d RYW, MR and primary figures (only its lag is fitted): %s%s.",
		len(ds), n, strings.Join(parts, "; "), more)
}

// Notes are the lines printed under a table: setup, achieved lag beside
// the simulator's, whether the simulator's figures agree with the lab's,
// and the experiment's own remarks.
func Notes(res *Result) []string {
	c := res.Config
	n := []string{
		fmt.Sprintf("Setup: %s routers, seed %d, %d sessions, %g writes/s offered for %gs (%d writes), %d reads per write, gaps %g–%g ms log-uniform, %d hot rows, %d workers; routed via %s (%s; scalar-token positions and the lag measurement polled every %g ms).",
			res.Mode, c.Seed, c.Sessions, c.WriteRate, c.DurationSec, res.OfferedWrites, c.ReadsPerWrite, c.GapMinMs, c.GapMaxMs, c.HotRows, c.Workers, res.Via, gtidSource(c), c.PollMs),
		fmt.Sprintf("Achieved lag (lab, write ack to first poll holding it, every replica): mean %.1f ms, p50 %.1f ms, p99 %.1f ms over %d samples (%d never seen).",
			res.Lag.MeanMs, res.Lag.P50Ms, res.Lag.P99Ms, res.Lag.Samples, res.Lag.Unseen),
	}
	if res.Spread.Writes > 0 {
		sp := fmt.Sprintf("Replica spread (lab, per write seen on every replica, first to last replica's first poll holding it): mean %.1f ms, p50 %.1f ms, p99 %.1f ms over %d writes",
			res.Spread.MeanMs, res.Spread.P50Ms, res.Spread.P99Ms, res.Spread.Writes)
		if len(res.Routers) > 0 && res.Routers[0].Prediction != nil {
			p := res.Routers[0].Prediction
			sp += fmt.Sprintf("; the simulator's: mean %.1f ms, p99 %.1f ms", p.SpreadMeanMs, p.SpreadP99Ms)
		}
		n = append(n, sp+".")
	}
	if len(res.Routers) > 0 && res.Routers[0].Prediction != nil {
		p := res.Routers[0].Prediction
		n = append(n, fmt.Sprintf("Simulator lag (its model fitted to the measured lag unless a note says otherwise): mean %.1f ms, p99 %.1f ms (model: %s). Violation %% columns are per served read (lab) and per read (sim).",
			p.LagMeanMs, p.LagP99Ms, res.SimModel), agreementNote(res, 0)+" Spread: 2 SD of the difference (the simulator's trials, the lab's binomial sampling error).")
	}
	n = append(n, fmt.Sprintf("Driver: %.0f reads/s over %.1f s measured (%.1f s with setup); condition did %d stalls, %d heavy transactions, %d fault errors; %d position polls, %d failed.",
		res.ReadsPerSec, res.MeasureSeconds, res.ElapsedSeconds, res.Stalls, res.HeavyTxns, res.FaultErrors, res.Polls, res.PollErrors))
	if c.GlobalSource != "" {
		n = append(n, fmt.Sprintf("Global routers take each read's target from %s (live.GlobalSource); all-writes viol. %%: served reads lacking a write acknowledged to any session before they were issued.", c.GlobalSource))
	}
	n = append(n, res.Notes...)
	return n
}

// Write renders res in format f to w: in markdown the compact tables
// unless wide (every column and note); CSV and JSON always hold
// everything.
func Write(w io.Writer, res *Result, f Format, wide bool) error {
	if f == sim.FormatJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	view := func(t *sim.Table) *sim.Table {
		if f == sim.FormatMarkdown && !wide {
			return t.Compact()
		}
		return t
	}
	if err := view(Table(res)).Write(w, f); err != nil {
		return err
	}
	for _, t := range res.SimTables {
		tt := *t
		tt.Title = "simulator: " + t.Title
		if err := view(&tt).Write(w, f); err != nil {
			return err
		}
	}
	return nil
}

// WriteOut writes DIR/<name>.md, .csv, .json (every column and note), a
// bar chart per metric (SVG and PNG) and DIR/report.html holding
// everything.
func WriteOut(dir string, results []*Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var page bytes.Buffer
	page.WriteString(sim.HTMLHead("causallab lab report"))
	engine := compose.EngineMySQL
	if len(results) > 0 && results[0].Config.Engine != "" {
		engine = compose.Engine(results[0].Config.Engine)
	}
	page.WriteString("<h1>causallab lab report</h1>\n<p>Measured on real " + engine.Display() + "; violations counted from the rows the database returned (docs/lab.md). The simulator's prediction for the same workload and condition is beside each lab column.</p>\n")
	allHash := len(results) > 0
	for _, res := range results {
		allHash = allHash && IsHashRun(res)
	}
	if allHash {
		var b bytes.Buffer
		if err := WriteHash(&b, results, sim.FormatMarkdown); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "lab-hash.md"), b.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&page, "<h2>lab hash</h2>\n<pre>%s</pre>\n", html.EscapeString(HashSummary(results)))
		for _, n := range hashNotes(results) {
			fmt.Fprintf(&page, "<p><small>%s</small></p>\n", html.EscapeString(n))
		}
	}
	for _, res := range results {
		base := "lab-" + res.Experiment
		t := Table(res)
		for _, f := range []Format{sim.FormatMarkdown, sim.FormatCSV} {
			var b bytes.Buffer
			if err := t.Write(&b, f); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, base+"."+string(f)), b.Bytes(), 0o644); err != nil {
				return err
			}
		}
		var jb bytes.Buffer
		if err := Write(&jb, res, sim.FormatJSON, true); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, base+".json"), jb.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&page, "<h2>%s</h2>\n", html.EscapeString(t.Title))
		t.WriteHTML(&page)
		for _, st := range res.SimTables {
			tt := *st
			tt.Title = "simulator: " + st.Title
			fmt.Fprintf(&page, "<h3>%s</h3>\n", html.EscapeString(tt.Title))
			tt.WriteHTML(&page)
		}
		if IsHashRun(res) {
			// The hashing picture replaces the per-metric bar charts.
			if err := WriteHashPlot(filepath.Join(dir, base), res); err != nil {
				return fmt.Errorf("lab: drawing %s: %w", base, err)
			}
			fmt.Fprintf(&page, "<p><img src=%q alt=%q style=\"max-width:100%%\"></p>\n", base+".png", "moves and MR violations by cause, "+res.Experiment)
			continue
		}
		for _, m := range barMetrics {
			name := base + "-" + m.key
			if err := barChart(filepath.Join(dir, name), res, m); err != nil {
				return fmt.Errorf("lab: drawing %s: %w", name, err)
			}
			fmt.Fprintf(&page, "<p><img src=%q alt=%q style=\"max-width:100%%\"></p>\n", name+".png", m.title)
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), page.Bytes(), 0o644)
}

// barMetric is one bar chart of WriteOut: the lab's figure per router, the
// simulator's mean and its SD over the trials.
type barMetric struct {
	key, title string
	lab        func(*RouterResult) float64
	sim, sd    func(*Prediction) float64
}

var barMetrics = []barMetric{
	{"ryw", "RYW violations (% of reads)", func(r *RouterResult) float64 { return r.RYWPct },
		func(p *Prediction) float64 { return p.RYWPct }, func(p *Prediction) float64 { return p.RYWSD }},
	{"mr", "MR violations (% of reads)", func(r *RouterResult) float64 { return r.MRPct },
		func(p *Prediction) float64 { return p.MRPct }, func(p *Prediction) float64 { return p.MRSD }},
	{"primary", "Reads on the primary (%)", func(r *RouterResult) float64 { return r.PrimaryPct },
		func(p *Prediction) float64 { return p.PrimaryPct }, func(p *Prediction) float64 { return p.PrimarySD }},
}

// barSeries are a bar chart's values: the lab's per router and, when the
// simulator ran, its means with whiskers of one SD over its trials.
type barSeries struct {
	names        []string
	lab, sim     plotter.Values
	simLo, simHi []float64
	hasSim       bool
	trials       int
	top          float64 // the tallest bar or whisker
}

func barValues(res *Result, m barMetric) barSeries {
	n := len(res.Routers)
	b := barSeries{names: make([]string, n), lab: make(plotter.Values, n), sim: make(plotter.Values, n),
		simLo: make([]float64, n), simHi: make([]float64, n)}
	for i := range res.Routers {
		r := &res.Routers[i]
		b.names[i] = r.Name
		b.lab[i] = m.lab(r)
		b.top = max(b.top, b.lab[i])
		if p := r.Prediction; p != nil {
			b.hasSim = true
			b.trials = max(b.trials, p.Trials)
			b.sim[i] = m.sim(p)
			sd := m.sd(p)
			b.simLo[i], b.simHi[i] = b.sim[i]-sd, b.sim[i]+sd
			b.top = max(b.top, b.simHi[i])
		}
	}
	return b
}

// barCaption names the run's condition and workload, and what the bars
// and whiskers are.
func barCaption(res *Result, b barSeries) string {
	c := res.Config
	s := fmt.Sprintf("lab %s: %s via %s; %d sessions, %g writes/s for %g s; lag mean %s, p99 %s. Lab: one run.",
		res.Experiment, res.Condition, res.Via, c.Sessions, c.WriteRate, c.DurationSec, fmtMs(res.Lag.MeanMs), fmtMs(res.Lag.P99Ms))
	if b.hasSim {
		trials := "its trials"
		if b.trials > 0 {
			trials = fmt.Sprintf("%d trials", b.trials)
		}
		s += fmt.Sprintf(" Simulator: mean, whisker ±1 SD over %s.", trials)
	}
	return s
}

// barChart draws lab and simulator values side by side per router, as
// base.svg and base.png: the run's condition in the title and a caption
// under the plot, the legend in a column of its own (never over a bar),
// the y axis from 0 to a labelled tick at or above the tallest bar or
// whisker (0..1 when every value is 0, never a negative axis), a bar of
// value 0 drawn as a labelled mark at the baseline, and the simulator's
// spread over its trials as whiskers.
func barChart(base string, res *Result, m barMetric) error {
	p, lg, _, err := barPlot(res, m)
	if err != nil {
		return err
	}
	caption := barCaption(res, barValues(res, m))
	csty := p.X.Tick.Label
	csty.Rotation, csty.XAlign, csty.YAlign = 0, draw.XLeft, draw.YBottom
	return chart.Save(base, 20*vg.Centimeter, 11*vg.Centimeter, func(dc draw.Canvas) {
		lines := chart.Wrap(csty, caption, dc.Max.X-dc.Min.X-vg.Points(12))
		lh := csty.Height("0") * 1.15
		for i, l := range lines {
			dc.FillText(csty, vg.Point{X: dc.Min.X + vg.Points(6), Y: dc.Min.Y + vg.Points(4) + lh*vg.Length(len(lines)-1-i)}, l)
		}
		body := draw.Crop(dc, 0, 0, lh*vg.Length(len(lines))+vg.Points(8), 0)
		area, lc := chart.SplitLegend(body, lg)
		p.Draw(area)
		lg.Draw(lc)
	})
}

// barPlot is barChart's plot and legend, and the marks over its bars
// (zeros, whiskers), lab's first.
func barPlot(res *Result, m barMetric) (*plot.Plot, *plot.Legend, []*chart.BarMarks, error) {
	b := barValues(res, m)
	p := plot.New()
	p.Title.Text = m.title + ": " + res.Condition
	if b.top == 0 {
		p.Title.Text += ", 0 for every router"
	}
	p.Y.Label.Text = "%"
	w := vg.Points(14)
	lg := plot.NewLegend()
	labOff := vg.Length(0)
	if b.hasSim {
		labOff = -w / 2
	}
	mk, err := addBars(p, &lg, b.lab, nil, nil, w, labOff, plotutil.Color(0), "lab (real "+compose.Engine(res.Config.Engine).Display()+"), one run")
	if err != nil {
		return nil, nil, nil, err
	}
	marks := []*chart.BarMarks{mk}
	if b.hasSim {
		mk, err := addBars(p, &lg, b.sim, b.simLo, b.simHi, w, w/2, plotutil.Color(1), "simulator, mean ± SD")
		if err != nil {
			return nil, nil, nil, err
		}
		marks = append(marks, mk)
	}
	p.X.Min, p.X.Max = -0.6, float64(len(b.names))-0.4
	top := b.top
	if top > 80 && top <= 100 {
		top = 100 // a share near 100: the whole scale
	}
	chart.YFromZero(p, top)
	p.NominalX(b.names...)
	p.X.Tick.Label.Rotation = math.Pi / 9
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	return p, &lg, marks, nil
}

// addBars adds one series of bars at offset off, with its zero marks and
// whiskers (lo, hi: nil for none), and its legend entry.
func addBars(p *plot.Plot, lg *plot.Legend, v plotter.Values, lo, hi []float64, w, off vg.Length, c color.Color, label string) (*chart.BarMarks, error) {
	bc, err := plotter.NewBarChart(v, w)
	if err != nil {
		return nil, err
	}
	bc.Color, bc.LineStyle.Width, bc.Offset = c, 0, off
	mk := &chart.BarMarks{Values: v, Low: lo, High: hi, Offset: off, Width: w, Color: c}
	p.Add(bc, mk)
	lg.Add(label, chart.ColorBox{C: c})
	return mk, nil
}

// Summary is a one-line verdict per router, for logs.
func Summary(res *Result) string {
	var b strings.Builder
	for _, r := range res.Routers {
		fmt.Fprintf(&b, "%s: %d reads, RYW %d, MR %d; ", r.Name, r.Reads, r.RYW, r.MR)
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// briefPrefix is the compact view's clause on the prefix check: "" when
// nothing was judged.
func briefPrefix(rs []RouterResult) string {
	var flagged []string
	judged := false
	for _, r := range rs {
		judged = judged || r.NonPrefixJudged > 0
		if r.NonPrefix > 0 {
			flagged = append(flagged, fmt.Sprintf("%s %d", r.Name, r.NonPrefix))
		}
	}
	switch {
	case !judged:
		return ""
	case len(flagged) == 0:
		return "non_prefix 0: every served read saw a prefix of the primary's history."
	default:
		return "non_prefix (reads that saw no prefix of the primary's history): " + strings.Join(flagged, ", ") + "; --wide shows them."
	}
}
