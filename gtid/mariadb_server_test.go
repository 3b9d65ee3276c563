package gtid_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// TestMariaDBDifferential compares the MariaDB position type with a real
// MariaDB 11.8: parsing (SET GLOBAL gtid_slave_pos accepts exactly what
// ParseMariaDBPosition accepts, and prints what String prints) and
// Contains (MASTER_GTID_WAIT(b, 0) on a server whose gtid_slave_pos is a
// returns 0 exactly when a.Contains(b)).
func TestMariaDBDifferential(t *testing.T) {
	composetest.Need(t, mariadb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := mariadb.DB("primary")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	defer conn.ExecContext(context.WithoutCancel(ctx), "SET GLOBAL gtid_slave_pos = ''")
	r := rand.New(rand.NewPCG(7, 11))
	mutate := func(s string) string {
		if s == "" || r.IntN(3) > 0 {
			return s
		}
		i := r.IntN(len(s) + 1)
		ins := []string{" ", "-", ",", "+", "x", "9999999999", "\t", ""}[r.IntN(8)]
		if r.IntN(2) == 0 && i < len(s) {
			return s[:i] + ins + s[i+1:]
		}
		return s[:i] + ins + s[i:]
	}
	parsed, rejected, waits := 0, 0, 0
	for range 1500 {
		a := mutate(randMariaDB(r))
		pa, perr := gtid.ParseMariaDBPosition(a)
		_, serr := conn.ExecContext(ctx, "SET GLOBAL gtid_slave_pos = ?", a)
		if (perr == nil) != (serr == nil) {
			t.Fatalf("gtid_slave_pos = %q: MariaDB says %v, ParseMariaDBPosition says %v", a, serr, perr)
		}
		if serr != nil {
			rejected++
			continue
		}
		parsed++
		var got string
		if err := conn.QueryRowContext(ctx, "SELECT @@gtid_slave_pos").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != pa.String() {
			t.Fatalf("gtid_slave_pos = %q reads back %q, String() = %q", a, got, pa.String())
		}
		for range 3 {
			b := randMariaDB(r)
			pb := gtid.MustParseMariaDBPosition(b)
			var v int
			if err := conn.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 0)", b).Scan(&v); err != nil {
				t.Fatalf("MASTER_GTID_WAIT(%q): %v", b, err)
			}
			if (v == 0) != pa.Contains(pb) {
				t.Fatalf("gtid_slave_pos %q, MASTER_GTID_WAIT(%q, 0) = %d, but Contains = %v", got, b, v, pa.Contains(pb))
			}
			waits++
		}
	}
	// MASTER_GTID_WAIT accepts repeated domains and waits for each.
	if _, err := conn.ExecContext(ctx, "SET GLOBAL gtid_slave_pos = '0-1-5'"); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"0-1-1,0-2-5", "0-1-1,0-2-6", " 0-1-5", "0-1-5 "} {
		var v int
		err := conn.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 0)", w).Scan(&v)
		pw, perr := gtid.ParseMariaDBWait(w)
		if (err == nil) != (perr == nil) || (err == nil && (v == 0) != gtid.MustParseMariaDBPosition("0-1-5").Contains(pw)) {
			t.Fatalf("MASTER_GTID_WAIT(%q, 0) = %d, %v; ParseMariaDBWait %q, %v", w, v, err, pw, perr)
		}
	}
	if parsed < 300 || rejected < 100 || !strings.Contains(mariadb.Primary().DSN(), "tcp(") {
		t.Fatalf("too few cases: %d parsed, %d rejected", parsed, rejected)
	}
	t.Logf("%d positions parsed alike, %d rejected alike, %d MASTER_GTID_WAIT comparisons agree", parsed, rejected, waits)
}
