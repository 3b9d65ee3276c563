package lab

import (
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
)

// TestLabHashViaProxy runs the built-in hash-down scenario through the
// proxy (TestScenarios runs the three hash folders through package
// router), as `causallab lab hash --via proxy` does, and requires every
// expectation to hold: full-list's needless counts exactly zero
// (structural: TestTrackerFullListNeverNeedless), tens of needless
// violations for available-only, chosen-down violations for both modes,
// nothing unexplained, the simulator agreeing on the zeros.
func TestLabHashViaProxy(t *testing.T) {
	composetest.Need(t, topo)
	for _, c := range []struct {
		name string
		via  Via
	}{{"hash-down", ViaProxy}} {
		t.Run(c.name+"/"+string(c.via), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sc, err := BuiltinScenario(c.name)
			if err != nil {
				t.Fatal(err)
			}
			results, failed, err := RunScenario(ctx, topo, sc, ScenarioOptions{Config: Config{Via: c.via}})
			if err != nil {
				t.Fatal(err)
			}
			for _, res := range results {
				logResult(t, res)
				t.Logf("\n%s", HashSummary([]*Result{res}))
				for i := range res.Routers {
					r := &res.Routers[i]
					accounted(t, r)
					if r.Hash == nil || r.Hash.MR.Total() != float64(r.MR) {
						t.Errorf("%s: MR %d, attributed %+v", r.Name, r.MR, r.Hash)
					}
				}
			}
			for _, f := range failed {
				t.Errorf("expectation: %s", f)
			}
		})
	}
}
