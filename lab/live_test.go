package lab

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/router"
)

func TestRunRoutersStraggler(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cname := "straggler"
	if c := os.Getenv("LAB_TEST_CONDITION"); c != "" {
		cname = c
	}
	cond, err := ParseCondition(cname)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, topo, Config{Sessions: 600, WriteRate: 150, Duration: 8 * time.Second, Routers: DefaultRouters(), Condition: cond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lag %+v reads/s %.0f polls %d errs %d stalls %d", res.Lag, res.ReadsPerSec, res.Polls, res.PollErrors, res.Stalls)
	for _, r := range res.Routers {
		t.Logf("%-18s reads %5d served %5d ryw %4d mr %4d prim %.1f%% fb %d lat p50 %.2f p99 %.2f out %v wErr %d noGTID %d obsErr %d disp99 %.1f",
			r.Name, r.Reads, r.Served, r.RYW, r.MR, r.PrimaryPct, r.Fallbacks, r.LatP50Ms, r.LatP99Ms, r.Outcomes, r.WriteErrors, r.WritesNoGTID, r.ObserveErrors, r.DispatchP99Ms)
	}
	var anyRYW int64
	for _, r := range res.Routers {
		if r.Reads == 0 {
			t.Fatalf("%s: no reads", r.Name)
		}
		if r.Outcomes["error"] > 0 {
			t.Errorf("%s: %d read errors", r.Name, r.Outcomes["error"])
		}
		switch r.Name {
		case router.PolicyTokenRYW.String():
			if r.RYW != 0 {
				t.Errorf("token-ryw: %d RYW violations", r.RYW)
			}
		case router.PolicyTokenRYWMR.String(), "token-wait(400ms)":
			if r.RYW != 0 || r.MR != 0 {
				t.Errorf("%s: %d RYW, %d MR violations", r.Name, r.RYW, r.MR)
			}
		case "any":
			anyRYW = r.RYW
		}
	}
	if anyRYW == 0 {
		t.Errorf("any: no RYW violation under a straggler (lag %+v)", res.Lag)
	}
}
