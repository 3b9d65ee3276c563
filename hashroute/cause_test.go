package hashroute

import (
	"testing"

	"pgregory.net/rapid"
)

func TestCauseNames(t *testing.T) {
	want := map[Cause]string{CauseNone: "none", CauseChosenDown: "chosen-down", CauseNeedless: "needless", CauseCameBack: "came-back"}
	for c, s := range want {
		if c.String() != s {
			t.Errorf("%d: %q, want %q", c, c.String(), s)
		}
		b, _ := c.MarshalText()
		if string(b) != s {
			t.Errorf("%d: MarshalText %q", c, b)
		}
	}
	if len(Causes()) != int(NumCauses)-1 {
		t.Errorf("Causes() %v misses one", Causes())
	}
}

// TestTrackerStories walks the three causes through the sequences the lab
// meets.
func TestTrackerStories(t *testing.T) {
	type step struct {
		node    int
		why     Reason
		down    bool
		moved   bool
		cause   Cause
		charge  Cause
		comment string
	}
	stories := map[string][]step{
		"full-list outage and return": {
			{0, FirstChoice, false, false, CauseNone, CauseNone, "first read on its first choice"},
			{0, FirstChoice, false, false, CauseNone, CauseNone, "stays"},
			{2, Reselected, false, true, CauseChosenDown, CauseChosenDown, "first choice down: reselected"},
			{2, Reselected, false, false, CauseNone, CauseChosenDown, "stays on the reselected server: same charge"},
			{0, FirstChoice, true, true, CauseCameBack, CauseCameBack, "returns once its server came back"},
			{0, FirstChoice, false, false, CauseNone, CauseCameBack, "a violation there is still the came-back server's"},
		},
		"available-only remap": {
			{1, FirstChoice, false, false, CauseNone, CauseNone, ""},
			{2, Remapped, false, true, CauseNeedless, CauseNeedless, "another server went down: remapped"},
			{1, FirstChoice, false, true, CauseNeedless, CauseNeedless, "the modulo reverts: back, still the mode's doing"},
			{1, FirstChoice, false, false, CauseNone, CauseNeedless, ""},
		},
		"rebalancer": {
			{0, FirstChoice, false, false, CauseNone, CauseNone, ""},
			{1, Rebalanced, false, true, CauseNeedless, CauseNeedless, ""},
			{2, Rebalanced, false, true, CauseNeedless, CauseNeedless, "rebalanced again, elsewhere"},
			{0, FirstChoice, false, true, CauseNeedless, CauseNeedless, ""},
		},
		"server restarts under a session that never left": {
			{1, FirstChoice, false, false, CauseNone, CauseNone, ""},
			{1, FirstChoice, true, false, CauseNone, CauseCameBack, "it was down between the two reads"},
		},
		"first read while the first choice is down": {
			{2, Reselected, false, false, CauseNone, CauseNone, "nothing shown before: no move"},
			{0, FirstChoice, false, true, CauseCameBack, CauseCameBack, "its first choice is back"},
		},
		"primary reads are not observed": {
			{1, FirstChoice, false, false, CauseNone, CauseNone, ""},
			{-1, NoServerUp, false, false, CauseNone, CauseNone, ""},
			{1, FirstChoice, false, false, CauseNone, CauseNone, "the primary read did not count as a move"},
		},
	}
	for name, steps := range stories {
		tr := NewTracker()
		for i, s := range steps {
			moved, cause := tr.Observe(s.node, s.why, s.down)
			if moved != s.moved || cause != s.cause || tr.Charge() != s.charge {
				t.Errorf("%s step %d (%s): moved %v cause %v charge %v, want %v %v %v",
					name, i, s.comment, moved, cause, tr.Charge(), s.moved, s.cause, s.charge)
			}
		}
	}
}

