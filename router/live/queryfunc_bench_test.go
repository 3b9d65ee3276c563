package live

import (
	"context"
	"testing"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// BenchmarkQueryFunc is the router's per-read cost around the caller's
// statement (decision, outcome counting, in-flight accounting; no I/O):
// what the proxy pays for routing through the router.
func BenchmarkQueryFunc(b *testing.B) {
	for _, k := range []router.PolicyKind{router.PolicyTokenRYW, router.PolicyTokenWait} {
		b.Run(k.String(), func(b *testing.B) {
			t := &testing.T{}
			r, _ := funcRouter(t, func(c *Config[gtid.Set]) { c.Trace = false })
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
