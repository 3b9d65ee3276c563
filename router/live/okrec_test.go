package live

import (
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
)

// TestLiveExecGTID: on real MySQL, ExecGTID returns exactly the GTID the
// write added to the session's token (one transaction, not in the token
// before), an empty set for a statement that commits nothing and for
// statements inside an open transaction, and the transaction's GTID at
// COMMIT.
func TestLiveExecGTID(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newLiveRouter(t, ctx, Config{Positions: &staticSource{}})
	s := r.NewSession()
	defer s.Close()
	mustExec(t, ctx, s, "CREATE DATABASE IF NOT EXISTS rt")
	mustExec(t, ctx, s, "CREATE TABLE IF NOT EXISTS rt.okrec (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")

	write := func(q string) {
		t.Helper()
		before := s.State().Token
		_, set, err := s.ExecGTID(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n := set.Count(); n != 1 {
			t.Fatalf("%s: ExecGTID returned %v (%d transactions), want one", q, set, n)
		}
		if before.Contains(set) {
			t.Fatalf("%s: returned GTID %v was already in the token %v", q, set, before)
		}
		if want := s.State().Token.Subtract(before); !want.Equal(set) {
			t.Fatalf("%s: ExecGTID returned %v, the token gained %v", q, set, want)
		}
	}
	write("INSERT INTO rt.okrec (v) VALUES (1)")
	write("INSERT INTO rt.okrec (v) VALUES (2)")

	if _, set, err := s.ExecGTID(ctx, "SELECT 1"); err != nil || !set.IsEmpty() {
		t.Fatalf("SELECT: ExecGTID = %v, %v; want an empty set", set, err)
	}
	for _, q := range []string{"BEGIN", "INSERT INTO rt.okrec (v) VALUES (3)"} {
		if _, set, err := s.ExecGTID(ctx, q); err != nil || !set.IsEmpty() {
			t.Fatalf("%s (open transaction): ExecGTID = %v, %v; want an empty set", q, set, err)
		}
	}
	write("COMMIT")
}
