package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/causallab/causallab/compose/composetest"
)

// Isolation under multiplexing and the evaluate-once rule for SET
// (docs/proxy-sessions.md, "When a session is pinned"): tests of issue 38's
// findings 4-6 and issue 39's defects 6, 9 and 10 (SQL PREPARE).

// isoSchema creates schema iso's objects on the primary (directly, as the
// topology's admin) and waits until every replica has them.
func isoSchema(t *testing.T) {
	t.Helper()
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := primaryDB(t, topo)
	for _, q := range []string{
		"CREATE DATABASE IF NOT EXISTS iso",
		"CREATE TABLE IF NOT EXISTS iso.counter (id INT PRIMARY KEY, n INT NOT NULL)",
		"INSERT IGNORE INTO iso.counter VALUES (1, 0)",
		"CREATE TABLE IF NOT EXISTS iso.vals (v VARCHAR(64))",
		"CREATE TABLE IF NOT EXISTS iso.w (a INT)",
		"CREATE TABLE IF NOT EXISTS iso.h (a INT PRIMARY KEY)",
		"CREATE TABLE IF NOT EXISTS iso.ai (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)",
		"INSERT IGNORE INTO iso.h VALUES (1), (2), (3)",
		"DROP FUNCTION IF EXISTS iso.setstate",
		"CREATE FUNCTION iso.setstate(i INT) RETURNS INT DETERMINISTIC NO SQL BEGIN SET @v = i; SET time_zone = CONCAT('+0', i, ':00'); RETURN i; END",
		"DROP FUNCTION IF EXISTS iso.bump",
		"CREATE FUNCTION iso.bump() RETURNS INT DETERMINISTIC MODIFIES SQL DATA BEGIN UPDATE iso.counter SET n = n + 1 WHERE id = 1; RETURN (SELECT n FROM iso.counter WHERE id = 1); END",
		"DROP PROCEDURE IF EXISTS iso.lockit",
		"CREATE PROCEDURE iso.lockit(name VARCHAR(64)) BEGIN DO GET_LOCK(name, 0); END",
		"DROP PROCEDURE IF EXISTS iso.mktemp",
		"CREATE PROCEDURE iso.mktemp() BEGIN CREATE TEMPORARY TABLE iso.tmp1 (a INT); INSERT INTO iso.tmp1 VALUES (7); END",
		"DROP PROCEDURE IF EXISTS iso.setx",
		"CREATE PROCEDURE iso.setx() BEGIN SET @x = 42; END",
		"DROP PROCEDURE IF EXISTS iso.outp",
		"CREATE PROCEDURE iso.outp(OUT o INT) BEGIN SET o = 5; END",
	} {
		if _, err := p.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var set string
	if err := p.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&set); err != nil {
		t.Fatal(err)
	}
	for _, r := range topo.Replicas() {
		db, err := sql.Open("mysql", r.User+":"+r.Password+"@tcp("+r.Addr()+")/")
		if err != nil {
			t.Fatal(err)
		}
		var timedOut int
		err = db.QueryRowContext(ctx, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, 30)", set).Scan(&timedOut)
		db.Close()
		if err != nil || timedOut != 0 {
			t.Fatalf("replica %s did not apply the schema: %d, %v", r.Name, timedOut, err)
		}
	}
}

// session is one client session through the proxy (one connection).
type isoSession struct {
	t *testing.T
	c *sql.Conn
}

func isoConn(t *testing.T, db *sql.DB) *isoSession {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &isoSession{t: t, c: c}
}

func (s *isoSession) exec(q string) {
	s.t.Helper()
	if _, err := s.c.ExecContext(context.Background(), q); err != nil {
		s.t.Fatalf("%s: %v", q, err)
	}
}

// value reads one value ("NULL" for NULL).
func (s *isoSession) value(q string) string {
	s.t.Helper()
	v, err := s.valueErr(q)
	if err != nil {
		s.t.Fatalf("%s: %v", q, err)
	}
	return v
}

func (s *isoSession) valueErr(q string) (string, error) {
	var v sql.NullString
	if err := s.c.QueryRowContext(context.Background(), q).Scan(&v); err != nil {
		return "", err
	}
	if !v.Valid {
		return "NULL", nil
	}
	return v.String, nil
}

// bothModes runs f with multiplexing off and on (whatever
// CAUSALLAB_PROXY_TEST_MULTIPLEX says).
func bothModes(t *testing.T, f func(t *testing.T, s *Server)) {
	for _, mx := range []bool{false, true} {
		t.Run(fmt.Sprintf("multiplex=%v", mx), func(t *testing.T) {
			f(t, startProxy(t, func(c *Config) { c.Multiplex = mx }))
		})
	}
}

