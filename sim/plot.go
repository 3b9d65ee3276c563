package sim

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// WritePlots draws every plot as DIR/NAME.svg and returns the file names.
func WritePlots(dir string, plots []Plot) ([]string, error) {
	var names []string
	for i := range plots {
		p := &plots[i]
		name := p.Name + ".svg"
		var err error
		if p.Strip != nil {
			err = drawStrip(filepath.Join(dir, name), p)
		} else {
			err = drawLines(filepath.Join(dir, name), p)
		}
		if err != nil {
			return names, fmt.Errorf("sim: drawing %s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

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

func drawLines(path string, p *Plot) error {
	pl := plot.New()
	pl.Title.Text, pl.X.Label.Text, pl.Y.Label.Text = p.Title, p.X, p.Y
	pl.Add(plotter.NewGrid())
	lg := plot.NewLegend()
	var xs []float64
	ymax := 0.0
	for i, l := range p.Lines {
		xy := make(plotter.XYs, len(l.X))
		for k := range l.X {
			xy[k].X, xy[k].Y = l.X[k], l.Y[k]
			ymax = max(ymax, l.Y[k])
		}
		xs = append(xs, l.X...)
		ln, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		ln.Color = plotutil.Color(i)
		ln.Width = vg.Points(1.5)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		pl.Add(ln, pts)
		lg.Add(l.Name, ln, pts)
	}
	// Every quantity charted is non-negative: start the y axis at zero, and
	// run percentages to 100 so two charts of shares read alike.
	pl.Y.Min = 0
	if strings.Contains(p.Y, "%") && ymax <= 100 {
		pl.Y.Max = 100
	}
	pl.Y.Tick.Marker = numTicks{}
	// The x values are the experiment's dial settings: tick each of them.
	pl.X.Tick.Marker = valueTicks(xs)
	return save(path, 18*vg.Centimeter, 10*vg.Centimeter, func(dc draw.Canvas) {
		area, lc := splitLegend(dc, &lg)
		pl.Draw(area)
		lg.Draw(lc)
	})
}

// splitLegend cuts dc into the plotting area and a legend column on the
// right, with the legend's top level with the top of the plotting area.
func splitLegend(dc draw.Canvas, lg *plot.Legend) (area, legend draw.Canvas) {
	lg.Top, lg.Left = true, true
	lg.Padding = vg.Points(2.5)
	r := lg.Rectangle(dc)
	w := vg.Length(float64(r.Max.X-r.Min.X)*legendSlack) + vg.Points(legendGap)
	area = draw.Crop(dc, 0, -w-vg.Points(rightMargin), 0, 0)
	legend = draw.Crop(dc, dc.Max.X-dc.Min.X-w+vg.Points(legendGap), -vg.Points(rightMargin), 0, -vg.Points(28))
	return area, legend
}

// stripBin is the strip's time bin for read shares.
const stripBin = 250 * usPerMs

// drawStrip draws one trial over the span of its offered writes: on top the
// replica lag (worst replica and mean over replicas, by commit time); below
// it, per 250 ms bin, the share of the reads that reached each node, the
// primary at the bottom of each stack. Reads that missed the session's own
// write are stacked on top in red (none under a token router).
func drawStrip(path string, p *Plot) error {
	tr := p.Strip
	end := tr.DurationMs / 1000
	if end <= 0 {
		end = float64(len(tr.LagMs)) * float64(binWidth) / 1e6
	}

	top := plot.New()
	top.Title.Text = p.Title
	top.Y.Label.Text = "replica lag (ms)"
	top.Add(plotter.NewGrid())
	var maxXY, meanXY plotter.XYs
	for b := range tr.LagMs {
		x := (float64(b) + 0.5) * float64(binWidth) / 1e6
		if x > end {
			break
		}
		maxXY = append(maxXY, plotter.XY{X: x, Y: tr.LagMs[b]})
		meanXY = append(meanXY, plotter.XY{X: x, Y: tr.MeanLagMs[b]})
	}
	lmax, err := plotter.NewLine(maxXY)
	if err != nil {
		return err
	}
	lmax.Color, lmax.Width = color.RGBA{R: 200, A: 255}, vg.Points(1.2)
	lmean, err := plotter.NewLine(meanXY)
	if err != nil {
		return err
	}
	lmean.Color, lmean.Width = color.RGBA{R: 90, G: 90, B: 90, A: 255}, vg.Points(1.2)
	top.Add(lmax, lmean)
	top.Y.Min = 0
	top.Y.Tick.Marker = numTicks{}

	counts, nodes, after := stripShares(tr, end)
	bot := plot.New()
	bot.X.Label.Text = fmt.Sprintf("time (s): the %.0f s of offered writes (%d later reads not drawn)", end, after)
	bot.Y.Label.Text = "reads per 250 ms (%)"
	sb := &stackBars{x0: 0, w: float64(stripBin) / 1e6, stacks: counts}
	sb.colors = append(sb.colors, color.RGBA{R: 30, G: 80, B: 220, A: 255})
	greens := []color.RGBA{{R: 25, G: 110, B: 45}, {R: 60, G: 150, B: 75}, {R: 100, G: 180, B: 105}, {R: 145, G: 205, B: 140}, {R: 190, G: 228, B: 180}}
	for r := range nodes {
		c := greens[r%len(greens)]
		c.A = 255
		sb.colors = append(sb.colors, c)
	}
	sb.colors = append(sb.colors, color.RGBA{R: 230, A: 255})
	bot.Add(sb)
	bot.Y.Min, bot.Y.Max = 0, 100
	bot.Y.Tick.Marker = numTicks{}

	lg := plot.NewLegend()
	lg.Add("worst replica lag", lmax)
	lg.Add("mean replica lag", lmean)
	lg.Add("primary", colorBox{sb.colors[0]})
	for r := range nodes {
		name := "replica r" + strconv.Itoa(r)
		if r == 0 && tr.Straggler {
			name += " (straggler)"
		}
		lg.Add(name, colorBox{sb.colors[r+1]})
	}
	if hasAny(counts[nodes+1]) {
		lg.Add("missed own write", colorBox{sb.colors[nodes+1]})
	}

	for _, pl := range []*plot.Plot{top, bot} {
		pl.X.Min, pl.X.Max = 0, end
		pl.X.Tick.Marker = stepTicks{major: 2, minor: 1}
	}
	plots := [][]*plot.Plot{{top}, {bot}}
	return save(path, 24*vg.Centimeter, 15*vg.Centimeter, func(dc draw.Canvas) {
		area, lc := splitLegend(dc, &lg)
		cs := plot.Align(plots, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(6)}, area)
		top.Draw(cs[0][0])
		bot.Draw(cs[1][0])
		lg.Draw(lc)
	})
}

// stripShares bins the reads that reached a node before end (seconds)
// into 250 ms bins and returns per series and bin the share (%) of that
// bin's reads: series 0 is the primary, 1..nodes the replicas, nodes+1 the
// reads that missed the session's own write (whatever node served them).
// after counts the reads at or after end, which are left out.
func stripShares(tr *Trace, end float64) (shares [][]float64, nodes, after int) {
	nb := int(math.Ceil(end * 1e6 / float64(stripBin)))
	for _, r := range tr.Reads {
		nodes = max(nodes, r.Node+1)
	}
	shares = make([][]float64, nodes+2)
	for k := range shares {
		shares[k] = make([]float64, nb)
	}
	for _, r := range tr.Reads {
		b := int(r.At * 1000 / float64(stripBin))
		if r.At/1000 >= end || b >= nb {
			after++
			continue
		}
		switch {
		case r.Missed:
			shares[nodes+1][b]++
		case r.Node < 0:
			shares[0][b]++
		default:
			shares[r.Node+1][b]++
		}
	}
	for b := range nb {
		var tot float64
		for k := range shares {
			tot += shares[k][b]
		}
		if tot > 0 {
			for k := range shares {
				shares[k][b] *= 100 / tot
			}
		}
	}
	return shares, nodes, after
}

func hasAny(v []float64) bool {
	for _, x := range v {
		if x != 0 {
			return true
		}
	}
	return false
}

// stackBars is stacked bars of equal width w from x0: stacks[k][b] is
// series k's height in bin b, drawn bottom-up in series order.
type stackBars struct {
	x0, w  float64
	stacks [][]float64
	colors []color.Color
}

func (s *stackBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	if len(s.stacks) == 0 {
		return
	}
	for b := range s.stacks[0] {
		x0, x1 := trX(s.x0+float64(b)*s.w), trX(s.x0+float64(b+1)*s.w)
		y := 0.0
		for k, st := range s.stacks {
			h := st[b]
			if h <= 0 {
				continue
			}
			y0, y1 := trY(y), trY(y+h)
			y += h
			c.FillPolygon(s.colors[k], c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
		}
	}
}

func (s *stackBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	n := 0
	if len(s.stacks) > 0 {
		n = len(s.stacks[0])
	}
	for b := range n {
		var t float64
		for _, st := range s.stacks {
			t += st[b]
		}
		ymax = max(ymax, t)
	}
	return s.x0, s.x0 + float64(n)*s.w, 0, ymax
}

// colorBox is a filled legend thumbnail.
type colorBox struct{ c color.Color }

func (b colorBox) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(b.c, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

// fmtTick formats a tick value as briefly as it reads (no "250.00").
func fmtTick(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// numTicks is gonum's default ticks with plain labels.
type numTicks struct{}

func (numTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmtTick(ts[i].Value)
		}
	}
	return ts
}

// valueTicks ticks every value in xs, labelling those at least 10% of the
// range from the previously labelled one (the rest get an unlabelled mark).
type valueTicks []float64

func (v valueTicks) Ticks(lo, hi float64) []plot.Tick {
	xs := slices.Compact(slices.Sorted(slices.Values(v)))
	var ts []plot.Tick
	last := math.Inf(-1)
	for _, x := range xs {
		if x < lo || x > hi {
			continue
		}
		t := plot.Tick{Value: x}
		if x-last >= 0.1*(hi-lo) {
			t.Label = fmtTick(x)
			last = x
		}
		ts = append(ts, t)
	}
	return ts
}

// stepTicks labels every major units and marks every minor units.
type stepTicks struct{ major, minor float64 }

func (s stepTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for i := math.Ceil(lo / s.minor); i*s.minor <= hi+1e-9; i++ {
		x := i * s.minor
		t := plot.Tick{Value: x}
		if r := math.Mod(x, s.major); math.Abs(r) < 1e-9 || math.Abs(r-s.major) < 1e-9 {
			t.Label = fmtTick(x)
		}
		ts = append(ts, t)
	}
	return ts
}

// save draws into an SVG of w×h at path. The fonts gonum measured with
// (Liberation) are metric-compatible with Times New Roman and Arial, so the
// SVG names those as fallbacks: a viewer without Liberation keeps the
// layout.
func save(path string, w, h vg.Length, drawFn func(draw.Canvas)) error {
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
