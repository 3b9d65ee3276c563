package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

// fakeTopo is an in-memory topology: a failover retires the primary and
// promotes the first replica, one replica fewer, as compose's does.
type fakeTopo struct {
	id       int
	primary  compose.Node
	replicas []compose.Node
	epoch    uint64
	closed   bool
}

func newFakeTopo(id, replicas int) *fakeTopo {
	t := &fakeTopo{id: id, primary: compose.Node{Name: "primary", Role: compose.RolePrimary}, epoch: 1}
	for i := 1; i <= replicas; i++ {
		t.replicas = append(t.replicas, compose.Node{Name: fmt.Sprintf("replica%d", i), Role: compose.RoleReplica})
	}
	return t
}

func (t *fakeTopo) Primary() compose.Node                                      { return t.primary }
func (t *fakeTopo) Replicas() []compose.Node                                   { return slices.Clone(t.replicas) }
func (t *fakeTopo) Epoch() uint64                                              { return t.epoch }
func (t *fakeTopo) StopApplier(context.Context, string) error                  { return nil }
func (t *fakeTopo) StartApplier(context.Context, string) error                 { return nil }
func (t *fakeTopo) SetApplyDelay(context.Context, string, time.Duration) error { return nil }
func (t *fakeTopo) HeavyTransaction(context.Context, int) (compose.HeavyResult, error) {
	return compose.HeavyResult{}, nil
}

func (t *fakeTopo) failover() compose.FailoverResult {
	old := t.primary.Name
	t.primary, t.replicas = t.replicas[0], t.replicas[1:]
	t.primary.Role = compose.RolePrimary
	t.epoch++
	return compose.FailoverResult{OldPrimary: old, NewPrimary: t.primary.Name, Epoch: t.epoch}
}

// fakeSource opens 1 + 3 fake topologies; Open fails from failFrom on
// (0: never).
type fakeSource struct {
	opened   []*fakeTopo
	closes   int
	failFrom int
}

func (s *fakeSource) Open(context.Context) (Topology, error) {
	if s.failFrom > 0 && len(s.opened)+1 >= s.failFrom {
		return nil, errors.New("no root filesystem")
	}
	t := newFakeTopo(len(s.opened)+1, 3)
	s.opened = append(s.opened, t)
	return t, nil
}

func (s *fakeSource) Close(_ context.Context, t Topology) error {
	t.(*fakeTopo).closed = true
	s.closes++
	return nil
}

// fakeRun stands in for RunScenario without MySQL: the same replica check,
// then one result per run, a failover for each failover event or chaos,
// an error for a scenario named in fail, and a failed expectation for one
// named in miss.
func fakeRun(fail, miss string, ran *[]string) runScenarioFunc {
	return func(_ context.Context, topo Topology, sc *Scenario, _ ScenarioOptions) ([]*Result, []string, error) {
		if _, err := sc.replicaNames(topo); err != nil {
			return nil, nil, err
		}
		ft := topo.(*fakeTopo)
		if ft.closed {
			return nil, nil, fmt.Errorf("%s ran on a closed topology", sc.Name)
		}
		*ran = append(*ran, fmt.Sprintf("%s@%d", sc.Name, ft.id))
		var out []*Result
		for _, r := range sc.runs() {
			res := &Result{Experiment: r.Name}
			for _, e := range r.Events {
				if e.Kind == EvFailover {
					res.Failovers = append(res.Failovers, ft.failover())
				}
			}
			if sc.Chaos != nil {
				res.Failovers = append(res.Failovers, ft.failover())
			}
			if sc.Name == fail {
				return out, nil, fmt.Errorf("lab scenario %s: the primary went away", r.Name)
			}
			out = append(out, res)
		}
		if sc.Name == miss {
			return out, []string{sc.Name + ": expected ryw == 0, got 3"}, nil
		}
		return out, nil, nil
	}
}

func builtins(t *testing.T, names ...string) []*Scenario {
	t.Helper()
	var out []*Scenario
	for _, n := range names {
		sc, err := BuiltinScenario(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sc)
	}
	return out
}

