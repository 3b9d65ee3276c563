package live_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
	"github.com/causallab/causallab/sim"
)

// equivUUID is the one source of the mapped positions: LogPos n of the
// simulator becomes the GTID set equivUUID:1-n (empty for 0).
const equivUUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"

// logPosToSet maps LogPos n to the set equivUUID:1-n (empty for 0), each set
// parsed once.
func logPosToSet() func(sim.LogPos) gtid.Set {
	sets := map[sim.LogPos]gtid.Set{}
	return func(p sim.LogPos) gtid.Set {
		if p == 0 {
			return gtid.Set{}
		}
		s, ok := sets[p]
		if !ok {
			s = gtid.MustParse(equivUUID + ":1-" + strconv.FormatUint(uint64(p), 10))
			sets[p] = s
		}
		return s
	}
}

type mapSource struct {
	pos map[string]gtid.Set
	up  map[string]bool
}

var _ live.PositionSource[gtid.Set] = (*mapSource)(nil)

func (m *mapSource) Position(n string) (gtid.Set, bool) { return m.pos[n], m.up[n] }
func (m *mapSource) WaitFor(ctx context.Context, n string, want gtid.Set) error {
	return fmt.Errorf("equivalence test: WaitFor is never called by the decision path")
}

// TestSimLiveEquivalence feeds the decisions of simulated trials, recorded
// by sim.RecordDecisions (the simulator's own call of router.Decide on
// LogPos positions), to the live router's decision path, live.DecideLive
// (View building from a PositionSource, then Decide on gtid.Set positions),
// with every LogPos n mapped to the one-UUID set uuid:1-n and every
// replica's position and health served by an in-memory PositionSource. The
// decisions must be identical, the views built must agree (Applied, Up,
// Behind, InFlight), and the live side's fallback bucket, fed the same
// sequence, must track the simulator's. PolicyGlobal's target (Input.Global)
// and the defer fallbacks (Policy.Defer, CapDefer) are replayed too; a
// deferral's retry estimate is the live router's own (its commit log),
// compared apart when the live side has no log. The +skip-futile runs
// give the live side a commit log holding every simulated commit at its
// exact time: the futile-wait test (Lag, from CommitLog.Lag at the
// decision, and NeedAge, from CommitLog.Age) must skip the same waits as
// the simulator's, some waits must be skipped and some made, and a
// deferral's retry estimate must be the simulator's.
func TestSimLiveEquivalence(t *testing.T) {
	pos := logPosToSet()
	type run struct {
		name string
		cfg  sim.Config
		pol  router.Policy
	}
	base := sim.Config{Seed: 11, Trials: 1, Replicas: 5, Duration: 2 * time.Second, Sessions: 300, World: sim.WorldStraggler,
		Poll: 5 * time.Millisecond, Faults: []sim.Fault{{Replica: 1, From: 500 * time.Millisecond, To: 900 * time.Millisecond}},
		Drifts: []sim.Drift{{Replica: 0, InFlight: 40, From: 200 * time.Millisecond, To: 1200 * time.Millisecond}}}
	// A slow world (every replica about 25 ms behind) for the token
	// policies: reads right after a write find no replica qualifying, so
	// waits, fallbacks and, with a small cap, the cap behaviours happen.
	slow := base
	slow.Model = &sim.ReplicaModel{ShipDelay: 25 * time.Millisecond, ShipJitter: 10 * time.Millisecond, ApplyCost: 150 * time.Microsecond}
	slowPolled := slow
	slowPolled.Poll = 5 * time.Millisecond
	capped := func(b router.CapBehavior) sim.Config {
		c := slow
		c.Cap = router.Cap{PerSecond: 20, Burst: 5, Behavior: b, ExtraWait: 50 * time.Millisecond}
		return c
	}
	// A lagging world (every replica about 100 ms behind, give or take
	// 60 ms) for +skip-futile: a 30 ms budget wait on a replica whose lag
	// is far past the need's age is futile and skipped, one on a replica
	// about to catch up is not. The live side gets a commit log holding
	// every commit at its exact time (the simulator's NeedAge and Lag are
	// exact too).
	lagging := base
	lagging.Model = &sim.ReplicaModel{ShipDelay: 100 * time.Millisecond, ShipJitter: 60 * time.Millisecond, ApplyCost: 150 * time.Microsecond}
	runs := []run{
		{"any", base, router.Policy{Kind: router.PolicyAny}},
		{"affinity-full-list", base, router.Policy{Kind: router.PolicyAffinity, HashMode: hashroute.FullList}},
		{"affinity-available-only", base, router.Policy{Kind: router.PolicyAffinity, HashMode: hashroute.AvailableOnly}},
		{"affinity-rebalance-override", base, router.Policy{Kind: router.PolicyAffinity, HashMode: hashroute.RebalanceOverride}},
		{"window", base, router.Policy{Kind: router.PolicyWindow, Window: 100 * time.Millisecond}},
		{"token-ryw-straggler", base, router.Policy{Kind: router.PolicyTokenRYW}},
		{"token-ryw", slow, router.Policy{Kind: router.PolicyTokenRYW}},
		{"token-ryw-mr", slow, router.Policy{Kind: router.PolicyTokenRYWMR}},
		{"token-wait", slow, router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 30 * time.Millisecond}},
		{"token-ryw-mr-cap-fail-fast", capped(router.CapFailFast), router.Policy{Kind: router.PolicyTokenRYWMR}},
		{"token-ryw-mr-cap-serve-stale", capped(router.CapServeStale), router.Policy{Kind: router.PolicyTokenRYWMR}},
		{"token-wait-cap-wait-longer", capped(router.CapWaitLonger), router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 30 * time.Millisecond}},
		{"global", slow, router.Policy{Kind: router.PolicyGlobal, WaitBudget: 30 * time.Millisecond}},
		{"global-polled", slowPolled, router.Policy{Kind: router.PolicyGlobal, WaitBudget: 30 * time.Millisecond}},
		{"global+defer", slow, router.Policy{Kind: router.PolicyGlobal, WaitBudget: 20 * time.Millisecond, Defer: true}},
		{"token-ryw+defer", slowPolled, router.Policy{Kind: router.PolicyTokenRYW, Defer: true}},
		{"token-wait+defer", slow, router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 20 * time.Millisecond, Defer: true}},
		{"token-ryw-mr-cap-defer", capped(router.CapDefer), router.Policy{Kind: router.PolicyTokenRYWMR}},
		{"token-wait+skip-futile", lagging, router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 30 * time.Millisecond, SkipFutile: true}},
		{"token-wait+skip-futile+defer", lagging, router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 30 * time.Millisecond, SkipFutile: true, Defer: true}},
		{"global+skip-futile", lagging, router.Policy{Kind: router.PolicyGlobal, WaitBudget: 30 * time.Millisecond, SkipFutile: true}},
	}
	seen := map[router.Action]int{}
	reasons := map[router.Reason]int{}
	for _, rc := range runs {
		t.Run(rc.name, func(t *testing.T) {
			nr := 5
			if rc.cfg.Replicas > 0 {
				nr = rc.cfg.Replicas
			}
			nodes := make([]live.Node, nr)
			servers := make([]hashroute.Server, nr)
			for i := range nodes {
				// Names as the simulator's hash table names its replicas.
				nodes[i] = live.Node{Name: "r" + strconv.Itoa(i), Addr: "sim:" + strconv.Itoa(i)}
				servers[i] = hashroute.Server{Name: nodes[i].Name, Weight: 1}
			}
			table, err := hashroute.NewTable(servers)
			if err != nil {
				t.Fatal(err)
			}
			src := &mapSource{pos: map[string]gtid.Set{}, up: map[string]bool{}}
			st := &live.LiveState[gtid.Set]{Flavor: live.MySQL{}, Primary: live.Node{Name: "primary", Addr: "sim:p"}, Replicas: nodes, Table: table,
				DownUntil: map[string]time.Time{}, InFlight: map[string]int{}}
			var bucket router.Bucket
			// +skip-futile: the live router's commit log, fed before each
			// decision with every commit up to the sim's primary
			// position, at its commit time (resolution 0: one entry per
			// record, none dropped).
			const logSize = 1 << 16
			var logged sim.LogPos
			if rc.pol.SkipFutile {
				st.Commits = live.NewCommitLog[gtid.Set](logSize, 0)
			}
			epoch0 := time.Unix(0, 0)
			n, simFutile, liveFutile, futileWaits, retryLogged := 0, 0, 0, 0, 0
			_, err = sim.RecordDecisions(context.Background(), rc.cfg, sim.RouterSpec{Name: rc.name, Policy: rc.pol}, 0, func(r *sim.DecisionRecord) {
				if t.Failed() {
					return
				}
				n++
				if len(r.View.Replicas) != nr {
					t.Fatalf("sim view has %d replicas, want %d", len(r.View.Replicas), nr)
				}
				if !r.View.PrimaryKnown {
					t.Fatal("sim view without a known primary: DecideLive always knows it")
				}
				// The live router's state and source, from the sim's view.
				st.Epoch, st.PrimaryPos = r.View.Epoch, pos(r.View.Primary)
				clear(st.InFlight)
				for i, rep := range r.View.Replicas {
					src.pos[nodes[i].Name], src.up[nodes[i].Name] = pos(rep.Applied), rep.Up
					if rep.InFlight != 0 {
						st.InFlight[nodes[i].Name] = rep.InFlight
					}
				}
				src.pos["primary"], src.up["primary"] = pos(r.View.Primary), true
				ses := router.Session[gtid.Set]{HasToken: r.Session.HasToken, Epoch: r.Session.Epoch,
					SeenEpoch: r.Session.SeenEpoch, HasSeen: r.Session.HasSeen, LastWriteAt: r.Session.LastWriteAt,
					AffinityKey: r.Session.AffinityKey}
				if ses.HasToken {
					ses.Token = pos(r.Session.Token)
				}
				if ses.HasSeen {
					ses.Seen = pos(r.Session.Seen)
				}
				if st.Commits != nil {
					for ; logged < r.View.Primary; logged++ {
						at, ok := r.CommitTime(logged + 1)
						if !ok {
							t.Fatalf("decision %d: record %d of the primary's position %d has no commit time by %v", n, logged+1, r.View.Primary, r.Now)
						}
						st.Commits.Record(epoch0.Add(at), pos(logged+1))
					}
					if st.Commits.Len() >= logSize {
						t.Fatalf("commit log full (%d entries): its Lag would be a lower bound, not the simulator's exact one", logSize)
					}
				}
				pol, cp := r.Policy, r.Cap
				if bucket != r.Bucket {
					t.Fatalf("decision %d: live bucket %v tokens, sim %v", n, bucket.Tokens(), r.Bucket.Tokens())
				}
				req := live.LiveRequest[gtid.Set]{Session: &ses, Policy: &pol, Cap: &cp, Wall: epoch0.Add(r.Now),
					Now: r.Now, Rand: r.Rand, Waited: r.Waited, GlobalKnown: r.GlobalKnown}
				if r.GlobalKnown {
					req.Global = pos(r.Global)
				}
				d, v, _ := live.DecideLive(st, src, &req, &bucket)
				if d.Action == router.ActDefer && st.Commits == nil {
					// The retry estimate is the live commit log's (none
					// here: the floor), not the simulator's lag model.
					if d.RetryAfter != router.MinRetryAfter {
						t.Fatalf("decision %d: retry after %v without a commit log, want %v", n, d.RetryAfter, router.MinRetryAfter)
					}
					d.RetryAfter = r.Decision.RetryAfter
				}
				for i, rep := range r.View.Replicas {
					lv := v.Replicas[i]
					if lv.Up != rep.Up || lv.Behind != rep.Behind || lv.InFlight != rep.InFlight || lv.Applied.Count() != uint64(rep.Applied) {
						t.Fatalf("decision %d replica %d: live view %+v (count %d), sim %+v", n, i, lv, lv.Applied.Count(), rep)
					}
				}
				if d != r.Decision {
					t.Fatalf("decision %d at %v: live %+v, sim %+v\nsession %+v\nview %+v\nsim need age %v (known %v); live view %+v", n, r.Now, d, r.Decision, r.Session, r.View, r.NeedAge, r.NeedAgeKnown, v.Replicas)
				}
				seen[d.Action]++
				reasons[d.Reason]++
				if r.Decision.Reason == router.ReasonWaitFutile {
					simFutile++
				}
				if d.Reason == router.ReasonWaitFutile {
					liveFutile++
				}
				if d.Action == router.ActDefer && st.Commits != nil && d.RetryAfter > router.MinRetryAfter {
					retryLogged++
				}
				if d.Action == router.ActWait && d.Reason == router.ReasonNoReplicaQualifies && rc.pol.SkipFutile {
					futileWaits++
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("no decision recorded")
			}
			if rc.pol.SkipFutile {
				// The runs must exercise the test both ways: waits skipped
				// (by the simulator and by the live path alike) and waits
				// the estimate let through.
				if simFutile == 0 || liveFutile == 0 {
					t.Fatalf("%s: %d futile skips in the simulator, %d live: the lagging world must make some waits futile", rc.name, simFutile, liveFutile)
				}
				if futileWaits == 0 {
					t.Fatalf("%s: no budget wait let through: the lagging world must leave some waits worth making", rc.name)
				}
				if rc.pol.Defer && retryLogged == 0 {
					t.Fatalf("%s: no deferral with a retry estimate above the floor: the commit log's Lag was not compared", rc.name)
				}
				t.Logf("%d futile skips (sim %d, live %d), %d budget waits made, %d deferrals timed by the log", liveFutile, simFutile, liveFutile, futileWaits, retryLogged)
			}
			t.Logf("%d decisions identical", n)
		})
	}
	t.Logf("actions %v; reasons %v", seen, reasons)
	for _, a := range router.Actions() {
		if seen[a] == 0 {
			t.Errorf("no %v decision among the replayed ones: the runs do not cover that action", a)
		}
	}
	for _, r := range []router.Reason{router.ReasonWaitBudgetSpent, router.ReasonNoReplicaQualifies, router.ReasonCapExceeded, router.ReasonWaitFutile} {
		if reasons[r] == 0 {
			t.Errorf("no %v decision among the replayed ones", r)
		}
	}
}
