package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

// Issue 39 defect 10: statements whose answer depends on what an earlier
// statement left on its connection (a HANDLER, the current schema after
// DROP DATABASE, the diagnostics area) answer as MySQL does, multiplexed
// or not (docs/proxy-sessions.md, "When a session is pinned").

// TestIsoHandlerOpenPinned: HANDLER ... OPEN keeps the session on its
// connection until HANDLER ... CLOSE: later READs see the open handler
// and walk the index in order.
func TestIsoHandlerOpenPinned(t *testing.T) {
	isoSchema(t)
	bothModes(t, func(t *testing.T, s *Server) {
		c := isoConn(t, openDB(t, s, ""))
		c.exec("HANDLER iso.h OPEN AS hh")
		for i, want := range []string{"1", "2", "3"} {
			q := "HANDLER hh READ `PRIMARY` NEXT"
			if i == 0 {
				q = "HANDLER hh READ `PRIMARY` FIRST"
			}
			if v, err := c.valueErr(q); err != nil || v != want {
				t.Fatalf("%s: %s, %v; want %s", q, v, err, want)
			}
		}
		c.exec("HANDLER hh CLOSE")
		if _, err := c.valueErr("HANDLER hh READ FIRST"); err == nil || !strings.Contains(err.Error(), "1109") {
			t.Fatalf("HANDLER READ after CLOSE: %v, want 1109 (unknown table in HANDLER)", err)
		}
		for range 3 {
			c.value("SELECT 1")
		}
		if s.cfg.Multiplex {
			m := metricText(t, s)
			if !strings.Contains(m, `reason="handler-open"`) {
				t.Errorf("no session pinned as handler-open:\n%s", grepLines(m, "pinned"))
			}
		}
	})
}

// TestIsoDropCurrentSchema: DROP DATABASE of the session's current schema
// leaves the session with no default database (DATABASE() is NULL), as
// MySQL does; the next statements run (no 2013 from a replayed USE of the
// dropped schema), whether the schema was chosen by USE or COM_INIT_DB
// and whatever quoting the DROP used.
func TestIsoDropCurrentSchema(t *testing.T) {
	isoSchema(t)
	bothModes(t, func(t *testing.T, s *Server) {
		db := openDB(t, s, "")
		for _, tc := range []struct{ use, drop string }{
			{"USE iso_drop1", "DROP DATABASE iso_drop1"},
			{"USE `iso_drop1`", "DROP SCHEMA IF EXISTS `iso_drop1`"},
			{"", "DROP DATABASE iso_drop1"}, // the schema of the handshake
		} {
			mustExec(t, db, "CREATE DATABASE IF NOT EXISTS iso_drop1")
			from := db
			if tc.use == "" {
				var err error
				if from, err = sql.Open("mysql", "app:apppw@tcp("+s.Addr()+")/iso_drop1"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { from.Close() })
			}
			c := isoConn(t, from)
			if tc.use != "" {
				c.exec(tc.use)
			}
			c.exec("CREATE TABLE t (a INT)")
			c.exec(tc.drop)
			for range 3 {
				if v, err := c.valueErr("SELECT DATABASE() FROM iso.counter FOR UPDATE"); err != nil || v != "NULL" {
					t.Fatalf("%s; %s: DATABASE() = %s, %v; want NULL", tc.use, tc.drop, v, err)
				}
				if v, err := c.valueErr("SELECT COUNT(*) >= 0 FROM iso.w"); err != nil || v != "1" {
					t.Fatalf("%s; %s: a read afterwards: %s, %v", tc.use, tc.drop, v, err)
				}
			}
			c.exec("USE iso")
			if v := c.value("SELECT DATABASE() FROM iso.counter FOR UPDATE"); v != "iso" {
				t.Fatalf("USE after the drop: DATABASE() = %s", v)
			}
		}
	})
}

