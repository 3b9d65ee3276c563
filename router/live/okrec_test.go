package live

import (
	"context"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
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
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: &staticSource{}})
	s := r.NewSession()
	defer s.Close()
	mustExec(t, ctx, s, "CREATE DATABASE IF NOT EXISTS rt")
	mustExec(t, ctx, s, "CREATE TABLE IF NOT EXISTS rt.okrec (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")

	write := func(q string) {
		t.Helper()
		before := s.State().Token
		_, set, err := execGTID(s, ctx, q)
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

	if _, set, err := execGTID(s, ctx, "SELECT 1"); err != nil || !set.IsEmpty() {
		t.Fatalf("SELECT: ExecGTID = %v, %v; want an empty set", set, err)
	}
	for _, q := range []string{"BEGIN", "INSERT INTO rt.okrec (v) VALUES (3)"} {
		if _, set, err := execGTID(s, ctx, q); err != nil || !set.IsEmpty() {
			t.Fatalf("%s (open transaction): ExecGTID = %v, %v; want an empty set", q, set, err)
		}
	}
	write("COMMIT")
}

// execGTID is ExecWrite returning the write's GTID set (empty when none).
func execGTID(s *LiveSession[gtid.Set], ctx context.Context, q string, args ...any) (*mysql.Result, gtid.Set, error) {
	res, w, err := s.ExecWrite(ctx, q, args...)
	return res, w.Pos, err
}

// gtok is the session's token as a gtid.Token.
func gtok(s *LiveSession[gtid.Set]) gtid.Token {
	set, epoch := s.Token()
	return gtid.Token{Epoch: epoch, GTIDs: set}
}
