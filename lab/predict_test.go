package lab

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

// labLikeResult is a lab routers result with the default workload and the
// given measured lag (no MySQL: the other figures are a recorded run's
// inputs: 10th/50th percentile lag, the heavy transactions' primary time).
func labLikeResult(meanMs, p99Ms float64) *Result {
	return &Result{
		Config: ConfigSummary{Sessions: 2000, HotRows: 8, WriteRate: 200, DurationSec: 20, ReadsPerWrite: 3,
			GapMinMs: 15, GapMaxMs: 4000, Seed: 1, Workers: 24, PollMs: 5},
		Lag:         LagStats{MeanMs: meanMs, P10Ms: 13.5, P50Ms: 27, P99Ms: p99Ms, Samples: 12000},
		HeavyMeanMs: 1470,
	}
}

// fitConfig is the simulator setup Predict uses for res, with the
// condition's model.
func fitConfig(t *testing.T, res *Result, condition string) sim.Config {
	t.Helper()
	cond, err := ParseCondition(condition)
	if err != nil {
		t.Fatal(err)
	}
	m := SimModel(res, cond)
	cfg := simConfig(res, 3, PredictOptions{Trials: 4, RTT: time.Millisecond, ReadService: 500 * time.Microsecond})
	cfg.Model = &m
	return cfg
}

