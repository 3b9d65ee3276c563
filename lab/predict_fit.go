package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

// FitOptions bound the fit of the simulator's replica model to a lag the
// lab measured. Zero fields take defaults in validate.
type FitOptions struct {
	// Tolerance is the relative distance from the measured lag mean and
	// p99 within which the fit counts as reached (both must hold);
	// default 0.1 (10%).
	Tolerance float64
	// MinScale and MaxScale bound each knob's factor on the condition's
	// input (the heavy record's replay cost, the straggler's mean stall);
	// defaults 1/16 and 32.
	MinScale, MaxScale float64
	// Steps is the number of bisection steps per knob (the inner and the
	// outer search each take at most Steps probes); default 10.
	Steps int
	// MaxProbes caps the simulator runs of one fit; default 120. Each probe
	// is one sim.Run of the prediction's trials under a single router.
	MaxProbes int
}

func (o *FitOptions) validate() error {
	if o.Tolerance == 0 {
		o.Tolerance = 0.1
	}
	if o.MinScale == 0 {
		o.MinScale = 1.0 / 16
	}
	if o.MaxScale == 0 {
		o.MaxScale = 32
	}
	if o.Steps == 0 {
		o.Steps = 10
	}
	if o.MaxProbes == 0 {
		o.MaxProbes = 120
	}
	switch {
	case o.Tolerance <= 0 || o.Tolerance >= 1:
		return fmt.Errorf("lab: fit tolerance %g: want 0 < t < 1", o.Tolerance)
	case o.MinScale <= 0 || o.MaxScale <= o.MinScale || o.MinScale > 1 || o.MaxScale < 1:
		return fmt.Errorf("lab: fit scale range [%g, %g]: want 0 < min <= 1 <= max, min < max", o.MinScale, o.MaxScale)
	case o.Steps < 1 || o.Steps > 64:
		return fmt.Errorf("lab: fit steps %d: want 1..64", o.Steps)
	case o.MaxProbes < 1:
		return fmt.Errorf("lab: fit max probes %d: want at least 1", o.MaxProbes)
	}
	return nil
}

// Fit knobs: which part of the replica model a fit scales.
const (
	// KnobHeavy scales the heavy record's replay cost (every replica).
	KnobHeavy = "heavy-cost"
	// KnobStall scales the straggler's mean stall length (one replica).
	KnobStall = "stall-mean"
)

// LagFit is the outcome of fitting the simulator's replica model to a
// measured lag. Only these knobs are fitted; what the simulator then
// predicts for violations and shares emerges from the fitted model.
type LagFit struct {
	// TargetMeanMs and TargetP99Ms are the lag the lab measured.
	TargetMeanMs, TargetP99Ms float64
	// Knobs are the knobs the base model has (KnobHeavy, KnobStall); none
	// when the condition has neither heavy records nor a straggler.
	Knobs []string
	// HeavyScale and StallScale are the fitted factors on the condition's
	// inputs (1 is the input itself; 0 when the knob is absent).
	HeavyScale, StallScale float64
	// Model is the fitted replica model (the base model when nothing could
	// be fitted).
	Model sim.ReplicaModel
	// MeanMs and P99Ms are the simulator's lag with Model: per-trial mean
	// and p99, averaged over trials (as Prediction averages them).
	MeanMs, P99Ms float64
	// BaseMeanMs and BaseP99Ms are the simulator's lag with the base model
	// (the condition's inputs, unfitted).
	BaseMeanMs, BaseP99Ms float64
	// Probes is the number of simulator runs the fit made.
	Probes int
	// Elapsed is the fit's wall time.
	Elapsed time.Duration
	// Reached is true when MeanMs and P99Ms are both within the tolerance
	// of the target. When false, Model is the closest probe and Reason
	// says why the fit stopped short.
	Reached bool
	// Reason explains an unreached fit; empty when Reached.
	Reason string
}

// String is a one-line account of the fit for a table's notes.
func (f *LagFit) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "measured mean %.1f ms / p99 %.1f ms; simulator with the fitted model mean %.1f ms / p99 %.1f ms",
		f.TargetMeanMs, f.TargetP99Ms, f.MeanMs, f.P99Ms)
	var k []string
	if f.HeavyScale > 0 {
		k = append(k, fmt.Sprintf("heavy replay cost ×%.3g = %v", f.HeavyScale, f.Model.HeavyCost.Round(time.Millisecond)))
	}
	if f.StallScale > 0 {
		k = append(k, fmt.Sprintf("straggler stall mean ×%.3g = %v", f.StallScale, f.Model.StallMean.Round(time.Millisecond)))
	}
	if len(k) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(k, ", "))
	}
	fmt.Fprintf(&b, "; %d probes, %.1f s", f.Probes, f.Elapsed.Seconds())
	if f.Reached {
		b.WriteString("; lag within tolerance (only the lag is fitted)")
	} else {
		fmt.Fprintf(&b, "; NOT REACHED: %s", f.Reason)
	}
	return b.String()
}

