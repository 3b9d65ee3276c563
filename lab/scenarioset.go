package lab

import (
	"context"
	"errors"
	"fmt"
)

// TopologySource gives RunScenarios the topologies its scenarios run on.
type TopologySource interface {
	// Open starts a topology (or attaches to one). RunScenarios calls it
	// before the first scenario and again whenever the last one is spent.
	Open(ctx context.Context) (Topology, error)
	// Close releases what Open returned: removes a topology Open started,
	// leaves an attached one running.
	Close(ctx context.Context, t Topology) error
}

// ScenarioOutcome is one scenario's part of RunScenarios.
type ScenarioOutcome struct {
	Scenario *Scenario
	// Results are its runs that finished: all of them unless Err.
	Results []*Result
	// Failed are its expectations that did not hold.
	Failed []string
	// Err says why it did not finish (nil: it did). A scenario that was
	// never started (ErrNotRun) has no results.
	Err error
	// Opened is true when it ran on a topology opened for it, false when
	// on the one the scenario before it left intact.
	Opened bool
}

// ErrNotRun marks the outcome of a scenario RunScenarios did not start:
// no topology could be opened for it, or the context was done.
var ErrNotRun = errors.New("not run")

// runScenarioFunc is RunScenario's signature (a test's fake runs none).
type runScenarioFunc func(ctx context.Context, topo Topology, sc *Scenario, o ScenarioOptions) ([]*Result, []string, error)

// RunScenarios runs scs one after the other, each on a topology of the
// shape it declares, and returns every scenario's outcome in order: one
// that fails (an error, or an expectation) does not stop the others, and
// the results of every run that finished are kept.
//
// The first scenario gets a topology from src.Open; the next one reuses it
// while it is intact and gets a fresh one (the spent one closed first)
// after a scenario that failed over (its primary retired and a replica
// promoted, so one replica fewer: failover, chaos; or the topology's epoch
// moved), after one that failed
// with an error (its faults may still stand), or when it has fewer
// replicas than the next one needs. The last topology is closed at the
// end. A topology that could not be opened leaves the scenarios from there
// on not run (ErrNotRun). The returned error joins the errors of closing
// topologies; the scenarios' own are in their outcomes.
//
// each, when not nil, is called before each scenario with a copy of o to
// adjust (a progress callback per scenario); the function it returns, when
// not nil, is called when the scenario ends.
func RunScenarios(ctx context.Context, src TopologySource, scs []*Scenario, o ScenarioOptions,
	each func(sc *Scenario, o *ScenarioOptions) (done func())) ([]ScenarioOutcome, error) {
	return runScenarios(ctx, src, scs, o, each, RunScenario)
}

func runScenarios(ctx context.Context, src TopologySource, scs []*Scenario, o ScenarioOptions,
	each func(*Scenario, *ScenarioOptions) func(), run runScenarioFunc) ([]ScenarioOutcome, error) {
	var topo Topology
	var epoch uint64 // topo's when opened
	var closeErrs []error
	release := func() {
		if topo == nil {
			return
		}
		if err := src.Close(context.WithoutCancel(ctx), topo); err != nil {
			closeErrs = append(closeErrs, err)
		}
		topo = nil
	}
	out := make([]ScenarioOutcome, 0, len(scs))
	var stop error // why the scenarios from here on are not run
	for _, sc := range scs {
		oc := ScenarioOutcome{Scenario: sc}
		if stop == nil {
			stop = ctx.Err()
		}
		if stop == nil && (topo == nil || len(topo.Replicas()) < sc.minReplicas()) {
			release()
			t, err := src.Open(ctx)
			if err != nil {
				stop = fmt.Errorf("opening a topology: %w", err)
			} else {
				topo, epoch, oc.Opened = t, t.Epoch(), true
			}
		}
		if stop != nil {
			oc.Err = fmt.Errorf("lab scenario %s: %w (%w)", sc.Name, ErrNotRun, stop)
			out = append(out, oc)
			continue
		}
		so := o
		var done func()
		if each != nil {
			done = each(sc, &so)
		}
		oc.Results, oc.Failed, oc.Err = run(ctx, topo, sc, so)
		if done != nil {
			done()
		}
		if oc.Err != nil || topo.Epoch() != epoch || failedOver(sc, oc.Results) {
			release() // spent: the next scenario gets a fresh one
		}
		out = append(out, oc)
	}
	release()
	return out, errors.Join(closeErrs...)
}

// failedOver reports whether sc failed its topology over: it declares a
// failover (or chaos, which has one), or one of its results records one
// (besides, RunScenarios sees a topology's epoch move).
func failedOver(sc *Scenario, results []*Result) bool {
	if sc.Chaos != nil {
		return true
	}
	for _, r := range sc.runs() {
		for _, e := range r.Events {
			if e.Kind == EvFailover {
				return true
			}
		}
	}
	for _, res := range results {
		if len(res.Failovers) > 0 {
			return true
		}
	}
	return false
}

// CollectScenarios flattens outcomes: every finished run's result in
// order, every failed expectation, and the scenarios' errors joined (nil
// when every scenario finished). A caller prints the results whatever the
// error, then exits 1 on the error, else 3 on a failed expectation.
func CollectScenarios(outcomes []ScenarioOutcome) (results []*Result, failed []string, err error) {
	var errs []error
	for _, oc := range outcomes {
		results = append(results, oc.Results...)
		failed = append(failed, oc.Failed...)
		if oc.Err != nil {
			errs = append(errs, oc.Err)
		}
	}
	return results, failed, errors.Join(errs...)
}
