package sim

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/causallab/causallab/router"
)

// TestRecordDecisions: the recorder drives the same engine as Run (the
// trial's result is identical), records every decision (one per reason
// counted), and its records replay through router.Decide to the same
// decisions.
//
// It runs under each cap behaviour: CapWaitLonger makes reads wait on the
// cap, which exercises the per-read wait flags the engine resets when a
// read is issued (an earlier copy of the event loop missed one reset, and
// its cap-wait count drifted from Run's).
func TestRecordDecisions(t *testing.T) {
	for _, beh := range router.CapBehaviors() {
		cfg := Config{Seed: 3, Trials: 1, Duration: 1500 * time.Millisecond, Sessions: 300, World: WorldStraggler,
			Poll: 5 * time.Millisecond, Cap: router.Cap{PerSecond: 5, Burst: 1, Behavior: beh, ExtraWait: 50 * time.Millisecond}}
		t.Run(fmt.Sprint("cap-behaviour-", beh), func(t *testing.T) { testRecordDecisions(t, cfg, false) })
	}
	// Replicas 300 ms behind (a standing delay): the budget waits of the
	// skip-futile policies are judged futile (Input.NeedAge recorded).
	m := WorldIdentical.Model()
	m.ReplicaDelay = []time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
	cfg := Config{Seed: 3, Trials: 1, Duration: 1500 * time.Millisecond, Sessions: 300, Model: &m,
		Cap: router.Cap{PerSecond: 50, Burst: 5, Behavior: router.CapDefer}}
	t.Run("skip-futile", func(t *testing.T) { testRecordDecisions(t, cfg, true) })
}

func testRecordDecisions(t *testing.T, cfg Config, wantFutile bool) {
	specs := append(seven(), spec(router.Policy{Kind: router.PolicyTokenRYWMR, Defer: true}),
		spec(router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 50 * time.Millisecond, SkipFutile: true}),
		spec(router.Policy{Kind: router.PolicyGlobal, WaitBudget: 50 * time.Millisecond, SkipFutile: true}),
		spec(router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 50 * time.Millisecond, SkipFutile: true, FutileTrend: true}))
	res := run(t, cfg, specs)
	var capWaited, deferred, futile int64
	for k, sp := range specs {
		capWaited += res[k][0].CapWaited
		deferred += res[k][0].Deferred
		futile += res[k][0].Reasons[router.ReasonWaitFutile]
		t.Run(sp.Name, func(t *testing.T) {
			var recs []DecisionRecord
			got, err := RecordDecisions(context.Background(), cfg, sp, 0, func(r *DecisionRecord) {
				c := *r
				c.View.Replicas = append([]router.Replica[LogPos](nil), r.View.Replicas...)
				recs = append(recs, c)
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, res[k][0]) {
				t.Fatalf("recorded trial result differs from Run's:\n%+v\n%+v", got, res[k][0])
			}
			var decisions int64
			for _, n := range got.Reasons {
				decisions += n
			}
			if int64(len(recs)) != decisions || decisions == 0 {
				t.Fatalf("%d records, %d decisions counted", len(recs), decisions)
			}
			var b router.Bucket
			for i := range recs {
				in := recs[i].Input()
				if d := router.Decide(&in, &b); d != recs[i].Decision {
					t.Fatalf("record %d replays to %+v, recorded %+v", i, d, recs[i].Decision)
				}
			}
		})
	}
	if cfg.Cap.Behavior == router.CapWaitLonger && capWaited == 0 {
		t.Error("no read waited on the cap: the test does not exercise cap waits")
	}
	if wantFutile && futile == 0 {
		t.Error("no wait was judged futile: the test does not exercise skip-futile (Input.NeedAge)")
	}
	if deferred == 0 {
		t.Error("no read was deferred: the test does not exercise deferrals and retries")
	}
	if _, err := RecordDecisions(context.Background(), cfg, specs[0], -1, func(*DecisionRecord) {}); err == nil {
		t.Error("negative trial accepted")
	}
}
