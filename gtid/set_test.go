package gtid

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

const (
	u1 = "3e11fa47-71ca-11e1-9e33-c80aa9429561"
	u2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	u3 = "8a94f357-aab4-11df-86ab-c80aa9429563"
)

func TestParseCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"  \n ", ""},
		{",", ""},
		{u1 + ":1-5", u1 + ":1-5"},
		{strings.ToUpper(u1) + ":1-5", u1 + ":1-5"},
		{u1 + ":7", u1 + ":7"},
		{u1 + ":7-7", u1 + ":7"},
		{u1 + ":1-3:4-5", u1 + ":1-5"},            // adjacent merge
		{u1 + ":4-5:1-3", u1 + ":1-5"},            // unsorted
		{u1 + ":1-10:5-6:20", u1 + ":1-10:20"},    // overlap
		{u1 + ":1-3," + u1 + ":5", u1 + ":1-3:5"}, // repeated UUID
		{u2 + ":1," + u1 + ":2", u1 + ":2,\n" + u2 + ":1"},
		{u2 + ":1,\n" + u1 + ":2", u1 + ":2,\n" + u2 + ":1"},
		{" " + u1 + " : 1 - 3 ,\n " + u1 + ":4", u1 + ":1-4"},
		{u1 + ":1-3,,", u1 + ":1-3"},
		{u1 + ":tb:5:ta:1-2:3", u1 + ":ta:1-3:tb:5"},
		{u1 + ":TAG_X:5", u1 + ":tag_x:5"},
		{u1 + ":_t:1", u1 + ":_t:1"},
		{u1 + ":tag:1-5," + u1 + ":8", u1 + ":8:tag:1-5"},
		{u1 + ":x:1," + u1 + ":X:2", u1 + ":x:1-2"},
		{"{" + u1 + "}:1", u1 + ":1"},
		{strings.ReplaceAll(u1, "-", "") + ":1", u1 + ":1"},
		{u1 + ":1-9223372036854775806", u1 + ":1-9223372036854775806"},
		{u1 + ":abcdefghijabcdefghijabcdefghijab:5", u1 + ":abcdefghijabcdefghijabcdefghijab:5"},
		{u1 + ":1-5:7:9-10, " + u2 + ":1-3:tb:5:ta:1-2", u1 + ":1-5:7:9-10,\n" + u2 + ":1-3:ta:1-2:tb:5"},
	}
	for _, tc := range tests {
		s, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := s.String(); got != tc.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		if got := s.CompactString(); got != strings.ReplaceAll(tc.want, ",\n", ",") {
			t.Errorf("Parse(%q).CompactString() = %q", tc.in, got)
		}
		checkInvariants(t, s)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		in     string
		pos    int
		reason string
	}{
		{u1[:35] + "x:1", 35, "not a hex digit"},
		{u1[:20] + ":1", 20, "hex digit"},
		{"zz", 0, "not a hex digit"},
		{u1, 0, "UUID has no interval"},
		{u1 + ":0", 37, "GNO 0"},
		{u1 + ":5-3", 37, "greater than its end"},
		{u1 + ":1-9223372036854775807", 39, "past the largest GNO"},
		{u1 + ":99999999999999999999999", 37, "past the largest GNO"},
		{u1 + "::1", 37, "empty tag"},
		{u1 + ":abcdefghijabcdefghijabcdefghijabc:5", 37, "at most 32"},
		{u1 + ":tag", 37, "no interval"},
		{u1 + ":tag:t2:1", 37, "no interval"},
		{u1 + ":1-3:tag", 41, "no interval"},
		{u1 + ":1t:1", 38, "expected ','"},
		{u1 + ":1;", 38, "expected ','"},
		{u1 + ":1-", 39, "expected a number"},
		{u1 + ":1 2", 39, "expected ','"},
		{u1 + ":", 37, "expected an interval"},
		{u1 + ":1," + u2, 39, "no interval"},
		{u1 + ":1,x", 39, "malformed UUID"},
		{u1 + ":é", 37, "expected an interval or a tag"},
	}
	for _, tc := range tests {
		_, err := Parse(tc.in)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) = %v, want a *ParseError", tc.in, err)
			continue
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q): errors.Is(err, ErrSyntax) is false", tc.in)
		}
		if pe.Pos != tc.pos || !strings.Contains(pe.Reason, tc.reason) {
			t.Errorf("Parse(%q) error at %d %q, want at %d containing %q", tc.in, pe.Pos, pe.Reason, tc.pos, tc.reason)
		}
		if !strings.Contains(err.Error(), "byte") {
			t.Errorf("error %q does not name the position", err)
		}
	}
}

