package lab

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/sim"
)

// IsHashRun reports whether every router row of res carries a hashing
// attribution (a run of affinity routers only, as lab hash's).
func IsHashRun(res *Result) bool {
	if len(res.Routers) == 0 {
		return false
	}
	for i := range res.Routers {
		if res.Routers[i].Hash == nil {
			return false
		}
	}
	return true
}

// hashCell is a count as the summary prints it: whole numbers, and "<1"
// for a simulator mean above zero but below one (so that a cell reads 0
// only when it is exactly zero).
func hashCell(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.IsNaN(v):
		return "–"
	case v < 1:
		return "<1"
	}
	return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
}

// hashCauseLegend explains the summary's cause columns, one line each.
var hashCauseLegend = []string{
	"down  the session's own (first-choice) replica was down: unavoidable",
	"need  its replica was up and the mode moved it anyway: the edge cases",
	"back  it returned to, or stayed on, a replica that had been down",
}

// HashSummary renders hashing runs as one compact text table (at most 80
// columns): per run and mode, the sessions moved and the MR violations by
// cause and the RYW violations, each lab row followed by the simulator's
// prediction for the same world.
func HashSummary(results []*Result) string {
	var b strings.Builder
	runW, modeW := len("hash-drift")+1, len("rebalance-override")+1
	for _, res := range results {
		runW = max(runW, len(res.Experiment)+1)
		for i := range res.Routers {
			if h := res.Routers[i].Hash; h != nil {
				modeW = max(modeW, len(h.Mode)+1)
			}
		}
	}
	row := fmt.Sprintf("%%-%ds%%-%ds%%6s%%6s%%6s  %%6s%%6s%%6s  %%6s\n", runW, modeW)
	fmt.Fprintf(&b, "%-*s%18s  %18s\n", runW+modeW, "", "sessions moved", "MR violations")
	fmt.Fprintf(&b, row, "run", "mode", "down", "need", "back", "down", "need", "back", "RYW")
	for _, res := range results {
		run := res.Experiment
		for i := range res.Routers {
			h := res.Routers[i].Hash
			if h == nil {
				continue
			}
			cells := func(h *HashResult) []any {
				return []any{hashCell(h.SessionsMoved.ChosenDown), hashCell(h.SessionsMoved.Needless), hashCell(h.SessionsMoved.CameBack),
					hashCell(h.MR.ChosenDown), hashCell(h.MR.Needless), hashCell(h.MR.CameBack), hashCell(h.RYW)}
			}
			fmt.Fprintf(&b, row, append([]any{run, h.Mode}, cells(h)...)...)
			run = ""
			if h.Sim != nil {
				fmt.Fprintf(&b, row, append([]any{"", "  simulator"}, cells(h.Sim)...)...)
			}
		}
	}
	return b.String()
}

