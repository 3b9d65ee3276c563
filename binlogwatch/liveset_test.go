package binlogwatch

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var (
	sidA = [16]byte{0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62}
	sidB = [16]byte{0x4e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42, 0x95, 0x62}
)

func TestLiveSetAddAndString(t *testing.T) {
	s := &liveSet{}
	a := source{sid: sidA}
	for _, g := range []int64{1, 2, 3, 7, 5, 6, 10} {
		if !s.add(a, g) {
			t.Fatalf("add(%d) reported duplicate", g)
		}
	}
	if s.add(a, 6) {
		t.Fatal("add(6) twice reported new")
	}
	s.add(source{sid: sidA, tag: "blue"}, 4)
	s.add(source{sid: sidB}, 9)
	want := "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-3:5-7:10:blue:4,4e11fa47-71ca-11e1-9e33-c80aa9429562:9"
	if got := s.String(); got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	s.add(a, 4)
	if got := s.String(); !strings.HasPrefix(got, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7:10:") {
		t.Fatalf("merge failed: %q", got)
	}
}

func TestParseLiveSetRoundTrip(t *testing.T) {
	in := "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:9-12"
	s, err := parseLiveSet(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.format(",\n"), in; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	e, err := parseLiveSet("")
	if err != nil || !e.isEmpty() {
		t.Fatalf("empty set: %v %v", e, err)
	}
	if _, err := parseLiveSet("not-a-set"); err == nil {
		t.Fatal("garbage parsed")
	}
}

// TestLiveSetModel checks add, contains, containsSet and missing against a
// map of GTIDs.
func TestLiveSetModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		srcs := []source{{sid: sidA}, {sid: sidA, tag: "t"}, {sid: sidB}}
		s, o := &liveSet{}, &liveSet{}
		ms, mo := map[source]map[int64]bool{}, map[source]map[int64]bool{}
		put := func(m map[source]map[int64]bool, src source, g int64) bool {
			if m[src] == nil {
				m[src] = map[int64]bool{}
			}
			old := m[src][g]
			m[src][g] = true
			return !old
		}
		n := rapid.IntRange(0, 200).Draw(t, "n")
		for range n {
			src := srcs[rapid.IntRange(0, 2).Draw(t, "src")]
			g := rapid.Int64Range(1, 40).Draw(t, "gno")
			if rapid.Bool().Draw(t, "which") {
				if s.add(src, g) != put(ms, src, g) {
					t.Fatalf("add(%v,%d) result disagrees", src, g)
				}
			} else {
				o.add(src, g)
				put(mo, src, g)
			}
		}
		for _, src := range srcs {
			for g := int64(0); g <= 41; g++ {
				if s.contains(src, g) != ms[src][g] {
					t.Fatalf("contains(%v,%d) disagrees; set %s", src, g, s)
				}
			}
		}
		wantContains, wantMissing := true, int64(0)
		for src, gs := range mo {
			for g := range gs {
				if !ms[src][g] {
					wantContains = false
					wantMissing++
				}
			}
		}
		if s.containsSet(o) != wantContains {
			t.Fatalf("containsSet = %v, want %v (%s vs %s)", !wantContains, wantContains, s, o)
		}
		if got := s.missing(o); got != wantMissing {
			t.Fatalf("missing = %d, want %d", got, wantMissing)
		}
		// Invariants and a round trip through text.
		for _, si := range s.srcs {
			for i := 1; i < len(si.ivs); i++ {
				if si.ivs[i-1].end+1 >= si.ivs[i].start {
					t.Fatalf("intervals not merged: %v", si.ivs)
				}
			}
		}
		p, err := parseLiveSet(s.String())
		if err != nil || p.String() != s.String() {
			t.Fatalf("round trip %q -> %q (%v)", s, p, err)
		}
		c := s.clone()
		c.add(source{sid: sidB, tag: "zz"}, 1)
		if s.contains(source{sid: sidB, tag: "zz"}, 1) {
			t.Fatal("clone shares storage")
		}
	})
}

func FuzzParseLiveSet(f *testing.F) {
	for _, s := range []string{
		"", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
		"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:9",
		"3e11fa47-71ca-11e1-9e33-c80aa9429562:tag:3-4", "x:1", ":", "3e11fa47-71ca-11e1-9e33-c80aa9429562:5-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := parseLiveSet(in)
		if err != nil {
			return
		}
		again, err := parseLiveSet(s.String())
		if err != nil {
			t.Fatalf("own output %q does not parse: %v", s.String(), err)
		}
		if again.String() != s.String() || !again.containsSet(s) || !s.containsSet(again) {
			t.Fatalf("round trip changed the set: %q -> %q", s, again)
		}
	})
}
