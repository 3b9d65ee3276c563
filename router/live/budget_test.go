package live

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// TestHugeTokenWaitBounded: a read whose token is a set of 60,000
// intervals no server holds, with a 400 ms budget. The replica's
// WAIT_FOR_EXECUTED_GTID_SET parses such a set for seconds before its own
// timeout can end it; the router gives it up past its budget (killed on
// the server), refuses the read as timed out within a bound near the
// budget, and holds no replica down for it (it marked the replica down
// and the read took budget + 1 s or more).
func TestHugeTokenWaitBounded(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pl := startPoller(t, ctx, 5*time.Millisecond)
	reg := prometheus.NewRegistry()
	pol := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 400 * time.Millisecond}
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Wait: WaitGTIDFunction, Policy: pol, Registerer: reg})
	var b strings.Builder
	b.WriteString("5c1e8b3a-0d2f-11f0-9f3c-0242ac120099")
	for i := range 60000 {
		b.WriteString(":" + strconv.Itoa(2*i+1))
	}
	set, err := gtid.Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	s := r.NewSession()
	defer s.Close()
	s.AddToken(set, r.Epoch())
	t0 := time.Now()
	_, err = s.Query(ctx, "SELECT 1")
	took := time.Since(t0)
	t.Logf("read: %v after %v", err, took)
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("read with a token nobody holds: %v, want ErrTimedOut", err)
	}
	// A generous bound for a loaded machine: the budget is 400 ms.
	if took > 4*time.Second {
		t.Errorf("the read took %v with a 400ms budget", took)
	}
	for _, n := range r.cfg.Replicas {
		if f := r.Failures(n.Name); f != 0 {
			t.Errorf("%s held down %d times for a wait that overran its budget", n.Name, f)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	overran := false
	for _, mf := range mfs {
		if mf.GetName() != "causallab_router_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "overran" && m.GetHistogram().GetSampleCount() > 0 {
					overran = true
				}
			}
		}
	}
	if !overran {
		t.Error(`the wait given up is not counted as wait_seconds{result="overran"}`)
	}
	r.Close() // waits for the kill
}
