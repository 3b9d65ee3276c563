package live

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// BenchmarkQueryFunc is the router's per-read cost around the caller's
// statement (decision, outcome counting, in-flight accounting; no I/O):
// what the proxy pays for routing through the router. global takes its
// target from the router's view (GlobalView); GlobalPrimaryQuery adds a
// round trip to the primary, which this benchmark has not.
func BenchmarkQueryFunc(b *testing.B) {
	for _, k := range []router.PolicyKind{router.PolicyTokenRYW, router.PolicyTokenWait, router.PolicyGlobal} {
		b.Run(k.String(), func(b *testing.B) {
			t := &testing.T{}
			// global with the view source: the target without a round trip.
			r, _ := funcRouter(t, func(c *Config[gtid.Set]) { c.Trace, c.Global = false, GlobalView })
			s := r.NewSession()
			s.AddToken(gtid.MustParse(uA+":8"), 1)
			pol := router.Policy{Kind: k, CheckEpoch: true, WaitBudget: router.DefaultWaitBudget}
			obs := gtid.MustParse(uA + ":1-10")
			run := func(context.Context, Target) (gtid.Set, error) { return obs, nil }
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.QueryFunc(ctx, pol, ReadOptions[gtid.Set]{}, run); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCommitLog is the commit log's cost on the write path (Record of a
// grown position) and on a deferral (Lag of a replica in the middle of a
// full ring).
func BenchmarkCommitLog(b *testing.B) {
	sets := make([]gtid.Set, 4096)
	for i := range sets {
		sets[i] = gtid.MustParse(uA + ":1-" + strconv.Itoa(i+1))
	}
	t0 := time.Unix(0, 0)
	b.Run("record", func(b *testing.B) {
		l := NewCommitLog[gtid.Set](defaultCommitLogSize, defaultCommitLogResolution)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			l.Record(t0.Add(time.Duration(i)*time.Millisecond), sets[i%len(sets)])
			if i++; i%len(sets) == 0 {
				l.Reset()
			}
		}
	})
	b.Run("lag", func(b *testing.B) {
		l := NewCommitLog[gtid.Set](defaultCommitLogSize, defaultCommitLogResolution)
		for i := range defaultCommitLogSize {
			l.Record(t0.Add(time.Duration(i)*time.Millisecond), sets[i])
		}
		applied := sets[defaultCommitLogSize/2]
		now := t0.Add(2 * time.Second)
		b.ReportAllocs()
		for b.Loop() {
			if l.Lag(applied, now) == 0 {
				b.Fatal("no lag")
			}
		}
	})
}
