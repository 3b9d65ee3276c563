package sim

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/router"
)

// TestStripPicture: the strip covers the span of the offered writes (the
// lag curve's span), its per-bin read shares add up to 100% and account
// for every read before the end, and the drawn SVG stays small and names
// every node in its legend.
func TestStripPicture(t *testing.T) {
	cfg := Config{Seed: 4, Trials: 1, Duration: 3 * time.Second, Sessions: 500}
	tr, res, err := TraceTrial(context.Background(), cfg, spec(router.Policy{Kind: router.PolicyTokenRYWMR}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if tr.DurationMs != 3000 || !tr.Straggler {
		t.Fatalf("trace span %v ms, straggler %v; want 3000 ms, true (default world)", tr.DurationMs, tr.Straggler)
	}
	end := tr.DurationMs / 1000
	shares, nodes, after := stripShares(tr, end)
	if nodes != 5 || len(shares) != nodes+2 || len(shares[0]) != 12 {
		t.Fatalf("%d nodes, %d series of %d bins; want 5 nodes, 7 series of 12 bins", nodes, len(shares), len(shares[0]))
	}
	before := 0
	for _, r := range tr.Reads {
		if r.At < tr.DurationMs {
			before++
		}
	}
	if after != len(tr.Reads)-before || after == 0 || before == 0 {
		t.Fatalf("%d reads after the end, %d before, of %d", after, before, len(tr.Reads))
	}
	if int64(len(tr.Reads)) != res.Reads-res.Failed {
		t.Fatalf("trace holds %d reads, the trial served %d", len(tr.Reads), res.Reads-res.Failed)
	}
	for b := range shares[0] {
		var sum float64
		for k := range shares {
			sum += shares[k][b]
		}
		if math.Abs(sum-100) > 1e-9 {
			t.Fatalf("bin %d shares add up to %v%%", b, sum)
		}
	}
	dir := t.TempDir()
	names, err := WritePlots(dir, []Plot{{Name: "strip", Title: "strip", Strip: tr}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"<svg", "replica r0 (straggler)", "replica r4", "primary", "worst replica lag", "Times New Roman"} {
		if !strings.Contains(svg, want) {
			t.Errorf("strip SVG lacks %q", want)
		}
	}
	if len(b) > 100_000 {
		t.Errorf("strip SVG is %d bytes: keep it under 100 kB", len(b))
	}
	if png, err := os.ReadFile(filepath.Join(dir, "strip.png")); err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("no PNG beside the SVG: %v", err)
	}
}

// TestReportHTML: sim all --out's report.html holds every table and shows
// every picture as PNG.
func TestReportHTML(t *testing.T) {
	dir := t.TempDir()
	tb := &Table{Name: "x", Title: "X table", Columns: []Column{{"router", "router", 0}, {"ryw_pct", "RYW %", 2}},
		Rows: [][]Cell{{L("any"), S(Stat{Mean: 1.5, SD: 0.5})}}, Notes: []string{"a <note>"}}
	reps := make([]*Report, len(Experiments()))
	for i := range reps {
		reps[i] = &Report{}
	}
	reps[0] = &Report{Tables: []*Table{tb}, Plots: []Plot{{Name: "pic", Title: "Pic"}}}
	if err := WriteReport(dir, reps); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h3>X table</h3>", "<td>1.50 ± 0.50</td>", "a &lt;note&gt;", `src="pic.png"`, "<h2>" + Experiments()[1].Name + "</h2>"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.html lacks %q:\n%s", want, page)
		}
	}
	if md, err := os.ReadFile(filepath.Join(dir, "report.md")); err != nil || !strings.Contains(string(md), "![Pic](pic.svg)") {
		t.Errorf("report.md: %v\n%s", err, md)
	}
}

// TestLinesAxisHoldsTheTopPoint: a line plot's y axis ends at a labelled
// tick at or above its highest point. wait-budget.png once put global's
// mean at 180 ms above a last tick of 160; shares keep their 0..100.
func TestLinesAxisHoldsTheTopPoint(t *testing.T) {
	for _, c := range []struct {
		y    string
		ys   []float64
		want float64
	}{
		{"read latency (ms)", []float64{5, 33, 84, 127, 180.4}, 200},
		{"read latency (ms)", []float64{0, 0}, 1},
		{"% of reads", []float64{0, 54.8, 98.9}, 100},
		{"% of reads", []float64{0, 121}, 140},
	} {
		p := Plot{Name: "x", Y: c.y, Lines: []Line{{Name: "a", X: []float64{0, 100, 400, 800, 1600}[:len(c.ys)], Y: c.ys}}}
		pl, _, err := linesPlot(&p)
		if err != nil {
			t.Fatal(err)
		}
		var last float64
		for _, tk := range pl.Y.Tick.Marker.Ticks(pl.Y.Min, pl.Y.Max) {
			if tk.Label != "" {
				last = tk.Value
			}
		}
		if pl.Y.Min != 0 || pl.Y.Max != c.want || last != c.want {
			t.Errorf("%s %v: axis %v..%v, last labelled tick %v; want 0..%v", c.y, c.ys, pl.Y.Min, pl.Y.Max, last, c.want)
		}
	}
}
