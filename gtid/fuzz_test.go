package gtid

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

// ref is the slow reference: each source's GNOs 1..64 as a bit mask.
type ref map[SourceKey]uint64

var refKeys = func() []SourceKey {
	var keys []SourceKey
	for _, u := range []string{u1, u2, u3} {
		sid, _ := ParseSID(u)
		for _, tag := range []string{"", "a", "tag_b"} {
			keys = append(keys, SourceKey{sid, tag})
		}
	}
	return keys
}()

// refFromBytes decodes fuzz bytes into a reference set: 9 bytes per source
// (key selector, then a 64-bit mask).
func refFromBytes(b []byte) ref {
	r := ref{}
	for len(b) >= 9 {
		k := refKeys[int(b[0])%len(refKeys)]
		var m uint64
		for i := 1; i < 9; i++ {
			m = m<<8 | uint64(b[i])
		}
		r[k] |= m
		b = b[9:]
	}
	return r
}

// text writes r in a deliberately messy but valid form: random source
// order, repeated UUIDs, unmerged single GNOs and ranges, upper case.
func (r ref) text(rng *rand.Rand) string {
	var parts []string
	for k, m := range r {
		for m != 0 {
			lo := bits.TrailingZeros64(m)
			hi := lo
			for hi+1 < 64 && m&(1<<(hi+1)) != 0 && rng.IntN(4) != 0 {
				hi++
			}
			for g := lo; g <= hi; g++ {
				m &^= 1 << g
			}
			iv := fmt.Sprint(lo + 1)
			if hi > lo {
				iv = fmt.Sprintf("%d-%d", lo+1, hi+1)
			}
			u := k.SID.String()
			if rng.IntN(3) == 0 {
				u = strings.ToUpper(u)
			}
			if k.Tag != "" {
				iv = k.Tag + ":" + iv
			}
			parts = append(parts, u+":"+iv)
		}
	}
	rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	return strings.Join(parts, ", \n"[:1+rng.IntN(3)])
}

func (r ref) contains(o ref) bool {
	for k, m := range o {
		if m&^r[k] != 0 {
			return false
		}
	}
	return true
}

func (r ref) op(o ref, f func(a, b uint64) uint64) ref {
	out := ref{}
	for _, k := range refKeys {
		if m := f(r[k], o[k]); m != 0 {
			out[k] = m
		}
	}
	return out
}

func (r ref) count() uint64 {
	n := 0
	for _, m := range r {
		n += bits.OnesCount64(m)
	}
	return uint64(n)
}

// equalsRef checks s holds exactly the transactions of r.
func equalsRef(t *testing.T, what string, s Set, r ref) {
	t.Helper()
	checkInvariants(t, s)
	got := ref{}
	for k, ivs := range s.Sources() {
		for _, iv := range ivs {
			if iv.End > 64 {
				t.Fatalf("%s: GNO %d out of the reference range", what, iv.End)
			}
			for g := iv.Start; g <= iv.End; g++ {
				got[k] |= 1 << (g - 1)
			}
		}
	}
	for _, k := range refKeys {
		if got[k] != r[k] {
			t.Fatalf("%s: source %v holds %064b, want %064b (set %q)", what, k, got[k], r[k], s)
		}
	}
}

