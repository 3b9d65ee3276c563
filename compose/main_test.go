package compose_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
)

// shared is the topology of tests whose faults do not conflict: one
// primary and two replicas.
var shared *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Replicas: 2}, func(t *compose.Topology) int {
		shared = t
		return m.Run()
	}))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, n compose.Node) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", n.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, ctx context.Context, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func queryInt(t *testing.T, ctx context.Context, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var v int64
	if err := db.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func queryStr(t *testing.T, ctx context.Context, db *sql.DB, q string, args ...any) string {
	t.Helper()
	var v sql.NullString
	if err := db.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v.String
}