// checkInvariants verifies the package-doc invariants of s.
func checkInvariants(t *testing.T, s Set) {
	t.Helper()
	for i, src := range s.srcs {
		if i > 0 && s.srcs[i-1].key.compare(src.key) >= 0 {
			t.Fatalf("sources not strictly sorted at %d in %q", i, s)
		}
		if src.key.Tag != lowerTag(src.key.Tag) || len(src.key.Tag) > MaxTagLen {
			t.Fatalf("bad tag %q", src.key.Tag)
		}
		if len(src.ivs) == 0 {
			t.Fatalf("empty source %v in %q", src.key, s)
		}
		for k, iv := range src.ivs {
			if iv.Start < 1 || iv.Start > iv.End || iv.End > MaxGNO {
				t.Fatalf("bad interval %v in %q", iv, s)
			}
			if k > 0 && src.ivs[k-1].End+1 >= iv.Start {
				t.Fatalf("intervals not merged: %v %v in %q", src.ivs[k-1], iv, s)
			}
		}
	}
}

func TestOperations(t *testing.T) {
	tests := []struct {
		a, b                       string
		union, subtract, intersect string
		aContainsB, bContainsA     bool
	}{
		{"", "", "", "", "", true, true},
		{u1 + ":1-5", "", u1 + ":1-5", u1 + ":1-5", "", true, false},
		{"", u1 + ":1-5", u1 + ":1-5", "", "", false, true},
		{u1 + ":1-10", u1 + ":3-4", u1 + ":1-10", u1 + ":1-2:5-10", u1 + ":3-4", true, false},
		{u1 + ":1-10", u1 + ":10-12", u1 + ":1-12", u1 + ":1-9", u1 + ":10", false, false},
		{u1 + ":1-3:7-9", u1 + ":4-6", u1 + ":1-9", u1 + ":1-3:7-9", "", false, false},
		{u1 + ":1-3:7-9", u1 + ":2-8", u1 + ":1-9", u1 + ":1:9", u1 + ":2-3:7-8", false, false},
		{u1 + ":1-100", u1 + ":2:4:6-7:50-200", u1 + ":1-200", u1 + ":1:3:5:8-49", u1 + ":2:4:6-7:50-100", false, false},
		{u1 + ":1-5", u2 + ":1-5", u1 + ":1-5,\n" + u2 + ":1-5", u1 + ":1-5", "", false, false},
		{u1 + ":1-5:t:1-3", u1 + ":t:2", u1 + ":1-5:t:1-3", u1 + ":1-5:t:1:3", u1 + ":t:2", true, false},
		{u1 + ":1-5", u1 + ":t:1-5", u1 + ":1-5:t:1-5", u1 + ":1-5", "", false, false},
		{u1 + ":1-5," + u2 + ":1-5", u1 + ":1-5," + u2 + ":1-5", u1 + ":1-5,\n" + u2 + ":1-5", "", u1 + ":1-5,\n" + u2 + ":1-5", true, true},
		{u1 + ":1-5," + u3 + ":9", u2 + ":1," + u3 + ":9", u1 + ":1-5,\n" + u2 + ":1,\n" + u3 + ":9", u1 + ":1-5", u3 + ":9", false, false},
		{u1 + ":1-9223372036854775806", u1 + ":9223372036854775806", u1 + ":1-9223372036854775806", u1 + ":1-9223372036854775805", u1 + ":9223372036854775806", true, false},
	}
	for _, tc := range tests {
		a, b := MustParse(tc.a), MustParse(tc.b)
		aText, bText := a.String(), b.String()
		check := func(op string, got Set, want string) {
			t.Helper()
			checkInvariants(t, got)
			if got.String() != want {
				t.Errorf("%q %s %q = %q, want %q", tc.a, op, tc.b, got, want)
			}
			if !got.Equal(MustParse(want)) {
				t.Errorf("%q %s %q: Equal(parse(want)) is false", tc.a, op, tc.b)
			}
		}
		check("∪", a.Union(b), tc.union)
		check("∪'", b.Union(a), tc.union)
		check("\\", a.Subtract(b), tc.subtract)
		check("∩", a.Intersect(b), tc.intersect)
		check("∩'", b.Intersect(a), tc.intersect)
		if got := a.Contains(b); got != tc.aContainsB {
			t.Errorf("%q Contains %q = %v", tc.a, tc.b, got)
		}
		if got := b.Contains(a); got != tc.bContainsA {
			t.Errorf("%q Contains %q = %v", tc.b, tc.a, got)
		}
		if got, want := a.Intersects(b), tc.intersect != ""; got != want {
			t.Errorf("%q Intersects %q = %v", tc.a, tc.b, got)
		}
		if a.Equal(b) != (tc.aContainsB && tc.bContainsA) {
			t.Errorf("%q Equal %q wrong", tc.a, tc.b)
		}
		// In-place forms agree and value forms left the inputs alone.
		for _, ip := range []struct {
			op   string
			f    func(*Set, Set)
			want string
		}{
			{"∪=", (*Set).UnionInPlace, tc.union},
			{"\\=", (*Set).SubtractInPlace, tc.subtract},
			{"∩=", (*Set).IntersectInPlace, tc.intersect},
		} {
			c := a.Clone()
			ip.f(&c, b)
			check(ip.op, c, ip.want)
		}
		if a.String() != aText || b.String() != bText {
			t.Errorf("inputs modified: %q %q -> %q %q", aText, bText, a, b)
		}
	}
}

