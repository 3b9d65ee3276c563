package lab

import (
	"bytes"
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

func affinitySpec(m hashroute.Mode) *RouterSpec {
	return &RouterSpec{Name: "affinity(" + m.String() + ")", Policy: router.Policy{Kind: router.PolicyAffinity, HashMode: m}}
}

// TestHashAccFullListNeverNeedless is the lab's side of the structural
// zero: whatever the outages and the ground truth's verdicts, the lab's
// attribution of full-list reads (as the live router routes them, through
// hashroute) never charges a needless move or violation, and every
// violation is charged to some cause.
func TestHashAccFullListNeverNeedless(t *testing.T) {
	names := []string{"replica1", "replica2", "replica3"}
	tab, err := hashTable(names, []int{1, 2, 1})
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		down := &downLog{}
		acc := newHashAcc(affinitySpec(hashroute.FullList), names, 20, down)
		up := tab.AllUp()
		var mr int64
		for step := 1; step <= 300; step++ {
			at := time.Duration(step) * 10 * time.Millisecond
			if rapid.IntRange(0, 19).Draw(t, "flip") == 0 {
				k := rapid.IntRange(0, 2).Draw(t, "k")
				if up.Up(k) {
					up = up.Without(k)
					down.begin(EvKill, names[k], 0, at)
				} else {
					up = up.With(k)
					down.end(EvKill, names[k], at)
				}
			}
			s := rapid.IntRange(0, 19).Draw(t, "session")
			inflight := rapid.SliceOfN(rapid.IntRange(0, 50), 3, 3).Draw(t, "inflight")
			i, why := tab.SelectID("session-"+string(rune('a'+s)), hashroute.FullList, up, inflight)
			r := &Read{Session: s, Outcome: router.OutReplica, Done: at, HashReason: why}
			if i >= 0 {
				r.Node = names[i]
			} else {
				r.Node, r.Outcome = "primary", router.OutPrimary
			}
			v := Verdict{MR: rapid.Bool().Draw(t, "mr")}
			if v.MR {
				mr++
			}
			acc.observe(s, r, v)
		}
		h := acc.result()
		if h.Moves.Needless != 0 || h.SessionsMoved.Needless != 0 || h.MR.Needless != 0 {
			t.Fatalf("full-list charged needless: %+v", h)
		}
		if h.MR.Total() != float64(mr) {
			t.Fatalf("%v violations attributed of %d", h.MR.Total(), mr)
		}
	})
}

// TestHashAccStories: the lab's attribution on reads as a run gives them:
// an available-only remap is needless, the down replica's sessions are
// chosen-down, a return after a restart is came-back (from the event
// log), bins follow the answer times.
func TestHashAccStories(t *testing.T) {
	names := []string{"replica1", "replica2", "replica3"}
	down := &downLog{}
	acc := newHashAcc(affinitySpec(hashroute.AvailableOnly), names, 3, down)
	read := func(s int, node string, why hashroute.Reason, at time.Duration, mr bool) {
		acc.observe(s, &Read{Session: s, Outcome: router.OutReplica, Node: node, HashReason: why, Done: at}, Verdict{MR: mr})
	}
	read(0, "replica1", hashroute.FirstChoice, 1*time.Second, false)
	read(1, "replica2", hashroute.FirstChoice, 1*time.Second, false)
	down.begin(EvKill, "replica1", 0, 2*time.Second)
	read(0, "replica3", hashroute.Reselected, 3*time.Second, true) // its own replica down
	read(1, "replica3", hashroute.Remapped, 3*time.Second, true)   // the edge case
	down.end(EvKill, "replica1", 4*time.Second)
	read(0, "replica1", hashroute.FirstChoice, 5*time.Second, true) // back on a restarted replica
	read(1, "replica2", hashroute.FirstChoice, 5*time.Second, false)
	acc.observe(2, &Read{Session: 2, Outcome: router.OutError}, Verdict{}) // not served: ignored
	h := acc.result()
	want := CauseCounts{ChosenDown: 1, Needless: 2, CameBack: 1}
	if h.Moves != want {
		t.Errorf("moves %+v, want %+v", h.Moves, want)
	}
	if h.SessionsMoved != (CauseCounts{ChosenDown: 1, Needless: 1, CameBack: 1}) {
		t.Errorf("sessions %+v", h.SessionsMoved)
	}
	if h.MR != (CauseCounts{ChosenDown: 1, Needless: 1, CameBack: 1}) {
		t.Errorf("MR %+v", h.MR)
	}
	if len(h.MRBin) != 6 || h.MRBin[3].Total() != 2 || h.MRBin[5].CameBack != 1 {
		t.Errorf("MR bins %+v", h.MRBin)
	}
	if acc := newHashAcc(&RouterSpec{Policy: router.Policy{Kind: router.PolicyTokenRYW}}, names, 1, down); acc != nil {
		t.Errorf("a token router got an attribution")
	}
}

