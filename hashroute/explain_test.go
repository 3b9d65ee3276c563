package hashroute

import (
	"testing"

	"pgregory.net/rapid"
)

// TestPropExplainAgreesWithSelect: Explain's final answer is Select's, its
// probe trail ends on the selected server, and it records the rebalancer's
// decision.
func TestPropExplainAgreesWithSelect(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tab := genTable(t)
		up := Availability(rapid.Uint64().Draw(t, "up"))
		mode := rapid.SampledFrom(Modes()).Draw(t, "mode")
		inflight := rapid.SliceOfN(rapid.IntRange(0, 20), 0, 12).Draw(t, "inflight")
		h := rapid.Uint64().Draw(t, "h")
		e := tab.Explain(h, mode, up, inflight)
		i, why := tab.Select(h, mode, up, inflight)
		if e.Index != i || e.Reason != why || e.First != tab.First(h) {
			t.Fatalf("Explain %+v, Select %d %v", e, i, why)
		}
		if len(e.Probes) > 0 && mode != AvailableOnly && e.Probes[len(e.Probes)-1] != e.Hashed {
			t.Fatalf("probe trail %v does not end on %d", e.Probes, e.Hashed)
		}
		if mode == RebalanceOverride && e.Hashed >= 0 && e.Overloaded != (why == Rebalanced) {
			t.Fatalf("overloaded=%v but reason %v", e.Overloaded, why)
		}
	})
}

func TestRemap(t *testing.T) {
	tab := mustTable(t, "a:1,b:1,c:2")
	hs := ids(20000)
	down := tab.AllUp().Without(1)
	full := tab.Remap(hs, FullList, tab.AllUp(), down, nil, nil)
	if full.MovedNeedlessly != 0 || full.Moved != full.OnDowned || full.IDs != len(hs) {
		t.Errorf("full-list: %+v", full)
	}
	if share := float64(full.Moved) / float64(len(hs)); share < 0.23 || share > 0.27 {
		t.Errorf("full-list moved %.3f, want about b's weight share 0.25", share)
	}
	avail := tab.Remap(hs, AvailableOnly, tab.AllUp(), down, nil, nil)
	if avail.MovedNeedlessly == 0 || avail.Moved <= full.Moved {
		t.Errorf("available-only: %+v, want needless moves", avail)
	}
	// Load drift with the fleet whole: only the rebalancer moves ids.
	drift := []int{10, 1, 1}
	for _, m := range []Mode{FullList, AvailableOnly} {
		if st := tab.Remap(hs, m, tab.AllUp(), tab.AllUp(), nil, drift); st.Moved != 0 {
			t.Errorf("%v moved %d ids on load drift", m, st.Moved)
		}
	}
	reb := tab.Remap(hs, RebalanceOverride, tab.AllUp(), tab.AllUp(), nil, drift)
	if reb.Moved == 0 || reb.MovedNeedlessly != reb.Moved {
		t.Errorf("rebalance-override on drift: %+v", reb)
	}
}
