package proxy

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
)

// TestGoMySQLClientPreparedExecute runs prepared statements with
// parameters from go-mysql's own client, which sets
// PARAMETER_COUNT_AVAILABLE (flags 0x08) on every such COM_STMT_EXECUTE
// whether or not query attributes were negotiated. MySQL accepts it (the
// bit changes the layout only with CLIENT_QUERY_ATTRIBUTES, which the proxy
// never offers); the proxy refused every one ("flags 0x08") until the raw
// path let that bit through and cleared it for the backend. Each execute
// is relayed raw, a read and a write.
func TestGoMySQLClientPreparedExecute(t *testing.T) {
	s := startProxy(t, nil)
	c, err := client.Connect(s.Addr(), "app", "apppw", "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS gmstmt", "DROP TABLE IF EXISTS gmstmt.kv",
		"CREATE TABLE gmstmt.kv (k INT PRIMARY KEY, v VARCHAR(20))"} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	ins, err := c.Prepare("INSERT INTO gmstmt.kv VALUES (?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer ins.Close()
	sel, err := c.Prepare("SELECT v, ? + 1 FROM gmstmt.kv WHERE k = ?")
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	const n = 5
	for i := range n {
		r, err := ins.Execute(i, "v"+strings.Repeat("x", i))
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		r.Close()
		r, err = sel.Execute(41, i)
		if err != nil {
			t.Fatalf("select %d: %v", i, err)
		}
		if r.RowNumber() != 1 {
			t.Fatalf("select %d: %d rows, want 1", i, r.RowNumber())
		}
		v, _ := r.GetString(0, 0)
		sum, _ := r.GetInt(0, 1)
		r.Close()
		if want := "v" + strings.Repeat("x", i); v != want || sum != 42 {
			t.Fatalf("select %d: (%q, %d), want (%q, 42)", i, v, sum, want)
		}
	}
	m := metricText(t, s)
	if want := `causallab_proxy_stmt_executes_total{path="raw",reason=""} 10`; !strings.Contains(m, want) {
		t.Errorf("want %s in the metrics; executes counted:\n%s", want, grepLines(m, "stmt_executes_total"))
	}
}
