package gtid

import (
	"math/rand/v2"
	"testing"
)

// TestPGSetOf: containment of the sets is the LSNs' order, and a write
// tokened at l is held exactly by the LSNs at or past it.
func TestPGSetOf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		a, b := PGLSN(r.Uint64N(1<<40)), PGLSN(r.Uint64N(1<<40))
		sa, err := PGSetOf(a)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := PGSetOf(b)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sa.Contains(sb), a.Contains(b); got != want {
			t.Fatalf("PGSetOf(%s).Contains(PGSetOf(%s)) = %v, LSN order says %v", a, b, got, want)
		}
		if b == 0 {
			continue
		}
		w, err := PGWrite(b)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sa.ContainsGTID(w), a >= b; got != want {
			t.Fatalf("PGSetOf(%s) holds the write at %s: %v, want %v", a, b, got, want)
		}
	}
	if s, err := PGSetOf(0); err != nil || !s.IsEmpty() {
		t.Fatalf("PGSetOf(0) = %v, %v; want the empty set", s, err)
	}
	if _, err := PGSetOf(PGLSN(1 << 63)); err == nil {
		t.Fatal("an LSN past MaxGNO was accepted")
	}
	if _, err := PGWrite(0); err == nil {
		t.Fatal("a write at LSN 0 was accepted")
	}
	if _, ok := mariaDBDomainOf(PGLSNSID()); ok {
		t.Fatal("PostgreSQL's source reads as a MariaDB domain")
	}
}
