package live

import (
	"testing"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// TestLiveRouterRefusesWhatItCannotCarryOut: PolicyGlobal and deferral are
// decided by the pure core but not yet carried out by the live router; its
// config and SetPolicy reject them instead of serving such reads from the
// primary.
func TestLiveRouterRefusesWhatItCannotCarryOut(t *testing.T) {
	bad := []struct {
		p router.Policy
		c router.Cap
	}{
		{router.Policy{Kind: router.PolicyGlobal, WaitBudget: router.DefaultWaitBudget}, router.Cap{}},
		{router.Policy{Kind: router.PolicyTokenWait, WaitBudget: router.DefaultWaitBudget, Defer: true}, router.Cap{}},
		{router.Policy{Kind: router.PolicyTokenRYWMR}, router.Cap{PerSecond: 10, Behavior: router.CapDefer}},
	}
	for _, b := range bad {
		if err := liveSupports(b.p, b.c); err == nil {
			t.Errorf("live router accepted %v with cap %+v", b.p, b.c)
		}
		s := &LiveSession[gtid.Set]{}
		if b.c.PerSecond == 0 {
			if err := s.SetPolicy(b.p); err == nil {
				t.Errorf("SetPolicy accepted %v", b.p)
			}
		}
	}
	for _, k := range router.PolicyKinds() {
		p, err := router.ParsePolicy(k.String())
		if err != nil {
			t.Fatal(err)
		}
		if err := liveSupports(p, router.Cap{PerSecond: 10, Behavior: router.CapFailFast}); err != nil {
			t.Errorf("%v refused: %v", p, err)
		}
	}
}
