package lab

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/causallab/causallab/sim"
)

// PredictOptions tune the simulator's prediction of a lab run.
type PredictOptions struct {
	// Trials is the number of simulator trials averaged; default 4.
	Trials int
	// RTT is the client-to-node round trip the simulator assumes; default
	// 1ms (loopback plus the server's parse, generously).
	RTT time.Duration
	// ReadService is a read's service time; default 500µs.
	ReadService time.Duration
	// NoFit predicts from the condition's inputs (SimModel) as they are,
	// without fitting the simulator's lag to the measured one.
	NoFit bool
	// Fit bounds the fit of the replica model to the measured lag.
	Fit FitOptions
	// OnPhase, when set, is called as the fit (PhaseFit) and the routers'
	// simulation (PhaseSimulation) begin.
	OnPhase func(Phase)
}

func (o *PredictOptions) phase(p Phase) {
	if o.OnPhase != nil {
		o.OnPhase(p)
	}
}

// defaults fills the unset options.
func (o *PredictOptions) defaults() {
	if o.Trials == 0 {
		o.Trials = 4
	}
	if o.RTT == 0 {
		o.RTT = time.Millisecond
	}
	if o.ReadService == 0 {
		o.ReadService = 500 * time.Microsecond
	}
}

// SimModel builds the simulator's replica model for a lab run: the SAME
// inputs the lab's condition used (stall schedule, heavy transaction
// period and replay cost, standing delay), plus a healthy ship delay set to
// the lab's measured 10th-percentile lag (the lag of writes that met no
// stall and no heavy transaction; the median would count the condition's
// lag twice; under apply-delay it holds the delay as MySQL applies it),
// jittered by the measured p50-p10 spread. The lag the simulator then achieves is an
// output, printed beside the measured one; violation rates are never fitted.
func SimModel(res *Result, cond ConditionSpec) sim.ReplicaModel {
	ship := time.Duration(res.Lag.P10Ms * float64(time.Millisecond))
	spread := time.Duration(max(0, res.Lag.P50Ms-res.Lag.P10Ms) * float64(time.Millisecond))
	m := sim.ReplicaModel{
		ShipDelay:  ship,
		ShipJitter: min(ship, spread),
		ApplyCost:  150 * time.Microsecond,
	}
	if cond.has(CondStraggler) {
		m.Straggler = true
		m.SlowFactor = 1
		m.StallEvery = cond.StragglerEvery
		m.StallMean = meanLogUniform(cond.StragglerMin, cond.StragglerMax)
	}
	if cond.has(CondHeavy) && res.Config.WriteRate > 0 {
		m.HeavyProb = min(1, 1/(cond.HeavyEvery.Seconds()*res.Config.WriteRate))
		cost := time.Duration(res.HeavyMeanMs * float64(time.Millisecond))
		if cost <= 0 {
			cost = time.Second
		}
		m.HeavyCost = cost
		m.HeavyJitter = heavyJitter(res.HeavyHoldsMs)
	}
	return m
}

// heavyJitter is the simulator's HeavyJitter measured from the lab's
// heavy holds (Result.HeavyHoldsMs): the mean, over heavy transactions,
// of the holds' coefficient of variation across replicas, times √3 (a
// uniform factor on [1-j, 1+j] has CV j/√3), below 0.9; 0 without a
// heavy transaction held on two replicas or more.
func heavyJitter(holds [][]float64) float64 {
	var sum float64
	n := 0
	for _, h := range holds {
		if len(h) < 2 {
			continue
		}
		var mean float64
		for _, x := range h {
			mean += x
		}
		mean /= float64(len(h))
		if mean <= 0 {
			continue
		}
		var ss float64
		for _, x := range h {
			ss += (x - mean) * (x - mean)
		}
		sum += math.Sqrt(ss/float64(len(h)-1)) / mean
		n++
	}
	if n == 0 {
		return 0
	}
	return min(0.9, math.Sqrt(3)*sum/float64(n))
}

// meanLogUniform is the mean of a log-uniform draw on [lo, hi].
func meanLogUniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	l, h := float64(lo), float64(hi)
	return time.Duration((h - l) / math.Log(h/l))
}

