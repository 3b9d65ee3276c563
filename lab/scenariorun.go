package lab

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/causallab/causallab/sim"
)

// Topology is what every scenario needs: nodes and faults.
// *compose.Topology has it; so does an external topology attached with
// compose's external backend (with fewer faults).
type Topology = Faults

// defaultScenarioDuration is a scenario's length when it names none (the
// base its events' times scale from).
const defaultScenarioDuration = 20 * time.Second

// ScenarioOptions adjust a scenario run.
type ScenarioOptions struct {
	// Config overrides the scenario where set: Duration (the events' times
	// scale with it), Sessions, WriteRate, ReadsPerWrite, GapMin, GapMax;
	// Routers replace the scenario's; Condition.Names replace its
	// condition (the other Condition fields apply as given, and
	// Condition.Events are played beside the scenario's). Every other
	// field (Seed, Mode, Via, Workload, Progress, ...) is Run's.
	Config Config
	// Nodes moves every event of a kind to another node:
	// {EvFailover: "replica2"} promotes replica2, {EvKill: "replica3"}
	// kills replica3.
	Nodes map[EventKind]string
	// DriftLoad, when set, replaces drift events' load.
	DriftLoad int
	// ChaosEvery, when set, replaces the chaos schedule's mean time
	// between faults.
	ChaosEvery time.Duration
	// NoPredict skips the simulator.
	NoPredict bool
	// Predict tunes the simulator; its Trials (at least 4) also serve the
	// failover and hashing tables.
	Predict PredictOptions
}

// Check builds every run's configuration of sc under o and validates it,
// without a topology (the replicas events name are checked at run time).
func (sc *Scenario) Check(o ScenarioOptions) error {
	_, err := sc.checkedConfigs(o)
	return err
}

// checkedConfigs returns the validated Config of each of sc.runs() under o,
// built without a topology.
func (sc *Scenario) checkedConfigs(o ScenarioOptions) ([]Config, error) {
	var out []Config
	for _, r := range sc.runs() {
		cfg, err := sc.runConfig(r, o, nil)
		if err == nil {
			err = cfg.validate()
		}
		if err != nil {
			return nil, fmt.Errorf("%w (scenario %s)", err, r.Name)
		}
		out = append(out, cfg)
	}
	return out, nil
}

// minReplicas is the fewest replicas sc runs on.
func (sc *Scenario) minReplicas() int {
	n := sc.MinReplicas
	if sc.Chaos != nil {
		n = max(n, 2)
	}
	for _, r := range sc.runs() {
		for _, e := range r.Events {
			n = max(n, e.Replica)
		}
	}
	return n
}

// runConfig is run r's Config under o. replicas are the topology's replica
// names (nil: leave replica references and chaos out, for Check).
func (sc *Scenario) runConfig(r ScenarioRun, o ScenarioOptions, replicas []string) (Config, error) {
	cfg := o.Config
	specs, err := r.specs()
	if err != nil {
		return cfg, err
	}
	if len(cfg.Routers) == 0 {
		cfg.Routers = specs
	}
	cond, err := ParseCondition(sc.conditionText())
	if err != nil {
		return cfg, err
	}
	if len(cfg.Condition.Names) == 0 {
		cfg.Condition.Names = cond.Names
	}
	base := sc.Duration
	if base == 0 {
		base = defaultScenarioDuration
	}
	if cfg.Duration == 0 {
		cfg.Duration = base
	}
	if cfg.Sessions == 0 {
		cfg.Sessions = sc.Sessions
	}
	if cfg.WriteRate == 0 {
		cfg.WriteRate = sc.WriteRate
	}
	if cfg.ReadsPerWrite == 0 {
		cfg.ReadsPerWrite = sc.ReadsPerWrite
	}
	if cfg.GapMin == 0 {
		cfg.GapMin = sc.GapMin
	}
	if cfg.GapMax == 0 {
		cfg.GapMax = sc.GapMax
	}
	if len(cfg.Weights) == 0 {
		cfg.Weights = sc.Weights
	}
	scale := float64(cfg.Duration) / float64(base)
	events := append([]Event(nil), cfg.Condition.Events...)
	for _, e := range r.Events {
		ev := Event{At: time.Duration(float64(e.At) * scale), Kind: e.Kind, Node: e.Node,
			For: time.Duration(float64(e.For) * scale), Load: e.Load}
		if n, ok := o.Nodes[e.Kind]; ok && n != "" {
			ev.Node = n
		} else if e.Replica > 0 && replicas != nil {
			ev.Node = replicas[e.Replica-1]
		}
		if e.Kind == EvDrift && o.DriftLoad > 0 {
			ev.Load = o.DriftLoad
		}
		events = append(events, ev)
	}
	if sc.Chaos != nil && replicas != nil {
		every := sc.Chaos.Every
		if o.ChaosEvery > 0 {
			every = o.ChaosEvery
		}
		seed := cfg.Seed
		if seed == 0 {
			seed = 1 // Config's default, which Run will apply
		}
		events = append(events, ChaosEvents(seed, cfg.Duration, every, replicas)...)
	}
	cfg.Condition.Events = events
	return cfg, nil
}