// TestIsoReplicaStateNotLeaked (issue 38, finding 4): multiplexed, 4
// clients x 200 rounds each call a stored function in a routed read
// that sets @v and time_zone to the client's own values, then read them
// back: no client ever sees another client's values (a replica
// connection whose statement changed the session's state is reset
// before it is lent again), and what a client sees is its own value or
// its state from before the read (docs: a replica read's state change is
// dropped, counted).
func TestIsoReplicaStateNotLeaked(t *testing.T) {
	isoSchema(t)
	s := startProxy(t, func(c *Config) { c.Multiplex, c.PoolSize = true, 4 })
	db := openDB(t, s, "")
	var defaultTZ string
	if err := primaryDB(t, topo).QueryRow("SELECT @@GLOBAL.time_zone").Scan(&defaultTZ); err != nil {
		t.Fatal(err)
	}
	const clients, rounds = 4, 200
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		leaks []string
	)
	for i := 1; i <= clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := db.Conn(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			own := fmt.Sprintf("+0%d:00", i)
			for r := range rounds {
				var v sql.NullInt64
				var tz string
				if err := c.QueryRowContext(context.Background(), "SELECT @v, @@SESSION.time_zone").Scan(&v, &tz); err != nil {
					t.Errorf("client %d round %d: %v", i, r, err)
					return
				}
				if v.Valid && v.Int64 != int64(i) || tz != own && tz != defaultTZ {
					mu.Lock()
					leaks = append(leaks, fmt.Sprintf("client %d round %d: @v %v, time_zone %q", i, r, v, tz))
					mu.Unlock()
				}
				var got int
				if err := c.QueryRowContext(context.Background(), fmt.Sprintf("SELECT iso.setstate(%d)", i)).Scan(&got); err != nil || got != i {
					t.Errorf("client %d round %d: setstate = %d, %v", i, r, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(leaks) > 0 {
		t.Fatalf("%d of %d reads saw another client's state, e.g. %s", len(leaks), clients*rounds, leaks[0])
	}
	if m := grepLines(metricText(t, s), `causallab_proxy_session_state_total{event="replica-state-dropped"}`); m == "" {
		t.Fatal("no replica-state-dropped counted: did the reads run on replicas?")
	}
}

// TestIsoNamedLocksHeld (issue 38, finding 5): a named lock taken in DO,
// in SET @g = GET_LOCK(...) or inside CALL is held by its session until
// it releases it: another client sees it held (IS_FREE_LOCK 0,
// GET_LOCK(..., 0) 0) after the holder's later statements, and gets it
// once the holder released it.
func TestIsoNamedLocksHeld(t *testing.T) {
	isoSchema(t)
	bothModes(t, func(t *testing.T, s *Server) {
		db := openDB(t, s, "")
		for _, c := range []struct{ name, take string }{
			{"iso_do", "DO GET_LOCK('iso_do', 0)"},
			{"iso_set", "SET @g = GET_LOCK('iso_set', 0)"},
			{"iso_call", "CALL iso.lockit('iso_call')"},
		} {
			holder, other := isoConn(t, db), isoConn(t, db)
			holder.exec(c.take)
			for range 3 {
				holder.value("SELECT 1")
				other.value("SELECT 1")
			}
			if v := other.value("SELECT IS_FREE_LOCK('" + c.name + "')"); v != "0" {
				t.Errorf("%s: another client's IS_FREE_LOCK = %s, want 0 (held)", c.take, v)
			}
			if v := other.value("SELECT GET_LOCK('" + c.name + "', 0)"); v != "0" {
				t.Errorf("%s: another client's GET_LOCK(..., 0) = %s, want 0 (held)", c.take, v)
			}
			if v := holder.value("SELECT RELEASE_LOCK('" + c.name + "')"); v != "1" {
				t.Errorf("%s: the holder's RELEASE_LOCK = %s, want 1", c.take, v)
			}
			if v := other.value("SELECT GET_LOCK('" + c.name + "', 0)"); v != "1" {
				t.Errorf("%s: GET_LOCK after the release = %s, want 1", c.take, v)
			}
			other.value("SELECT RELEASE_LOCK('" + c.name + "')")
		}
	})
}

// TestIsoSetEvaluatedOnce (issue 38 finding 5, issue 39 defect 6): SET
// @u = UUID() gives the session one value, wherever it is read (replicas
// included) and written; SET @id = f() runs f's update exactly once.
func TestIsoSetEvaluatedOnce(t *testing.T) {
	isoSchema(t)
	bothModes(t, func(t *testing.T, s *Server) {
		db := openDB(t, s, "")
		c := isoConn(t, db)
		c.exec("SET @u = UUID()")
		first := c.value("SELECT @u")
		for i := range 8 {
			if v := c.value("SELECT @u"); v != first {
				t.Fatalf("read %d: @u = %s, the first read %s", i, v, first)
			}
		}
		c.exec("INSERT INTO iso.vals VALUES (@u)")
		if n := c.value("SELECT COUNT(*) FROM iso.vals WHERE v = @u"); n != "1" {
			t.Fatalf("rows WHERE v = @u after inserting @u: %s, want 1", n)
		}
		if v := c.value("SELECT v FROM iso.vals WHERE v = '" + first + "'"); v != first {
			t.Fatalf("inserted %s, want %s", v, first)
		}

		p := primaryDB(t, topo)
		var before int
		if err := p.QueryRow("SELECT n FROM iso.counter WHERE id = 1").Scan(&before); err != nil {
			t.Fatal(err)
		}
		c.exec("SET @id = iso.bump()")
		for range 6 {
			if v := c.value("SELECT @id"); v != fmt.Sprint(before+1) {
				t.Fatalf("@id = %s, want %d", v, before+1)
			}
			c.exec("INSERT INTO iso.w VALUES (1)")
		}
		var after int
		if err := p.QueryRow("SELECT n FROM iso.counter WHERE id = 1").Scan(&after); err != nil {
			t.Fatal(err)
		}
		if after != before+1 {
			t.Fatalf("SET @id = f() ran f's update %d times, want once", after-before)
		}
		// A SET that warns keeps its warnings for SHOW WARNINGS: its
		// values are read back after that.
		c.exec("SET @w = 'x' + 1")
		if n := c.value("SHOW COUNT(*) WARNINGS"); n != "1" {
			t.Fatalf("warnings after SET @w = 'x' + 1: %s, want 1", n)
		}
		for range 4 {
			if v := c.value("SELECT @w"); v != "1" {
				t.Fatalf("@w = %s, want 1", v)
			}
		}
		// Typed: a string's character set and collation, a decimal, a
		// double, binary, NULL come back as they were set.
		c.exec("SET @s = CONCAT(_latin1 'x', CHAR(233 USING latin1)) COLLATE latin1_bin, @d = 1.50 + 0, @f = 0.1 + 0E0, @b = UNHEX(CONCAT('00', 'FF')), @n = NULL + 1")
		for i := range 4 {
			got := c.value("SELECT CONCAT_WS('|', HEX(@s), COLLATION(@s), @d, @f, HEX(@b), COLLATION(@b), @n IS NULL)")
			if want := "78E9|latin1_bin|1.50|0.1|00FF|binary|1"; got != want {
				t.Fatalf("read %d: %s, want %s", i, got, want)
			}
		}
	})
}

// TestIsoSavedValueNotReplayedLater (issue 39 defect 9): SET @saved =
// @@GLOBAL.x, then SET GLOBAL x = another value: @saved stays the value
// it was set to, on every later statement (a write included), never the
// later moment's.
func TestIsoSavedValueNotReplayedLater(t *testing.T) {
	isoSchema(t)
	p := primaryDB(t, topo)
	var orig string
	if err := p.QueryRow("SELECT @@GLOBAL.max_connect_errors").Scan(&orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Exec("SET GLOBAL max_connect_errors = " + orig) })
	bothModes(t, func(t *testing.T, s *Server) {
		c := isoConn(t, openDB(t, s, ""))
		c.exec("SET @saved = @@GLOBAL.max_connect_errors")
		c.exec("SET GLOBAL max_connect_errors = 4242")
		c.exec("DELETE FROM iso.vals")
		c.exec("INSERT INTO iso.vals VALUES (@saved)")
		if v := c.value("SELECT @saved"); v != orig {
			t.Fatalf("@saved = %s, want %s", v, orig)
		}
		if v := c.value("SELECT v FROM iso.vals"); v != orig {
			t.Fatalf("inserted @saved = %s, want %s", v, orig)
		}
		c.exec("SET GLOBAL max_connect_errors = @saved")
		var now string
		if err := p.QueryRow("SELECT @@GLOBAL.max_connect_errors").Scan(&now); err != nil || now != orig {
			t.Fatalf("restored max_connect_errors = %s, %v; want %s", now, err, orig)
		}
	})
}

// TestIsoSQLPrepareAndFTWRL (issue 38 finding 5, issue 39 defect 10):
// SQL PREPARE/EXECUTE works on the next statements; FLUSH TABLES WITH
// READ LOCK holds until UNLOCK TABLES (another client's write waits).
func TestIsoSQLPrepareAndFTWRL(t *testing.T) {
	isoSchema(t)
	bothModes(t, func(t *testing.T, s *Server) {
		db := openDB(t, s, "")
		c := isoConn(t, db)
		c.exec("PREPARE iso_s1 FROM 'SELECT ? + 1'")
		c.exec("SET @p = 41")
		for range 3 {
			if v := c.value("EXECUTE iso_s1 USING @p"); v != "42" {
				t.Fatalf("EXECUTE = %s, want 42", v)
			}
		}
		c.exec("DEALLOCATE PREPARE iso_s1")

		other := isoConn(t, db)
		other.exec("SET SESSION lock_wait_timeout = 1")
		c.exec("FLUSH TABLES WITH READ LOCK")
		for range 3 {
			c.value("SELECT 1")
		}
		_, err := other.c.ExecContext(context.Background(), "INSERT INTO iso.w VALUES (2)")
		var me *gomysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1205 {
			c.exec("UNLOCK TABLES")
			t.Fatalf("a write under another session's FTWRL: %v, want 1205 (lock wait timeout)", err)
		}
		c.exec("UNLOCK TABLES")
		other.exec("INSERT INTO iso.w VALUES (3)")
	})
}

// TestIsoStateInsideCallAndDynamicSQL (issue 38, finding 6; issue 39
// defect 5): a temporary table created inside CALL or through
// PREPARE/EXECUTE, and a user variable set inside a procedure, are read
// by the session's next statements (they live on the primary: its reads
// stay there), in both modes.
func TestIsoStateInsideCallAndDynamicSQL(t *testing.T) {
	isoSchema(t)
	bothModes(t, func(t *testing.T, s *Server) {
		db := openDB(t, s, "")
		c := isoConn(t, db)
		c.exec("CALL iso.mktemp()")
		for range 3 {
			if v, err := c.valueErr("SELECT a FROM iso.tmp1"); err != nil || v != "7" {
				t.Fatalf("temporary table made in CALL: %s, %v", v, err)
			}
		}
		d := isoConn(t, db)
		d.exec("PREPARE iso_mk FROM 'CREATE TEMPORARY TABLE iso.tmp2 (a INT)'")
		d.exec("EXECUTE iso_mk")
		d.exec("DEALLOCATE PREPARE iso_mk")
		for range 3 {
			if v, err := d.valueErr("SELECT COUNT(*) FROM iso.tmp2"); err != nil || v != "0" {
				t.Fatalf("temporary table made by EXECUTE: %s, %v", v, err)
			}
		}
		e := isoConn(t, db)
		e.exec("CALL iso.setx()")
		for range 3 {
			if v := e.value("SELECT @x"); v != "42" {
				t.Fatalf("@x set in CALL: %s, want 42", v)
			}
		}
		o := isoConn(t, db)
		o.exec("CALL iso.outp(@out)")
		for range 3 {
			if v := o.value("SELECT @out"); v != "5" {
				t.Fatalf("@out of CALL p(@out): %s, want 5", v)
			}
		}
		if m := metricText(t, s); !strings.Contains(m, `reason="session-state"`) {
			t.Errorf("no read pinned as session-state:\n%s", grepLines(m, "primary_statements_total"))
		}
	})
}

// TestIsoOrdinaryStatementsDoNotPin: the statements applications run all
// the time (transactions, writes, DDL, replayed SETs, USE, reads) report
// no session state change the proxy does not replay: no session is held
// as session-state-changed, and its reads stay routable.
func TestIsoOrdinaryStatementsDoNotPin(t *testing.T) {
	isoSchema(t)
	bothModes(t, func(t *testing.T, s *Server) {
		c := isoConn(t, openDB(t, s, ""))
		for _, q := range []string{
			"BEGIN", "INSERT INTO iso.w VALUES (1)", "SAVEPOINT a", "ROLLBACK TO SAVEPOINT a", "COMMIT",
			"START TRANSACTION READ ONLY", "SELECT COUNT(*) FROM iso.w", "ROLLBACK",
			"CREATE TABLE IF NOT EXISTS iso.ddl (a INT)", "DROP TABLE iso.ddl", "UPDATE iso.w SET a = a WHERE a = 0",
			"SET @a = 1", "SET time_zone = '+00:00'", "SET NAMES utf8mb4", "USE iso", "SET @u = UUID()",
			"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "DO 1", "SELECT SLEEP(0)", "ANALYZE TABLE iso.w",
			"SELECT * FROM iso.w LIMIT 1 FOR UPDATE", "SHOW WARNINGS", "SELECT @a",
		} {
			if _, err := c.c.ExecContext(context.Background(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		for range 3 {
			c.value("SELECT 1")
		}
		m := metricText(t, s)
		if l := grepLines(m, `reason="session-state-changed"`); l != "" {
			t.Fatalf("ordinary statements held a session as session-state-changed:\n%s", l)
		}
		if l := grepLines(m, `causallab_proxy_primary_statements_total{reason="session-state"}`); l != "" {
			t.Fatalf("reads pinned as session-state after ordinary statements:\n%s", l)
		}
	})
}