// checkAgainstRef runs every operation on a, b and compares with the reference.
func checkAgainstRef(t *testing.T, ra, rb ref, rng *rand.Rand) {
	t.Helper()
	ta, tb := ra.text(rng), rb.text(rng)
	a, err := Parse(ta)
	if err != nil {
		t.Fatalf("Parse(%q): %v", ta, err)
	}
	b, err := Parse(tb)
	if err != nil {
		t.Fatalf("Parse(%q): %v", tb, err)
	}
	equalsRef(t, "parse a", a, ra)
	equalsRef(t, "parse b", b, rb)
	aText, bText := a.String(), b.String()

	equalsRef(t, "union", a.Union(b), ra.op(rb, func(x, y uint64) uint64 { return x | y }))
	equalsRef(t, "subtract", a.Subtract(b), ra.op(rb, func(x, y uint64) uint64 { return x &^ y }))
	equalsRef(t, "intersect", a.Intersect(b), ra.op(rb, func(x, y uint64) uint64 { return x & y }))
	if a.Contains(b) != ra.contains(rb) || b.Contains(a) != rb.contains(ra) {
		t.Fatalf("Contains(%q, %q) = %v, want %v", a, b, a.Contains(b), ra.contains(rb))
	}
	if a.Equal(b) != (ra.contains(rb) && rb.contains(ra)) {
		t.Fatalf("Equal(%q, %q) wrong", a, b)
	}
	if a.Intersects(b) != (len(ra.op(rb, func(x, y uint64) uint64 { return x & y })) > 0) {
		t.Fatalf("Intersects(%q, %q) wrong", a, b)
	}
	if a.Count() != ra.count() {
		t.Fatalf("Count(%q) = %d, want %d", a, a.Count(), ra.count())
	}
	for range 4 {
		k := refKeys[rng.IntN(len(refKeys))]
		g := GTID{SID: k.SID, Tag: k.Tag, GNO: int64(rng.IntN(64) + 1)}
		if got, want := a.ContainsGTID(g), ra[k]&(1<<(g.GNO-1)) != 0; got != want {
			t.Fatalf("ContainsGTID(%q, %v) = %v", a, g, got)
		}
	}
	c := a.Clone()
	c.UnionInPlace(b)
	equalsRef(t, "union in place", c, ra.op(rb, func(x, y uint64) uint64 { return x | y }))
	c = a.Clone()
	c.SubtractInPlace(b)
	equalsRef(t, "subtract in place", c, ra.op(rb, func(x, y uint64) uint64 { return x &^ y }))
	c = a.Clone()
	c.IntersectInPlace(b)
	equalsRef(t, "intersect in place", c, ra.op(rb, func(x, y uint64) uint64 { return x & y }))
	// Building b one GTID at a time, in random order, onto a.
	c = a.Clone()
	var gs []GTID
	for k, m := range rb {
		for g := range 64 {
			if m&(1<<g) != 0 {
				gs = append(gs, GTID{SID: k.SID, Tag: k.Tag, GNO: int64(g + 1)})
			}
		}
	}
	rng.Shuffle(len(gs), func(i, j int) { gs[i], gs[j] = gs[j], gs[i] })
	for _, g := range gs {
		if err := c.AddInPlace(g); err != nil {
			t.Fatal(err)
		}
	}
	equalsRef(t, "AddInPlace", c, ra.op(rb, func(x, y uint64) uint64 { return x | y }))

	if a.String() != aText || b.String() != bText {
		t.Fatalf("inputs modified")
	}
	// Canonical text round trip.
	if back := MustParse(aText); !back.Equal(a) || back.String() != aText {
		t.Fatalf("round trip of %q", aText)
	}
}

// TestAgainstReference runs many random pairs through every operation.
func TestAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 5000
	if testing.Short() {
		n = 500
	}
	for range n {
		var ba, bb [36]byte
		for i := range ba {
			ba[i], bb[i] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		// Sparse masks fragment the intervals; dense ones make long runs.
		la, lb := 9*rng.IntN(5), 9*rng.IntN(5)
		ra, rb := refFromBytes(ba[:la]), refFromBytes(bb[:lb])
		if rng.IntN(2) == 0 {
			for k := range rb {
				rb[k] &= ra[k] | uint64(rng.Uint32())
			}
		}
		checkAgainstRef(t, ra, rb, rng)
	}
}