// TestRunScenariosFreshTopologyAfterFailover: `lab scenario all` runs
// chaos and failover (each promotes a replica) before hash-down, which
// needs 3 replicas; on one shared 1 + 3 topology hash-down was refused
// ("needs at least 3 replicas, have 1") and every result was thrown away.
// Each scenario now gets the topology it declares: a fresh one after a
// failover, the same one otherwise.
func TestRunScenariosFreshTopologyAfterFailover(t *testing.T) {
	scs := builtins(t, "chaos", "failover", "hash-down", "gated", "routers")
	src := &fakeSource{}
	var ran []string
	var started, ended []string
	each := func(sc *Scenario, o *ScenarioOptions) func() {
		started = append(started, sc.Name)
		return func() { ended = append(ended, sc.Name) }
	}
	outs, err := runScenarios(context.Background(), src, scs, ScenarioOptions{}, each, fakeRun("", "", &ran))
	if err != nil {
		t.Fatal(err)
	}
	results, failed, err := CollectScenarios(outs)
	if err != nil || len(failed) != 0 {
		t.Fatalf("errors %v, failed %v", err, failed)
	}
	// chaos on the first, failover on a fresh one, hash-down on a third
	// (the failover spent the second), gated and routers on that third.
	if want := []string{"chaos@1", "failover@2", "hash-down@3", "gated@3", "routers@3"}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	var opened []bool
	for _, oc := range outs {
		opened = append(opened, oc.Opened)
	}
	if want := []bool{true, true, true, false, false}; !slices.Equal(opened, want) {
		t.Errorf("opened %v, want %v", opened, want)
	}
	if len(results) != 5 || src.closes != 3 || len(src.opened) != 3 {
		t.Errorf("%d results, %d topologies opened, %d closed", len(results), len(src.opened), src.closes)
	}
	for _, ft := range src.opened {
		if !ft.closed {
			t.Errorf("topology %d left open", ft.id)
		}
	}
	if !slices.Equal(started, ended) || len(started) != 5 {
		t.Errorf("each: started %v, ended %v", started, ended)
	}
}

// TestRunScenariosKeepResultsPastAFailure: a scenario that fails with an
// error, or whose expectation fails, does not discard the others' results
// (they once were: the first error returned nothing); the scenario after
// an error gets a fresh topology (the failed one's faults may stand).
func TestRunScenariosKeepResultsPastAFailure(t *testing.T) {
	scs := builtins(t, "gated", "failover", "routers", "replica-down-hash")
	src := &fakeSource{}
	var ran []string
	outs, err := runScenarios(context.Background(), src, scs, ScenarioOptions{}, nil, fakeRun("failover", "routers", &ran))
	if err != nil {
		t.Fatal(err)
	}
	results, failed, err := CollectScenarios(outs)
	var names []string
	for _, r := range results {
		names = append(names, r.Experiment)
	}
	if want := []string{"gated", "routers", "replica-down-hash"}; !slices.Equal(names, want) {
		t.Errorf("results %v, want %v", names, want)
	}
	if err == nil || !strings.Contains(err.Error(), "lab scenario failover: the primary went away") || errors.Is(err, ErrNotRun) {
		t.Errorf("error %v, want failover's", err)
	}
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "routers: ") {
		t.Errorf("failed %v, want routers' expectation", failed)
	}
	if want := []string{"gated@1", "failover@1", "routers@2", "replica-down-hash@2"}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
}

// TestRunScenariosOpenFails: when no topology can be opened for a
// scenario, it and the ones after it are not run (ErrNotRun), and the
// results before stay.
func TestRunScenariosOpenFails(t *testing.T) {
	scs := builtins(t, "routers", "chaos", "gated", "hash-down")
	src := &fakeSource{failFrom: 2}
	var ran []string
	outs, err := runScenarios(context.Background(), src, scs, ScenarioOptions{}, nil, fakeRun("", "", &ran))
	if err != nil {
		t.Fatal(err)
	}
	results, _, err := CollectScenarios(outs)
	if len(results) != 2 || !slices.Equal(ran, []string{"routers@1", "chaos@1"}) {
		t.Errorf("results %d, ran %v", len(results), ran)
	}
	for _, oc := range outs[2:] {
		if !errors.Is(oc.Err, ErrNotRun) || !strings.Contains(oc.Err.Error(), "no root filesystem") {
			t.Errorf("%s: %v, want not run", oc.Scenario.Name, oc.Err)
		}
	}
	if err == nil || src.closes != 1 {
		t.Errorf("error %v, %d closed", err, src.closes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	outs, _ = runScenarios(ctx, &fakeSource{}, scs[:1], ScenarioOptions{}, nil, fakeRun("", "", &ran))
	if !errors.Is(outs[0].Err, ErrNotRun) || !errors.Is(outs[0].Err, context.Canceled) {
		t.Errorf("cancelled: %v", outs[0].Err)
	}
}