func TestDownLog(t *testing.T) {
	var l downLog
	l.begin(EvKill, "r1", 0, 2*time.Second)
	l.begin(EvDrift, "r2", 40, 2*time.Second)
	if !l.downBetween("r1", time.Second, 3*time.Second) || !l.downBetween("r1", 5*time.Second, 6*time.Second) {
		t.Errorf("an open outage is not seen")
	}
	l.end(EvKill, "r1", 4*time.Second)
	l.end(EvDrift, "r2", 7*time.Second)
	for _, c := range []struct {
		node     string
		from, to time.Duration
		want     bool
	}{
		{"r1", 0, time.Second, false},
		{"r1", time.Second, 2500 * time.Millisecond, true},
		{"r1", 3 * time.Second, 5 * time.Second, true},
		{"r1", 4 * time.Second, 5 * time.Second, false},
		{"r2", 0, 9 * time.Second, false}, // a drift is load, not an outage
	} {
		if got := l.downBetween(c.node, c.from, c.to); got != c.want {
			t.Errorf("%s down in (%v, %v]: %v, want %v", c.node, c.from, c.to, got, c.want)
		}
	}
	w := l.windows(10 * time.Second)
	if len(w) != 2 || w[0] != (FaultWindow{Kind: "kill", Node: "r1", FromSec: 2, ToSec: 4}) || w[1].Load != 40 || w[1].ToSec != 7 {
		t.Errorf("windows %+v", w)
	}
}

func hashResultsFixture() []*Result {
	mk := func(mode string, needless float64, sim bool) RouterResult {
		h := &HashResult{Mode: mode, SessionsMoved: CauseCounts{ChosenDown: 68, Needless: needless, CameBack: 53},
			MR: CauseCounts{ChosenDown: 210, Needless: needless * 2, CameBack: 5}, Reads: 4500, RYW: 3944}
		if sim {
			s := *h
			s.MR.Needless, s.MR.CameBack = needless*1.5, 0.4
			h.Sim = &s
		}
		return RouterResult{Name: "affinity(" + mode + ")", MR: int64(h.MR.Total()), Hash: h}
	}
	return []*Result{
		{Experiment: "hash-down", Via: "router", Condition: "staggered", Weights: []int{1, 1, 1},
			ReplicaLag: []ReplicaLag{{Node: "replica1", P10Ms: 3}, {Node: "replica2", P10Ms: 2700}},
			Faults:     []FaultWindow{{Kind: "kill", Node: "replica1", FromSec: 5, ToSec: 12}},
			Routers:    []RouterResult{mk("full-list", 0, true), mk("available-only", 86, true)}},
		{Experiment: "hash-drift", Via: "router", Faults: []FaultWindow{{Kind: "drift", Node: "replica1", Load: 40, FromSec: 5, ToSec: 10}},
			Routers: []RouterResult{mk("full-list", 0, false), mk("rebalance-override", 173, false)}},
	}
}

