package lab

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"gonum.org/v1/plot"

	"github.com/causallab/causallab/sim"
)

// reportResult is a routers run as the lab reports it, with the numbers
// README's table once showed (two routers) and a prediction per row.
func reportResult() *Result {
	return &Result{Experiment: "routers", Condition: "straggler+heavy", Mode: "concurrent", Via: "router",
		Config: ConfigSummary{Sessions: 2000, WriteRate: 200, DurationSec: 20, ReadsPerWrite: 3, Seed: 1, Workers: 24, PollMs: 5},
		Lag:    LagStats{MeanMs: 468, P99Ms: 2700, Samples: 12000},
		Routers: []RouterResult{
			{Name: "affinity(full-list)", Reads: 1974, Served: 1974, RYWPct: 19.27, MRPct: 0, PrimaryPct: 0, LatP99Ms: 162.4,
				Prediction: &Prediction{RYWPct: 19.17, RYWSD: 1.1, MRPct: 0, PrimaryPct: 0, LagMeanMs: 470, LagP99Ms: 2600}},
			{Name: "token-ryw-mr", Reads: 2094, Served: 2094, RYWPct: 0, MRPct: 0, PrimaryPct: 42.3, LatP99Ms: 158.7, Waited: 12,
				Prediction: &Prediction{RYWPct: 0, MRPct: 0, PrimaryPct: 77.7, PrimarySD: 2.0, LagMeanMs: 470, LagP99Ms: 2600}},
		},
		Notes: []string{"Simulator lag fitted to the lab's: measured mean 468 ms; within tolerance.", "Expectations of scenario routers: 2 of 2 held."},
	}
}

func TestCompactTableFitsATerminal(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, reportResult(), sim.FormatMarkdown, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > sim.TermWidth {
			t.Errorf("line of %d characters: %q", n, l)
		}
	}
	for _, want := range []string{"| router | reads | RYW % | MR % | primary % | waited | p99 ms |",
		"| token-ryw-mr | 2094 | 0.00/0.00 | 0.00/0.00 | 42.3/77.7 | 12 | 158.7 |", "--wide"} {
		if !strings.Contains(out, want) {
			t.Errorf("compact output lacks %q:\n%s", want, out)
		}
	}
	noSim := reportResult()
	for i := range noSim.Routers {
		noSim.Routers[i].Prediction = nil
	}
	b.Reset()
	if err := Write(&b, noSim, sim.FormatMarkdown, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| token-ryw-mr | 2094 | 0.00 | 0.00 | 42.3 | 12 | 158.7 |") || strings.Contains(b.String(), "simulator") && strings.Contains(b.String(), "agrees") {
		t.Errorf("compact output without a prediction:\n%s", b.String())
	}
	var w bytes.Buffer
	if err := Write(&w, reportResult(), sim.FormatMarkdown, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.String(), "| peak primary r/s |") || !strings.Contains(w.String(), "Driver:") {
		t.Errorf("--wide output lacks the full table or its notes:\n%s", w.String())
	}
}

// TestDisagreementsSaySo: the prediction that was far off at load 12
// (primary 42.3% lab vs 77.7% sim) is called off in words, in the compact
// and the full notes; the figure within its trial spread is not.
func TestDisagreementsSaySo(t *testing.T) {
	res := reportResult()
	ds := Disagreements(res)
	if len(ds) != 1 || ds[0].Router != "token-ryw-mr" || ds[0].Metric != "primary" {
		t.Fatalf("disagreements %+v, want token-ryw-mr primary only", ds)
	}
	want := "The simulator is off beyond the trial spread on 1 of 6 RYW, MR and primary figures (only its lag is fitted): token-ryw-mr primary 42.3% lab vs 77.7% sim."
	for name, notes := range map[string][]string{"full": Notes(res), "compact": Table(res).BriefNotes} {
		if !strings.Contains(strings.Join(notes, " "), want) {
			t.Errorf("%s notes lack %q:\n%s", name, want, strings.Join(notes, "\n"))
		}
	}
	res.Routers[1].PrimaryPct = 76.5 // within 2 SD of the trials (and the lab's sampling error)
	if ds := Disagreements(res); len(ds) != 0 {
		t.Errorf("disagreements %+v, want none", ds)
	}
	if n := agreementNote(res, 0); !strings.Contains(n, "agrees with the lab within the trial spread on all 6") {
		t.Errorf("agreement note %q", n)
	}
}

