package gtid_test

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/causallab/causallab/gtid"
)

func TestParseMariaDBPosition(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"0-1-5", "0-1-5"},
		{"5-1-1,0-1-2,3-2-3", "0-1-2,3-2-3,5-1-1"}, // sorted by domain, as MariaDB prints
		{" 0-+1-05, 1- 2-3", "0-1-5,1-2-3"},        // my_strtoll10: spaces, '+', leading zeros
		{"\t0-1-0", "0-1-0"},
		{"4294967295-4294967295-18446744073709551615", "4294967295-4294967295-18446744073709551615"},
		{"000000000000000000000000000007-1-1", "7-1-1"},
	} {
		p, err := gtid.ParseMariaDBPosition(c.in)
		if err != nil || p.String() != c.want {
			t.Errorf("ParseMariaDBPosition(%q) = %q, %v; want %q", c.in, p, err, c.want)
		}
	}
	for _, bad := range []string{" ", "0-1", "0-1-", "0--1-5", "-0-1-5", "0 -1-5", "0-1-5 ", "0-1-5 ,1-1-1", "0-1-5,", ",0-1-5",
		"4294967296-1-1", "0-4294967296-1", "0-1-18446744073709551616", "0-1-5,0-2-6", "a-1-1", "0-1-1x", "+"} {
		if p, err := gtid.ParseMariaDBPosition(bad); err == nil {
			t.Errorf("ParseMariaDBPosition(%q) = %q, want an error", bad, p)
		}
	}
	// MASTER_GTID_WAIT's argument may repeat a domain.
	w, err := gtid.ParseMariaDBWait("0-1-1,0-2-7,0-1-3")
	if err != nil || w.String() != "0-2-7" {
		t.Fatalf("ParseMariaDBWait = %q, %v", w, err)
	}
}

func TestMariaDBContainsUnion(t *testing.T) {
	p := gtid.MustParseMariaDBPosition
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"0-1-5", "0-1-5", true},
		{"0-1-5", "0-1-6", false},
		{"0-2-105", "0-1-103", true}, // server ids do not count: the failover hazard
		{"0-1-5", "1-1-1", false},
		{"0-1-5", "7-3-0", true}, // seq 0 is always reached
		{"", "", true},
		{"0-1-5,1-1-9", "1-2-9,0-9-1", true},
	} {
		if got := p(c.a).Contains(p(c.b)); got != c.want {
			t.Errorf("%q.Contains(%q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	a, b := p("0-1-5,2-1-1"), p("0-2-5,1-1-3,2-3-4")
	if u := a.Union(b); u.String() != "0-1-5,1-1-3,2-3-4" || !u.Equal(b.Union(a)) {
		t.Fatalf("union %q / %q", a.Union(b), b.Union(a))
	}
	if a.String() != "0-1-5,2-1-1" || b.String() != "0-2-5,1-1-3,2-3-4" {
		t.Fatal("Union modified an input")
	}
	if got := gtid.FormatMariaDBRanges(p("0-1-22,1-1-4").Ahead(p("0-2-16"))); got != "0-1-17..22,1-1-1..4" {
		t.Fatalf("Ahead = %q", got)
	}
	j, _ := json.Marshal(a)
	var back gtid.MariaDBPosition
	if err := json.Unmarshal(j, &back); err != nil || !back.Equal(a) {
		t.Fatalf("JSON round trip %s: %q %v", j, back, err)
	}
}

// randMariaDB writes a random position in messy but valid text.
func randMariaDB(r *rand.Rand) string {
	var parts []string
	used := map[int]bool{}
	for range r.IntN(4) {
		d := r.IntN(4)
		if used[d] {
			continue
		}
		used[d] = true
		sp := []string{"", " ", "\t", "+", "0"}[r.IntN(5)]
		parts = append(parts, sp+itoa(d)+"-"+itoa(1+r.IntN(3))+"-"+sp+itoa(r.IntN(6)))
	}
	return strings.Join(parts, ","+[]string{"", " "}[r.IntN(2)])
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestMariaDBProperties: Union is the least upper bound under Contains.
func TestMariaDBProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		a := gtid.MustParseMariaDBPosition(randMariaDB(r))
		b := gtid.MustParseMariaDBPosition(randMariaDB(r))
		u := a.Union(b)
		if !u.Contains(a) || !u.Contains(b) || !u.Equal(b.Union(a)) {
			t.Fatalf("%q ∪ %q = %q", a, b, u)
		}
		c := gtid.MustParseMariaDBPosition(randMariaDB(r))
		if a.Contains(b) && b.Contains(c) && !a.Contains(c) {
			t.Fatalf("not transitive: %q ⊇ %q ⊇ %q", a, b, c)
		}
		if a.Contains(b) != a.Contains(a.Union(b)) {
			t.Fatalf("a ⊇ b must mean a ∪ b adds nothing a lacks: %q %q", a, b)
		}
		if back, err := gtid.ParseMariaDBPosition(u.String()); err != nil || !back.Equal(u) {
			t.Fatalf("round trip %q: %q %v", u, back, err)
		}
	}
}

func FuzzParseMariaDBPosition(f *testing.F) {
	for _, s := range []string{"", "0-1-5", "5-1-1,0-1-2,3-2-3", " 0-+1-05, 1- 2-3", "0-1-5,0-2-6", "0-1-18446744073709551616", "0--1-5", "1-2-3,", "\t+0-0-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := gtid.ParseMariaDBPosition(s)
		if err != nil {
			if _, ok := err.(*gtid.ParseError); !ok {
				t.Fatalf("%q: error %T %v is not a *ParseError", s, err, err)
			}
			return
		}
		back, err := gtid.ParseMariaDBPosition(p.String())
		if err != nil || !back.Equal(p) || back.String() != p.String() {
			t.Fatalf("%q -> %q -> %q, %v", s, p, back, err)
		}
		if !p.Contains(p) || !p.Union(p).Equal(p) {
			t.Fatalf("%q: not reflexive", s)
		}
	})
}

