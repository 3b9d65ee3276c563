// Package chart holds the drawing helpers the simulator's and the lab's
// pictures share (gonum/plot): a legend column that never covers the data,
// stacked bars, plain tick labels, and SVG and PNG output whose text fits.
package chart

import (
	"bytes"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Layout: every chart keeps its legend in a column right of the plotting
// area (never over the data), and a margin on the right so the last tick
// label fits even when the viewer's fallback font is wider than the one
// gonum measured with.
const (
	rightMargin = 14 // points
	legendGap   = 10 // points between the plot and its legend
	// legendSlack widens the measured legend for a wider fallback font.
	legendSlack = 1.35
)

// SplitLegend cuts dc into the plotting area and a legend column on the
// right, with the legend's top level with the top of the plotting area.
func SplitLegend(dc draw.Canvas, lg *plot.Legend) (area, legend draw.Canvas) {
	lg.Top, lg.Left = true, true
	lg.Padding = vg.Points(2.5)
	r := lg.Rectangle(dc)
	w := vg.Length(float64(r.Max.X-r.Min.X)*legendSlack) + vg.Points(legendGap)
	area = draw.Crop(dc, 0, -w-vg.Points(rightMargin), 0, 0)
	legend = draw.Crop(dc, dc.Max.X-dc.Min.X-w+vg.Points(legendGap), -vg.Points(rightMargin), 0, -vg.Points(28))
	return area, legend
}

// StackBars is stacked bars in bins of equal width W from X0:
// Stacks[k][b] is series k's height in bin b, drawn bottom-up in series
// order with Colors[k].
type StackBars struct {
	X0, W  float64
	Stacks [][]float64
	Colors []color.Color
	// Offset and Frac place the bar inside its bin: it spans
	// [X0+(b+Offset)·W, X0+(b+Offset+Frac)·W); zero Frac is the full bin.
	Offset, Frac float64
}

// Plot implements plot.Plotter.
func (s *StackBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	if len(s.Stacks) == 0 {
		return
	}
	frac := s.Frac
	if frac <= 0 {
		frac = 1
	}
	for b := range s.Stacks[0] {
		x0, x1 := trX(s.X0+(float64(b)+s.Offset)*s.W), trX(s.X0+(float64(b)+s.Offset+frac)*s.W)
		y := 0.0
		for k, st := range s.Stacks {
			h := st[b]
			if h <= 0 {
				continue
			}
			y0, y1 := trY(y), trY(y+h)
			y += h
			c.FillPolygon(s.Colors[k], c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		}
	}
}

// DataRange implements plot.DataRanger.
func (s *StackBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	n := 0
	if len(s.Stacks) > 0 {
		n = len(s.Stacks[0])
	}
	for b := range n {
		var t float64
		for _, st := range s.Stacks {
			t += st[b]
		}
		ymax = max(ymax, t)
	}
	return s.X0, s.X0 + float64(n)*s.W, 0, ymax
}

// ColorBox is a filled legend thumbnail.
type ColorBox struct{ C color.Color }

// Thumbnail implements plot.Thumbnailer.
func (b ColorBox) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(b.C, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

// FmtTick formats a tick value as briefly as it reads (no "250.00").
func FmtTick(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// NumTicks is gonum's default ticks with plain labels.
type NumTicks struct{}

// Ticks implements plot.Ticker.
func (NumTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = FmtTick(ts[i].Value)
		}
	}
	return ts
}

// ValueTicks ticks every value in xs, labelling those at least 10% of the
// range from the previously labelled one (the rest get an unlabelled mark).
type ValueTicks []float64

// Ticks implements plot.Ticker.
func (v ValueTicks) Ticks(lo, hi float64) []plot.Tick {
	xs := slices.Compact(slices.Sorted(slices.Values(v)))
	var ts []plot.Tick
	last := math.Inf(-1)
	for _, x := range xs {
		if x < lo || x > hi {
			continue
		}
		t := plot.Tick{Value: x}
		if x-last >= 0.1*(hi-lo) {
			t.Label = FmtTick(x)
			last = x
		}
		ts = append(ts, t)
	}
	return ts
}

// StepTicks labels every major units and marks every minor units.
type StepTicks struct{ Major, Minor float64 }

// Ticks implements plot.Ticker.
func (s StepTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for i := math.Ceil(lo / s.Minor); i*s.Minor <= hi+1e-9; i++ {
		x := i * s.Minor
		t := plot.Tick{Value: x}
		if r := math.Mod(x, s.Major); math.Abs(r) < 1e-9 || math.Abs(r-s.Major) < 1e-9 {
			t.Label = FmtTick(x)
		}
		ts = append(ts, t)
	}
	return ts
}

// SaveSVG draws into an SVG of w×h at path. The fonts gonum measured with
// (Liberation) are metric-compatible with Times New Roman and Arial, so the
// SVG names those as fallbacks: a viewer without Liberation keeps the
// layout.
func SaveSVG(path string, w, h vg.Length, drawFn func(draw.Canvas)) error {
	c := vgsvg.New(w, h)
	drawFn(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return err
	}
	out := bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Serif;"),
		[]byte("font-family:'Liberation Serif','Times New Roman',Times,serif;"))
	out = bytes.ReplaceAll(out, []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
	return os.WriteFile(path, out, 0o644)
}

// SavePNG draws into a PNG of w×h at 144 dots per inch at path.
func SavePNG(path string, w, h vg.Length, drawFn func(draw.Canvas)) error {
	c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(144), vgimg.UseBackgroundColor(color.White))
	drawFn(draw.New(c))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// Save writes base.svg and base.png of the same drawing.
func Save(base string, w, h vg.Length, drawFn func(draw.Canvas)) error {
	if err := SaveSVG(base+".svg", w, h, drawFn); err != nil {
		return err
	}
	return SavePNG(base+".png", w, h, drawFn)
}

// CountTicks ticks whole numbers only (counts), about five labelled
// steps; a range with nothing in it (hi <= 0) gets 0 and 1, never a
// negative axis.
type CountTicks struct{}

// Ticks implements plot.Ticker.
func (CountTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= 1 {
		return []plot.Tick{{Value: 0, Label: "0"}, {Value: 1, Label: "1"}}
	}
	step := 1.0
	for _, m := range []float64{1, 2, 5} {
		for p := 1.0; p < 1e9; p *= 10 {
			if s := m * p; hi/s <= 6 {
				if step == 1 || s < step {
					step = s
				}
				break
			}
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+1e-9; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: FmtTick(v)})
	}
	return ts
}

// maxIntervals is the most labelled steps AxisTop gives an axis.
const maxIntervals = 7

// AxisTop is a value axis from 0 that holds v: the smallest step of 1, 2,
// 2.5 or 5 times a power of ten that covers v in at most 7 steps, and the
// top, the first multiple of the step at or above v. So the top tick is
// labelled and never below the tallest point (gonum's own ticks may stop
// short of it). A v of 0 or less gets 0..1 in steps of 0.2.
func AxisTop(v float64) (top, step float64) {
	if !(v > 0) || math.IsInf(v, 1) {
		return 1, 0.2
	}
	for p := math.Pow(10, math.Floor(math.Log10(v))-1); ; p *= 10 {
		for _, m := range []float64{1, 2, 2.5, 5} {
			s := m * p
			// The tolerance keeps a v that is a multiple of s (up to
			// rounding) from getting one step more.
			if n := math.Ceil(v/s - 1e-9); n <= maxIntervals {
				return n * s, s
			}
		}
	}
}

// YFromZero runs p's y axis from 0 to AxisTop(v), labelled at every step
// with an unlabelled mark halfway.
func YFromZero(p *plot.Plot, v float64) {
	top, step := AxisTop(v)
	p.Y.Min, p.Y.Max = 0, top
	p.Y.Tick.Marker = StepTicks{Major: step, Minor: step / 2}
}

// BarMarks draws what a bar chart's bars cannot show, over the bars of a
// plotter.BarChart at x = 0, 1, ... shifted by Offset: a bar of height 0
// as a thick line at the baseline labelled "0" (a bar of zero height is
// otherwise invisible, and reads as missing data), and whiskers from
// Low[i] to High[i] when given (a spread over trials).
type BarMarks struct {
	Values    []float64
	Low, High []float64
	Offset    vg.Length
	Width     vg.Length
	Color     color.Color
}

// ZeroMarkWidth is the thickness of a zero bar's mark.
var ZeroMarkWidth = vg.Points(2.5)

// Plot implements plot.Plotter.
func (m *BarMarks) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	zero := draw.LineStyle{Color: m.Color, Width: ZeroMarkWidth}
	whisker := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
	label := plt.Y.Tick.Label
	label.XAlign, label.YAlign = draw.XCenter, draw.YBottom
	for i, v := range m.Values {
		x := trX(float64(i)) + m.Offset
		y0 := trY(0)
		if v == 0 {
			half := m.Width/2 - vg.Points(1)
			c.StrokeLine2(zero, x-half, y0+ZeroMarkWidth/2, x+half, y0+ZeroMarkWidth/2)
			c.FillText(label, vg.Point{X: x, Y: y0 + ZeroMarkWidth + vg.Points(1.5)}, "0")
		}
		if i < len(m.Low) && i < len(m.High) && m.High[i] > m.Low[i] {
			lo, hi := trY(math.Max(0, m.Low[i])), trY(m.High[i])
			cw := m.Width / 4
			c.StrokeLine2(whisker, x, lo, x, hi)
			c.StrokeLine2(whisker, x-cw, hi, x+cw, hi)
			c.StrokeLine2(whisker, x-cw, lo, x+cw, lo)
		}
	}
}

// DataRange implements plot.DataRanger: the bars' x range and the
// whiskers' top.
func (m *BarMarks) DataRange() (xmin, xmax, ymin, ymax float64) {
	for i, v := range m.Values {
		ymax = math.Max(ymax, v)
		if i < len(m.High) {
			ymax = math.Max(ymax, m.High[i])
		}
	}
	return 0, float64(max(len(m.Values)-1, 0)), 0, ymax
}

// Wrap breaks s at spaces into lines no wider than w in style sty (a word
// wider than w gets a line of its own).
func Wrap(sty text.Style, s string, w vg.Length) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		next := word
		if line != "" {
			next = line + " " + word
		}
		if line != "" && sty.Width(next) > w {
			lines = append(lines, line)
			next = word
		}
		line = next
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
