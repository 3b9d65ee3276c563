package compose_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// TestAppAccount (issue 38): every MySQL server compose starts has the
// least-privilege application account app/app: DML and DDL on the
// application's schemas (CREATE DATABASE included, replicated), nothing
// on mysql and sys, no administrative privilege; replicas carry the same
// partial revokes (partial_revokes=ON everywhere).
func TestAppAccount(t *testing.T) {
	composetest.Need(t, shared)
	ctx := testCtx(t)
	asApp := func(n compose.Node) *sql.DB {
		db, err := sql.Open("mysql", compose.AppUser+":"+compose.AppPassword+"@tcp("+n.Addr()+")/?tls=preferred")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	code := func(err error) uint16 {
		var me *gomysql.MySQLError
		if errors.As(err, &me) {
			return me.Number
		}
		return 0
	}
	nodes := append([]compose.Node{shared.Primary()}, shared.Replicas()...)
	for _, n := range nodes {
		db := asApp(n)
		var who string
		if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&who); err != nil || who != "app@%" {
			t.Fatalf("%s: CURRENT_USER() %q, %v", n.Name, who, err)
		}
		var grants []string
		rows, err := db.QueryContext(ctx, "SHOW GRANTS")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var g string
			if err := rows.Scan(&g); err != nil {
				t.Fatal(err)
			}
			grants = append(grants, g)
		}
		rows.Close()
		all := strings.Join(grants, "\n")
		for _, p := range []string{"SUPER", "FILE", "PROCESS", "CONNECTION_ADMIN", "CREATE USER", "SHUTDOWN", "RELOAD", "REPLICATION", "SYSTEM_VARIABLES_ADMIN", "GRANT OPTION", "ALL PRIVILEGES"} {
			if strings.Contains(all, p) {
				t.Errorf("%s: app has %s: %s", n.Name, p, all)
			}
		}
		for q, want := range map[string]uint16{
			"SELECT COUNT(*) FROM mysql.user":          1142,
			"SELECT COUNT(*) FROM sys.processlist":     1142,
			"SET GLOBAL max_connections = 301":         1227,
			"CREATE USER evil":                         1227,
			"SHUTDOWN":                                 1227,
			"SET sql_log_bin = 0":                      1227,
			"SELECT 1 INTO OUTFILE '/tmp/causallab-x'": 1227,
		} {
			if _, err := db.ExecContext(ctx, q); code(err) != want {
				t.Errorf("%s: %s: %v, want error %d", n.Name, q, err, want)
			}
		}
	}
	app := asApp(shared.Primary())
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS apptest", "CREATE TABLE IF NOT EXISTS apptest.t (a INT PRIMARY KEY)",
		"REPLACE INTO apptest.t VALUES (1)", "CREATE OR REPLACE VIEW apptest.v AS SELECT a FROM apptest.t"} {
		if _, err := app.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
