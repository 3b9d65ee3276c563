package lab

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// TestScenarioFilesParse: every shipped folder parses, names known routers
// and states at least one expectation.
func TestScenarioFilesParse(t *testing.T) {
	dirs, err := ScenarioDirs("scenarios")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 3 {
		t.Fatalf("%d scenario folders", len(dirs))
	}
	for _, d := range dirs {
		sc, err := LoadScenario(d)
		if err != nil {
			t.Errorf("%s: %v", d, err)
			continue
		}
		xs, err := sc.Expectations()
		if err != nil || len(xs) == 0 {
			t.Errorf("%s: expectations %v, %v", d, xs, err)
		}
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
		{"routers: [any]\nevents: [{at: 1s, kind: explode}]\n", "unknown"},
	} {
		_, err := ParseScenario([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.in, err, c.want)
		}
	}
	sc, err := ParseScenario([]byte("routers: [any, \"lsn:token-wait\"]\nexpect: {any: {ryw: \">0\", mr: \"<= 3\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	xs, _ := sc.Expectations()
	got := []string{xs[0].String(), xs[1].String()}
	if want := []string{"any: mr <= 3", "any: ryw > 0"}; !slices.Equal(got, want) {
		t.Errorf("expectations %v, want %v", got, want)
	}
	cfg, _ := sc.config()
	if cfg.Routers[1].Token != TokenLSN || cfg.Routers[1].Name != "lsn:token-wait" {
		t.Errorf("lsn router parsed as %+v", cfg.Routers[1])
	}
}

// TestScenarios runs every folder of lab/scenarios on real MySQL with short
// durations (events scaled) and checks its expectations. A scenario with a
// failover runs on its own topology (the failover retires the primary).
func TestScenarios(t *testing.T) {
	composetest.Need(t, topo)
	dirs, err := ScenarioDirs("scenarios")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		sc, err := LoadScenario(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(sc.Name, func(t *testing.T) {
			on := Topology(topo)
			for _, e := range sc.Events {
				if e.Kind == EvFailover {
					on = composetest.Start(t, compose.Config{Replicas: 2})
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, failed, err := RunScenario(ctx, on, sc, ScenarioOptions{Config: Config{Duration: 8 * time.Second, Sessions: 400}})
			if err != nil {
				t.Fatal(err)
			}
			logResult(t, res)
			for i := range res.Routers {
				accounted(t, &res.Routers[i])
			}
			for _, f := range failed {
				t.Error(f)
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
		if len(sc.Routers) == 0 {
			t.Fatalf("accepted a scenario without routers: %q", b)
		}
		if _, err := sc.Expectations(); err != nil {
			t.Fatalf("accepted, then expectations fail: %v", err)
		}
	})
}