// simLag runs cfg with model m under one router and returns the trial
// averages of the lag mean and p99, as the fit and Predict compute them.
func simLag(t *testing.T, cfg sim.Config, m sim.ReplicaModel) (mean, p99 float64) {
	t.Helper()
	cfg.Model = &m
	out, err := sim.Run(context.Background(), cfg, []sim.RouterSpec{{Name: "any", Policy: router.Policy{Kind: router.PolicyAny}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out[0] {
		mean += r.LagMean
		p99 += r.LagP99
	}
	return mean / float64(len(out[0])), p99 / float64(len(out[0]))
}

func within(got, want, tol float64) bool { return math.Abs(got/want-1) <= tol }

// checkReached asserts a reached fit: lag within tolerance of the target,
// and the fitted model giving that lag again when run afresh.
func checkReached(t *testing.T, cfg sim.Config, fit LagFit, tol float64) {
	t.Helper()
	t.Log(fit.String())
	if !fit.Reached || fit.Reason != "" {
		t.Fatalf("fit not reached: %s", fit.String())
	}
	if !within(fit.MeanMs, fit.TargetMeanMs, tol) || !within(fit.P99Ms, fit.TargetP99Ms, tol) {
		t.Fatalf("fit claims reached but lag %.1f/%.1f ms is not within %g of %.1f/%.1f ms",
			fit.MeanMs, fit.P99Ms, tol, fit.TargetMeanMs, fit.TargetP99Ms)
	}
	m, p := simLag(t, cfg, fit.Model)
	if m != fit.MeanMs || p != fit.P99Ms {
		t.Fatalf("fitted model rerun gives %v/%v ms, fit said %v/%v ms", m, p, fit.MeanMs, fit.P99Ms)
	}
}

// The recorded `lab routers` run: measured mean 1074.6 ms, p99 5094.1 ms,
// while the condition's inputs give the simulator about a fifth of that.
func TestFitLagReachesRecordedLabLag(t *testing.T) {
	res := labLikeResult(1074.6, 5094.1)
	cfg := fitConfig(t, res, "straggler+heavy")
	fit, err := FitLag(context.Background(), cfg, res.Lag.MeanMs, res.Lag.P99Ms, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkReached(t, cfg, fit, 0.1)
	if within(fit.BaseMeanMs, res.Lag.MeanMs, 0.1) {
		t.Fatalf("base model already gives %.1f ms: the test no longer exercises the fit", fit.BaseMeanMs)
	}
	if len(fit.Knobs) != 2 || fit.HeavyScale <= 0 || fit.StallScale <= 0 {
		t.Fatalf("knobs %v, heavy ×%g, stall ×%g: want both fitted", fit.Knobs, fit.HeavyScale, fit.StallScale)
	}
	base := *cfg.Model
	if got := fit.Model; got.HeavyProb != base.HeavyProb || got.StallEvery != base.StallEvery || got.ShipDelay != base.ShipDelay ||
		got.ApplyCost != base.ApplyCost || got.HeavyCost != time.Duration(float64(base.HeavyCost)*fit.HeavyScale) {
		t.Fatalf("fit changed more than its knobs: base %+v, fitted %+v", base, got)
	}
	again, err := FitLag(context.Background(), cfg, res.Lag.MeanMs, res.Lag.P99Ms, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again.Elapsed = fit.Elapsed
	if again.String() != fit.String() || !reflect.DeepEqual(again.Model, fit.Model) {
		t.Fatalf("fit not deterministic:\n%s\n%s", fit.String(), again.String())
	}
}

// A target the model family can produce (the simulator's own lag at known
// factors) is found again, with two knobs and with one.
func TestFitLagRecoversSimulatorTarget(t *testing.T) {
	res := labLikeResult(1, 1)
	for _, tc := range []struct {
		cond string
		h, s float64
	}{
		{"straggler+heavy", 3, 0.5},
		{"straggler+heavy", 0.5, 6},
		{"heavy", 2.5, 0},
		{"straggler", 0, 4},
	} {
		t.Run(tc.cond, func(t *testing.T) {
			cfg := fitConfig(t, res, tc.cond)
			m := *cfg.Model
			if tc.h > 0 {
				m.HeavyCost = time.Duration(float64(m.HeavyCost) * tc.h)
			}
			if tc.s > 0 {
				m.StallMean = time.Duration(float64(m.StallMean) * tc.s)
			}
			mean, p99 := simLag(t, cfg, m)
			fit, err := FitLag(context.Background(), cfg, mean, p99, FitOptions{Tolerance: 0.05})
			if err != nil {
				t.Fatal(err)
			}
			checkReached(t, cfg, fit, 0.05)
		})
	}
}

// Targets outside the model's reach are reported as not reached, with the
// closest probe and the reason; never silently accepted.
func TestFitLagReportsUnreachable(t *testing.T) {
	res := labLikeResult(1, 1)
	for _, tc := range []struct {
		name, cond string
		mean, p99  float64
		o          FitOptions
		reason     string
	}{
		// p99 of 100 minutes: beyond every knob's bound.
		{"beyond-bounds", "straggler+heavy", 600_000, 6_000_000, FitOptions{}, "at its bound"},
		// a mean nearly equal to the p99: no knob setting gives that shape.
		{"mean-at-p99", "straggler+heavy", 4900, 5000, FitOptions{}, "from the measured lag"},
		{"one-knob-shape", "heavy", 4900, 5000, FitOptions{}, "from the measured lag"},
		{"budget", "straggler+heavy", 1074.6, 5094.1, FitOptions{MaxProbes: 3}, "probe budget of 3 spent"},
		{"no-knob", "identical", 1074.6, 5094.1, FitOptions{}, "no knob to fit"},
		{"no-lag", "straggler+heavy", 0, 0, FitOptions{}, "no usable measured lag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fitConfig(t, res, tc.cond)
			fit, err := FitLag(context.Background(), cfg, tc.mean, tc.p99, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(fit.String())
			if fit.Reached {
				t.Fatalf("fit reached an unreachable target: %s", fit.String())
			}
			if !strings.Contains(fit.Reason, tc.reason) || !strings.Contains(fit.String(), "NOT REACHED") {
				t.Fatalf("reason %q: want it to contain %q (and the string to say NOT REACHED)", fit.Reason, tc.reason)
			}
			if max := tc.o.MaxProbes; max > 0 && fit.Probes > max {
				t.Fatalf("%d probes, cap %d", fit.Probes, max)
			}
			// the model returned is a probe that ran: its lag is what the fit says
			m, p := simLag(t, cfg, fit.Model)
			if m != fit.MeanMs || p != fit.P99Ms {
				t.Fatalf("returned model gives %v/%v ms, fit said %v/%v ms", m, p, fit.MeanMs, fit.P99Ms)
			}
		})
	}
}

func TestFitOptionsValidate(t *testing.T) {
	for _, o := range []FitOptions{
		{Tolerance: -0.1}, {Tolerance: 1}, {MinScale: 2}, {MaxScale: 0.5}, {MinScale: -1},
		{Steps: 100}, {MaxProbes: -1},
	} {
		if err := o.validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	res := labLikeResult(1000, 5000)
	cfg := fitConfig(t, res, "straggler+heavy")
	cfg.Model = nil
	if _, err := FitLag(context.Background(), cfg, 1000, 5000, FitOptions{}); err == nil {
		t.Error("nil model: no error")
	}
}

// Predict simulates the routers on the fitted model: its lag is the
// measured one (within the fit's tolerance), its notes say so, and the
// structural results still emerge (token routers never violate).
func TestPredictUsesFittedModel(t *testing.T) {
	routers := DefaultRouters()
	run := func(o PredictOptions) *Result {
		res := labLikeResult(1074.6, 5094.1)
		res.Routers = make([]RouterResult, len(routers))
		cond, _ := ParseCondition("straggler+heavy")
		if err := Predict(context.Background(), res, cond, 3, routers, o); err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := run(PredictOptions{})
	for i, r := range res.Routers {
		p := r.Prediction
		if p == nil {
			t.Fatalf("router %d: no prediction", i)
		}
		if !within(p.LagMeanMs, 1074.6, 0.1) || !within(p.LagP99Ms, 5094.1, 0.1) {
			t.Fatalf("%s: predicted lag %.1f/%.1f ms, measured 1074.6/5094.1", routers[i].Name, p.LagMeanMs, p.LagP99Ms)
		}
		switch routers[i].Policy.Kind {
		case router.PolicyTokenRYW:
			if p.RYWPct != 0 {
				t.Errorf("%s: RYW %g%%", routers[i].Name, p.RYWPct)
			}
		case router.PolicyTokenRYWMR, router.PolicyTokenWait:
			if p.RYWPct != 0 || p.MRPct != 0 {
				t.Errorf("%s: RYW %g%%, MR %g%%", routers[i].Name, p.RYWPct, p.MRPct)
			}
		case router.PolicyAny:
			if p.RYWPct <= 0 {
				t.Errorf("%s: RYW %g%% under a second of lag", routers[i].Name, p.RYWPct)
			}
		}
	}
	if !strings.HasPrefix(res.SimModel, "fitted to the measured lag: ") {
		t.Errorf("SimModel %q", res.SimModel)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"Simulator lag fitted to the lab's: measured mean 1074.6 ms / p99 5094.1 ms", "within tolerance", "heavy replay cost ×", "straggler stall mean ×", "inputs unfitted"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if again := run(PredictOptions{}); *again.Routers[0].Prediction != *res.Routers[0].Prediction {
		t.Errorf("prediction not deterministic: %+v vs %+v", *res.Routers[0].Prediction, *again.Routers[0].Prediction)
	}

	nofit := run(PredictOptions{NoFit: true})
	if !strings.HasPrefix(nofit.SimModel, "same inputs, not fitted: ") || len(nofit.Notes) != 0 {
		t.Errorf("NoFit: SimModel %q, notes %q", nofit.SimModel, nofit.Notes)
	}
	if within(nofit.Routers[0].Prediction.LagMeanMs, 1074.6, 0.1) {
		t.Errorf("NoFit lag %.1f ms: the inputs should not give the measured lag here", nofit.Routers[0].Prediction.LagMeanMs)
	}
}

// An apply-delay run has no knob: the prediction says it was not fitted.
func TestPredictNoKnob(t *testing.T) {
	res := labLikeResult(1010, 1030)
	res.Lag.P10Ms, res.Lag.P50Ms = 1002, 1008
	res.Routers = make([]RouterResult, 1)
	cond, _ := ParseCondition("apply-delay")
	if err := Predict(context.Background(), res, cond, 3, DefaultRouters()[:1], PredictOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "Simulator lag not fitted (the condition has no heavy records and no straggler") ||
		!strings.Contains(res.Notes[0], ", lag within the fit's tolerance") || !strings.HasPrefix(res.SimModel, "same inputs, not fitted: ") {
		t.Fatalf("notes %q, model %q", res.Notes, res.SimModel)
	}
	// the same run with a lag the standing delay cannot explain
	res.Lag.MeanMs, res.Lag.P99Ms, res.Notes = 2000, 4000, nil
	if err := Predict(context.Background(), res, cond, 3, DefaultRouters()[:1], PredictOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "NOT within the fit's tolerance (the condition has no heavy records and no straggler: no knob to fit)") {
		t.Fatalf("notes %q", res.Notes)
	}
}

// TestHeavyJitterFromHolds: the simulator's heavy jitter is √3 times the
// mean coefficient of variation of the measured holds across replicas;
// no usable hold gives 0, and it stays below 0.9.
func TestHeavyJitterFromHolds(t *testing.T) {
	// holds 900, 1000, 1100: sd 100, CV 0.1; 2000, 2000: CV 0.
	got := heavyJitter([][]float64{{900, 1000, 1100}, {2000, 2000}, {500}})
	if want := math.Sqrt(3) * 0.05; math.Abs(got-want) > 1e-9 {
		t.Fatalf("heavy jitter %g, want %g", got, want)
	}
	if got := heavyJitter(nil); got != 0 {
		t.Fatalf("no holds: %g", got)
	}
	if got := heavyJitter([][]float64{{1, 1000}}); got != 0.9 {
		t.Fatalf("wild holds: %g, want the 0.9 cap", got)
	}
}