// TestAgreementNoteNamesTheLargest: the compact note names the three
// disagreements largest against their spread and counts the rest; the
// full one names every one, in table order.
func TestAgreementNoteNamesTheLargest(t *testing.T) {
	res := &Result{}
	for i, gap := range []float64{1, 5, 2, 4, 3} {
		res.Routers = append(res.Routers, RouterResult{Name: fmt.Sprintf("r%d", i), Served: 1000000,
			RYWPct: 10 + gap, Prediction: &Prediction{RYWPct: 10, RYWSD: 0.1}})
	}
	brief, full := agreementNote(res, briefDisagreements), agreementNote(res, 0)
	if want := "on 5 of 15 RYW, MR and primary figures (only its lag is fitted): r1 RYW 15.0% lab vs 10.0% sim; r3 RYW 14.0% lab vs 10.0% sim; r4 RYW 13.0% lab vs 10.0% sim; 2 more with --wide."; !strings.Contains(brief, want) {
		t.Errorf("compact note %q, want it to contain %q", brief, want)
	}
	if want := "r0 RYW 11.0% lab vs 10.0% sim; r1 RYW"; !strings.Contains(full, want) || strings.Contains(full, "more with --wide") {
		t.Errorf("full note %q, want every disagreement in table order", full)
	}
}

// TestWriteOutDrawsEveryPicture: --out holds the tables in full, each
// bar chart as SVG and PNG, and report.html showing the PNGs.
func TestWriteOutDrawsEveryPicture(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("CAUSALLAB_TEST_OUT"); d != "" { // to look at the pictures
		dir = d
	}
	res := reportResult()
	res.Routers[0].MRPct, res.Routers[1].MRPct = 0, 0 // an all-zero chart
	if err := WriteOut(dir, []*Result{res}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"ryw", "mr", "primary"} {
		for _, ext := range []string{".svg", ".png"} {
			st, err := os.Stat(filepath.Join(dir, "lab-routers-"+m+ext))
			if err != nil || st.Size() < 1000 {
				t.Errorf("lab-routers-%s%s: %v (%v bytes)", m, ext, err, st)
			}
		}
		if !bytes.Contains(page, []byte(`src="lab-routers-`+m+`.png"`)) {
			t.Errorf("report.html does not show lab-routers-%s.png", m)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "lab-routers.md"))
	if err != nil || !bytes.Contains(md, []byte("peak primary r/s")) {
		t.Errorf("lab-routers.md is not the full table (%v):\n%s", err, md)
	}
}

// TestCompactShowsFailedReads: when reads timed out or failed fast (a
// failover), the compact view shows those columns, still within 80.
func TestCompactShowsFailedReads(t *testing.T) {
	res := reportResult()
	res.Routers[0].Outcomes = map[string]int64{"timed-out": 260}
	res.Routers[1].Outcomes = map[string]int64{"failed-fast": 260, "error": 3}
	c := Table(res).Compact()
	var heads []string
	for _, col := range c.Columns {
		heads = append(heads, col.Key)
	}
	got := strings.Join(heads, ",")
	if !strings.Contains(got, "timed_out,failed_fast,errors") {
		t.Errorf("compact columns %s lack the failed reads", got)
	}
	var b bytes.Buffer
	if err := c.Write(&b, sim.FormatMarkdown); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if n := utf8.RuneCountInString(l); n > sim.TermWidth {
			t.Errorf("line of %d characters: %q", n, l)
		}
	}
}