// TestHashSummaryFits: the compact table fits an 80-column terminal, has
// a simulator row under each lab row that has one, prints zero only for
// exact zeros, and its notes carry the legend and the fault windows.
func TestHashSummaryFits(t *testing.T) {
	res := hashResultsFixture()
	var b bytes.Buffer
	if err := WriteHash(&b, res, sim.FormatMarkdown); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, l := range strings.Split(HashSummary(res), "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("%d columns: %q", n, l)
		}
	}
	if got := strings.Count(out, "  simulator"); got != 2 {
		t.Errorf("%d simulator rows, want 2:\n%s", got, out)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"<1", "hash-down  full-list", "replica1 kill 5.0–12.0 s", "replica1 drift +40 in flight 5.0–10.0 s", "down  the session's own", "weights 1:1:1",
		"No simulator row for 2 of its 2 modes"} {
		if !strings.Contains(out, want) && !strings.Contains(flat, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := WriteHash(&b, res, sim.FormatCSV); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+6 || recs[0][0] != "run" || recs[2][2] != "sim" || recs[2][7] != "0" {
		t.Errorf("csv %v", recs)
	}
}

// TestHashPlot draws a picture of each fixture, PNG and SVG
// (CAUSALLAB_TEST_OUT=DIR keeps them, to look at).
func TestHashPlot(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("CAUSALLAB_TEST_OUT"); d != "" {
		dir = d
	}
	for _, res := range hashResultsFixture() {
		res.Config.DurationSec = 15
		for i := range res.Routers {
			h := res.Routers[i].Hash
			h.MovesBin = make([]CauseCounts, 16)
			h.MRBin = make([]CauseCounts, 16)
			h.MovesBin[5].ChosenDown, h.MRBin[5].Needless = 30, float64(i)*12
			if h.Sim != nil {
				h.Sim.MovesBin, h.Sim.MRBin = h.MovesBin, h.MRBin
			}
		}
		base := filepath.Join(dir, "lab-"+res.Experiment)
		if err := WriteHashPlot(base, res); err != nil {
			t.Fatal(err)
		}
		for _, ext := range []string{".png", ".svg"} {
			if !isFile(base + ext) {
				t.Errorf("no %s", base+ext)
			}
		}
	}
}

// TestHashMetrics: every attribution metric parses as a --fail-on rule,
// reads its row, and has no value on a row without an attribution.
func TestHashMetrics(t *testing.T) {
	res := hashResultsFixture()[0]
	row := &res.Routers[1]
	for _, name := range hashMetricNames() {
		if _, err := ParseFailOn(name + ">0"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if v := failMetrics[name](&RouterResult{}); !math.IsNaN(v) {
			t.Errorf("%s on a token row: %v, want no value", name, v)
		}
	}
	if v := failMetrics["mr_needless"](row); v != 172 {
		t.Errorf("mr_needless %v", v)
	}
	if v := failMetrics["sim_mr_needless"](row); v != 129 {
		t.Errorf("sim_mr_needless %v", v)
	}
	if f := Failures(res, mustRules(t, "affinity(full-list):mr_needless>0,affinity(available-only):mr_needless>0")); len(f) != 1 {
		t.Errorf("failures %v", f)
	}
}

func mustRules(t *testing.T, s string) []FailRule {
	t.Helper()
	r, err := ParseFailOn(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHashScenariosExpectTheStructure: the built-in hash scenarios assert
// in CI what the issue asks: full-list's exact zeros where a mode could be
// needless, tens of needless violations for the broken modes, chosen-down
// violations for both in the outages, nothing unexplained, and the
// simulator agreeing on the zeros.
func TestHashScenariosExpectTheStructure(t *testing.T) {
	want := map[string][]string{
		"hash-down": {"affinity(full-list): moved_needless == 0", "affinity(full-list): mr_needless == 0", "affinity(full-list): sim_mr_needless == 0",
			"affinity(available-only): mr_needless >= 10", "affinity(available-only): sim_mr_needless > 0",
			"affinity(full-list): mr_chosen_down >= 10", "affinity(available-only): mr_chosen_down >= 10", "affinity(full-list): mr_unexplained == 0"},
		"hash-flap": {"affinity(full-list): mr_needless == 0", "affinity(full-list): mr_chosen_down >= 10", "affinity(available-only): mr_chosen_down >= 10",
			"affinity(full-list): sim_mr_chosen_down > 0"},
		"hash-drift": {"affinity(full-list): moved_needless == 0", "affinity(full-list): mr_needless == 0", "affinity(full-list): sim_mr_needless == 0",
			"affinity(rebalance-override): mr_needless >= 10", "affinity(rebalance-override): sim_mr_needless > 0"},
	}
	for name, ws := range want {
		sc, err := BuiltinScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		xs, err := sc.Expectations()
		if err != nil {
			t.Fatal(err)
		}
		var have []string
		for _, x := range xs {
			have = append(have, x.String())
		}
		for _, w := range ws {
			found := false
			for _, h := range have {
				found = found || h == w
			}
			if !found {
				t.Errorf("%s: no expectation %q among %v", name, w, have)
			}
		}
		if sc.Predict != PredictHashing || sc.conditionText() != CondStaggered || len(sc.Weights) != 3 {
			t.Errorf("%s: predict %q, condition %q, weights %v", name, sc.Predict, sc.conditionText(), sc.Weights)
		}
	}
}

// TestCheckExpectationsSkipsMissingSimulator: --no-sim skips the
// expectations on the simulator, and says so; a lab expectation still
// counts.
func TestCheckExpectationsSkipsMissingSimulator(t *testing.T) {
	res := hashResultsFixture()[1] // no simulator
	run := ScenarioRun{Name: "x", Routers: []ScenarioRouter{{Name: "affinity(full-list)"}},
		Expect: map[string]map[string]string{"affinity(full-list)": {"sim_mr_needless": "0", "mr_needless": "0"}}}
	fails, err := checkExpectations(res, run, false)
	if err != nil || len(fails) != 0 {
		t.Fatalf("fails %v, %v", fails, err)
	}
	if n := res.Notes[len(res.Notes)-1]; !strings.Contains(n, "1 of 1 held") || !strings.Contains(n, "1 on the simulator skipped") {
		t.Errorf("note %q", n)
	}
}

// TestFailuresAll: a rule is checked on every run of an invocation, and
// naming a router no run has is one failure.
func TestFailuresAll(t *testing.T) {
	res := hashResultsFixture()
	f := FailuresAll(res, mustRules(t, "affinity(available-only):mr_needless>0,affinity(nope):mr>0,mr_needless>1000"))
	if len(f) != 2 || !strings.HasPrefix(f[0], "hash-down: affinity(available-only): mr_needless = 172") || f[1] != "rule affinity(nope):mr>0 names no router of this run" {
		t.Errorf("%q", f)
	}
}

// TestCheckFailOnAllHash: lab hash's rules may name a router of any of
// its three folders; a router none has is refused before the run.
func TestCheckFailOnAllHash(t *testing.T) {
	var scs []*Scenario
	for _, n := range []string{"hash-down", "hash-flap", "hash-drift"} {
		sc, err := BuiltinScenario(n)
		if err != nil {
			t.Fatal(err)
		}
		scs = append(scs, sc)
	}
	ok := mustRules(t, "affinity(full-list):mr_needless>0,affinity(available-only):mr_needless<10,affinity(rebalance-override):mr_needless<10")
	if err := CheckFailOnAll(scs, ScenarioOptions{}, ok); err != nil {
		t.Errorf("the CI rules of docs/lab-api.md refused: %v", err)
	}
	err := CheckFailOnAll(scs, ScenarioOptions{}, mustRules(t, "affinity(fulllist):mr>0"))
	if err == nil || !strings.Contains(err.Error(), "names no router of hash-down, hash-flap, hash-drift") {
		t.Errorf("a typo: %v", err)
	}
}
