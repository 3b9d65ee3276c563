package router

import "testing"

// TestLiveRouterRefusesWhatItCannotCarryOut: PolicyGlobal and deferral are
// decided by the pure core but not yet carried out by the live router; its
// config and SetPolicy reject them instead of serving such reads from the
// primary.
func TestLiveRouterRefusesWhatItCannotCarryOut(t *testing.T) {
	bad := []struct {
		p Policy
		c Cap
	}{
		{Policy{Kind: PolicyGlobal, WaitBudget: DefaultWaitBudget}, Cap{}},
		{Policy{Kind: PolicyTokenWait, WaitBudget: DefaultWaitBudget, Defer: true}, Cap{}},
		{Policy{Kind: PolicyTokenRYWMR}, Cap{PerSecond: 10, Behavior: CapDefer}},
	}
	for _, b := range bad {
		if err := liveSupports(b.p, b.c); err == nil {
			t.Errorf("live router accepted %v with cap %+v", b.p, b.c)
		}
		s := &LiveSession{}
		if b.c.PerSecond == 0 {
			if err := s.SetPolicy(b.p); err == nil {
				t.Errorf("SetPolicy accepted %v", b.p)
			}
		}
	}
	for _, k := range PolicyKinds() {
		p, err := ParsePolicy(k.String())
		if err != nil {
			t.Fatal(err)
		}
		if err := liveSupports(p, Cap{PerSecond: 10, Behavior: CapFailFast}); err != nil {
			t.Errorf("%v refused: %v", p, err)
		}
	}
}
