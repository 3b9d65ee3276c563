package gtid_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/causallab/causallab/gtid"
)

// TestMariaDBAsSet: a MariaDB position read as a set (AsSet) answers
// containment and union as MariaDB's own comparison does, and
// MariaDBWaitPosition gives back, per domain, the sequence number to
// wait for; a MySQL set has no MariaDB wait position.
func TestMariaDBAsSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 40))
	random := func() (gtid.MariaDBPosition, gtid.Set) {
		var parts []string
		for d := range uint32(3) {
			if rng.IntN(3) > 0 {
				parts = append(parts, fmt.Sprintf("%d-%d-%d", d*7, 1+rng.IntN(3), rng.IntN(20)))
			}
		}
		p := gtid.MustParseMariaDBPosition(strings.Join(parts, ","))
		s, err := p.AsSet()
		if err != nil {
			t.Fatal(err)
		}
		return p, s
	}
	for range 3000 {
		a, as := random()
		b, bs := random()
		if got, want := as.Contains(bs), a.Contains(b); got != want {
			t.Fatalf("%s contains %s: the sets say %v, MariaDB %v", a, b, got, want)
		}
		u, err := a.Union(b).AsSet()
		if err != nil {
			t.Fatal(err)
		}
		if !u.Equal(as.Union(bs)) {
			t.Fatalf("%s union %s: %s as a set, %s from the sets", a, b, u, as.Union(bs))
		}
		w, err := gtid.MariaDBWaitPosition(as)
		if err != nil {
			t.Fatal(err)
		}
		if !w.Contains(a) || !a.Contains(w) {
			t.Fatalf("%s: wait position %s", a, w)
		}
	}
	if s, err := gtid.MariaDBSetOf("0-1-105,4294967295-2-3"); err != nil || s.String() != "4d617269-6144-4200-8000-000000000000:1-105,\n4d617269-6144-4200-8000-0000ffffffff:1-3" {
		t.Fatalf("MariaDBSetOf: %q, %v", s, err)
	}
	if _, err := gtid.MariaDBSetOf("0-1-9223372036854775808"); err == nil || !strings.Contains(err.Error(), "0-1-9223372036854775808") {
		t.Fatalf("a sequence number past MaxGNO: %v", err)
	}
	if _, err := gtid.MariaDBWaitPosition(gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")); err == nil {
		t.Fatal("a MySQL set gave a MariaDB wait position")
	}
	if w, err := gtid.MariaDBWaitPosition(gtid.Set{}); err != nil || !w.IsEmpty() {
		t.Fatalf("the empty set: %v, %v", w, err)
	}
}

// TestMariaDBWriters: a write's writer source tells two servers' writes
// of one sequence number apart (a failover's lost write and the new
// primary's), and ParseMariaDBRanges reads what FormatMariaDBRanges
// writes as those writes.
func TestMariaDBWriters(t *testing.T) {
	lost, err := gtid.MariaDBWrite("0-1-103")
	if err != nil {
		t.Fatal(err)
	}
	next, err := gtid.MariaDBWrite("0-2-103")
	if err != nil {
		t.Fatal(err)
	}
	if lost.SID == next.SID || lost.GNO != 103 || lost.SID == gtid.MariaDBDomainSID(0) {
		t.Fatalf("writer sources %v, %v", lost, next)
	}
	old := gtid.MustParseMariaDBPosition("0-1-105,7-1-4")
	cur := gtid.MustParseMariaDBPosition("0-2-100")
	text := gtid.FormatMariaDBRanges(old.Ahead(cur))
	set, err := gtid.ParseMariaDBRanges(text)
	if err != nil {
		t.Fatal(err)
	}
	if !set.ContainsGTID(lost) || set.ContainsGTID(next) || set.Count() != 9 {
		t.Fatalf("%q read as %s", text, set)
	}
	for _, bad := range []string{"0-1-6", "0-1-9..8", "0-1-0..2", "x", "0-1-1..2,"} {
		if _, err := gtid.ParseMariaDBRanges(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := gtid.MariaDBWrite("0-1-0"); err == nil {
		t.Error("sequence number 0 read as a write")
	}
}