// TestResultsShareNoMemory mutates every result in place and checks that the
// inputs are unchanged.
func TestPrefixes(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{u1 + ":7", u1 + ":1-7"},
		{u1 + ":1-5:10-20:31", u1 + ":1-31"},
		{u1 + ":1-3:8," + u1 + ":tag:4:9," + u2 + ":100-200", u1 + ":1-8:tag:1-9,\n" + u2 + ":1-200"},
	}
	for _, c := range cases {
		in := MustParse(c.in)
		text := in.String()
		got := in.Prefixes()
		if got.String() != c.want {
			t.Errorf("Prefixes(%q) = %q, want %q", c.in, got, c.want)
		}
		if in.String() != text {
			t.Errorf("Prefixes modified its input: %q became %q", text, in)
		}
		if !got.Contains(in) {
			t.Errorf("Prefixes(%q) = %q is not a superset", c.in, got)
		}
		if !got.Prefixes().Equal(got) {
			t.Errorf("Prefixes is not idempotent on %q", got)
		}
	}
}

func TestResultsShareNoMemory(t *testing.T) {
	a := MustParse(u1 + ":1-5:10-20," + u2 + ":t:3")
	b := MustParse(u1 + ":7," + u3 + ":1-2")
	aText, bText := a.String(), b.String()
	g := GTID{SID: a.srcs[0].key.SID, GNO: 6}
	for _, r := range []Set{a.Union(b), a.Subtract(b), a.Intersect(b), a.Clone(), b.Clone(), b.Union(a), a.Prefixes(), b.Prefixes()} {
		_ = r.AddInPlace(g)
		_ = r.AddInPlace(GTID{SID: a.srcs[0].key.SID, GNO: 21})
		_ = r.AddInPlace(GTID{SID: b.srcs[1].key.SID, GNO: 3})
		r.UnionInPlace(MustParse(u1 + ":1-100"))
	}
	if x, err := a.Add(g); err != nil || x.String() != u1+":1-6:10-20,\n"+u2+":t:3" {
		t.Errorf("Add = %q, %v", x, err)
	}
	if a.String() != aText || b.String() != bText {
		t.Fatalf("inputs modified: %q %q", a, b)
	}
}

func TestContainsGTID(t *testing.T) {
	s := MustParse(u1 + ":1-5:7:9-10:t:3," + u3 + ":100-200")
	tests := []struct {
		g    string
		want bool
	}{
		{u1 + ":1", true}, {u1 + ":5", true}, {u1 + ":6", false}, {u1 + ":7", true},
		{u1 + ":8", false}, {u1 + ":10", true}, {u1 + ":11", false},
		{u1 + ":t:3", true}, {u1 + ":T:3", true}, {u1 + ":t:4", false}, {u1 + ":u:3", false},
		{u2 + ":1", false}, {u3 + ":99", false}, {u3 + ":150", true},
	}
	for _, tc := range tests {
		g := MustParseGTID(tc.g)
		if got := s.ContainsGTID(g); got != tc.want {
			t.Errorf("ContainsGTID(%s) = %v", tc.g, got)
		}
		one, err := Set{}.Add(g)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Contains(one); got != tc.want {
			t.Errorf("Contains({%s}) = %v", tc.g, got)
		}
	}
}

