package chart

import (
	"image/color"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// TestCountTicks: whole numbers only, never below zero, and an empty
// range gets 0 and 1 (not gonum's -1..1).
func TestCountTicks(t *testing.T) {
	for _, c := range []struct {
		hi   float64
		want []float64
	}{
		{0, []float64{0, 1}},
		{1, []float64{0, 1}},
		{7, []float64{0, 2, 4, 6}},
		{100, []float64{0, 20, 40, 60, 80, 100}},
		{430, []float64{0, 100, 200, 300, 400}},
	} {
		ts := CountTicks{}.Ticks(0, c.hi)
		var got []float64
		for _, tk := range ts {
			got = append(got, tk.Value)
			if tk.Label != FmtTick(tk.Value) {
				t.Errorf("hi %v: tick %v labelled %q", c.hi, tk.Value, tk.Label)
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("hi %v: ticks %v, want %v", c.hi, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("hi %v: ticks %v, want %v", c.hi, got, c.want)
			}
		}
	}
}

// TestStackBarsAndSave: the bars' range is the stacks' tallest bin, and a
// drawing is written as SVG and PNG.
func TestStackBarsAndSave(t *testing.T) {
	sb := &StackBars{W: 1, Stacks: [][]float64{{1, 2, 0}, {3, 0, 0}}, Colors: []color.Color{color.Black, color.White}, Offset: 0.5, Frac: 0.4}
	if x0, x1, y0, y1 := sb.DataRange(); x0 != 0 || x1 != 3 || y0 != 0 || y1 != 4 {
		t.Errorf("range %v %v %v %v", x0, x1, y0, y1)
	}
	p := plot.New()
	p.Add(sb)
	lg := plot.NewLegend()
	lg.Add("a", ColorBox{C: color.Black})
	base := filepath.Join(t.TempDir(), "x")
	if err := Save(base, 10*vg.Centimeter, 6*vg.Centimeter, func(dc draw.Canvas) {
		area, lc := SplitLegend(dc, &lg)
		p.Draw(area)
		lg.Draw(lc)
	}); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".svg", ".png"} {
		if st, err := os.Stat(base + ext); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", ext, err)
		}
	}
}