// RunScenario runs sc on topo: each of its runs in turn (one Result each,
// named after the run), the simulator's part, and the per-router notes. It
// returns the expectations that did not hold, one line each (empty: the
// scenario passed; expectations about routers a run replaced with
// o.Config.Routers are skipped). The results' notes say the same. On an
// error the results are the runs that finished before it (nil when none
// did), each whole, with its expectations checked.
func RunScenario(ctx context.Context, topo Topology, sc *Scenario, o ScenarioOptions) ([]*Result, []string, error) {
	names, err := sc.replicaNames(topo)
	if err != nil {
		return nil, nil, err
	}
	var results []*Result
	var failed []string
	for _, run := range sc.runs() {
		res, fails, err := sc.runOne(ctx, topo, run, o, names)
		if err != nil {
			return results, failed, fmt.Errorf("lab scenario %s: %w", run.Name, err)
		}
		failed = append(failed, fails...)
		results = append(results, res)
	}
	if !o.NoPredict && len(results) > 0 && sc.Predict != PredictFit && sc.Predict != PredictNone && sc.Predict != "" {
		if o.Config.Progress != nil {
			o.Config.Progress(Progress{Phase: PhaseSimulation})
		}
		tables, err := sc.simTables(ctx, results[0], len(names), o.Predict)
		if err != nil {
			return results, failed, fmt.Errorf("lab scenario %s: simulator: %w", sc.Name, err)
		}
		results[0].SimTables = append(results[0].SimTables, tables...)
	}
	return results, failed, nil
}

// replicaNames checks that topo has the replicas sc needs and returns
// their names.
func (sc *Scenario) replicaNames(topo Topology) ([]string, error) {
	if topo == nil {
		return nil, fmt.Errorf("lab scenario %s: no topology", sc.Name)
	}
	reps := topo.Replicas()
	if need := sc.minReplicas(); len(reps) < need {
		return nil, fmt.Errorf("lab scenario %s: needs at least %d replicas, have %d", sc.Name, need, len(reps))
	}
	names := make([]string, len(reps))
	for i, r := range reps {
		names[i] = r.Name
	}
	return names, nil
}

// runOne runs one of sc's runs on topo (whose replicas are names), with
// the simulator's prediction its Predict kind asks for, and checks its
// expectations: the failures come back prefixed with the run's name.
func (sc *Scenario) runOne(ctx context.Context, topo Topology, run ScenarioRun, o ScenarioOptions, names []string) (*Result, []string, error) {
	cfg, err := sc.runConfig(run, o, names)
	if err == nil {
		err = adoptEngine(topo, &cfg)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	res, err := Run(ctx, topo, cfg)
	if err != nil {
		return nil, nil, err
	}
	res.Experiment = run.Name
	if err := sc.addNotes(res); err != nil {
		return nil, nil, err
	}
	if sc.Predict == PredictFit && !o.NoPredict {
		po := o.Predict
		if cfg.Progress != nil {
			po.OnPhase = func(p Phase) { cfg.Progress(Progress{Phase: p}) }
		}
		if err := Predict(ctx, res, cfg.Condition, len(names), cfg.Routers, po); err != nil {
			return nil, nil, err
		}
	}
	if sc.Predict == PredictHashing && !o.NoPredict {
		if err := PredictHash(ctx, res, cfg, names, o.Predict); err != nil {
			return nil, nil, err
		}
	}
	fails, err := checkExpectations(res, run, len(o.Config.Routers) > 0)
	if err != nil {
		return nil, nil, err
	}
	for i, f := range fails {
		fails[i] = run.Name + ": " + f
	}
	return res, fails, nil
}

// addNotes appends the scenario's note, executed per router row.
func (sc *Scenario) addNotes(res *Result) error {
	if sc.note == nil {
		return nil
	}
	for _, r := range res.Routers {
		var b bytes.Buffer
		if err := sc.note.Execute(&b, r); err != nil {
			return fmt.Errorf("note: %w", err)
		}
		res.Notes = append(res.Notes, b.String())
	}
	return nil
}

// checkExpectations checks run's expectations on res, notes the outcome in
// res, and returns the failures. With replaced routers, expectations about
// routers that did not run are skipped (and noted).
func checkExpectations(res *Result, run ScenarioRun, replaced bool) ([]string, error) {
	xs, err := run.expectations()
	if err != nil || len(xs) == 0 {
		return nil, err
	}
	var failed []string
	held, skipped, noSim := 0, 0, 0
	for _, x := range xs {
		var row *RouterResult
		for i := range res.Routers {
			if res.Routers[i].Name == x.Router {
				row = &res.Routers[i]
			}
		}
		switch {
		case row == nil && replaced:
			skipped++
		case row == nil:
			failed = append(failed, fmt.Sprintf("%s: no such router in the result", x))
		case math.IsNaN(failMetrics[x.Metric](row)) && strings.HasPrefix(x.Metric, "sim_") && row.Hash != nil && row.Hash.Sim == nil:
			noSim++
		default:
			if v := failMetrics[x.Metric](row); compare(v, x.Op, x.Value) {
				held++
			} else {
				failed = append(failed, fmt.Sprintf("expected %s, got %g", x, v))
			}
		}
	}
	note := fmt.Sprintf("Expectations of scenario %s: %d of %d held", run.Name, held, len(xs)-skipped-noSim)
	if skipped > 0 {
		note += fmt.Sprintf(" (%d skipped: their routers did not run)", skipped)
	}
	if noSim > 0 {
		note += fmt.Sprintf(" (%d on the simulator skipped: it did not run)", noSim)
	}
	res.Notes = append(res.Notes, note+".")
	for _, f := range failed {
		res.Notes = append(res.Notes, "Expectation failed: "+f+".")
	}
	return failed, nil
}

// simTables runs the simulator's own experiment for sc's Predict kind.
func (sc *Scenario) simTables(ctx context.Context, res *Result, replicas int, o PredictOptions) ([]*sim.Table, error) {
	base := sim.Options{Base: sim.Config{Seed: res.Config.Seed, Trials: max(o.Trials, 4), Replicas: replicas,
		WritesPerSec: res.Config.WriteRate}}
	var rep *sim.Report
	var err error
	switch sc.Predict {
	case PredictFailover:
		rep, err = sim.Failover(ctx, base)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return rep.Tables, nil
}
