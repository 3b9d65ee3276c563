package sim

import (
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/router"
)

// TestHeavyJitter: a heavy record's per-replica replay spread
// (ReplicaModel.HeavyJitter) moves the replicas apart (the spread grows)
// and is deterministic per seed; out-of-range values are refused.
func TestHeavyJitter(t *testing.T) {
	run := func(j float64) Result {
		t.Helper()
		m := ReplicaModel{ShipDelay: 2 * time.Millisecond, ApplyCost: 150 * time.Microsecond,
			HeavyProb: 0.002, HeavyCost: time.Second, HeavyJitter: j}
		cfg := Config{Seed: 7, Trials: 1, Replicas: 3, WritesPerSec: 200, Sessions: 300, Duration: 10 * time.Second, Model: &m}
		out, err := Run(context.Background(), cfg, []RouterSpec{{Name: "any", Policy: router.Policy{Kind: router.PolicyAny}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out[0][0]
	}
	lockstep, spread := run(0), run(0.5)
	if !(spread.SpreadMean > 2*lockstep.SpreadMean) || !(spread.SpreadP99 > lockstep.SpreadP99) {
		t.Fatalf("jitter 0.5: spread mean %.1f ms, p99 %.1f ms; lockstep %.1f ms, %.1f ms: not further apart",
			spread.SpreadMean, spread.SpreadP99, lockstep.SpreadMean, lockstep.SpreadP99)
	}
	if again := run(0.5); again.SpreadMean != spread.SpreadMean || again.MR != spread.MR {
		t.Fatalf("jitter 0.5 not deterministic: spread %v then %v", spread.SpreadMean, again.SpreadMean)
	}
	for _, j := range []float64{-0.1, 1} {
		m := ReplicaModel{HeavyProb: 0.01, HeavyCost: time.Second, HeavyJitter: j}
		cfg := Config{Trials: 1, Model: &m}
		if _, err := Run(context.Background(), cfg, []RouterSpec{{Name: "any", Policy: router.Policy{Kind: router.PolicyAny}}}, nil); err == nil {
			t.Errorf("heavy jitter %g accepted", j)
		}
	}
	t.Logf("spread mean %.1f ms in lockstep, %.1f ms at jitter 0.5", lockstep.SpreadMean, spread.SpreadMean)
}
