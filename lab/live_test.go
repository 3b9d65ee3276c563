package lab

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// Integration tests: real MySQL, one shared topology (TestMain), skipped
// under -short. They assert structural results only (zeros that the
// routers' designs guarantee, and violations that lag makes unavoidable),
// never tuned rates.

func logResult(t *testing.T, res *Result) {
	t.Helper()
	t.Logf("%s/%s: lag %+v, %.0f reads/s, polls %d (%d failed)", res.Experiment, res.Condition, res.Lag, res.ReadsPerSec, res.Polls, res.PollErrors)
	for _, r := range res.Routers {
		t.Logf("  %-28s reads %5d served %5d ryw %4d mr %4d primary %.1f%% outcomes %v", r.Name, r.Reads, r.Served, r.RYW, r.MR, r.PrimaryPct, r.Outcomes)
	}
	for _, n := range res.Notes {
		t.Logf("  note: %s", n)
	}
}

func row(t *testing.T, res *Result, name string) *RouterResult {
	t.Helper()
	for i := range res.Routers {
		if res.Routers[i].Name == name {
			return &res.Routers[i]
		}
	}
	t.Fatalf("no router %q in %s", name, Summary(res))
	return nil
}

func accounted(t *testing.T, r *RouterResult) {
	t.Helper()
	var n int64
	for _, c := range r.Outcomes {
		n += c
	}
	if n != r.Reads || r.Reads == 0 {
		t.Errorf("%s: %d reads, %d with an outcome", r.Name, r.Reads, n)
	}
}

// TestLabRouters: the six routers under lag. Token routers: zero of what
// they guarantee; any: above zero RYW.
func TestLabRouters(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cname := "straggler+heavy"
	if c := os.Getenv("LAB_TEST_CONDITION"); c != "" {
		cname = c
	}
	cond, err := ParseCondition(cname)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Routers(ctx, topo, RoutersOptions{Config: Config{Sessions: 600, WriteRate: 150, Duration: 10 * time.Second, Condition: cond}})
	if err != nil {
		t.Fatal(err)
	}
	logResult(t, res)
	for i := range res.Routers {
		accounted(t, &res.Routers[i])
		if res.Routers[i].Prediction == nil {
			t.Errorf("%s: no simulator prediction", res.Routers[i].Name)
		}
	}
	if r := row(t, res, "token-ryw"); r.RYW != 0 {
		t.Errorf("token-ryw: %d RYW violations", r.RYW)
	}
	for _, n := range []string{"token-ryw-mr", "token-wait(400ms)"} {
		if r := row(t, res, n); r.RYW != 0 || r.MR != 0 {
			t.Errorf("%s: %d RYW, %d MR violations", n, r.RYW, r.MR)
		}
	}
	// affinity(full-list) keeps a session on one replica only while that
	// replica looks up: a failed position poll (an overloaded machine) makes
	// the router reselect, which may legitimately go backwards.
	if r := row(t, res, "affinity(full-list)"); r.MR != 0 {
		if res.PollErrors == 0 {
			t.Errorf("affinity(full-list): %d MR violations with every replica up", r.MR)
		} else {
			t.Logf("affinity(full-list): %d MR violations after %d failed polls (replicas looked down)", r.MR, res.PollErrors)
		}
	}
	if r := row(t, res, "any"); r.RYW == 0 {
		t.Errorf("any: no RYW violation under lag %+v", res.Lag)
	}
}

// TestLabViaProxy: the lab's sessions through `causallab proxy` (started
// in-process against the shared topology), tokens in comments: token-ryw-mr
// shows zero violations; any shows RYW violations under the same lag.
func TestLabViaProxy(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cond, err := ParseCondition("straggler+heavy")
	if err != nil {
		t.Fatal(err)
	}
	routers, err := ParseRouters("any,token-ryw-mr")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, topo, Config{Sessions: 400, WriteRate: 100, Duration: 8 * time.Second, Condition: cond, Routers: routers, Via: ViaProxy})
	if err != nil {
		t.Fatal(err)
	}
	res.Experiment = "routers"
	logResult(t, res)
	for i := range res.Routers {
		accounted(t, &res.Routers[i])
		if n := res.Routers[i].Outcomes[OutProxied.String()]; n == 0 {
			t.Errorf("%s: no read served through the proxy", res.Routers[i].Name)
		}
	}
	if r := row(t, res, "token-ryw-mr"); r.RYW != 0 || r.MR != 0 {
		t.Errorf("token-ryw-mr via proxy: %d RYW, %d MR violations", r.RYW, r.MR)
	}
	if r := row(t, res, "any"); r.RYW == 0 {
		t.Errorf("any via proxy: no RYW violation under lag %+v", res.Lag)
	}
}

// TestLabGated: naive reads are stale under a standing lag, gated never.
func TestLabGated(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Gated(ctx, topo, GatedOptions{Config: Config{Sessions: 500, WriteRate: 100, Duration: 6 * time.Second}, NoPredict: true})
	if err != nil {
		t.Fatal(err)
	}
	logResult(t, res)
	if r := row(t, res, "naive"); r.RYW == 0 {
		t.Errorf("naive: no stale read under a %v ms standing lag", res.Lag.MeanMs)
	}
	if r := row(t, res, "gated"); r.RYW != 0 {
		t.Errorf("gated: %d stale reads", r.RYW)
	}
}

// TestLabFailover: on its own topology (the failover retires the primary).
// The epoch token is never silently stale; the GTID-set token is never
// silently stale either (it times out); when writes were lost, the scalar
// token serves some reads without them.
func TestLabFailover(t *testing.T) {
	composetest.Need(t, topo)
	own := composetest.Start(t, compose.Config{Replicas: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Failover(ctx, own, FailoverOptions{Config: Config{Sessions: 600, WriteRate: 150, Duration: 12 * time.Second}, NoPredict: true})
	if err != nil {
		t.Fatal(err)
	}
	logResult(t, res)
	if len(res.Failovers) != 1 {
		t.Fatalf("%d failovers", len(res.Failovers))
	}
	for i := range res.Routers {
		accounted(t, &res.Routers[i])
	}
	for _, n := range []string{"epoch-token", "gtid-token"} {
		if r := row(t, res, n); r.RYW != 0 {
			t.Errorf("%s: %d reads silently served without the session's write", n, r.RYW)
		}
	}
	if res.Failovers[0].LostGTIDs != "" {
		if r := row(t, res, "epoch-token"); r.Outcomes[OutFailed.String()] == 0 {
			t.Errorf("epoch-token: writes were lost (%s) but no read failed fast", res.Failovers[0].LostGTIDs)
		}
		if r := row(t, res, "lsn-token"); r.RYW == 0 {
			t.Logf("lsn-token: writes were lost but no read was served without them (no session read its lost write from a node past its LSN)")
		}
	} else {
		t.Logf("no write was lost in this failover")
	}
}
