package sim

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/causallab/causallab/internal/chart"
)

// WritePlots draws every plot as DIR/NAME.svg and DIR/NAME.png and
// returns the SVG files' names.
func WritePlots(dir string, plots []Plot) ([]string, error) {
	var names []string
	for i := range plots {
		p := &plots[i]
		name := p.Name + ".svg"
		base := filepath.Join(dir, p.Name)
		var err error
		if p.Strip != nil {
			err = drawStrip(base, p)
		} else {
			err = drawLines(base, p)
		}
		if err != nil {
			return names, fmt.Errorf("sim: drawing %s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

func drawLines(base string, p *Plot) error {
	pl, lg, err := linesPlot(p)
	if err != nil {
		return err
	}
	return chart.Save(base, 18*vg.Centimeter, 10*vg.Centimeter, func(dc draw.Canvas) {
		area, lc := chart.SplitLegend(dc, lg)
		pl.Draw(area)
		lg.Draw(lc)
	})
}

// linesPlot is drawLines' plot and legend.
func linesPlot(p *Plot) (*plot.Plot, *plot.Legend, error) {
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
			return nil, nil, err
		}
		ln.Color = plotutil.Color(i)
		ln.Width = vg.Points(1.5)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		pl.Add(ln, pts)
		lg.Add(l.Name, ln, pts)
	}
	// Every quantity charted is non-negative: start the y axis at zero, and
	// run percentages to 100 so two charts of shares read alike; anything
	// else to a labelled tick at or above its top point (gonum's ticks
	// stopped short of it: wait-budget's 180 ms over a last tick of 160).
	if strings.Contains(p.Y, "%") && ymax <= 100 {
		pl.Y.Min, pl.Y.Max = 0, 100
		pl.Y.Tick.Marker = chart.NumTicks{}
	} else {
		chart.YFromZero(pl, ymax)
	}
	// The x values are the experiment's dial settings: tick each of them.
	pl.X.Tick.Marker = chart.ValueTicks(xs)
	return pl, &lg, nil
}

// stripBin is the strip's time bin for read shares.
const stripBin = 250 * usPerMs

// drawStrip draws one trial over the span of its offered writes: on top the
// replica lag (worst replica and mean over replicas, by commit time); below
// it, per 250 ms bin, the share of the reads that reached each node, the
// primary at the bottom of each stack. Reads that missed the session's own
// write are stacked on top in red (none under a token router).
func drawStrip(base string, p *Plot) error {
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
	lagMax := 0.0
	for _, xy := range maxXY {
		lagMax = math.Max(lagMax, xy.Y)
	}
	chart.YFromZero(top, lagMax)

	counts, nodes, after := stripShares(tr, end)
	bot := plot.New()
	bot.X.Label.Text = fmt.Sprintf("time (s): the %.0f s of offered writes (%d later reads not drawn)", end, after)
	bot.Y.Label.Text = "reads per 250 ms (%)"
	sb := &chart.StackBars{X0: 0, W: float64(stripBin) / 1e6, Stacks: counts}
	sb.Colors = append(sb.Colors, color.RGBA{R: 30, G: 80, B: 220, A: 255})
	greens := []color.RGBA{{R: 25, G: 110, B: 45}, {R: 60, G: 150, B: 75}, {R: 100, G: 180, B: 105}, {R: 145, G: 205, B: 140}, {R: 190, G: 228, B: 180}}
	for r := range nodes {
		c := greens[r%len(greens)]
		c.A = 255
		sb.Colors = append(sb.Colors, c)
	}
	sb.Colors = append(sb.Colors, color.RGBA{R: 230, A: 255})
	bot.Add(sb)
	bot.Y.Min, bot.Y.Max = 0, 100
	bot.Y.Tick.Marker = chart.NumTicks{}

	lg := plot.NewLegend()
	lg.Add("worst replica lag", lmax)
	lg.Add("mean replica lag", lmean)
	lg.Add("primary", chart.ColorBox{C: sb.Colors[0]})
	for r := range nodes {
		name := "replica r" + strconv.Itoa(r)
		if r == 0 && tr.Straggler {
			name += " (straggler)"
		}
		lg.Add(name, chart.ColorBox{C: sb.Colors[r+1]})
	}
	if hasAny(counts[nodes+1]) {
		lg.Add("missed own write", chart.ColorBox{C: sb.Colors[nodes+1]})
	}

	for _, pl := range []*plot.Plot{top, bot} {
		pl.X.Min, pl.X.Max = 0, end
		pl.X.Tick.Marker = chart.StepTicks{Major: 2, Minor: 1}
	}
	plots := [][]*plot.Plot{{top}, {bot}}
	return chart.Save(base, 24*vg.Centimeter, 15*vg.Centimeter, func(dc draw.Canvas) {
		area, lc := chart.SplitLegend(dc, &lg)
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
