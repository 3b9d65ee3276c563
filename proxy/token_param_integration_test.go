package proxy

import (
	"context"
	"errors"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
)

// TestPreparedTokenParamThroughDriver: go-sql-driver/mysql sends
// `SET @causal_token = ?` with an argument as a server-side prepared
// statement (no client-side interpolation): the token another connection
// got travels as data, and this connection's read then sees the write.
// A malformed token from untrusted input is refused, not run.
func TestPreparedTokenParamThroughDriver(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.Policy = "token-ryw" })
	db := openDB(t, s, "")
	ctx := context.Background()
	emptyTable(t, db, "tokparam", "t", "k INT PRIMARY KEY")
	writer, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	mustExec(t, writer, "INSERT INTO tokparam.t VALUES (1)")
	var tok string
	if err := writer.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil || tok == "" {
		t.Fatalf("writer's token %q, %v", tok, err)
	}
	reader, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	mustExec(t, reader, "SET @causal_token = ?", tok)
	var got string
	if err := reader.QueryRowContext(ctx, "SELECT @causal_token").Scan(&got); err != nil || got != tok {
		t.Fatalf("reader's token %q, %v; want %q", got, err, tok)
	}
	var n int
	if err := reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM tokparam.t WHERE k = 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("read with the carried token: %d rows, %v; want the write", n, err)
	}
	_, err = reader.ExecContext(ctx, "SET @causal_token = ?", "x */ DELETE FROM tokparam.t #")
	var me *gomysql.MySQLError
	if !errors.As(err, &me) || me.Number != codeProxy {
		t.Fatalf("a malformed token: %v, want the proxy's refusal", err)
	}
	if err := reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM tokparam.t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the refusal: %d rows, %v", n, err)
	}
}