// errFitBudget stops a fit whose probe budget is spent.
var errFitBudget = errors.New("probe budget spent")

// fitter holds one fit's state.
type fitter struct {
	ctx        context.Context
	cfg        sim.Config
	base       sim.ReplicaModel
	tm, tp     float64 // target mean, p99 (ms)
	o          FitOptions
	probes     int
	best       probe
	bestErr    float64
	haveBest   bool
	lnTol      float64
	fitRouters []sim.RouterSpec
}

// probe is one simulator run at knob factors (h, s).
type probe struct {
	h, s    float64
	mean    float64
	p99     float64
	model   sim.ReplicaModel
	lm, lp  float64 // log(mean/target), log(p99/target)
	reached bool
}

// FitLag fits cfg.Model (the condition's inputs: see SimModel) so the
// simulator's achieved lag lands near the measured mean and p99 (ms). It
// scales at most two knobs, the heavy record's replay cost and the
// straggler's mean stall, by factors in [MinScale, MaxScale]; every probe
// runs cfg (its seed and trials, so the fit is deterministic) under one
// router, which is enough: in the default posture a router's reads do not
// move replication. With both knobs, an inner bisection on the heavy
// factor matches the p99 and an outer bisection on the stall factor then
// matches the mean (at a fixed p99, longer stalls on one replica and
// shorter heavy records on all give a lower mean); with one knob, a
// bisection balances the two (log mean error + log p99 error = 0). A fit
// that cannot get both within the tolerance returns the closest probe with
// Reached false and a Reason; it is never silently accepted. Errors are
// only the simulator's (bad config, ctx).
func FitLag(ctx context.Context, cfg sim.Config, targetMeanMs, targetP99Ms float64, o FitOptions) (LagFit, error) {
	start := time.Now()
	if err := o.validate(); err != nil {
		return LagFit{}, err
	}
	if cfg.Model == nil {
		return LagFit{}, errors.New("lab: fit: cfg.Model is nil (want the condition's replica model)")
	}
	f := &fitter{ctx: ctx, cfg: cfg, base: *cfg.Model, tm: targetMeanMs, tp: targetP99Ms, o: o,
		lnTol:      math.Log1p(o.Tolerance),
		fitRouters: []sim.RouterSpec{{Name: "fit", Policy: router.Policy{Kind: router.PolicyAny}}}}
	out := LagFit{TargetMeanMs: targetMeanMs, TargetP99Ms: targetP99Ms}
	heavy := f.base.HeavyProb > 0 && f.base.HeavyCost > 0
	stall := f.base.Straggler && f.base.StallEvery > 0 && f.base.StallMean > 0
	if heavy {
		out.Knobs = append(out.Knobs, KnobHeavy)
	}
	if stall {
		out.Knobs = append(out.Knobs, KnobStall)
	}
	h0, s0 := 0.0, 0.0
	if heavy {
		h0 = 1
	}
	if stall {
		s0 = 1
	}
	// The base model first: its lag is reported whatever the fit does.
	bp, err := f.run(h0, s0)
	if err != nil {
		return LagFit{}, err
	}
	out.BaseMeanMs, out.BaseP99Ms = bp.mean, bp.p99
	var reason string
	switch {
	case !(targetMeanMs > 0) || !(targetP99Ms > 0) || math.IsInf(targetMeanMs, 0) || math.IsInf(targetP99Ms, 0):
		reason = fmt.Sprintf("no usable measured lag (mean %g ms, p99 %g ms)", targetMeanMs, targetP99Ms)
	case !heavy && !stall:
		reason = "the condition has no heavy records and no straggler: no knob to fit"
	case bp.reached:
		// the inputs already give the measured lag
	case heavy && stall:
		err = f.fitTwo()
	case heavy:
		err = f.fitOne(func(x float64) (float64, float64) { return x, 0 })
	default:
		err = f.fitOne(func(x float64) (float64, float64) { return 0, x })
	}
	switch {
	case errors.Is(err, errFitBudget):
		reason = fmt.Sprintf("probe budget of %d spent", o.MaxProbes)
	case err != nil:
		return LagFit{}, err
	}
	b := f.best
	out.HeavyScale, out.StallScale = b.h, b.s
	out.Model = b.model
	out.MeanMs, out.P99Ms = b.mean, b.p99
	out.Probes = f.probes
	out.Reached = b.reached
	if !out.Reached {
		if reason == "" {
			reason = f.explain(heavy, stall)
		}
		out.Reason = reason
	}
	out.Elapsed = time.Since(start)
	return out, nil
}

