package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
)

// diagScript is a statement, then GET DIAGNOSTICS twice (the second reads
// the same diagnostics area: GET DIAGNOSTICS does not clear it), then the
// variables they set, as one row of text.
func diagScript(t *testing.T, c *sql.Conn, stmt string) (string, error) {
	t.Helper()
	ctx := context.Background()
	if rows, err := c.QueryContext(ctx, stmt); err == nil {
		for rows.Next() {
		}
		rows.Close()
	}
	for _, q := range []string{
		"GET DIAGNOSTICS @n = NUMBER",
		"GET CURRENT DIAGNOSTICS CONDITION 1 @e = MYSQL_ERRNO, @m = MESSAGE_TEXT, @s = RETURNED_SQLSTATE",
	} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return "", fmt.Errorf("%s: %w", q, err)
		}
	}
	var n, e, m, st sql.NullString
	err := c.QueryRowContext(ctx, "SELECT @n, @e, @m, @s").Scan(&n, &e, &m, &st)
	return fmt.Sprintf("%v|%v|%v|%v", n, e, m, st), err
}

// TestGetDiagnosticsFollowsThePreviousStatement (issue 39, defect 4): GET
// DIAGNOSTICS reads the diagnostics area of the connection that ran the
// previous statement, a replica for a routed read (a warning, an error),
// and the variables it sets are the session's afterwards: MySQL's answer,
// as on a direct connection. It went to the primary (unclassified): no
// condition, or the primary's.
func TestGetDiagnosticsFollowsThePreviousStatement(t *testing.T) {
	s, rec := startRecordingProxy(t)
	db := openDB(t, s, "")
	mustExec(t, db, "CREATE DATABASE IF NOT EXISTS ptest")
	p := topo.Primary()
	direct := sqlOpen(t, p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	ctx := context.Background()
	dc, err := direct.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	pc, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, stmt := range []string{
		"SELECT CAST('1replica' AS SIGNED)", // a warning
		"SELECT * FROM ptest.no_such_table", // an error
	} {
		want, err := diagScript(t, dc, stmt)
		if err != nil {
			t.Fatalf("direct: %v", err)
		}
		for range 3 {
			rec.reset()
			got, err := diagScript(t, pc, stmt)
			on := rec.all()
			if err != nil || got != want {
				t.Fatalf("%s (served by replica %v), then GET DIAGNOSTICS: %s, %v; direct: %s", stmt, on, got, err, want)
			}
			if len(on) == 0 || on[0] < 0 {
				t.Logf("%s served by the primary (%v)", stmt, on)
			}
		}
	}
}
