package proxy

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestStartTokenProxyWrites: a client session that begins after another
// session's write reads that write while both replicas lack it, as a new
// connection to one MySQL server would (go-sql-driver's
// TestRawBytesAreNotModified reconnects after each cancelled query and
// reads the rows its first connection inserted). With start_token none the
// same read is served by a replica without the row: the test sees the
// difference the setting makes. COM_RESET_CONNECTION starts the session's
// causal state afresh, from the same token.
func TestStartTokenProxyWrites(t *testing.T) {
	for _, c := range []struct {
		startToken string
		wantRow    bool
	}{{StartTokenProxyWrites, true}, {StartTokenNone, false}} {
		t.Run(c.startToken, func(t *testing.T) {
			s := startProxy(t, func(cfg *Config) { cfg.StartToken, cfg.Policy = c.startToken, "token-ryw-mr" })
			ctx := context.Background()
			writer := openDB(t, s, "tls=skip-verify")
			emptyTable(t, writer, "ptest", "starttok", "id INT PRIMARY KEY")
			stopAppliers(t)
			// A session begun before the write (its reset is checked last).
			rc := rawLogin(t, s.Addr(), "app", "apppw", false)
			mustExec(t, writer, "INSERT INTO ptest.starttok VALUES (1)")

			// A new client, a new session: no token of its own.
			reader := openDB(t, s, "tls=skip-verify")
			var id int
			err := reader.QueryRowContext(ctx, "SELECT id FROM ptest.starttok WHERE id = 1").Scan(&id)
			switch {
			case c.wantRow && err != nil:
				t.Fatalf("a session begun after the write: %v, want the row", err)
			case !c.wantRow && !errors.Is(err, sql.ErrNoRows):
				t.Fatalf("start_token none: %v (id %d), want no row from a stopped replica", err, id)
			case !c.wantRow:
				return
			}
			// The start token is the session's own, as a written one is: SELECT
			// @causal_token shows it.
			var tok string
			if err := reader.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil || tok == "" {
				t.Fatalf("SELECT @causal_token of a new session: %q, %v; want the proxy's writes", tok, err)
			}
			// COM_RESET_CONNECTION: the session starts again, from the
			// proxy's writes at that moment.
			if _, ok := rc.value(t, "SELECT id FROM ptest.starttok WHERE id = 1"); ok {
				t.Fatal("a session begun before the write read it from a stopped replica")
			}
			rc.write(0, []byte{mysql.COM_RESET_CONNECTION})
			if a := rc.reply(); a.kind != "ok" {
				t.Fatalf("COM_RESET_CONNECTION: %v", a)
			}
			if _, ok := rc.value(t, "SELECT id FROM ptest.starttok WHERE id = 1"); !ok {
				t.Fatal("after COM_RESET_CONNECTION, the row written before it is missing")
			}
		})
	}
}

// TestReadYourWritesUnderWideCollation: a session whose
// collation_connection is utf16 or utf32 (MySQL's own ctype_utf32_uca
// sets it) still reads its own writes under token-wait: the replica's
// WAIT_FOR_EXECUTED_GTID_SET, run on the session's connection, got its
// GTID set as a literal in that character set, read it as another set and
// answered "caught up" at once, so a replica whose applier was stopped
// served the read.
func TestReadYourWritesUnderWideCollation(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.Policy, c.StartToken = "token-wait", StartTokenNone })
	db := openDB(t, s, "tls=skip-verify")
	emptyTable(t, db, "ptest", "widecoll", "id INT PRIMARY KEY")
	stopAppliers(t)
	for _, coll := range []string{"utf32_unicode_ci", "utf16_general_ci", "ucs2_bin"} {
		rc := rawLogin(t, s.Addr(), "app", "apppw", false)
		rc.exec(t, "SET collation_connection = "+coll)
		rc.exec(t, "INSERT INTO ptest.widecoll VALUES ((SELECT COUNT(*) FROM ptest.widecoll x) + 1)")
		n, ok := rc.value(t, "SELECT COUNT(*) FROM ptest.widecoll")
		if want := map[string]string{"utf32_unicode_ci": "1", "utf16_general_ci": "2", "ucs2_bin": "3"}[coll]; !ok || n != want {
			t.Errorf("collation_connection %s: the session's read counts %q rows, want %s (its own insert)", coll, n, want)
		}
	}
	// A SET the proxy evaluates once and replays as a literal on a
	// replica connection, under utf32 there; and SHOW PROCESSLIST, whose
	// privilege check runs on the session's connection.
	rc := rawLogin(t, s.Addr(), "app", "apppw", false)
	rc.exec(t, "SET collation_connection = utf32_unicode_ci")
	rc.exec(t, "SET SESSION time_zone = @@GLOBAL.time_zone")
	if v, ok := rc.value(t, "SELECT @@SESSION.time_zone"); !ok || v != "SYSTEM" {
		t.Errorf("an evaluated time_zone read on a replica under utf32: %q", v)
	}
	rc.exec(t, "SHOW PROCESSLIST")
}

// stopAppliers waits until both replicas have everything, then stops
// their appliers until the test ends: what the test writes next is on the
// primary alone.
func stopAppliers(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, r := range topo.Replicas() {
		if err := topo.StopApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := topo.StartApplier(context.Background(), r.Name); err != nil {
				t.Error(err)
			}
		})
	}
}