// explain says why the closest probe is still outside the tolerance.
func (f *fitter) explain(heavy, stall bool) string {
	b := f.best
	var atBound []string
	for _, k := range []struct {
		on   bool
		name string
		x    float64
	}{{heavy, KnobHeavy, b.h}, {stall, KnobStall, b.s}} {
		if k.on && (k.x <= f.o.MinScale*1.01 || k.x >= f.o.MaxScale/1.01) {
			atBound = append(atBound, fmt.Sprintf("%s at its bound ×%.3g", k.name, k.x))
		}
	}
	s := fmt.Sprintf("closest mean is %+.0f%%, p99 %+.0f%% from the measured lag (tolerance %.0f%%)",
		100*(math.Exp(b.lm)-1), 100*(math.Exp(b.lp)-1), 100*f.o.Tolerance)
	if len(atBound) > 0 {
		return s + "; " + strings.Join(atBound, ", ")
	}
	if heavy != stall {
		return s + "; one knob cannot set both the mean and the p99 (the model's lag distribution has another shape than the measured one)"
	}
	return s + "; the two knobs cannot give this mean at this p99"
}

// run probes the model at factors (h, s) on the heavy cost and the stall
// mean (0: knob absent, base value kept).
func (f *fitter) run(h, s float64) (probe, error) {
	if f.probes >= f.o.MaxProbes {
		return probe{}, errFitBudget
	}
	f.probes++
	m := f.base
	if h > 0 {
		m.HeavyCost = time.Duration(float64(f.base.HeavyCost) * h)
	}
	if s > 0 {
		m.StallMean = time.Duration(float64(f.base.StallMean) * s)
	}
	cfg := f.cfg
	cfg.Model = &m
	out, err := sim.Run(f.ctx, cfg, f.fitRouters, nil)
	if err != nil {
		return probe{}, fmt.Errorf("lab: fit: simulator: %w", err)
	}
	p := probe{h: h, s: s, model: m}
	for _, t := range out[0] {
		p.mean += t.LagMean
		p.p99 += t.LagP99
	}
	n := float64(len(out[0]))
	p.mean /= n
	p.p99 /= n
	p.lm = logRatio(p.mean, f.tm)
	p.lp = logRatio(p.p99, f.tp)
	p.reached = math.Abs(p.lm) <= f.lnTol && math.Abs(p.lp) <= f.lnTol
	if e := max(math.Abs(p.lm), math.Abs(p.lp)); !f.haveBest || e < f.bestErr {
		f.best, f.bestErr, f.haveBest = p, e, true
	}
	return p, nil
}

// logRatio is log(a/b), finite for a zero or non-finite side (a lag of 0
// against a positive target is far below it, not NaN).
func logRatio(a, b float64) float64 {
	const floor = 1e-3 // ms
	return math.Log(max(a, floor) / max(b, floor))
}

// bisect searches x in [MinScale, MaxScale] on a log scale for the sign
// change of g (negative: x too small; positive: too large; done: stop
// early). It returns the last x probed.
func (f *fitter) bisect(g func(x float64) (sign float64, done bool, err error)) error {
	lo, hi := math.Log(f.o.MinScale), math.Log(f.o.MaxScale)
	for range f.o.Steps {
		x := (lo + hi) / 2
		sign, done, err := g(math.Exp(x))
		if err != nil || done {
			return err
		}
		if sign > 0 {
			hi = x
		} else {
			lo = x
		}
	}
	return nil
}

// fitOne fits one knob: at maps the knob's factor to (h, s).
func (f *fitter) fitOne(at func(x float64) (float64, float64)) error {
	return f.bisect(func(x float64) (float64, bool, error) {
		p, err := f.run(at(x))
		if err != nil {
			return 0, false, err
		}
		return p.lm + p.lp, p.reached, nil
	})
}

// fitTwo fits both knobs: the outer search on the stall factor, the inner
// one on the heavy factor for the p99.
func (f *fitter) fitTwo() error {
	return f.bisect(func(s float64) (float64, bool, error) {
		var last probe
		err := f.bisect(func(h float64) (float64, bool, error) {
			p, err := f.run(h, s)
			if err != nil {
				return 0, false, err
			}
			last = p
			return p.lp, p.reached || math.Abs(p.lp) <= f.lnTol/2, nil
		})
		if err != nil {
			return 0, false, err
		}
		if last.reached {
			return 0, true, nil
		}
		switch {
		case last.lp > f.lnTol:
			// p99 above the target even with the lightest heavy records:
			// the stalls alone are too long.
			return 1, false, nil
		case last.lp < -f.lnTol:
			// p99 below the target even with the heaviest: stalls too short.
			return -1, false, nil
		}
		// p99 matched: a mean above the target wants more of the lag on
		// the straggler (longer stalls), below it less.
		return -last.lm, false, nil
	})
}
