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
	}
	return m
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
func Predict(ctx context.Context, res *Result, cond ConditionSpec, replicas int, routers []RouterSpec, o PredictOptions) error {
	if o.Trials == 0 {
		o.Trials = 4
	}
	if o.RTT == 0 {
		o.RTT = time.Millisecond
	}
	if o.ReadService == 0 {
		o.ReadService = 500 * time.Microsecond
	}
	if len(routers) != len(res.Routers) {
		return fmt.Errorf("lab: predict: %d routers for %d result rows", len(routers), len(res.Routers))
	}
	model := SimModel(res, cond)
	c := res.Config
	cfg := sim.Config{
		Seed: c.Seed, Trials: o.Trials, Replicas: replicas, WritesPerSec: c.WriteRate,
		Sessions: c.Sessions, Duration: time.Duration(c.DurationSec * float64(time.Second)),
		ReadsPerWrite: c.ReadsPerWrite,
		GapMin:        time.Duration(c.GapMinMs * float64(time.Millisecond)),
		GapMax:        time.Duration(c.GapMaxMs * float64(time.Millisecond)),
		RTT:           o.RTT, ReadService: o.ReadService, Model: &model,
		Poll: time.Duration(c.PollMs * float64(time.Millisecond)),
	}
	specs := make([]sim.RouterSpec, len(routers))
	for i, r := range routers {
		specs[i] = sim.RouterSpec{Name: r.Name, Policy: r.Policy}
	}
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
			p.LatP99Ms += t.ReadP99
			p.LagMeanMs += t.LagMean
			p.LagP99Ms += t.LagP99
		}
		n := float64(len(out[i]))
		p.RYWPct /= n
		p.MRPct /= n
		p.PrimaryPct /= n
		p.LatP99Ms /= n
		p.LagMeanMs /= n
		p.LagP99Ms /= n
		res.Routers[i].Prediction = &p
	}
	res.SimModel = fmt.Sprintf("ship %v±%v, apply %v/txn, straggler=%v (stall every %v, mean %v), heavy p=%.2g cost %v",
		model.ShipDelay, model.ShipJitter, model.ApplyCost, model.Straggler, model.StallEvery, model.StallMean, model.HeavyProb, model.HeavyCost)
	return nil
}