func TestContainsGTIDManySources(t *testing.T) {
	var parts []string
	for i := range 20 {
		parts = append(parts, fmt.Sprintf("%08x-0000-0000-0000-000000000000:%d-%d", i*7, i+1, i+5))
	}
	s := MustParse(strings.Join(parts, ","))
	for i := range 20 {
		sid, _ := ParseSID(fmt.Sprintf("%08x-0000-0000-0000-000000000000", i*7))
		for gno := int64(1); gno < 30; gno++ {
			want := gno >= int64(i+1) && gno <= int64(i+5)
			if got := s.ContainsGTID(GTID{SID: sid, GNO: gno}); got != want {
				t.Fatalf("source %d GNO %d: %v", i, gno, got)
			}
		}
		if s.ContainsGTID(GTID{SID: sid, Tag: "t", GNO: int64(i + 1)}) {
			t.Fatalf("tagged GTID of an untagged source contained")
		}
	}
	missing, _ := ParseSID("00000001-0000-0000-0000-000000000000")
	if s.ContainsGTID(GTID{SID: missing, GNO: 1}) {
		t.Fatal("missing source contained")
	}
}

func TestAddInPlace(t *testing.T) {
	var s Set
	for _, step := range []struct{ g, want string }{
		{u2 + ":5", u2 + ":5"},
		{u2 + ":6", u2 + ":5-6"},
		{u2 + ":6", u2 + ":5-6"},
		{u2 + ":9", u2 + ":5-6:9"},
		{u2 + ":3", u2 + ":3:5-6:9"},
		{u2 + ":4", u2 + ":3-6:9"},
		{u2 + ":8", u2 + ":3-6:8-9"},
		{u2 + ":7", u2 + ":3-9"},
		{u2 + ":1", u2 + ":1:3-9"},
		{u1 + ":1", u1 + ":1,\n" + u2 + ":1:3-9"},
		{u2 + ":b:1", u1 + ":1,\n" + u2 + ":1:3-9:b:1"},
		{u2 + ":a:2", u1 + ":1,\n" + u2 + ":1:3-9:a:2:b:1"},
		{u3 + ":9223372036854775806", u1 + ":1,\n" + u2 + ":1:3-9:a:2:b:1,\n" + u3 + ":9223372036854775806"},
	} {
		if err := s.AddInPlace(MustParseGTID(step.g)); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, s)
		if s.String() != step.want {
			t.Fatalf("after adding %s: %q, want %q", step.g, s, step.want)
		}
	}
	for _, bad := range []GTID{{GNO: 0}, {GNO: -1}, {GNO: MaxGNO + 1}, {GNO: 1, Tag: "1x"}, {GNO: 1, Tag: "a-b"}, {GNO: 1, Tag: strings.Repeat("a", 33)}} {
		before := s.String()
		if err := s.AddInPlace(bad); err == nil {
			t.Errorf("AddInPlace(%+v) accepted", bad)
		}
		if s.String() != before {
			t.Errorf("failed AddInPlace changed the set")
		}
	}
}

func TestCountLenSources(t *testing.T) {
	s := MustParse(u1 + ":1-5:7:t:1-10," + u2 + ":100")
	if got := s.Count(); got != 17 {
		t.Errorf("Count = %d", got)
	}
	if s.Len() != 3 || s.IsEmpty() || !(Set{}).IsEmpty() || (Set{}).Count() != 0 {
		t.Errorf("Len/IsEmpty wrong")
	}
	var keys []string
	for k, ivs := range s.Sources() {
		keys = append(keys, k.SID.String()+"/"+k.Tag)
		if len(ivs) == 0 {
			t.Errorf("empty intervals")
		}
	}
	if !slices.Equal(keys, []string{u1 + "/", u1 + "/t", u2 + "/"}) {
		t.Errorf("Sources order %v", keys)
	}
	sid, _ := ParseSID(u1)
	if got := s.Intervals(sid, "t"); !slices.Equal(got, []Interval{{1, 10}}) {
		t.Errorf("Intervals = %v", got)
	}
	big := MustParse(u1 + ":1-9223372036854775806," + u2 + ":1-9223372036854775806," + u3 + ":1-9223372036854775806")
	if big.Count() != ^uint64(0) {
		t.Errorf("Count does not saturate: %d", big.Count())
	}
}