func FuzzOps(f *testing.F) {
	f.Add([]byte{}, []byte{}, uint64(0))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 31}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 4}, uint64(1))
	f.Add([]byte{1, 0xaa, 0xaa, 0xaa, 0xaa, 0x55, 0x55, 0x55, 0x55, 4, 0xff, 0, 0xff, 0, 1, 2, 3, 4}, []byte{1, 0x0f, 0xf0, 0, 0, 0, 0, 0xff, 0xff}, uint64(7))
	f.Add([]byte{8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte{8, 0x80, 0, 0, 0, 0, 0, 0, 1, 7, 1, 1, 1, 1, 1, 1, 1, 1}, uint64(3))
	f.Fuzz(func(t *testing.T, a, b []byte, seed uint64) {
		checkAgainstRef(t, refFromBytes(a), refFromBytes(b), rand.New(rand.NewPCG(seed, 0)))
	})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", " ", ",", u1 + ":1-5", strings.ToUpper(u1) + ":1-5:7:9-10",
		u1 + ":1-3:tb:5:ta:1-2," + u2 + ":4-6:1-3",
		" " + u1 + " : 1 - 3 ,\n " + u1 + ":4",
		u1 + ":1-9223372036854775806", u1 + ":9223372036854775807", u1 + ":0", u1 + ":5-3",
		u1 + ":tag", u1 + "::1", "{" + u1 + "}:1", strings.ReplaceAll(u1, "-", "") + ":1",
		u1 + ":abcdefghijabcdefghijabcdefghijabc:5", u1 + ":1,,", u1 + ":1t:1", "\x00", u1 + ":é",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := Parse(s)
		if err != nil {
			pe, ok := err.(*ParseError)
			if !ok || pe.Pos < 0 || pe.Pos > len(s) || pe.Input != s {
				t.Fatalf("Parse(%q): bad error %#v", s, err)
			}
			_ = err.Error()
			return
		}
		checkInvariants(t, set)
		text := set.String()
		again, err := Parse(text)
		if err != nil || !again.Equal(set) || again.String() != text {
			t.Fatalf("Parse(String(Parse(%q))) = %q, %v; want %q", s, again, err, text)
		}
		compact, err := Parse(set.CompactString())
		if err != nil || !compact.Equal(set) {
			t.Fatalf("compact round trip of %q: %v", s, err)
		}
	})
}

func FuzzParseGTID(f *testing.F) {
	for _, s := range []string{u1 + ":5", u1 + ":Tag:5", " " + u1 + " : 5 ", u1 + ":0", u1 + ":t:", "", u1 + ":1-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGTID(s)
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("ParseGTID(%q): %T", s, err)
			}
			return
		}
		back, err := ParseGTID(g.String())
		if err != nil || back != g {
			t.Fatalf("round trip of %q: %v %v", s, back, err)
		}
		set, err := Set{}.Add(g)
		if err != nil || !set.ContainsGTID(g) || set.Count() != 1 {
			t.Fatalf("Add(%v): %v", g, err)
		}
	})
}

func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"g1.0.", "g1.3." + u1 + ":7~" + u2 + ":1-5:t:2", "g1.3" + u1, "g1.." + u1 + ":1", "g1.3." + u1 + ":1,", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			if pe, ok := err.(*ParseError); !ok || pe.Pos < 0 || pe.Pos > len(s) {
				t.Fatalf("ParseToken(%q): %#v", s, err)
			}
			return
		}
		text := tok.String()
		if strings.ContainsAny(text, " \t\r\n,;\"\\*") {
			t.Fatalf("unsafe token text %q", text)
		}
		back, err := ParseToken(text)
		if err != nil || back.Epoch != tok.Epoch || !back.GTIDs.Equal(tok.GTIDs) || back.String() != text {
			t.Fatalf("round trip of %q: %v", s, err)
		}
	})
}

func FuzzParseLSNToken(f *testing.F) {
	for _, s := range []string{"l1.0.0", "l1.3.100", "l1.3.", "l1..1", "l1.1.18446744073709551616", "g1.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseLSNToken(s)
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("ParseLSNToken(%q): %T", s, err)
			}
			return
		}
		if back, err := ParseLSNToken(tok.String()); err != nil || back != tok {
			t.Fatalf("round trip of %q", s)
		}
	})
}

// FuzzParseMariaDBRanges: any input parses or gives a *ParseError; what
// parses holds only writer sources (no MariaDB domain stands for them),
// and every range's first and last write.
func FuzzParseMariaDBRanges(f *testing.F) {
	for _, s := range []string{"", "0-1-6..8", "0-1-6..8,1-2-3..3", "0-1-6", "0-1-0..2", "0-1-9..8", "4294967295-4294967295-1..9223372036854775807", "0-1-1..2,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseMariaDBRanges(s)
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("ParseMariaDBRanges(%q): %T", s, err)
			}
			return
		}
		if _, err := MariaDBWaitPosition(set); err == nil && !set.IsEmpty() {
			t.Fatalf("%q: a writer set read as domains: %s", s, set)
		}
		for part := range strings.SplitSeq(s, ",") {
			if part == "" {
				continue
			}
			head, _, _ := strings.Cut(part, "..")
			g, err := MariaDBWrite(head)
			if err != nil || !set.ContainsGTID(g) {
				t.Fatalf("%q: %s not in %s (%v)", s, head, set, err)
			}
		}
	})
}
