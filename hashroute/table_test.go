package hashroute

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func mustTable(t testing.TB, spec string) *Table {
	t.Helper()
	servers, err := ParseServers(spec)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := NewTable(servers)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestHashKnownVectors(t *testing.T) {
	// xxhash64 (seed 0) reference values from the xxHash specification's test
	// suite; they pin the hash itself, independently of this package.
	cases := map[string]uint64{
		"":    0xef46db3751d8e999,
		"abc": 0x44bc2cf5ad770999,
	}
	for in, want := range cases {
		if got := Hash(in); got != want {
			t.Errorf("Hash(%q) = %#x, want %#x", in, got, want)
		}
		if got := HashBytes([]byte(in)); got != want {
			t.Errorf("HashBytes(%q) = %#x, want %#x", in, got, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	many := make([]Server, MaxServers+1)
	for i := range many {
		many[i] = Server{Name: fmt.Sprint("s", i), Weight: 1}
	}
	bad := []struct {
		name string
		cfg  Config
		want string
	}{
		{"empty", Config{}, "no servers"},
		{"too many", Config{Servers: many}, "at most 64"},
		{"empty name", Config{Servers: []Server{{"", 1}}}, "empty name"},
		{"dup name", Config{Servers: []Server{{"a", 1}, {"a", 2}}}, "appears twice"},
		{"zero weight", Config{Servers: []Server{{"a", 0}}}, "weight 0"},
		{"negative weight", Config{Servers: []Server{{"a", -3}}}, "weight -3"},
		{"huge weight", Config{Servers: []Server{{"a", MaxWeight + 1}}}, "weight"},
		{"factor below 1", Config{Servers: []Server{{"a", 1}}, RebalanceFactor: 0.5}, "rebalance factor"},
		{"factor NaN", Config{Servers: []Server{{"a", 1}}, RebalanceFactor: math.NaN()}, "rebalance factor"},
		{"factor Inf", Config{Servers: []Server{{"a", 1}}, RebalanceFactor: math.Inf(1)}, "rebalance factor"},
	}
	for _, c := range bad {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New error = %v, want one containing %q", c.name, err, c.want)
		}
	}
	tab, err := New(Config{Servers: []Server{{"a", 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if tab.RebalanceFactor() != DefaultRebalanceFactor {
		t.Errorf("default factor = %v", tab.RebalanceFactor())
	}
	if _, err := New(Config{Servers: many[:MaxServers]}); err != nil {
		t.Errorf("64 servers rejected: %v", err)
	}
}

func TestParseServers(t *testing.T) {
	got, err := ParseServers(" a:1, b ,c:2 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []Server{{"a", 1}, {"b", 1}, {"c", 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseServers = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "a:x", "a:1,,b:1", "a:1,a:2", "a:0", ":3"} {
		if _, err := ParseServers(bad); err == nil {
			t.Errorf("ParseServers(%q) accepted", bad)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range Modes() {
		got, err := ParseMode(strings.ToUpper(m.String()))
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if m, err := ParseMode(""); err != nil || m != FullList {
		t.Errorf("ParseMode(\"\") = %v, %v; want full-list default", m, err)
	}
	if _, err := ParseMode("modulo"); err == nil {
		t.Error("ParseMode accepted an unknown name")
	}
}

func TestAvailability(t *testing.T) {
	a := AllUp(3)
	if a != 0b111 || a.Count() != 3 {
		t.Fatalf("AllUp(3) = %b", a)
	}
	if b := a.Without(1); b.Up(1) || !b.Up(0) || !b.Up(2) || b.With(1) != a {
		t.Errorf("Without/With wrong: %b", b)
	}
	if AllUp(64) != ^Availability(0) || AllUp(0) != 0 || AllUp(-1) != 0 || AllUp(100) != ^Availability(0) {
		t.Error("AllUp clamps wrong")
	}
	if a.Up(-1) || a.Up(64) || a.Without(70) != a || a.With(-2) != a {
		t.Error("out-of-range index not ignored")
	}
}

// ids returns n deterministic sample ids.
func ids(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = Hash(fmt.Sprintf("session-%d", i))
	}
	return out
}

func TestSelectAllUpModesAgree(t *testing.T) {
	tab := mustTable(t, "a:1,b:1,c:2,d:3,e:1")
	for _, h := range ids(5000) {
		first := tab.First(h)
		for _, m := range Modes() {
			i, why := tab.Select(h, m, tab.AllUp(), nil)
			if i != first || why != FirstChoice {
				t.Fatalf("mode %v, h=%#x: got %d %v, want first choice %d", m, h, i, why, first)
			}
		}
	}
}

func TestSelectNoServerUp(t *testing.T) {
	tab := mustTable(t, "a:1,b:2")
	for _, m := range Modes() {
		// Bits above the table's servers are ignored.
		for _, up := range []Availability{0, ^Availability(0) &^ 0b11} {
			if i, why := tab.Select(Hash("x"), m, up, []int{5, 0}); i != -1 || why != NoServerUp {
				t.Errorf("mode %v up=%b: got %d %v, want -1 no-server-up", m, up, i, why)
			}
		}
	}
}

// TestFullListShares: first choices follow the weights, and ids displaced by
// a down server spread over the others by weight.
func TestFullListShares(t *testing.T) {
	tab := mustTable(t, "a:1,b:1,c:2,d:4")
	const n = 40000
	hs := ids(n)
	down := tab.AllUp().Without(3) // d (half the weight) down
	first := make([]int, tab.Len())
	resel := make([]int, tab.Len())
	displaced := 0
	for _, h := range hs {
		first[tab.First(h)]++
		i, why := tab.Select(h, FullList, down, nil)
		if why == Reselected {
			displaced++
			resel[i]++
		}
	}
	check := func(what string, got, total int, share float64) {
		t.Helper()
		sigma := math.Sqrt(float64(total) * share * (1 - share))
		if d := math.Abs(float64(got) - float64(total)*share); d > 5*sigma {
			t.Errorf("%s: %d of %d, want %.0f ± %.0f (5σ)", what, got, total, float64(total)*share, 5*sigma)
		}
	}
	for i, w := range []float64{1, 1, 2, 4} {
		check("first choice "+tab.Server(i).Name, first[i], n, w/8)
	}
	check("displaced", displaced, n, 0.5)
	for i, w := range []float64{1, 1, 2} {
		check("reselected to "+tab.Server(i).Name, resel[i], displaced, w/4)
	}
	if resel[3] != 0 {
		t.Errorf("%d ids reselected onto the down server", resel[3])
	}
}

// TestAvailableOnlyMovesMany: the first bug remaps ids on servers that stayed up.
func TestAvailableOnlyMovesMany(t *testing.T) {
	tab := mustTable(t, "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1")
	hs := ids(20000)
	down := tab.AllUp().Without(1)
	movedFull, movedAvail, remapped := 0, 0, 0
	for _, h := range hs {
		before, _ := tab.Select(h, FullList, tab.AllUp(), nil)
		if after, _ := tab.Select(h, FullList, down, nil); after != before {
			movedFull++
		}
		beforeA, _ := tab.Select(h, AvailableOnly, tab.AllUp(), nil)
		afterA, why := tab.Select(h, AvailableOnly, down, nil)
		if afterA != beforeA {
			movedAvail++
		}
		if why == Remapped {
			remapped++
		}
	}
	fullShare := float64(movedFull) / float64(len(hs))
	availShare := float64(movedAvail) / float64(len(hs))
	if math.Abs(fullShare-1.0/8) > 0.02 {
		t.Errorf("full-list moved %.3f, want about 1/8", fullShare)
	}
	// Modulo 7 vs modulo 8: an id keeps its server only when h%8 == h%7 maps
	// to the same server (about 1/8 of ids), so most ids move.
	if availShare < 0.7 {
		t.Errorf("available-only moved only %.3f of ids, want most of them", availShare)
	}
	if remapped == 0 {
		t.Error("available-only never reported Remapped")
	}
}

func TestRebalanceOverride(t *testing.T) {
	tab := mustTable(t, "a:1,b:1")
	// Find an id whose first choice is a (index 0).
	var h uint64
	for _, x := range ids(100) {
		if tab.First(x) == 0 {
			h = x
			break
		}
	}
	up := tab.AllUp()
	cases := []struct {
		inflight []int
		want     int
		why      Reason
	}{
		{nil, 0, FirstChoice},            // no load: never fires
		{[]int{1, 1}, 0, FirstChoice},    // balanced
		{[]int{3, 2}, 0, FirstChoice},    // share 0.6 <= 1.5*0.5
		{[]int{3, 1}, 0, FirstChoice},    // share 0.75 is exactly 1.5*0.5: not above
		{[]int{4, 1}, 1, Rebalanced},     // share 0.8 > 0.75
		{[]int{1, 0}, 1, Rebalanced},     // share 1.0 > 0.75
		{[]int{-4, 7}, 0, FirstChoice},   // negative counts as zero
		{[]int{9}, 1, Rebalanced},        // missing entry counts as zero
		{[]int{0, 100}, 0, FirstChoice},  // the other server is the loaded one
		{[]int{7, 0, 99}, 1, Rebalanced}, // extra entries ignored
	}
	for _, c := range cases {
		i, why := tab.Select(h, RebalanceOverride, up, c.inflight)
		if i != c.want || why != c.why {
			t.Errorf("inflight %v: got %d %v, want %d %v", c.inflight, i, why, c.want, c.why)
		}
	}
	// With b down, the request stays on a however loaded: no other server.
	if i, why := tab.Select(h, RebalanceOverride, up.Without(1), []int{10, 0}); i != 0 || why != FirstChoice {
		t.Errorf("single up server: got %d %v", i, why)
	}
	// Factor is configurable: with 1.2, Shopify's 3:1 drift moves the
	// request; with 4, 4:1 does not.
	tab12, err := New(Config{Servers: tab.Servers(), RebalanceFactor: 1.2})
	if err != nil {
		t.Fatal(err)
	}
	if i, why := tab12.Select(h, RebalanceOverride, up, []int{3, 1}); i != 1 || why != Rebalanced {
		t.Errorf("factor 1.2, 3:1: got %d %v", i, why)
	}
	tab4, err := New(Config{Servers: tab.Servers(), RebalanceFactor: 4})
	if err != nil {
		t.Fatal(err)
	}
	if i, why := tab4.Select(h, RebalanceOverride, up, []int{4, 1}); i != 0 || why != FirstChoice {
		t.Errorf("factor 4, 4:1: got %d %v", i, why)
	}
}

func TestRebalanceWeighted(t *testing.T) {
	tab := mustTable(t, "a:1,b:1,c:2")
	var h uint64
	for _, x := range ids(100) {
		if tab.First(x) == 0 {
			h = x
			break
		}
	}
	// a has 4 of 8 in flight (share 0.5 > 1.5 × 0.25): moved to the least
	// loaded per weight: b has 3/1, c has 1/2 → c.
	if i, why := tab.Select(h, RebalanceOverride, tab.AllUp(), []int{4, 3, 1}); i != 2 || why != Rebalanced {
		t.Errorf("got %d %v, want c rebalanced", i, why)
	}
	// Down servers are never a target.
	if i, why := tab.Select(h, RebalanceOverride, tab.AllUp().Without(2), []int{4, 0, 0}); i != 1 || why != Rebalanced {
		t.Errorf("got %d %v, want b rebalanced", i, why)
	}
}

func TestSelectAllocs(t *testing.T) {
	tab := mustTable(t, "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1")
	inflight := []int{9, 1, 1, 1, 1, 1, 1, 1}
	hs := ids(64)
	up := tab.AllUp().Without(0)
	for _, m := range Modes() {
		allocs := testing.AllocsPerRun(100, func() {
			for _, h := range hs {
				tab.Select(h, m, up, inflight)
			}
			tab.SelectID("session-1", m, up, inflight)
		})
		if allocs != 0 {
			t.Errorf("mode %v: %v allocations per run", m, allocs)
		}
	}
}

// genTable draws a table of 1..12 servers with weights 1..5.
func genTable(t *rapid.T) *Table {
	n := rapid.IntRange(1, 12).Draw(t, "n")
	servers := make([]Server, n)
	for i := range servers {
		servers[i] = Server{Name: fmt.Sprint("s", i), Weight: rapid.IntRange(1, 5).Draw(t, fmt.Sprint("w", i))}
	}
	tab, err := NewTable(servers)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// TestPropFullListMovesExactlyTheDownServersIDs: from any availability,
// taking server k down moves exactly the ids that were on k, and bringing it
// back returns exactly those ids.
func TestPropFullListMovesExactlyTheDownServersIDs(t *testing.T) {
	hs := ids(2000)
	rapid.Check(t, func(t *rapid.T) {
		tab := genTable(t)
		up := Availability(rapid.Uint64().Draw(t, "up")) & tab.AllUp()
		k := rapid.IntRange(0, tab.Len()-1).Draw(t, "k")
		up = up.With(k)
		down := up.Without(k)
		for _, h := range hs {
			before, whyB := tab.Select(h, FullList, up, nil)
			after, whyA := tab.Select(h, FullList, down, nil)
			if before < 0 || !up.Up(before) {
				t.Fatalf("selected %d (%v) which is not up in %b", before, whyB, up)
			}
			if down != 0 && (after < 0 || !down.Up(after)) {
				t.Fatalf("selected %d (%v) which is not up in %b", after, whyA, down)
			}
			if (before == k) != (after != before) {
				t.Fatalf("h=%#x: on %d with k=%d up, on %d with k down", h, before, k, after)
			}
			if first := tab.First(h); (first == before) != (whyB == FirstChoice) {
				t.Fatalf("reason %v but first=%d selected=%d", whyB, first, before)
			}
		}
	})
}

// TestPropNeverDown: every mode only returns up servers.
func TestPropNeverDown(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tab := genTable(t)
		up := Availability(rapid.Uint64().Draw(t, "up"))
		mode := rapid.SampledFrom(Modes()).Draw(t, "mode")
		inflight := rapid.SliceOfN(rapid.IntRange(-2, 50), 0, 14).Draw(t, "inflight")
		h := rapid.Uint64().Draw(t, "h")
		i, why := tab.Select(h, mode, up, inflight)
		live := up & tab.AllUp()
		if live == 0 {
			if i != -1 || why != NoServerUp {
				t.Fatalf("no server up: got %d %v", i, why)
			}
			return
		}
		if !live.Up(i) {
			t.Fatalf("mode %v selected %d (%v), not up in %b", mode, i, why, live)
		}
		if why.Moved() != (i != tab.First(h)) {
			t.Fatalf("reason %v inconsistent: selected %d, first %d", why, i, tab.First(h))
		}
	})
}
