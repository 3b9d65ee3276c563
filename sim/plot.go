package sim

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

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

func drawLines(path string, p *Plot) error {
	pl := plot.New()
	pl.Title.Text, pl.X.Label.Text, pl.Y.Label.Text = p.Title, p.X, p.Y
	pl.Legend.Top = true
	pl.Add(plotter.NewGrid())
	for i, l := range p.Lines {
		xy := make(plotter.XYs, len(l.X))
		for k := range l.X {
			xy[k].X, xy[k].Y = l.X[k], l.Y[k]
		}
		ln, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		ln.Color = plotutil.Color(i)
		ln.Width = vg.Points(1.5)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		pl.Add(ln, pts)
		pl.Legend.Add(l.Name, ln, pts)
	}
	return save(path, 16*vg.Centimeter, 10*vg.Centimeter, func(dc draw.Canvas) { pl.Draw(dc) })
}

// drawStrip draws one trial: the replica lag curve on top, and below it
// every read as a dot at its node (replicas r0.., the primary as -1) over time.
func drawStrip(path string, p *Plot) error {
	tr := p.Strip
	top := plot.New()
	top.Title.Text = p.Title
	top.Y.Label.Text = "replica lag (ms)"
	top.Add(plotter.NewGrid())
	maxXY := make(plotter.XYs, len(tr.LagMs))
	meanXY := make(plotter.XYs, len(tr.MeanLagMs))
	for b := range tr.LagMs {
		x := float64(b) * float64(binWidth) / 1e6
		maxXY[b] = plotter.XY{X: x, Y: tr.LagMs[b]}
		meanXY[b] = plotter.XY{X: x, Y: tr.MeanLagMs[b]}
	}
	lmax, err := plotter.NewLine(maxXY)
	if err != nil {
		return err
	}
	lmax.Color = color.RGBA{R: 200, A: 255}
	lmean, err := plotter.NewLine(meanXY)
	if err != nil {
		return err
	}
	lmean.Color = color.RGBA{B: 200, A: 255}
	top.Add(lmax, lmean)
	top.Legend.Add("worst replica", lmax)
	top.Legend.Add("mean over replicas", lmean)
	top.Legend.Top = true

	bot := plot.New()
	bot.X.Label.Text = "time (s)"
	bot.Y.Label.Text = "node (-1 = primary)"
	var rep, prim, miss plotter.XYs
	// Keep the SVG small: every primary read and every miss, but at most
	// about 3000 ordinary replica reads (every k-th, deterministically).
	k := max(1, len(tr.Reads)/3000)
	for i, r := range tr.Reads {
		if r.Node >= 0 && !r.Missed && i%k != 0 {
			continue
		}
		xy := plotter.XY{X: r.At / 1000, Y: float64(r.Node)}
		switch {
		case r.Missed:
			miss = append(miss, xy)
		case r.Node < 0:
			prim = append(prim, xy)
		default:
			rep = append(rep, xy)
		}
	}
	add := func(xy plotter.XYs, c color.Color, name string) error {
		if len(xy) == 0 {
			return nil
		}
		s, err := plotter.NewScatter(xy)
		if err != nil {
			return err
		}
		s.GlyphStyle.Color = c
		s.GlyphStyle.Radius = vg.Points(0.8)
		bot.Add(s)
		bot.Legend.Add(name, s)
		return nil
	}
	if err := add(rep, color.RGBA{G: 140, A: 255}, "replica read"); err != nil {
		return err
	}
	if err := add(prim, color.RGBA{B: 220, A: 255}, "primary read"); err != nil {
		return err
	}
	if err := add(miss, color.RGBA{R: 230, A: 255}, "missed own write"); err != nil {
		return err
	}
	bot.Legend.Top = true
	top.X.Min, top.X.Max = 0, 0
	bot.X.Min = 0
	mx := max(top.X.Max, bot.X.Max)
	top.X.Max, bot.X.Max = mx, mx
	plots := [][]*plot.Plot{{top}, {bot}}
	return save(path, 24*vg.Centimeter, 16*vg.Centimeter, func(dc draw.Canvas) {
		cs := plot.Align(plots, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(4)}, dc)
		top.Draw(cs[0][0])
		bot.Draw(cs[1][0])
	})
}

func save(path string, w, h vg.Length, drawFn func(draw.Canvas)) error {
	c := vgsvg.New(w, h)
	drawFn(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = c.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
