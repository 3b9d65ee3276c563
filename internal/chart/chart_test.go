package chart

import (
	"image"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
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

// TestAxisTopHoldsTheTallest: the top of the axis is a labelled tick at or
// above the tallest value, within 7 steps of 1, 2, 2.5 or 5 times a power
// of ten. gonum's ticks on [0, 1.08·max] once stopped below the top point
// (wait-budget.png: a point at 180 over a last tick of 160).
func TestAxisTopHoldsTheTallest(t *testing.T) {
	for _, c := range []struct{ v, top, step float64 }{
		{0, 1, 0.2}, {-3, 1, 0.2}, {1, 1, 0.2}, {5.6, 6, 1}, {21.3, 25, 5}, {100, 100, 20},
		{180.4, 200, 50}, {3080, 3500, 500}, {0.004, 0.004, 0.001}, {7, 7, 1}, {7.0000001, 8, 2},
	} {
		top, step := AxisTop(c.v)
		if math.Abs(top-c.top) > 1e-12 || math.Abs(step-c.step) > 1e-12 {
			t.Errorf("AxisTop(%v) = %v, %v; want %v, %v", c.v, top, step, c.top, c.step)
		}
	}
	for i := range 2000 {
		v := math.Pow(10, float64(i)/200-4) // 1e-4 .. 1e6
		p := plot.New()
		YFromZero(p, v)
		var last plot.Tick
		for _, tk := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
			if tk.Label != "" {
				last = tk
			}
		}
		if last.Value < v || p.Y.Max < v || math.Abs(last.Value-p.Y.Max) > 1e-9*p.Y.Max || last.Label != FmtTick(last.Value) {
			t.Fatalf("v %v: axis to %v, last labelled tick %+v", v, p.Y.Max, last)
		}
		if p.Y.Min != 0 {
			t.Fatalf("v %v: axis from %v", v, p.Y.Min)
		}
	}
}

// countColor counts the pixels of img exactly c.
func countColor(img image.Image, c color.Color) int {
	r0, g0, b0, _ := c.RGBA()
	n := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r == r0 && g == g0 && b == b0 {
				n++
			}
		}
	}
	return n
}

// TestBarMarksShowZero: a bar of value 0 leaves no pixel of its colour
// under gonum's BarChart (it reads as missing data); BarMarks draws a
// mark at the baseline, labelled "0", and whiskers reach the axis range.
func TestBarMarksShowZero(t *testing.T) {
	red := color.RGBA{R: 220, A: 255}
	draw1 := func(marks bool) image.Image {
		p := plot.New()
		vals := plotter.Values{0, 0}
		bc, err := plotter.NewBarChart(vals, vg.Points(14))
		if err != nil {
			t.Fatal(err)
		}
		bc.Color, bc.LineStyle.Width = red, 0
		p.Add(bc)
		if marks {
			p.Add(&BarMarks{Values: vals, Width: vg.Points(14), Color: red})
		}
		p.X.Min, p.X.Max = -0.6, 1.6
		YFromZero(p, 0)
		c := vgimg.New(8*vg.Centimeter, 6*vg.Centimeter)
		p.Draw(draw.New(c))
		return c.Image()
	}
	if n := countColor(draw1(false), red); n != 0 {
		t.Fatalf("a zero bar alone drew %d pixels: the test cannot tell", n)
	}
	if n := countColor(draw1(true), red); n < 20 {
		t.Errorf("zero bars with BarMarks drew %d pixels of their colour, want a visible mark", n)
	}
	m := &BarMarks{Values: []float64{3, 0, 1}, Low: []float64{2, 0, 0.5}, High: []float64{4.5, 0, 1.5}}
	if x0, x1, y0, y1 := m.DataRange(); x0 != 0 || x1 != 2 || y0 != 0 || y1 != 4.5 {
		t.Errorf("range %v %v %v %v, want 0 2 0 4.5 (the whisker's top)", x0, x1, y0, y1)
	}
}

// TestWrap: lines no wider than asked, every word kept in order.
func TestWrap(t *testing.T) {
	sty := plot.New().X.Tick.Label
	s := "lab routers: straggler+heavy via router; 2000 sessions, 200 writes/s for 20 s; lag mean 564ms, p99 2.6s. Lab: one run."
	w := sty.Width("lab routers: straggler+heavy via")
	lines := Wrap(sty, s, w)
	if len(lines) < 3 || strings.Join(lines, " ") != s {
		t.Fatalf("lines %q", lines)
	}
	for _, l := range lines {
		if sty.Width(l) > w && strings.Contains(l, " ") {
			t.Errorf("line %q wider than %v", l, w)
		}
	}
}
