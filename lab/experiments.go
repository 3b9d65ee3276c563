package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

// Topology is what every experiment needs: nodes and faults.
// *compose.Topology has it; so does an external topology attached with
// compose's external backend (with fewer faults).
type Topology = Faults

// RoutersOptions configure `lab routers`.
type RoutersOptions struct {
	// Config is the workload; Routers default to DefaultRouters() and the
	// condition to straggler+heavy (the simulator's default world).
	Config Config
	// NoPredict skips the simulator's prediction.
	NoPredict bool
	// Predict tunes the prediction.
	Predict PredictOptions
}

// Routers runs the six routers (or cfg.Routers) on the live topology and
// puts the simulator's prediction beside each row.
func Routers(ctx context.Context, topo Topology, o RoutersOptions) (*Result, error) {
	cfg := o.Config
	if len(cfg.Routers) == 0 {
		cfg.Routers = DefaultRouters()
	}
	if len(cfg.Condition.Names) == 0 {
		c, err := ParseCondition("straggler+heavy")
		if err != nil {
			return nil, err
		}
		cfg.Condition = c
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res, err := Run(ctx, topo, cfg)
	if err != nil {
		return nil, err
	}
	res.Experiment = "routers"
	if !o.NoPredict {
		if err := Predict(ctx, res, cfg.Condition, len(topo.Replicas()), cfg.Routers, o.Predict); err != nil {
			return nil, fmt.Errorf("lab routers: %w", err)
		}
	}
	return res, nil
}

// GatedOptions configure `lab gated`.
type GatedOptions struct {
	// Config is the workload. Defaults: one read per write, 5ms–4s gaps
	// (many reads land right after the write), apply-delay (1 s standing
	// lag: MySQL's SOURCE_DELAY is whole seconds, so the reference
	// harness's 250 ms cannot be set), routers naive (any) and gated
	// (token-ryw).
	Config    Config
	NoPredict bool
	Predict   PredictOptions
}

// Gated runs naive against GTID-gated reads under a standing lag.
func Gated(ctx context.Context, topo Topology, o GatedOptions) (*Result, error) {
	cfg := o.Config
	if len(cfg.Routers) == 0 {
		cfg.Routers = []RouterSpec{
			{Name: "naive", Policy: router.Policy{Kind: router.PolicyAny}},
			{Name: "gated", Policy: router.Policy{Kind: router.PolicyTokenRYW}},
		}
	}
	if len(cfg.Condition.Names) == 0 {
		cfg.Condition = ConditionSpec{Names: []string{CondApplyDelay}}
	}
	if cfg.ReadsPerWrite == 0 {
		cfg.ReadsPerWrite = 1
	}
	if cfg.GapMin == 0 {
		cfg.GapMin = 5 * time.Millisecond
	}
	if cfg.GapMax == 0 {
		cfg.GapMax = 4 * time.Second
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res, err := Run(ctx, topo, cfg)
	if err != nil {
		return nil, err
	}
	res.Experiment = "gated"
	for _, r := range res.Routers {
		res.Notes = append(res.Notes, fmt.Sprintf("%s: %.2f%% of served reads stale (lacked the session's own write); %.1f%% served from replicas.",
			r.Name, r.RYWPct, pct(r.Outcomes[OutReplica.String()]+r.Outcomes[OutStale.String()], r.Served)))
	}
	if !o.NoPredict {
		if err := Predict(ctx, res, cfg.Condition, len(topo.Replicas()), cfg.Routers, o.Predict); err != nil {
			return nil, fmt.Errorf("lab gated: %w", err)
		}
	}
	return res, nil
}

// FailoverOptions configure `lab failover`.
type FailoverOptions struct {
	// Config is the workload. Defaults: 16 s, apply-delay on every replica
	// (so the promoted one lacks the last second of acknowledged writes),
	// and three routers, all token-wait(400ms): lsn-token (scalar position),
	// gtid-token (GTID set, no epoch), epoch-token (GTID set + epoch).
	Config Config
	// At is when the primary is killed and replica1 promoted; default half
	// of the duration.
	At time.Duration
	// Candidate is the replica promoted; default the first replica.
	Candidate string
	// NoPredict skips the simulator's failover table.
	NoPredict bool
	// SimTrials is the simulator's trial count; default 4.
	SimTrials int
}

// Failover kills the primary while replicas lag and compares the three
// token kinds from ground truth: reads silently served without the
// session's write (RYW), reads that timed out, reads failed fast.
func Failover(ctx context.Context, topo Topology, o FailoverOptions) (*Result, error) {
	cfg := o.Config
	if cfg.Duration == 0 {
		cfg.Duration = 16 * time.Second
	}
	wait := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: router.DefaultWaitBudget}
	epoch := wait
	epoch.CheckEpoch = true
	if len(cfg.Routers) == 0 {
		cfg.Routers = []RouterSpec{
			{Name: "lsn-token", Policy: wait, Token: TokenLSN},
			{Name: "gtid-token", Policy: wait, Token: TokenGTID},
			{Name: "epoch-token", Policy: epoch, Token: TokenGTID},
		}
	}
	if len(cfg.Condition.Names) == 0 {
		cfg.Condition.Names = []string{CondApplyDelay}
	}
	reps := topo.Replicas()
	if len(reps) < 2 {
		return nil, fmt.Errorf("lab failover: needs at least 2 replicas, have %d", len(reps))
	}
	if o.Candidate == "" {
		o.Candidate = reps[0].Name
	}
	if o.At == 0 {
		o.At = cfg.Duration / 2
	}
	cfg.Condition.Events = append(cfg.Condition.Events, Event{At: o.At, Kind: EvFailover, Node: o.Candidate})
	res, err := Run(ctx, topo, cfg)
	if err != nil {
		return nil, err
	}
	res.Experiment = "failover"
	for _, r := range res.Routers {
		res.Notes = append(res.Notes, fmt.Sprintf("%s: %d reads served without the session's own write (silently stale), %d timed out, %d failed fast (%v).",
			r.Name, r.RYW, r.Outcomes[OutTimedOut.String()], r.Outcomes[OutFailed.String()], r.Reasons))
	}
	if !o.NoPredict {
		rep, err := sim.Failover(ctx, sim.Options{Base: sim.Config{Seed: cfg.Seed, Trials: max(o.SimTrials, 4),
			Replicas: len(reps), WritesPerSec: cfg.WriteRate}})
		if err != nil {
			return nil, fmt.Errorf("lab failover: simulator: %w", err)
		}
		res.SimTables = rep.Tables
	}
	return res, nil
}

// HashOptions configure `lab hash`.
type HashOptions struct {
	// Config is the workload; default condition straggler (replicas at
	// different positions, so a moved session can see the world go back).
	Config Config
	// Down is the replica that goes down (killed, restarted later);
	// default the second replica.
	Down string
	// DriftLoad is the outside in-flight reads added on the first replica
	// in the drift part; default 40.
	DriftLoad int
	// NoPredict skips the simulator's hashing table.
	NoPredict bool
}

// Hash runs the two hashing edge cases: (1) a replica goes down, full-list
// against available-only: sessions whose replica changed and MR
// violations; (2) load drift under rebalance-override.
func Hash(ctx context.Context, topo Topology, o HashOptions) ([]*Result, error) {
	reps := topo.Replicas()
	if len(reps) < 2 {
		return nil, fmt.Errorf("lab hash: needs at least 2 replicas, have %d", len(reps))
	}
	base := o.Config
	if base.Duration == 0 {
		base.Duration = 15 * time.Second
	}
	if len(base.Condition.Names) == 0 {
		base.Condition.Names = []string{CondStraggler}
	}
	if o.Down == "" {
		o.Down = reps[1].Name
	}
	if o.DriftLoad == 0 {
		o.DriftLoad = 40
	}
	aff := func(m hashroute.Mode) RouterSpec {
		p := router.Policy{Kind: router.PolicyAffinity, HashMode: m}
		return RouterSpec{Name: p.String(), Policy: p}
	}
	third := base.Duration / 3
	down := base
	down.Routers = []RouterSpec{aff(hashroute.FullList), aff(hashroute.AvailableOnly)}
	down.Condition.Events = []Event{{At: third, Kind: EvKill, Node: o.Down, For: third}}
	r1, err := Run(ctx, topo, down)
	if err != nil {
		return nil, fmt.Errorf("lab hash (replica down): %w", err)
	}
	r1.Experiment = "hash-down"
	drift := base
	drift.Routers = []RouterSpec{aff(hashroute.FullList), aff(hashroute.RebalanceOverride)}
	drift.Condition.Events = []Event{{At: third, Kind: EvDrift, Node: reps[0].Name, For: third, Load: o.DriftLoad}}
	r2, err := Run(ctx, topo, drift)
	if err != nil {
		return nil, fmt.Errorf("lab hash (drift): %w", err)
	}
	r2.Experiment = "hash-drift"
	if !o.NoPredict {
		rep, err := sim.Hashing(ctx, sim.Options{Base: sim.Config{Seed: base.Seed, Trials: 4, Replicas: len(reps),
			WritesPerSec: base.WriteRate}})
		if err != nil {
			return nil, fmt.Errorf("lab hash: simulator: %w", err)
		}
		r1.SimTables = rep.Tables
	}
	for _, r := range []*Result{r1, r2} {
		for _, rr := range r.Routers {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %d sessions changed replica (%d switches), %d MR violations, %d RYW.",
				rr.Name, rr.SessionsMoved, rr.ReplicaSwitches, rr.MR, rr.RYW))
		}
	}
	return []*Result{r1, r2}, nil
}

