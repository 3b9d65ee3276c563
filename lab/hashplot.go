package lab

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/internal/chart"
)

// The hashing picture of one run: for each mode (a column), the session
// moves per second (top) and the MR violations per second (bottom),
// stacked by cause, the lab's bar on the left of each second and the
// simulator's (pale) on the right, over shaded fault and drift windows.

// causeColors are the causes' colours (the simulator's bars are paler).
var causeColors = map[hashroute.Cause]color.RGBA{
	hashroute.CauseChosenDown: {R: 230, G: 140, B: 20, A: 255},
	hashroute.CauseNeedless:   {R: 210, G: 30, B: 40, A: 255},
	hashroute.CauseCameBack:   {R: 40, G: 90, B: 200, A: 255},
	hashroute.CauseNone:       {R: 110, G: 110, B: 110, A: 255},
}

var causeLabels = map[hashroute.Cause]string{
	hashroute.CauseChosenDown: "chosen-down",
	hashroute.CauseNeedless:   "needless",
	hashroute.CauseCameBack:   "came-back",
	hashroute.CauseNone:       "unexplained",
}

// pale blends c with white (the simulator's bars).
func pale(c color.RGBA) color.RGBA {
	f := func(v uint8) uint8 { return uint8(255 - (255-int(v))*45/100) }
	return color.RGBA{R: f(c.R), G: f(c.G), B: f(c.B), A: 255}
}

// plotCauses is the stacking order, bottom up.
var plotCauses = []hashroute.Cause{hashroute.CauseChosenDown, hashroute.CauseNeedless, hashroute.CauseCameBack, hashroute.CauseNone}

// spans shades time windows over the whole height of a panel.
type spans struct {
	wins  [][2]float64
	color color.Color
}

func (s spans) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, w := range s.wins {
		x0, x1 := trX(w[0]), trX(w[1])
		c.FillPolygon(s.color, c.ClipPolygonX([]vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}}))
	}
}

// stacksOf turns per-bin cause counts into StackBars' series.
func stacksOf(bins []CauseCounts, n int) [][]float64 {
	out := make([][]float64, len(plotCauses))
	for k, c := range plotCauses {
		out[k] = make([]float64, n)
		for b := 0; b < n && b < len(bins); b++ {
			out[k][b] = bins[b].Get(c)
		}
	}
	return out
}

func binMax(bins []CauseCounts) float64 {
	m := 0.0
	for i := range bins {
		m = max(m, bins[i].Total())
	}
	return m
}

// WriteHashPlot draws res's picture as base.svg and base.png (res must be
// a hashing run: IsHashRun).
func WriteHashPlot(base string, res *Result) error {
	rows := res.Routers
	if len(rows) == 0 {
		return fmt.Errorf("lab: %s has no router rows", res.Experiment)
	}
	// time bins: the offered period at least, up to the last bin with a move or violation
	nb := int(math.Ceil(res.Config.DurationSec))
	var ymax [2]float64
	for i := range rows {
		h := rows[i].Hash
		for _, x := range []*HashResult{h, h.Sim} {
			if x == nil {
				continue
			}
			for b := range x.MovesBin {
				if x.MovesBin[b].Total() > 0 || x.MRBin[b].Total() > 0 {
					nb = max(nb, b+1)
				}
			}
			ymax[0] = max(ymax[0], binMax(x.MovesBin))
			ymax[1] = max(ymax[1], binMax(x.MRBin))
		}
	}
	var downs, drifts [][2]float64
	for _, f := range res.Faults {
		if f.Kind == string(EvDrift) {
			drifts = append(drifts, [2]float64{f.FromSec, f.ToSec})
		} else {
			downs = append(downs, [2]float64{f.FromSec, f.ToSec})
		}
	}
	hasSim, hasNone := false, false
	grid := make([][]*plot.Plot, 2)
	for r, what := range []string{"session moves per second", "MR violations per second"} {
		for i := range rows {
			h := rows[i].Hash
			p := plot.New()
			p.Title.Text = h.Mode + ": " + what
			p.Add(spans{wins: downs, color: color.RGBA{R: 225, G: 225, B: 225, A: 255}})
			p.Add(spans{wins: drifts, color: color.RGBA{R: 250, G: 232, B: 200, A: 255}})
			lab, sim := h.MovesBin, []CauseCounts(nil)
			if h.Sim != nil {
				sim = h.Sim.MovesBin
			}
			if r == 1 {
				lab = h.MRBin
				if h.Sim != nil {
					sim = h.Sim.MRBin
				}
			}
			for _, c := range lab {
				hasNone = hasNone || c.None > 0
			}
			cols := make([]color.Color, len(plotCauses))
			pcols := make([]color.Color, len(plotCauses))
			for k, c := range plotCauses {
				cols[k], pcols[k] = causeColors[c], pale(causeColors[c])
			}
			p.Add(&chart.StackBars{X0: 0, W: HashBin.Seconds(), Stacks: stacksOf(lab, nb), Colors: cols, Offset: 0.06, Frac: 0.44})
			if h.Sim != nil {
				hasSim = true
				p.Add(&chart.StackBars{X0: 0, W: HashBin.Seconds(), Stacks: stacksOf(sim, nb), Colors: pcols, Offset: 0.5, Frac: 0.44})
			}
			p.X.Min, p.X.Max = 0, float64(nb)
			p.Y.Min, p.Y.Max = 0, max(1, math.Ceil(ymax[r]*1.08))
			p.X.Tick.Marker = chart.StepTicks{Major: 5, Minor: 1}
			p.Y.Tick.Marker = chart.CountTicks{}
			if r == 1 {
				p.X.Label.Text = "run time (s)"
			}
			grid[r] = append(grid[r], p)
		}
	}
	lg := plot.NewLegend()
	for _, c := range plotCauses {
		if c == hashroute.CauseNone && !hasNone {
			continue
		}
		lg.Add(causeLabels[c], chart.ColorBox{C: causeColors[c]})
	}
	grey := color.RGBA{R: 90, G: 90, B: 90, A: 255}
	lg.Add("lab: left, solid", chart.ColorBox{C: grey})
	if hasSim {
		lg.Add("simulator: right, pale", chart.ColorBox{C: pale(grey)})
	}
	if len(downs) > 0 {
		lg.Add("replica down", chart.ColorBox{C: color.RGBA{R: 225, G: 225, B: 225, A: 255}})
	}
	if len(drifts) > 0 {
		lg.Add("load drift", chart.ColorBox{C: color.RGBA{R: 250, G: 232, B: 200, A: 255}})
	}
	title := fmt.Sprintf("lab %s (via %s): moves and MR violations per second, by cause", res.Experiment, res.Via)
	tsty := plot.New().Title.TextStyle
	tsty.XAlign, tsty.YAlign = draw.XLeft, draw.YTop
	w, hgt := 24*vg.Centimeter, 14*vg.Centimeter
	return chart.Save(filepath.Clean(base), w, hgt, func(dc draw.Canvas) {
		top := tsty.Height(title) + vg.Points(10)
		dc.FillText(tsty, vg.Point{X: dc.Min.X + vg.Points(6), Y: dc.Max.Y - vg.Points(3)}, title)
		body := draw.Crop(dc, 0, 0, 0, -top)
		area, lc := chart.SplitLegend(body, &lg)
		cs := plot.Align(grid, draw.Tiles{Rows: 2, Cols: len(rows), PadX: vg.Points(10), PadY: vg.Points(8)}, area)
		for r := range grid {
			for c := range grid[r] {
				grid[r][c].Draw(cs[r][c])
			}
		}
		lg.Draw(lc)
	})
}