func TestParseGTID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{u1 + ":5", u1 + ":5"},
		{strings.ToUpper(u1) + ":Tag:5", u1 + ":tag:5"},
		{" " + u1 + " : 5 ", u1 + ":5"},
	} {
		g, err := ParseGTID(tc.in)
		if err != nil || g.String() != tc.want {
			t.Errorf("ParseGTID(%q) = %v, %v", tc.in, g, err)
		}
	}
	for _, bad := range []string{"", u1, u1 + ":", u1 + ":0", u1 + ":1-2", u1 + ":t", u1 + ":t:", u1 + ":5x", "x" + u1 + ":1", u1 + ":9223372036854775807"} {
		if _, err := ParseGTID(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseGTID(%q) = %v, want a syntax error", bad, err)
		}
	}
}

func TestTextMarshal(t *testing.T) {
	s := MustParse(u2 + ":1-3," + u1 + ":t:4")
	b, err := s.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var back Set
	if err := back.UnmarshalText(b); err != nil || !back.Equal(s) {
		t.Fatalf("round trip %q: %v", b, err)
	}
	if err := back.UnmarshalText([]byte("nope")); err == nil {
		t.Fatal("bad text accepted")
	}
}

// containsIvsWalk is containsIvs before galloping: one interval of sup at a
// time. TestContainsIvsGallop checks the two agree.
func containsIvsWalk(sup, sub []Interval) bool {
	if len(sub) == 0 {
		return true
	}
	if len(sup) == 0 || sub[0].Start < sup[0].Start || sub[len(sub)-1].End > sup[len(sup)-1].End {
		return false
	}
	for _, x := range sub {
		for sup[0].End < x.Start {
			sup = sup[1:]
		}
		if sup[0].Start > x.Start || sup[0].End < x.End {
			return false
		}
	}
	return true
}

// TestContainsIvsGallop: the galloping containsIvs agrees with the
// one-by-one walk on large fragmented interval lists, where sub is mostly a
// subset of sup (pieces of sup's intervals, some far apart, some adjacent)
// with now and then one GNO moved into a gap or past the end; and on
// every one- and two-interval sub of small lists.
func TestContainsIvsGallop(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	answers := map[bool]int{}
	for range 3000 {
		n := 1 + rng.IntN(1<<rng.IntN(11))
		sup := make([]Interval, 0, n)
		next := int64(1 + rng.IntN(3))
		for range n {
			l := int64(1 + rng.IntN(5))
			sup = append(sup, Interval{next, next + l - 1})
			next += l + 1 + int64(rng.IntN(4)) // at least one missing GNO
		}
		var sub []Interval
		p := []float64{0.02, 0.2, 0.9}[rng.IntN(3)] // how often an interval of sup is used
		for _, iv := range sup {
			if rng.Float64() >= p {
				continue
			}
			a := iv.Start + rng.Int64N(iv.End-iv.Start+1)
			b := a + rng.Int64N(iv.End-a+1)
			sub = append(sub, Interval{a, b})
		}
		if len(sub) > 0 && rng.IntN(3) == 0 {
			// Break containment: stretch one interval into the gap after it
			// (or, for sup's last, past its end), or before its start.
			k := rng.IntN(len(sub))
			if rng.IntN(2) == 0 && (k+1 == len(sub) || sub[k].End+1 < sub[k+1].Start) {
				sub[k].End++
			} else if k == 0 || sub[k-1].End+1 < sub[k].Start-1 {
				if sub[k].Start > 1 {
					sub[k].Start--
				}
			}
		}
		want := containsIvsWalk(sup, sub)
		if got := containsIvs(sup, sub); got != want {
			t.Fatalf("containsIvs(%v, %v) = %v, walk says %v", sup, sub, got, want)
		}
		answers[want]++
	}
	if answers[true] < 1000 || answers[false] < 300 {
		t.Fatalf("answers %v: the cases do not exercise both outcomes", answers)
	}
	// Exhaustively on small lists: one interval anywhere, alone or after
	// one GNO of sup's first interval (so the search starts past it).
	for n := 1; n <= 12; n++ {
		sup := make([]Interval, n)
		for i := range sup {
			sup[i] = Interval{int64(10*i + 1), int64(10*i + 5)}
		}
		top := sup[n-1].End + 1
		for a := int64(1); a <= top; a++ {
			for b := a; b <= top; b++ {
				for _, sub := range [][]Interval{{{a, b}}, {{1, 1}, {a, b}}} {
					if len(sub) == 2 && a <= 2 {
						continue
					}
					if got, want := containsIvs(sup, sub), containsIvsWalk(sup, sub); got != want {
						t.Fatalf("containsIvs(%v, %v) = %v, walk says %v", sup, sub, got, want)
					}
				}
			}
		}
	}
}