// Predict runs the simulator on the lab run's workload parameters and
// condition and attaches each router's prediction to res.Routers.
//
// The lab's lag is an input of the question, not an output: unless
// o.NoFit, the replica model built from the condition's inputs (SimModel)
// is first fitted so the simulator's lag (mean and p99) comes near the lag
// the lab measured (FitLag: the heavy record's replay cost and the
// straggler's stall length are the only knobs), and the routers are then
// simulated on the fitted model with the same workload parameters. The
// violation rates, primary shares and latencies are never fitted. The
// notes say what was measured, what the fitted simulator achieved, the
// knobs' values, and the lag of the unfitted inputs; a fit that fell short
// of its tolerance says so there.
func Predict(ctx context.Context, res *Result, cond ConditionSpec, replicas int, routers []RouterSpec, o PredictOptions) error {
	o.defaults()
	if len(routers) != len(res.Routers) {
		return fmt.Errorf("lab: predict: %d routers for %d result rows", len(routers), len(res.Routers))
	}
	model := SimModel(res, cond)
	cfg := simConfig(res, replicas, o)
	cfg.Model = &model
	desc := "same inputs, not fitted: "
	if !o.NoFit {
		o.phase(PhaseFit)
		fit, err := FitLag(ctx, cfg, res.Lag.MeanMs, res.Lag.P99Ms, o.Fit)
		if err != nil {
			return fmt.Errorf("lab: predict: %w", err)
		}
		if len(fit.Knobs) == 0 {
			status := "lag within the fit's tolerance"
			if !fit.Reached {
				status = "NOT within the fit's tolerance (" + fit.Reason + ")"
			}
			res.Notes = append(res.Notes, fmt.Sprintf("Simulator lag not fitted (the condition has no heavy records and no straggler, the fit's only knobs): measured mean %.1f ms / p99 %.1f ms, simulator with the condition's inputs mean %.1f ms / p99 %.1f ms, %s.",
				fit.TargetMeanMs, fit.TargetP99Ms, fit.BaseMeanMs, fit.BaseP99Ms, status))
		} else {
			res.Notes = append(res.Notes,
				"Simulator lag fitted to the lab's: "+fit.String()+".",
				fmt.Sprintf("Simulator lag with the condition's inputs unfitted (%s): mean %.1f ms, p99 %.1f ms.", describeModel(&model), fit.BaseMeanMs, fit.BaseP99Ms))
			model = fit.Model
			desc = "fitted to the measured lag: "
			if !fit.Reached {
				desc = "fit NOT reached, closest probe: "
			}
		}
	}
	specs := make([]sim.RouterSpec, len(routers))
	for i, r := range routers {
		specs[i] = sim.RouterSpec{Name: r.Name, Policy: r.Policy}
	}
	cfg.Model = &model
	o.phase(PhaseSimulation)
	out, err := sim.Run(ctx, cfg, specs, nil)
	if err != nil {
		return fmt.Errorf("lab: simulator prediction: %w", err)
	}
	for i := range res.Routers {
		var p Prediction
		for _, t := range out[i] {
			p.RYWPct += t.RYWPct
			p.MRPct += t.MRPct
			p.PrimaryPct += t.PrimaryPct
			p.AllWritesPct += t.AllWritesPct
			p.LatP99Ms += t.ReadP99
			p.LagMeanMs += t.LagMean
			p.LagP99Ms += t.LagP99
			p.SpreadMeanMs += t.SpreadMean
			p.SpreadP99Ms += t.SpreadP99
		}
		n := float64(len(out[i]))
		p.RYWSD = trialSD(out[i], func(t sim.Result) float64 { return t.RYWPct })
		p.MRSD = trialSD(out[i], func(t sim.Result) float64 { return t.MRPct })
		p.PrimarySD = trialSD(out[i], func(t sim.Result) float64 { return t.PrimaryPct })
		p.RYWPct /= n
		p.MRPct /= n
		p.PrimaryPct /= n
		p.AllWritesPct /= n
		p.LatP99Ms /= n
		p.LagMeanMs /= n
		p.LagP99Ms /= n
		p.SpreadMeanMs /= n
		p.SpreadP99Ms /= n
		p.Trials = len(out[i])
		res.Routers[i].Prediction = &p
	}
	res.SimModel = desc + describeModel(&model)
	return nil
}

// trialSD is the sample standard deviation of f over the trials (0 for
// fewer than two).
func trialSD(trials []sim.Result, f func(sim.Result) float64) float64 {
	if len(trials) < 2 {
		return 0
	}
	var sum float64
	for _, t := range trials {
		sum += f(t)
	}
	mean := sum / float64(len(trials))
	var ss float64
	for _, t := range trials {
		d := f(t) - mean
		ss += d * d
	}
	return math.Sqrt(ss / float64(len(trials)-1))
}

// describeModel is a replica model in one line.
func describeModel(m *sim.ReplicaModel) string {
	d := fmt.Sprintf("ship %v±%v, apply %v/txn, straggler=%v (stall every %v, mean %v), heavy p=%.2g cost %v",
		m.ShipDelay.Round(10*time.Microsecond), m.ShipJitter.Round(10*time.Microsecond), m.ApplyCost, m.Straggler,
		m.StallEvery, m.StallMean.Round(time.Millisecond), m.HeavyProb, m.HeavyCost.Round(time.Millisecond))
	if m.HeavyJitter > 0 {
		d += fmt.Sprintf(" ±%.0f%% per replica (measured)", 100*m.HeavyJitter)
	}
	return d
}

// simConfig is the simulator's setup for a lab run: the same workload
// parameters; the replica model is the caller's. The lab's driver keeps one
// read queue per session (a write's reads wait for the session's earlier
// reads), which is the simulator's WorkloadQueue shape.
func simConfig(res *Result, replicas int, o PredictOptions) sim.Config {
	c := res.Config
	return sim.Config{
		Seed: c.Seed, Trials: o.Trials, Replicas: replicas, WritesPerSec: c.WriteRate,
		Workload: sim.WorkloadQueue, Sessions: c.Sessions, Duration: time.Duration(c.DurationSec * float64(time.Second)),
		ReadsPerWrite: c.ReadsPerWrite,
		GapMin:        time.Duration(c.GapMinMs * float64(time.Millisecond)),
		GapMax:        time.Duration(c.GapMaxMs * float64(time.Millisecond)),
		RTT:           o.RTT, ReadService: o.ReadService,
		Poll: time.Duration(c.PollMs * float64(time.Millisecond)),
	}
}