// TestTrackerFullListNeverNeedless is the structural zero: whatever the
// servers and weights, however servers go down and come back, whatever
// the load, sessions routed by FullList are never charged a needless move
// or a needless violation. (Select's FullList never answers Remapped or
// Rebalanced; the Tracker makes Needless only from those.)
func TestTrackerFullListNeverNeedless(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tab := genTable(t)
		nsess := rapid.IntRange(1, 40).Draw(t, "sessions")
		trs := make([]Tracker, nsess)
		last := make([]int, nsess) // step of each session's previous read
		for i := range trs {
			trs[i] = NewTracker()
		}
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		up := tab.AllUp()
		var downAt [][]int // per server, the steps it was down at
		downAt = make([][]int, tab.Len())
		for st := 1; st <= steps; st++ {
			if rapid.IntRange(0, 9).Draw(t, "flip") == 0 {
				k := rapid.IntRange(0, tab.Len()-1).Draw(t, "k")
				if up.Up(k) {
					up = up.Without(k)
				} else {
					up = up.With(k)
				}
			}
			for k := range tab.Len() {
				if !up.Up(k) {
					downAt[k] = append(downAt[k], st)
				}
			}
			inflight := rapid.SliceOfN(rapid.IntRange(0, 100), tab.Len(), tab.Len()).Draw(t, "inflight")
			s := rapid.IntRange(0, nsess-1).Draw(t, "session")
			i, why := tab.Select(uint64(s)*0x9e3779b97f4a7c15+1, FullList, up, inflight)
			wasDown := false
			if i >= 0 {
				for _, d := range downAt[i] {
					if d > last[s] && d < st {
						wasDown = true
					}
				}
			}
			_, cause := trs[s].Observe(i, why, wasDown)
			last[s] = st
			if cause == CauseNeedless || trs[s].Charge() == CauseNeedless {
				t.Fatalf("step %d session %d: full-list selection %d (%v) charged needless", st, s, i, why)
			}
		}
	})
}

// TestTrackerStableFullListNoMoves: with every server up, full-list never
// moves a session, under any load.
func TestTrackerStableFullListNoMoves(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tab := genTable(t)
		tr := NewTracker()
		h := rapid.Uint64().Draw(t, "h")
		for range rapid.IntRange(1, 50).Draw(t, "reads") {
			inflight := rapid.SliceOfN(rapid.IntRange(0, 100), tab.Len(), tab.Len()).Draw(t, "inflight")
			i, why := tab.Select(h, FullList, tab.AllUp(), inflight)
			if moved, _ := tr.Observe(i, why, false); moved || tr.Charge() != CauseNone {
				t.Fatalf("moved to %d (%v) with every server up", i, why)
			}
		}
	})
}

// TestTrackerAvailableOnlyNeedless: one server going down charges needless
// moves under AvailableOnly to ids whose own server stayed up, and none to
// the down server's ids.
func TestTrackerAvailableOnlyNeedless(t *testing.T) {
	tab := mustTable(t, "a:1,b:1,c:1")
	needless, down := 0, 0
	for _, h := range ids(3000) {
		tr := NewTracker()
		i, why := tab.Select(h, AvailableOnly, tab.AllUp(), nil)
		tr.Observe(i, why, false)
		j, why := tab.Select(h, AvailableOnly, tab.AllUp().Without(0), nil)
		moved, cause := tr.Observe(j, why, false)
		switch {
		case !moved:
		case cause == CauseNeedless:
			if tab.First(h) == 0 {
				t.Fatalf("id on the down server charged needless")
			}
			needless++
		case cause == CauseChosenDown:
			if tab.First(h) != 0 {
				t.Fatalf("id on an up server charged chosen-down")
			}
			down++
		default:
			t.Fatalf("unexpected cause %v", cause)
		}
	}
	// 3 -> 2 servers: about half of the two up servers' ids change server.
	if needless < 800 || needless > 1200 || down < 800 || down > 1200 {
		t.Errorf("needless %d, chosen-down %d of 3000 ids; want about 1000 each", needless, down)
	}
}