func TestParsePGLSN(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"0/0", "0/0"}, {"0/3000148", "0/3000148"}, {"16/b374d848", "16/B374D848"}, {"FFFFFFFF/FFFFFFFF", "FFFFFFFF/FFFFFFFF"}, {"00000000/00000001", "0/1"},
	} {
		l, err := gtid.ParsePGLSN(c.in)
		if err != nil || l.String() != c.want {
			t.Errorf("ParsePGLSN(%q) = %q, %v; want %q", c.in, l, err, c.want)
		}
	}
	for _, bad := range []string{"", "/", "0/", "/0", "0/0/0", " 0/0", "0/0 ", "123456789/0", "0/123456789", "g/0", "0x1/0", "-1/0"} {
		if l, err := gtid.ParsePGLSN(bad); err == nil {
			t.Errorf("ParsePGLSN(%q) = %q, want an error", bad, l)
		}
	}
	if gtid.MustParsePGLSN("1/0") != 1<<32 || !gtid.MustParsePGLSN("0/10").Contains(gtid.MustParsePGLSN("0/F")) {
		t.Fatal("LSN value")
	}
}

func TestPGPositionHistory(t *testing.T) {
	h, err := gtid.ParsePGHistory(3, "1\t0/3000148\tno recovery target specified\n\n2\t0/5039B08\tno recovery target specified\n")
	if err != nil {
		t.Fatal(err)
	}
	pos := func(s string) gtid.PGPosition {
		p, err := gtid.ParsePGPosition(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	at := pos("3:0/6000000")
	for _, c := range []struct {
		o    string
		want bool
	}{
		{"1:0/3000148", true}, {"1:0/3000149", false}, // timeline 1 after its switch point is not timeline 3's
		{"2:0/5039B08", true}, {"2:0/5039B09", false},
		{"3:0/6000000", true}, {"3:0/6000001", false},
		{"4:0/1", false},
	} {
		if got := h.Contains(at, pos(c.o)); got != c.want {
			t.Errorf("history contains %s = %v, want %v", c.o, got, c.want)
		}
	}
	if pos("2:0/10").Contains(pos("1:0/1")) || !pos("1:0/10").Contains(pos("1:0/1")) {
		t.Fatal("PGPosition.Contains across timelines")
	}
	if u := pos("1:0/FF").Union(pos("2:0/1")); u.String() != "2:0/1" {
		t.Fatalf("union %s", u)
	}
	for _, bad := range []string{"1 0/0\n1 0/1", "2 0/1\n1 0/2", "3 0/1", "x 0/1", "1"} {
		if _, err := gtid.ParsePGHistory(3, bad); err == nil {
			t.Errorf("ParsePGHistory(%q) accepted", bad)
		}
	}
	if r := (gtid.PGRange{Timeline: 1, From: gtid.MustParsePGLSN("0/5000000"), To: gtid.MustParsePGLSN("0/5039B08")}); r.String() != "1:0/5000000..0/5039B08" || r.Bytes() != 0x39B08 {
		t.Fatalf("range %s %d", r, r.Bytes())
	}
}

func FuzzParsePGLSN(f *testing.F) {
	for _, s := range []string{"0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF", "0/", "123456789/0", "1:0/3000148"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if l, err := gtid.ParsePGLSN(s); err == nil {
			if back, err := gtid.ParsePGLSN(l.String()); err != nil || back != l {
				t.Fatalf("%q -> %s -> %s %v", s, l, back, err)
			}
		}
		if p, err := gtid.ParsePGPosition(s); err == nil {
			if back, err := gtid.ParsePGPosition(p.String()); err != nil || back != p {
				t.Fatalf("%q -> %s -> %s %v", s, p, back, err)
			}
		}
	})
}

func FuzzParsePGHistory(f *testing.F) {
	f.Add("1\t0/3000148\tno recovery target specified\n2\t0/5039B08\tx\n")
	f.Add("# comment\n\n1 0/1")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := gtid.ParsePGHistory(9, s)
		if err != nil {
			return
		}
		for i := 1; i < len(h.Switches); i++ {
			if h.Switches[i].Parent <= h.Switches[i-1].Parent || h.Switches[i].End < h.Switches[i-1].End {
				t.Fatalf("%q: unordered history %+v", s, h)
			}
		}
	})
}