// hashNotes are the lines under the summary: the legend, the world, each
// run's faults and expectations.
func hashNotes(results []*Result) []string {
	out := append([]string(nil), hashCauseLegend...)
	if len(results) == 0 {
		return out
	}
	r0 := results[0]
	var lags []string
	for _, l := range r0.ReplicaLag {
		lags = append(lags, fmt.Sprintf("%s %s", l.Node, fmtMs(l.P10Ms)))
	}
	weights := "1 each"
	if len(r0.Weights) > 0 {
		ws := make([]string, len(r0.Weights))
		for i, w := range r0.Weights {
			ws[i] = strconv.Itoa(w)
		}
		weights = strings.Join(ws, ":")
	}
	c := r0.Config
	out = append(out, fmt.Sprintf("World: %s replicas, lag p10 %s; weights %s; %d sessions, %g writes/s for %gs, %d reads per write; via %s.",
		r0.Condition, strings.Join(lags, ", "), weights, c.Sessions, c.WriteRate, c.DurationSec, c.ReadsPerWrite, r0.Via))
	if r0.SimModel != "" {
		out = append(out, "Simulator: "+r0.SimModel+".")
	}
	out = append(out, fmt.Sprintf("The %d sessions are split between a run's two modes (each mode's counts are over %d).", c.Sessions, c.Sessions/2))
	for _, res := range results {
		for i := range res.Routers {
			r := &res.Routers[i]
			if h := r.Hash; h != nil && (h.MR.None > 0 || h.MR.Total() != float64(r.MR)) {
				out = append(out, fmt.Sprintf("%s %s: %g of its %d MR violations unexplained by a move or an outage.", res.Experiment, r.Name, float64(r.MR)-h.MR.Total()+h.MR.None, r.MR))
			}
		}
		var fs []string
		for _, f := range res.Faults {
			what := f.Kind
			if f.Kind == string(EvDrift) {
				what = fmt.Sprintf("drift +%d in flight", f.Load)
			}
			fs = append(fs, fmt.Sprintf("%s %s %.1f–%.1f s", f.Node, what, f.FromSec, f.ToSec))
		}
		line := fmt.Sprintf("%s: %s.", res.Experiment, strings.Join(fs, "; "))
		noSim := 0
		for i := range res.Routers {
			if h := res.Routers[i].Hash; h != nil && h.Sim == nil {
				noSim++
			}
		}
		if noSim > 0 {
			line += fmt.Sprintf(" No simulator row for %d of its %d modes (the prediction did not run): the picture has only the lab's bars.", noSim, len(res.Routers))
		}
		for _, n := range res.Notes {
			if strings.HasPrefix(n, "Expectations of scenario") || strings.HasPrefix(n, "Expectation failed") {
				line += " " + n
			}
		}
		out = append(out, line)
	}
	return out
}

// wrap breaks s into lines of at most width columns at spaces
// (continuation lines indented by two).
func wrap(s string, width int) string {
	if len([]rune(s)) <= width {
		return s
	}
	var b strings.Builder
	col := 0
	for i, w := range strings.Fields(s) {
		n := len([]rune(w))
		switch {
		case i == 0:
		case col+1+n > width:
			b.WriteString("\n  ")
			col = 2
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += n
	}
	return b.String()
}

func fmtMs(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1fs", v/1000)
	}
	return fmt.Sprintf("%.0fms", v)
}

// WriteHash renders hashing results in format f: md and text are the
// compact summary with its notes (the per-run tables are in --out's
// files), csv one row per run, mode and source, json the results.
func WriteHash(w io.Writer, results []*Result, f Format) error {
	switch f {
	case sim.FormatJSON:
		for _, r := range results {
			if err := Write(w, r, f, true); err != nil {
				return err
			}
		}
		return nil
	case sim.FormatCSV:
		return writeHashCSV(w, results)
	}
	via, engine := "", compose.EngineMySQL
	if len(results) > 0 {
		via, engine = results[0].Via, compose.Engine(results[0].Config.Engine)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "### lab hash: real %s beside the simulator (via %s)\n\n```\n%s```\n\n", engine.Display(), via, HashSummary(results))
	for _, n := range hashNotes(results) {
		fmt.Fprintf(&b, "%s\n", wrap(n, 80))
	}
	b.WriteString("\n")
	_, err := w.Write(b.Bytes())
	return err
}

func writeHashCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	head := []string{"run", "mode", "source"}
	for _, what := range []string{"sessions_moved", "mr"} {
		for _, c := range append(hashroute.Causes(), hashroute.CauseNone) {
			if what == "sessions_moved" && c == hashroute.CauseNone {
				continue
			}
			head = append(head, what+"_"+strings.ReplaceAll(c.String(), "-", "_"))
		}
	}
	head = append(head, "reads", "ryw")
	if err := cw.Write(head); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, res := range results {
		for i := range res.Routers {
			h := res.Routers[i].Hash
			if h == nil {
				continue
			}
			for _, src := range []struct {
				name string
				h    *HashResult
			}{{"lab", h}, {"sim", h.Sim}} {
				if src.h == nil {
					continue
				}
				x := src.h
				rec := []string{res.Experiment, h.Mode, src.name,
					f(x.SessionsMoved.ChosenDown), f(x.SessionsMoved.Needless), f(x.SessionsMoved.CameBack),
					f(x.MR.ChosenDown), f(x.MR.Needless), f(x.MR.CameBack), f(x.MR.None), f(x.Reads), f(x.RYW)}
				if err := cw.Write(rec); err != nil {
					return err
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
