package sim

import (
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// staggeredConfig is the lab's hash world: three replicas at standing
// delays 0, 1 and 2 s, one read queue per session.
func staggeredConfig() Config {
	m := WorldIdentical.Model()
	m.ReplicaDelay = []time.Duration{0, time.Second, 2 * time.Second}
	return Config{Seed: 3, Trials: 4, Replicas: 3, WritesPerSec: 100, Sessions: 300, Workload: WorkloadQueue,
		Duration: 15 * time.Second, GapMax: time.Second, Model: &m}
}

func hashSpecs(modes ...hashroute.Mode) []RouterSpec {
	out := make([]RouterSpec, len(modes))
	for i, m := range modes {
		out[i] = spec(router.Policy{Kind: router.PolicyAffinity, HashMode: m})
	}
	return out
}

func sumHash(rs []Result) (h HashCauses, mr int64) {
	for _, r := range rs {
		for c := range hashroute.NumCauses {
			h.Moves[c] += r.Hash.Moves[c]
			h.Sessions[c] += r.Hash.Sessions[c]
			h.MR[c] += r.Hash.MR[c]
		}
		mr += r.MR
	}
	return h, mr
}

// TestHashCausesStaggered: in a staggered world the simulator shows the
// edge cases as the lab must: needless moves and violations for
// available-only (a replica down) and rebalance-override (load drift),
// exact zeros for full-list, chosen-down violations for both when the
// chosen replica itself is down, and every violation attributed.
func TestHashCausesStaggered(t *testing.T) {
	ctx := context.Background()
	down := staggeredConfig()
	down.Faults = []Fault{{Replica: 0, From: 5 * time.Second, To: 10 * time.Second}}
	drift := staggeredConfig()
	drift.Drifts = []Drift{{Replica: 0, InFlight: 40, From: 5 * time.Second, To: 10 * time.Second}}
	for _, c := range []struct {
		name  string
		cfg   Config
		modes []hashroute.Mode
	}{
		{"down", down, []hashroute.Mode{hashroute.FullList, hashroute.AvailableOnly}},
		{"drift", drift, []hashroute.Mode{hashroute.FullList, hashroute.RebalanceOverride}},
	} {
		res, err := Run(ctx, c.cfg, hashSpecs(c.modes...), nil)
		if err != nil {
			t.Fatal(err)
		}
		full, fullMR := sumHash(res[0])
		broken, brokenMR := sumHash(res[1])
		t.Logf("%s: full-list %+v (MR %d); %v %+v (MR %d)", c.name, full, fullMR, c.modes[1], broken, brokenMR)
		if full.Moves[hashroute.CauseNeedless] != 0 || full.MR[hashroute.CauseNeedless] != 0 {
			t.Errorf("%s: full-list needless %d moves, %d MR", c.name, full.Moves[hashroute.CauseNeedless], full.MR[hashroute.CauseNeedless])
		}
		if broken.MR[hashroute.CauseNeedless] < 20 {
			t.Errorf("%s: %v needless MR %d, want tens", c.name, c.modes[1], broken.MR[hashroute.CauseNeedless])
		}
		for _, h := range []HashCauses{full, broken} {
			if h.MR[hashroute.CauseNone] != 0 {
				t.Errorf("%s: %d violations with no move and no outage", c.name, h.MR[hashroute.CauseNone])
			}
		}
		var tot int64
		for _, n := range broken.MR {
			tot += n
		}
		if tot != brokenMR {
			t.Errorf("%s: %d violations attributed of %d", c.name, tot, brokenMR)
		}
		if c.name == "down" {
			a, b := full.MR[hashroute.CauseChosenDown], broken.MR[hashroute.CauseChosenDown]
			if a < 20 || b < 20 || a > 2*b || b > 2*a {
				t.Errorf("chosen-down MR %d (full-list) and %d (available-only): want tens, similar", a, b)
			}
		}
	}
}
