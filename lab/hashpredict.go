package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

// PredictHash runs the simulator on the same world as a hashing run and
// attaches its attribution to every affinity row (RouterResult.Hash.Sim):
//
//   - the same workload per router: the lab's concurrent routers split the
//     sessions and the writes evenly, so each simulated router gets its
//     share (sessions/routers, write rate/routers), with one read queue
//     per session (sim.WorkloadQueue, the lab driver's shape);
//   - the same replicas, hashing order and weights, every
//     replica at the standing lag the lab measured on it: the healthy
//     model plus, for replica r, its measured 10th-percentile lag above
//     the fastest replica's (the only fitted input; the 10th percentile
//     is the standing delay, which a replica's catch-up after an outage
//     does not move);
//   - the same faults where they happened: each kill or pause as an
//     outage from the kill to the server answering again (res.Faults),
//     each drift as the same outside reads in flight for the same window.
//
// The counts the simulator predicts (moves, sessions, violations by
// cause) are means over its trials; nothing about them is fitted.
func PredictHash(ctx context.Context, res *Result, cfg Config, replicas []string, o PredictOptions) error {
	o.defaults()
	var specs []sim.RouterSpec
	var rows []int
	for i := range res.Routers {
		if res.Routers[i].Hash == nil {
			continue
		}
		sp := cfg.Routers[i]
		specs = append(specs, sim.RouterSpec{Name: sp.Name, Policy: sp.Policy})
		rows = append(rows, i)
	}
	if len(specs) == 0 {
		return nil
	}
	sc := simConfig(res, len(replicas), o)
	sc.Weights = cfg.Weights
	sc.Poll = 0 // affinity reads no positions; health is exact
	if cfg.Mode != Sequential {
		k := len(cfg.Routers)
		sc.Sessions = max(1, sc.Sessions/k)
		sc.WritesPerSec /= float64(k)
	}
	model := sim.WorldIdentical.Model()
	index := map[string]int{}
	for i, n := range replicas {
		index[n] = i
	}
	var fastest float64 = -1
	for _, l := range res.ReplicaLag {
		if fastest < 0 || l.P10Ms < fastest {
			fastest = l.P10Ms
		}
	}
	model.ReplicaDelay = make([]time.Duration, len(replicas))
	var delays []string
	for _, l := range res.ReplicaLag {
		if i, ok := index[l.Node]; ok {
			model.ReplicaDelay[i] = time.Duration((l.P10Ms - fastest) * float64(time.Millisecond)).Round(time.Millisecond)
			delays = append(delays, fmtMs(float64(model.ReplicaDelay[i])/1e6))
		}
	}
	sc.Model = &model
	for _, f := range res.Faults {
		i, ok := index[f.Node]
		switch {
		case !ok:
		case f.Kind == string(EvDrift):
			sc.Drifts = append(sc.Drifts, sim.Drift{Replica: i, InFlight: f.Load, From: secs(f.FromSec), To: secs(f.ToSec)})
		default:
			sc.Faults = append(sc.Faults, sim.Fault{Replica: i, From: secs(f.FromSec), To: secs(f.ToSec)})
		}
	}
	out, err := sim.Run(ctx, sc, specs, nil)
	if err != nil {
		return fmt.Errorf("lab: simulator prediction: %w", err)
	}
	for k, i := range rows {
		row := &res.Routers[i]
		row.Hash.Sim = simHashResult(cfg.Routers[i].Policy.HashMode, out[k])
		// The lag is the simulator's own achieved lag in this world (the
		// standing delays and outages above, no fitted lag model): the
		// figure the compact note prints beside the lab's.
		var p Prediction
		for _, t := range out[k] {
			p.RYWPct += t.RYWPct
			p.MRPct += t.MRPct
			p.LagMeanMs += t.LagMean
			p.LagP99Ms += t.LagP99
		}
		n := float64(len(out[k]))
		p.RYWPct, p.MRPct, p.LagMeanMs, p.LagP99Ms = p.RYWPct/n, p.MRPct/n, p.LagMeanMs/n, p.LagP99Ms/n
		p.RYWSD = trialSD(out[k], func(t sim.Result) float64 { return t.RYWPct })
		p.MRSD = trialSD(out[k], func(t sim.Result) float64 { return t.MRPct })
		p.Trials = len(out[k])
		row.Prediction = &p
	}
	res.SimModel = fmt.Sprintf("the same world (replicas %s behind the fastest, as measured; the outages and drifts as they happened), mean of %d trials of %d sessions at %g writes/s per mode",
		strings.Join(delays, ", "), sc.Trials, sc.Sessions, sc.WritesPerSec)
	return nil
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// hasAffinity reports whether any of specs is an affinity router.
func hasAffinity(specs []RouterSpec) bool {
	for _, sp := range specs {
		if sp.Policy.Kind == router.PolicyAffinity {
			return true
		}
	}
	return false
}