// ChaosOptions configure `lab chaos`.
type ChaosOptions struct {
	// Config is the workload; default router token-ryw-mr+epoch, 60 s.
	Config Config
	// Every is the mean time between faults; default 3s.
	Every time.Duration
}

// Chaos plays a seeded random fault schedule (kill, pause, partition,
// heavy transactions, apply delay, applier stalls, one failover) under
// token-ryw-mr with epochs. The expected result is zero RYW and zero MR
// violations with every read accounted for.
func Chaos(ctx context.Context, topo Topology, o ChaosOptions) (*Result, error) {
	cfg := o.Config
	if cfg.Duration == 0 {
		cfg.Duration = 60 * time.Second
	}
	if o.Every == 0 {
		o.Every = 3 * time.Second
	}
	if len(cfg.Routers) == 0 {
		p := router.Policy{Kind: router.PolicyTokenRYWMR, CheckEpoch: true}
		cfg.Routers = []RouterSpec{{Name: p.String(), Policy: p}}
	}
	reps := topo.Replicas()
	if len(reps) < 2 {
		return nil, fmt.Errorf("lab chaos: needs at least 2 replicas, have %d", len(reps))
	}
	names := make([]string, len(reps))
	for i, r := range reps {
		names[i] = r.Name
	}
	cfg.Condition.Events = append(cfg.Condition.Events, ChaosEvents(cfg.Seed, cfg.Duration, o.Every, names)...)
	res, err := Run(ctx, topo, cfg)
	if err != nil {
		return nil, err
	}
	res.Experiment = "chaos"
	for _, r := range res.Routers {
		var n int64
		for _, c := range r.Outcomes {
			n += c
		}
		res.Notes = append(res.Notes, fmt.Sprintf("%s: %d reads, %d accounted for by outcome, RYW %d, MR %d, declared losses %d, outcomes %v.",
			r.Name, r.Reads, n, r.RYW, r.MR, r.DeclaredLosses, r.Outcomes))
	}
	return res, nil
}