// TestBarChartAxisZerosSpread: each routers picture runs its y axis to a
// labelled tick at or above its tallest bar or whisker (gonum's ticks on
// [0, 1.08·max] once stopped short of it), marks every zero bar (the
// token routers' 0 violations once drew nothing, like missing data),
// draws the simulator's trial spread as whiskers, and names the run's
// condition in its title and caption.
func TestBarChartAxisZerosSpread(t *testing.T) {
	res := reportResult()
	res.Routers[0].RYWPct = 21.3 // gonum labelled 0, 10, 20 under a bar of 21.3
	for i := range res.Routers {
		res.Routers[i].Prediction.Trials = 4
	}
	for _, m := range barMetrics {
		p, _, marks, err := barPlot(res, m)
		if err != nil {
			t.Fatal(err)
		}
		b := barValues(res, m)
		var last plot.Tick
		for _, tk := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
			if tk.Label != "" {
				last = tk
			}
		}
		if last.Value < b.top || p.Y.Min != 0 {
			t.Errorf("%s: last labelled tick %v below the tallest bar or whisker %v", m.key, last.Value, b.top)
		}
		if !strings.Contains(p.Title.Text, "straggler+heavy") {
			t.Errorf("%s: title %q lacks the condition", m.key, p.Title.Text)
		}
		var zeros, whiskers int
		for _, bm := range marks {
			zeros += len(bm.Values)
			whiskers += len(bm.High)
			for i, v := range bm.Values {
				if i < len(bm.High) && (bm.High[i] < v || bm.Low[i] > v) {
					t.Errorf("%s: whisker %v..%v does not hold the mean %v", m.key, bm.Low[i], bm.High[i], v)
				}
			}
		}
		if zeros != 2*len(res.Routers) || whiskers != len(res.Routers) {
			t.Errorf("%s: marks for %d bars, whiskers for %d, want %d and %d", m.key, zeros, whiskers, 2*len(res.Routers), len(res.Routers))
		}
		if c := barCaption(res, b); !strings.Contains(c, "straggler+heavy via router") || !strings.Contains(c, "±1 SD over 4 trials") {
			t.Errorf("caption %q", c)
		}
	}
	if b := barValues(res, barMetrics[0]); b.top != 21.3 || math.Abs(b.simHi[0]-(19.17+1.1)) > 1e-9 {
		t.Errorf("ryw top %v, whisker %v", b.top, b.simHi[0])
	}
}

// TestHashNoteSaysTheSimulatorsLag: a hashing run's compact note once
// said "the simulator's: mean 0ms, p99 0ms" beside simulator RYW of
// 67-82% (PredictHash kept no lag). It now prints the lag the simulator
// had, built from the measured standing delays, and says so; a prediction
// without a lag recorded says that instead of zeros.
func TestHashNoteSaysTheSimulatorsLag(t *testing.T) {
	res := &Result{Experiment: "hash-down", Condition: "staggered", Via: "router", Lag: LagStats{MeanMs: 4500, P99Ms: 12200},
		Config: ConfigSummary{Sessions: 600, WriteRate: 200, DurationSec: 15},
		Routers: []RouterResult{{Name: "affinity(full-list)", Hash: &HashResult{},
			Prediction: &Prediction{RYWPct: 82, LagMeanMs: 2050, LagP99Ms: 4100}}}}
	note := Table(res).BriefNotes[0]
	if !strings.Contains(note, "the simulator's, from the measured standing delays: mean 2.0s, p99 4.1s") || strings.Contains(note, "0ms") {
		t.Errorf("note %q", note)
	}
	res.Routers[0].Prediction.LagMeanMs, res.Routers[0].Prediction.LagP99Ms = 0, 0
	if note := Table(res).BriefNotes[0]; !strings.Contains(note, "the simulator's lag not recorded") || strings.Contains(note, "mean 0ms") {
		t.Errorf("note without a lag %q", note)
	}
	if note := Table(reportResult()).BriefNotes[0]; !strings.Contains(note, "; the simulator's: mean 470ms, p99 2.6s.") {
		t.Errorf("routers note %q", note)
	}
}

// TestPredictHashKeepsItsLag: the simulator's prediction of a hashing run
// carries the lag it had (the measured standing delays: about 2 s and 4 s
// behind the fastest here) and its trial count and spread.
func TestPredictHashKeepsItsLag(t *testing.T) {
	specs, err := ParseRouters("affinity(full-list)")
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Config: ConfigSummary{Sessions: 60, WriteRate: 50, DurationSec: 3, ReadsPerWrite: 3, GapMinMs: 15, GapMaxMs: 1000, Seed: 1},
		Routers:    []RouterResult{{Name: specs[0].Name, Hash: &HashResult{}}},
		ReplicaLag: []ReplicaLag{{Node: "replica1", P10Ms: 10}, {Node: "replica2", P10Ms: 2010}, {Node: "replica3", P10Ms: 4010}}}
	cfg := Config{Routers: specs}
	if err := PredictHash(context.Background(), res, cfg, []string{"replica1", "replica2", "replica3"}, PredictOptions{}); err != nil {
		t.Fatal(err)
	}
	p := res.Routers[0].Prediction
	if p == nil || p.LagMeanMs < 1000 || p.LagP99Ms < 3000 || p.Trials != 4 {
		t.Fatalf("prediction %+v, want the standing delays' lag over 4 trials", p)
	}
}
