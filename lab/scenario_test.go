package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// experimentNames are the built-in scenarios `causallab lab` names.
var experimentNames = []string{"routers", "gated", "failover", "hash-down", "hash-flap", "hash-drift", "chaos"}

// TestBuiltinScenariosParse: the embedded folders are lab/scenarios, each
// parses, and every experiment name is one of them.
func TestBuiltinScenariosParse(t *testing.T) {
	names, err := ScenarioNames(Builtin())
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := ScenarioNames(os.DirFS("scenarios"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, onDisk) {
		t.Fatalf("embedded %v, lab/scenarios %v", names, onDisk)
	}
	for _, n := range experimentNames {
		if !slices.Contains(names, n) {
			t.Errorf("no built-in scenario %q among %v", n, names)
		}
	}
	for _, n := range names {
		sc, err := BuiltinScenario(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if sc.Name != n || sc.Description == "" {
			t.Errorf("%s: name %q, description %q", n, sc.Name, sc.Description)
		}
		if err := sc.Check(ScenarioOptions{}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// oldRouter is a router as lab/experiments.go built it before the
// experiments became scenario folders.
func oldRouter(name string, p router.Policy, tok TokenKind) RouterSpec {
	if name == "" {
		name = p.String()
	}
	return RouterSpec{Name: name, Policy: p, Token: tok}
}

func affinity(m hashroute.Mode) RouterSpec {
	return oldRouter("", router.Policy{Kind: router.PolicyAffinity, HashMode: m}, TokenGTID)
}

// TestBuiltinScenariosKeepTheExperiments pins what each built-in scenario
// runs to what the Go experiments (lab/experiments.go, before they became
// folders) ran: the same routers under the same names, condition,
// workload, events, simulator part and notes.
func TestBuiltinScenariosKeepTheExperiments(t *testing.T) {
	reps := []string{"replica1", "replica2", "replica3"}
	wait := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: router.DefaultWaitBudget}
	epoch := wait
	epoch.CheckEpoch = true
	type run struct {
		name    string
		routers []RouterSpec
		events  []Event
	}
	for _, c := range []struct {
		name      string
		opts      ScenarioOptions
		cond      string
		duration  time.Duration
		rpw       int
		gapMin    time.Duration
		predict   PredictKind
		runs      []run
		minReps   int
		noteCheck func(RouterResult) string // the old note for a row; nil: none
	}{
		{name: "routers", cond: "straggler+heavy", duration: 20 * time.Second, rpw: 3, gapMin: 15 * time.Millisecond, predict: PredictFit,
			runs: []run{{name: "routers", routers: DefaultRouters()}}},
		{name: "gated", cond: "apply-delay", duration: 15 * time.Second, rpw: 1, gapMin: 5 * time.Millisecond, predict: PredictFit,
			runs: []run{{name: "gated", routers: []RouterSpec{
				oldRouter("naive", router.Policy{Kind: router.PolicyAny}, TokenGTID),
				oldRouter("gated", router.Policy{Kind: router.PolicyTokenRYW}, TokenGTID)}}},
			noteCheck: func(r RouterResult) string {
				return fmt.Sprintf("%s: %.2f%% of served reads stale (lacked the session's own write); %.1f%% served from replicas.",
					r.Name, r.RYWPct, pct(r.Outcomes[router.OutReplica.String()]+r.Outcomes[router.OutStale.String()], r.Served))
			}},
		{name: "failover", cond: "apply-delay", duration: 16 * time.Second, rpw: 3, gapMin: 15 * time.Millisecond, predict: PredictFailover, minReps: 2,
			runs: []run{{name: "failover", routers: []RouterSpec{
				oldRouter("lsn-token", wait, TokenLSN), oldRouter("gtid-token", wait, TokenGTID), oldRouter("epoch-token", epoch, TokenGTID)},
				events: []Event{{At: 8 * time.Second, Kind: EvFailover, Node: "replica1"}}}},
			noteCheck: func(r RouterResult) string {
				return fmt.Sprintf("%s: %d reads served without the session's own write (silently stale), %d timed out, %d failed fast (%v).",
					r.Name, r.RYW, r.Outcomes[router.OutTimedOut.String()], r.Outcomes[router.OutFailedFast.String()], r.Reasons)
			}},
		{name: "failover", opts: ScenarioOptions{Config: Config{Duration: 10 * time.Second}, Nodes: map[EventKind]string{EvFailover: "replica3"}},
			cond: "apply-delay", duration: 10 * time.Second, rpw: 3, gapMin: 15 * time.Millisecond, predict: PredictFailover, minReps: 2,
			runs: []run{{name: "failover", routers: []RouterSpec{
				oldRouter("lsn-token", wait, TokenLSN), oldRouter("gtid-token", wait, TokenGTID), oldRouter("epoch-token", epoch, TokenGTID)},
				events: []Event{{At: 5 * time.Second, Kind: EvFailover, Node: "replica3"}}}}},
		{name: "chaos", cond: "identical", duration: 60 * time.Second, rpw: 3, gapMin: 15 * time.Millisecond, predict: "", minReps: 2,
			runs: []run{{name: "chaos", routers: []RouterSpec{oldRouter("", router.Policy{Kind: router.PolicyTokenRYWMR, CheckEpoch: true}, TokenGTID)},
				events: ChaosEvents(1, 60*time.Second, 3*time.Second, reps)}},
			noteCheck: func(r RouterResult) string {
				var n int64
				for _, c := range r.Outcomes {
					n += c
				}
				return fmt.Sprintf("%s: %d reads, %d accounted for by outcome, RYW %d, MR %d, declared losses %d, outcomes %v.",
					r.Name, r.Reads, n, r.RYW, r.MR, r.DeclaredLosses, r.Outcomes)
			}},
		{name: "chaos", opts: ScenarioOptions{ChaosEvery: 5 * time.Second, Config: Config{Seed: 9}},
			cond: "identical", duration: 60 * time.Second, rpw: 3, gapMin: 15 * time.Millisecond, minReps: 2,
			runs: []run{{name: "chaos", routers: []RouterSpec{oldRouter("", router.Policy{Kind: router.PolicyTokenRYWMR, CheckEpoch: true}, TokenGTID)},
				events: ChaosEvents(9, 60*time.Second, 5*time.Second, reps)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc, err := BuiltinScenario(c.name)
			if err != nil {
				t.Fatal(err)
			}
			if sc.Predict != c.predict || sc.minReplicas() != c.minReps {
				t.Errorf("predict %q, min replicas %d; want %q, %d", sc.Predict, sc.minReplicas(), c.predict, c.minReps)
			}
			runs := sc.runs()
			if len(runs) != len(c.runs) {
				t.Fatalf("%d runs, want %d", len(runs), len(c.runs))
			}
			for i, r := range runs {
				cfg, err := sc.runConfig(r, c.opts, reps)
				if err != nil {
					t.Fatal(err)
				}
				if err := cfg.validate(); err != nil {
					t.Fatal(err)
				}
				want := c.runs[i]
				wantCfg := Config{Routers: slices.Clone(want.routers)}
				if err := wantCfg.validate(); err != nil {
					t.Fatal(err)
				}
				want.routers = wantCfg.Routers
				if r.Name != want.name {
					t.Errorf("run %d named %q, want %q", i, r.Name, want.name)
				}
				if !reflect.DeepEqual(cfg.Routers, want.routers) {
					t.Errorf("%s: routers\n%+v\nwant\n%+v", r.Name, cfg.Routers, want.routers)
				}
				if cfg.Condition.String() != c.cond || cfg.Duration != c.duration || cfg.Sessions != 2000 || cfg.WriteRate != 200 ||
					cfg.ReadsPerWrite != c.rpw || cfg.GapMin != c.gapMin || cfg.GapMax != 4*time.Second {
					t.Errorf("%s: condition %s, %v, %d sessions, %v w/s, %d reads/write, gaps %v-%v", r.Name, cfg.Condition, cfg.Duration,
						cfg.Sessions, cfg.WriteRate, cfg.ReadsPerWrite, cfg.GapMin, cfg.GapMax)
				}
				if !reflect.DeepEqual(cfg.Condition.Events, want.events) {
					t.Errorf("%s: events\n%v\nwant\n%v", r.Name, cfg.Condition.Events, want.events)
				}
			}
			row := RouterResult{Name: "x", Reads: 10, Served: 8, RYW: 2, MR: 1, RYWPct: 25, SessionsMoved: 3, ReplicaSwitches: 4, DeclaredLosses: 1,
				Outcomes: map[string]int64{"replica": 5, "primary": 2, "stale": 1, "timed-out": 1, "failed-fast": 1}, Reasons: map[string]int64{"routed": 7, "timed-out": 1}}
			res := &Result{Routers: []RouterResult{row}}
			if err := sc.addNotes(res); err != nil {
				t.Fatal(err)
			}
			switch {
			case c.noteCheck == nil && len(res.Notes) > 0 && c.opts.Config.Duration == 0 && c.opts.ChaosEvery == 0:
				t.Errorf("unexpected notes %q", res.Notes)
			case c.noteCheck != nil && (len(res.Notes) != 1 || res.Notes[0] != c.noteCheck(row)):
				t.Errorf("note\n%q\nwant\n%q", res.Notes, c.noteCheck(row))
			}
		})
	}
}

// TestScenariosFromADirectory: a user's folder of scenario folders, a
// folder given as a path, "all", and the errors for what is not there.
func TestScenariosFromADirectory(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("mine/scenario.yaml", "description: mine\nrouters: [any]\nexpect: {any: {ryw: 0}}\n")
	write("other/scenario.yaml", "description: other\ncondition: heavy\nrouters: [token-ryw]\n")
	write("notes/readme.txt", "not a scenario")
	write("stray.yaml", "routers: [any]\n")
	write("broken/scenario.yaml", "routers: [nope]\n")

	names, err := ScenarioNames(os.DirFS(root))
	if err != nil || !slices.Equal(names, []string{"broken", "mine", "other"}) {
		t.Fatalf("names %v, %v", names, err)
	}
	sc, err := LoadScenario(filepath.Join(root, "mine"))
	if err != nil || sc.Name != "mine" || sc.Description != "mine" {
		t.Fatalf("LoadScenario = %+v, %v", sc, err)
	}
	if _, err := LoadScenario(filepath.Join(root, "broken")); err == nil || !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "nope") {
		t.Errorf("broken scenario: %v", err)
	}
	if _, err := LoadScenario(filepath.Join(root, "notes")); err == nil || !strings.Contains(err.Error(), "notes") {
		t.Errorf("folder without scenario.yaml: %v", err)
	}

	catalog := os.DirFS(root)
	scs, err := ResolveScenarios(catalog, "other", filepath.Join(root, "mine"))
	if err != nil || len(scs) != 2 || scs[0].Name != "other" || scs[1].Name != "mine" {
		t.Fatalf("resolve by name and by path: %v, %v", scs, err)
	}
	if _, err := ResolveScenarios(catalog, "all"); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("all with a broken folder: %v", err)
	}
	_, err = ResolveScenarios(catalog, "routers")
	if err == nil || !strings.Contains(err.Error(), `no scenario "routers" (have broken, mine, other`) {
		t.Errorf("unknown name: %v", err)
	}
	for _, bad := range []string{"../mine", "/etc", ""} {
		if _, err := ResolveScenarios(catalog, bad); err == nil {
			t.Errorf("%q resolved", bad)
		}
	}
	// The built-in catalog resolves outside the repository: its names,
	// and all of them. A folder given as "." is named after itself.
	t.Chdir(filepath.Join(root, "mine"))
	if scs, err := ResolveScenarios(Builtin(), "."); err != nil || scs[0].Name != "mine" {
		t.Errorf(`"." resolved to %v, %v`, scs, err)
	}
	scs, err = ResolveScenarios(Builtin(), "routers", "all")
	if err != nil || scs[0].Name != "routers" || len(scs) < 1+len(experimentNames) {
		t.Fatalf("built-in from %s: %d scenarios, %v", root, len(scs), err)
	}
}

func TestParseScenarioErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"routers: [any]\nbogus: 1\n", "field bogus not found"},
		{"routers: []\n", "no routers"},
		{"routers: [nope]\n", "nope"},
		{"routers: [any]\ncondition: wet\n", "unknown condition"},
		{"routers: [any]\nexpect: {other: {ryw: 0}}\n", "not among routers"},
		{"routers: [any]\nexpect: {any: {speed: 0}}\n", "unknown metric"},
		{"routers: [any]\nexpect: {any: {ryw: lots}}\n", "not a number"},
		{"routers: [any]\nevents: [{at: 1s, kind: explode, node: r}]\n", `event kind "explode" unknown (want one of kill, pause`},
		{"routers: [any]\nevents: [{at: 1s, kind: stall, node: r}]\n", `"stall" unknown`},
		{"routers: [any]\nevents: [{at: -1s, kind: kill, node: r}]\n", "negative time"},
		{"routers: [any]\nevents: [{at: 1s, kind: kill}]\n", "needs a node"},
		{"routers: [any]\nevents: [{at: 1s, kind: heavy, node: r}]\n", "takes no node"},
		{"routers: [any]\nevents: [{at: 1s, kind: kill, node: r, replica: 1}]\n", "not both"},
		{"routers: [any]\nevents: [{at: 1s, kind: kill, replica: -1}]\n", "replica -1"},
		{"routers: [any]\nevents: [{at: 1s, kind: drift, replica: 1}]\n", "drift: load 0"},
		{"routers: [{name: a, policy: any, speed: 3}]\n", `router field "speed" unknown`},
		{"routers: [{name: a, policy: any, token: scn}]\n", `token "scn" unknown`},
		{"routers: [[any]]\n", "a router is a policy text or {name, policy, token}"},
		{"routers: [any, any]\n", ""}, // accepted by the parser; Check refuses the duplicate
		{"routers: [any]\npredict: oracle\n", `predict "oracle" unknown`},
		{"routers: [any]\nchaos: {every: 0s}\n", "chaos every 0s"},
		{"routers: [any]\nduration: -5s\n", "negative workload value"},
		{"routers: [any]\nruns: [{name: a, routers: [any]}]\n", "belong to each run"},
		{"runs: [{name: a, routers: [any]}, {name: a, routers: [any]}]\n", `run name "a" empty or repeated`},
		{"runs: [{routers: [any]}]\n", `run name "" empty`},
		{"runs: [{name: a}]\n", "no routers"},
		{"runs: [{name: a, routers: [any], expect: {b: {ryw: 0}}}]\n", "not among routers"},
		{"routers: [any]\nnote: '{{.Nope}}'\n", "can't evaluate field Nope"},
		{"routers: [any]\nnote: '{{outcomes . \"timed_out\"}}'\n", `outcome "timed_out" unknown`},
		{"routers: [any]\nnote: '{{.Name'\n", "note:"},
	} {
		sc, err := ParseScenario([]byte(c.in))
		if c.want == "" {
			if err != nil {
				t.Errorf("%q: %v", c.in, err)
			} else if err := sc.Check(ScenarioOptions{}); err == nil || !strings.Contains(err.Error(), `two routers named "any"`) {
				t.Errorf("%q: Check = %v", c.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.in, err, c.want)
		}
	}
	sc, err := ParseScenario([]byte("routers: [any, \"lsn:token-wait\", {name: mine, policy: window(1s), token: lsn}]\nexpect: {any: {ryw: \">0\", mr: \"<= 3\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	xs, _ := sc.Expectations()
	got := []string{xs[0].String(), xs[1].String()}
	if want := []string{"any: mr <= 3", "any: ryw > 0"}; !slices.Equal(got, want) {
		t.Errorf("expectations %v, want %v", got, want)
	}
	specs, _ := sc.runs()[0].specs()
	if specs[1].Token != TokenLSN || specs[1].Name != "lsn:token-wait" || specs[1].Policy.Kind != router.PolicyTokenWait {
		t.Errorf("lsn router parsed as %+v", specs[1])
	}
	if specs[2].Token != TokenLSN || specs[2].Name != "mine" || specs[2].Policy.Window != time.Second {
		t.Errorf("mapped router parsed as %+v", specs[2])
	}
}

// TestScenarioCheckRefusesBadOptions: the options a command passes are
// validated with the scenario before any topology is started.
func TestScenarioCheckRefusesBadOptions(t *testing.T) {
	fo, err := BuiltinScenario("failover")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    ScenarioOptions
		want string
	}{
		{ScenarioOptions{Config: Config{Via: "carrier-pigeon"}}, `unknown path "carrier-pigeon"`},
		{ScenarioOptions{Config: Config{Mode: "sideways"}}, `unknown mode "sideways"`},
		{ScenarioOptions{Config: Config{Sessions: 2}}, "3 routers for 2 sessions"},
	} {
		if err := fo.Check(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o.Config, err, c.want)
		}
	}
	if err := fo.Check(ScenarioOptions{Config: Config{Routers: DefaultRouters()}}); err != nil {
		t.Errorf("replaced routers: %v", err)
	}
}

// oneReplica is a topology of a primary and one replica that must not be
// used: RunScenario refuses it before touching it.
type oneReplica struct{ Faults }

func (oneReplica) Replicas() []compose.Node { return []compose.Node{{Name: "replica1"}} }

func TestRunScenarioNeedsItsReplicas(t *testing.T) {
	for _, n := range []string{"failover", "chaos"} {
		sc, err := BuiltinScenario(n)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = RunScenario(context.Background(), oneReplica{}, sc, ScenarioOptions{})
		if err == nil || !strings.Contains(err.Error(), "needs at least 2 replicas, have 1") {
			t.Errorf("%s on one replica: %v", n, err)
		}
	}
	sc, err := ParseScenario([]byte("routers: [any]\nevents: [{at: 1s, kind: kill, replica: 3}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := RunScenario(context.Background(), oneReplica{}, sc, ScenarioOptions{}); err == nil || !strings.Contains(err.Error(), "needs at least 3 replicas") {
		t.Errorf("event on replica 3: %v", err)
	}
}

// TestCheckExpectations: held, failed and skipped expectations, and the
// notes they leave.
func TestCheckExpectations(t *testing.T) {
	sc, err := ParseScenario([]byte("routers: [any, token-ryw]\nexpect: {any: {ryw: \">0\"}, token-ryw: {ryw: 0, mr: 0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sc.Name = "mine"
	run := sc.runs()[0]
	res := &Result{Routers: []RouterResult{{Name: "any", RYW: 3}, {Name: "token-ryw", RYW: 0, MR: 2}}}
	failed, err := checkExpectations(res, run, false)
	if err != nil || !slices.Equal(failed, []string{"expected token-ryw: mr == 0, got 2"}) {
		t.Fatalf("failed %q, %v", failed, err)
	}
	if want := []string{"Expectations of scenario mine: 2 of 3 held.", "Expectation failed: expected token-ryw: mr == 0, got 2."}; !slices.Equal(res.Notes, want) {
		t.Errorf("notes %q", res.Notes)
	}
	res = &Result{Routers: []RouterResult{{Name: "any", RYW: 3}}}
	if failed, _ := checkExpectations(res, run, false); len(failed) != 2 || !strings.Contains(failed[0], "no such router") {
		t.Errorf("absent router: %q", failed)
	}
	res = &Result{Routers: []RouterResult{{Name: "any", RYW: 3}}}
	if failed, _ := checkExpectations(res, run, true); len(failed) != 0 || res.Notes[0] != "Expectations of scenario mine: 1 of 1 held (2 skipped: their routers did not run)." {
		t.Errorf("replaced routers: %q, notes %q", failed, res.Notes)
	}
}

// TestResultMerge: counts add, rows and notes append, the lag is the one
// of both parts' samples together, heavy time is weighted.
func TestResultMerge(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	part := func(name string, reads int64, lags []time.Duration, unseen int, heavy int64, heavyMs float64) *Result {
		r := &Result{Routers: []RouterResult{{Name: name, Reads: reads}}, MeasureSeconds: 10, Polls: 5, PollErrors: 1, Stalls: 2,
			HeavyTxns: heavy, HeavyMeanMs: heavyMs, FaultErrors: 1, Notes: []string{name + " note"},
			Failovers: []compose.FailoverResult{{NewPrimary: name}}}
		r.lagSamples, r.lagUnseen = lags, unseen
		r.Lag = lagStats(lags, unseen)
		return r
	}
	a := part("a", 100, ms(1, 2, 3, 100), 1, 1, 300)
	b := part("b", 300, ms(4, 5, 6, 7, 8, 9), 2, 3, 100)
	res := &Result{Experiment: "routers", Condition: "heavy", Mode: "sequential", Via: "router", Config: ConfigSummary{Sessions: 7}, OfferedWrites: 9}
	res.Merge(a)
	res.Merge(b)
	if res.Experiment != "routers" || res.Condition != "heavy" || res.Config.Sessions != 7 || res.OfferedWrites != 9 {
		t.Errorf("identity changed: %+v", res)
	}
	if len(res.Routers) != 2 || res.Routers[1].Name != "b" || !slices.Equal(res.Notes, []string{"a note", "b note"}) || len(res.Failovers) != 2 {
		t.Errorf("rows %v, notes %q, failovers %v", res.Routers, res.Notes, res.Failovers)
	}
	if res.MeasureSeconds != 20 || res.Polls != 10 || res.PollErrors != 2 || res.Stalls != 4 || res.HeavyTxns != 4 || res.FaultErrors != 2 {
		t.Errorf("counts %+v", res)
	}
	if res.ReadsPerSec != 20 || res.HeavyMeanMs != 150 {
		t.Errorf("reads/s %v, heavy mean %v", res.ReadsPerSec, res.HeavyMeanMs)
	}
	if want := lagStats(ms(1, 2, 3, 100, 4, 5, 6, 7, 8, 9), 3); res.Lag != want {
		t.Errorf("lag %+v, want %+v", res.Lag, want)
	}

	// Parts read back from JSON carry no samples: the mean is weighted,
	// the quantiles are upper bounds.
	a2, b2 := *a, *b
	a2.lagSamples, b2.lagSamples = nil, nil
	res = &Result{}
	res.Merge(&a2)
	res.Merge(&b2)
	if res.Lag.Samples != 10 || res.Lag.Unseen != 3 || res.Lag.MaxMs != 100 || res.Lag.P99Ms != max(a.Lag.P99Ms, b.Lag.P99Ms) ||
		res.Lag.MeanMs != (a.Lag.MeanMs*4+b.Lag.MeanMs*6)/10 {
		t.Errorf("lag without samples %+v", res.Lag)
	}
	if res.Experiment != "" || res.Routers[0].Name != "a" {
		t.Errorf("merge into empty: %+v", res)
	}
}

// TestScenarios runs every built-in scenario on real MySQL with short
// durations (events scaled) and checks its expectations, every read's
// outcome, and what each experiment shows beyond its expectations. A
// scenario with a failover (or chaos, which has one) runs on its own
// topology (the failover retires the primary).
func TestScenarios(t *testing.T) {
	composetest.Need(t, topo)
	names, err := ScenarioNames(Builtin())
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string]func(t *testing.T, res []*Result){
		"routers": func(t *testing.T, res []*Result) {
			for _, r := range res[0].Routers {
				if r.Prediction == nil {
					t.Errorf("%s: no simulator prediction", r.Name)
				}
			}
			// The all-writes check sees other sessions' writes missing
			// where nothing protects them (global's zero is its
			// expectation in the scenario).
			if r := row(t, res[0], "any"); r.AllWrites == 0 {
				t.Errorf("any: no read lacked another session's acknowledged write under lag %+v", res[0].Lag)
			}
			// affinity(full-list) keeps a session on one replica only while
			// that replica looks up: a failed position poll (an overloaded
			// machine) makes the router reselect, which may legitimately go
			// backwards.
			if r := row(t, res[0], "affinity(full-list)"); r.MR != 0 {
				if res[0].PollErrors == 0 {
					t.Errorf("affinity(full-list): %d MR violations with every replica up", r.MR)
				} else {
					t.Logf("affinity(full-list): %d MR violations after %d failed polls (replicas looked down)", r.MR, res[0].PollErrors)
				}
			}
		},
		"failover": func(t *testing.T, res []*Result) {
			if len(res[0].Failovers) != 1 {
				t.Fatalf("%d failovers", len(res[0].Failovers))
			}
			for _, r := range res[0].Routers {
				t.Logf("%s: mr %d (hidden loss %d), non_prefix %d of %d judged before the failover",
					r.Name, r.MR, r.MRHiddenLoss, r.NonPrefix, r.NonPrefixJudged)
			}
			if lost := res[0].Failovers[0].LostGTIDs; lost != "" {
				if r := row(t, res[0], "epoch-token"); r.Outcomes[router.OutFailedFast.String()] == 0 {
					t.Errorf("epoch-token: writes were lost (%s) but no read failed fast", lost)
				}
				if r := row(t, res[0], "lsn-token"); r.RYW == 0 {
					t.Logf("lsn-token: writes were lost but no read was served without them")
				}
			} else {
				t.Logf("no write was lost in this failover")
			}
		},
		"chaos": func(t *testing.T, res []*Result) {
			if len(res[0].Failovers) != 1 {
				t.Errorf("%d failovers", len(res[0].Failovers))
			}
		},
	}
	for _, n := range names {
		sc, err := BuiltinScenario(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(sc.Name, func(t *testing.T) {
			on := Topology(topo)
			own := sc.Chaos != nil
			for _, r := range sc.runs() {
				for _, e := range r.Events {
					own = own || e.Kind == EvFailover
				}
			}
			if own {
				on = composetest.Start(t, compose.Config{Replicas: 2})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			o := ScenarioOptions{Config: Config{Duration: 8 * time.Second, Sessions: 400}, NoPredict: n != "routers"}
			if sc.Predict == PredictHashing {
				// The hash folders run as `lab hash` runs them: their
				// expectations (tens of needless violations) are sized for
				// their own workload, and they assert the simulator's zeros.
				o = ScenarioOptions{}
			}
			if sc.Name == "hash-down" {
				// Its needless violations need the staggered world at
				// the kill, which 200 writes/s on a loaded machine
				// erases (TestLabHashViaProxy): the lighter world.
				o = hashDownLight(ViaRouter)
			}
			results, failed, err := RunScenario(ctx, on, sc, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, res := range results {
				logResult(t, res)
				for i := range res.Routers {
					r := &res.Routers[i]
					accounted(t, r)
					if r.Hash != nil && r.Hash.MR.Total() != float64(r.MR) {
						t.Errorf("%s: MR %d, attributed %+v", r.Name, r.MR, r.Hash.MR)
					}
				}
				if IsHashRun(res) {
					t.Logf("\n%s", HashSummary([]*Result{res}))
				}
			}
			for _, f := range failed {
				t.Error(f)
			}
			if x := extra[n]; x != nil {
				x(t, results)
			}
		})
	}
}

// FuzzParseScenario: any input gives a scenario or an error, never a panic;
// an accepted scenario has routers and parseable expectations.
func FuzzParseScenario(f *testing.F) {
	for _, s := range []string{
		"routers: [any]\n",
		"condition: straggler+heavy\nrouters: [any, token-ryw-mr]\nexpect: {token-ryw-mr: {ryw: 0, mr: 0}, any: {ryw: \">0\"}}\n",
		"routers: [\"lsn:token-wait\"]\nevents: [{at: 1s, kind: failover, node: replica1}]\n",
		"routers: [{name: a, policy: any}]\nnote: '{{.Name}} {{outcomes . \"replica\"}}'\n",
		"runs: [{name: a, routers: [any], events: [{at: 1s, kind: drift, replica: 1, load: 3}]}]\nchaos: {every: 1s}\n",
		"routers: [any]\nexpect: {any: {ryw: \"<=\"}}\n",
		"- 1\n- 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := ParseScenario(b)
		if err != nil {
			return
		}
		for _, r := range sc.runs() {
			if len(r.Routers) == 0 {
				t.Fatalf("accepted a run without routers: %q", b)
			}
		}
		if _, err := sc.Expectations(); err != nil {
			t.Fatalf("accepted, then expectations fail: %v", err)
		}
		if err := sc.addNotes(&Result{Routers: []RouterResult{{Name: "x"}}}); err != nil {
			t.Fatalf("accepted, then the note fails: %v", err)
		}
	})
}
