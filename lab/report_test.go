package lab

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

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