// TestIsoDiagnosticsRepeat: SHOW WARNINGS, SHOW ERRORS, SHOW COUNT(*)
// WARNINGS and @@warning_count read the same diagnostics as often as
// asked: each answer through the proxy is a direct connection's to the
// same sequence.
func TestIsoDiagnosticsRepeat(t *testing.T) {
	isoSchema(t)
	direct := isoConn(t, primaryDB(t, topo))
	bothModes(t, func(t *testing.T, s *Server) {
		c := isoConn(t, openDB(t, s, ""))
		reads := []string{"SHOW WARNINGS", "SHOW WARNINGS", "SELECT @@warning_count", "SHOW WARNINGS",
			"SHOW COUNT(*) WARNINGS", "SHOW WARNINGS", "SHOW ERRORS", "SELECT @@error_count", "SHOW ERRORS", "SHOW WARNINGS"}
		for _, first := range []string{
			"SELECT CAST('1x' AS SIGNED)", // a read (a replica's warning)
			"UPDATE iso.counter SET n = n + CAST('1x' AS SIGNED) * 0 WHERE id = 1",
			"SELECT * FROM iso.no_such_table",
			"SELECT 1",
		} {
			for i, q := range append([]string{first}, reads...) {
				want, got := diagFirst(t, direct, q), diagFirst(t, c, q)
				if got != want {
					t.Fatalf("after %s, statement %d %s: %q, want %q (direct)", first, i, q, got, want)
				}
			}
		}
	})
}

// diagFirst runs q and returns its first row's first column ("" when no
// row).
func diagFirst(t *testing.T, c *isoSession, q string) string {
	t.Helper()
	rows, err := c.c.QueryContext(context.Background(), q)
	if err != nil {
		var me *gomysql.MySQLError
		if errors.As(err, &me) {
			return fmt.Sprintf("error %d", me.Number)
		}
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return ""
	}
	vals := make([]any, len(cols))
	var first string
	vals[0] = &first
	for i := 1; i < len(vals); i++ {
		vals[i] = new(any)
	}
	if err := rows.Scan(vals...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return first
}

// TestIsoLastInsertID: LAST_INSERT_ID() on a later statement is the
// session's own, as MySQL keeps it: the first id the session's last
// generating INSERT made (an explicit id changes nothing), or what
// LAST_INSERT_ID(expr) set, whatever ran between; two sessions
// interleaved each read their own.
func TestIsoLastInsertID(t *testing.T) {
	isoSchema(t)
	bothModes(t, func(t *testing.T, s *Server) {
		db := openDB(t, s, "")
		a, b := isoConn(t, db), isoConn(t, db)
		ctx := context.Background()
		insert := func(c *isoSession) int64 {
			t.Helper()
			r, err := c.c.ExecContext(ctx, "INSERT INTO iso.ai (v) VALUES (1), (2)")
			if err != nil {
				t.Fatal(err)
			}
			id, err := r.LastInsertId()
			if err != nil || id == 0 {
				t.Fatalf("insert id %d, %v", id, err)
			}
			return id
		}
		check := func(c *isoSession, want int64, when string) {
			t.Helper()
			c.value("SELECT 1")
			c.value("SELECT COUNT(*) FROM iso.w")
			if v := c.value("SELECT LAST_INSERT_ID()"); v != fmt.Sprint(want) {
				t.Fatalf("%s: LAST_INSERT_ID() = %s, want %d", when, v, want)
			}
		}
		for range 3 {
			ia := insert(a)
			ib := insert(b)
			check(a, ia, "after an INSERT")
			check(b, ib, "after an INSERT")
			a.exec(fmt.Sprintf("INSERT INTO iso.ai (id, v) VALUES (%d, 3)", ia+1000000))
			check(a, ia, "after an INSERT of an explicit id")
			a.exec(fmt.Sprintf("UPDATE iso.ai SET v = v WHERE id = LAST_INSERT_ID(%d)", ia+7))
			check(a, ia+7, "after LAST_INSERT_ID(expr) in an UPDATE")
			b.value("SELECT LAST_INSERT_ID(5)")
			check(b, 5, "after SELECT LAST_INSERT_ID(5)")
			b.exec("INSERT INTO iso.ai (v) VALUES (LAST_INSERT_ID())")
			id := b.value("SELECT LAST_INSERT_ID()")
			if v := b.value("SELECT v FROM iso.ai WHERE id = " + id + " FOR UPDATE"); v != "5" {
				t.Fatalf("INSERT ... VALUES (LAST_INSERT_ID()) stored %s, want 5", v)
			}
		}
	})
}
