package sim

import (
	"context"
	"time"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// hashScenario is one fleet condition of the hashing experiment.
type hashScenario struct {
	name   string
	faults []Fault
	drifts []Drift
}

func hashScenarios(n int) []hashScenario {
	down := min(2, n-1)
	return []hashScenario{
		{name: "stable"},
		{name: "replica down 4–10 s", faults: []Fault{{Replica: down, From: 4 * time.Second, To: 10 * time.Second}}},
		{name: "load drift 4–10 s", drifts: []Drift{{Replica: 0, InFlight: 12, From: 4 * time.Second, To: 10 * time.Second}}},
	}
}

// Hashing is the `hashing` experiment: the affinity router's three hashroute
// modes under a stable fleet, a replica outage and outside load on one
// replica (Shopify's two edge cases).
func Hashing(ctx context.Context, o Options) (*Report, error) {
	base := o.base(8)
	if base.Replicas == 0 {
		base.Replicas = 5
	}
	scs := hashScenarios(base.Replicas)
	modes := hashroute.Modes()
	cfgs, res, pools, err := sweep(ctx, len(scs), func(i int) Config {
		c := base
		c.Faults, c.Drifts = scs[i].faults, scs[i].drifts
		return c
	}, func(int) []RouterSpec {
		sp := make([]RouterSpec, len(modes))
		for k, m := range modes {
			sp[k] = spec(router.Policy{Kind: router.PolicyAffinity, HashMode: m})
		}
		return sp
	}, o.Progress)
	if err != nil {
		return nil, err
	}
	t := &Table{Name: "hashing", Title: "Affinity hashing modes: monotonic reads under trouble", Columns: []Column{
		{"scenario", "fleet", 0}, {"mode", "hash mode", 0}, {"mr_pct", "MR viol. %", 3}, {"ryw_pct", "RYW viol. %", 2},
		{"moved_pct", "moved off first choice %", 2}, {"primary_pct", "primary %", 1}}}
	t.Brief = []BriefColumn{{Key: "scenario"}, {Key: "mode"}, {Key: "mr_pct", Header: "MR %", SD: true}, {Key: "ryw_pct", Header: "RYW %"},
		{Key: "moved_pct", Header: "moved %"}, {Key: "primary_pct"}}
	for i, sc := range scs {
		for k, m := range modes {
			rs := res[i][k]
			t.Rows = append(t.Rows, []Cell{L(sc.name), L(m.String()), S(stat(rs, fMR)), S(stat(rs, fRYW)),
				S(stat(rs, func(r *Result) float64 { return pct(r.HashMoved, r.Reads) })), S(stat(rs, fPrim))})
		}
	}
	t.Notes = []string{setupNote(&cfgs[0]), lagNote(&cfgs[0], res[0][0], pools[0]),
		"A down replica is unselectable and its applier pauses; load drift adds 12 outside reads in flight on replica 0 (rebalance-override moves reads when a replica's in-flight share exceeds 1.5× its weight share)."}
	return &Report{Tables: []*Table{t}}, nil
}
