package proxy

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
)

// sessionTokenSet is the GTID set of the session's token (SELECT
// @causal_token, g1.<epoch>.<set>); empty before the first write.
func sessionTokenSet(t *testing.T, ctx context.Context, conn *sql.Conn) gtid.Set {
	t.Helper()
	var tok sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil {
		t.Fatal(err)
	}
	if !tok.Valid {
		return gtid.Set{}
	}
	parts := strings.SplitN(tok.String, ".", 3)
	if len(parts) != 3 {
		t.Fatalf("token %q", tok.String)
	}
	set, err := gtid.Parse(parts[2])
	if err != nil {
		t.Fatalf("token %q: %v", tok.String, err)
	}
	return set
}

// TestWriteReturningRowsRecordsGTID: a binlogged statement that returns
// rows (ANALYZE TABLE, OPTIMIZE TABLE, a CALL whose procedure writes and
// selects, as a query and as a prepared execution) adds its GTID to the
// session's token, so the session's next read cannot go to a replica
// that lacks it (issue 39, defect 2: the GTID was read from OK packets
// only, and a result set ends with an EOF).
func TestWriteReturningRowsRecordsGTID(t *testing.T) {
	s := startProxy(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openDB(t, s, "tls=skip-verify")
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS rowswrite",
		"CREATE TABLE IF NOT EXISTS rowswrite.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
		"DROP PROCEDURE IF EXISTS rowswrite.p",
		"CREATE PROCEDURE rowswrite.p(x INT) BEGIN INSERT INTO rowswrite.t (v) VALUES (x); SELECT x; END",
	} {
		mustExec(t, db, q)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustExec(t, conn, "INSERT INTO rowswrite.t (v) VALUES (0)")
	prev := sessionTokenSet(t, ctx, conn)
	if prev.IsEmpty() {
		t.Fatal("no token after an INSERT")
	}
	for _, c := range []struct {
		name, query string
		args        []any
	}{
		{"analyze", "ANALYZE TABLE rowswrite.t", nil},
		{"optimize", "OPTIMIZE TABLE rowswrite.t", nil},
		{"call", "CALL rowswrite.p(1)", nil},
		{"call-prepared", "CALL rowswrite.p(?)", []any{2}},
	} {
		rows, err := conn.QueryContext(ctx, c.query, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		for rows.NextResultSet() {
			for rows.Next() {
				n++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		rows.Close()
		if n == 0 {
			t.Fatalf("%s returned no rows", c.query)
		}
		got := sessionTokenSet(t, ctx, conn)
		if !got.Contains(prev) || prev.Contains(got) {
			t.Fatalf("%s: token %v after it, %v before: the statement's GTID is not in the session's token", c.name, got, prev)
		}
		prev = got
	}
}
