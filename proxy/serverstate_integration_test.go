package proxy

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// replicasHave waits until query returns want on every replica (direct).
func replicasHave(t *testing.T, query, want string) {
	t.Helper()
	for _, r := range topo.Replicas() {
		rdb := sqlOpen(t, r.User+":"+r.Password+"@tcp("+r.Addr()+")/")
		deadline := time.Now().Add(30 * time.Second)
		for {
			var got string
			if err := rdb.QueryRow(query).Scan(&got); err == nil && got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s: %s is not %s after 30 s", r.Name, query, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestSessionAndServerReads (issue 39, defect 8): reads that describe the
// session or the server run where their answer lives. Through the proxy
// (reads on the replicas, policy any), as direct:
//   - SHOW SESSION STATUS LIKE 'Last_query_cost' after a read a replica
//     served: that read's cost (the primary's connection said 0);
//   - FLUSH STATUS, a read, SHOW STATUS LIKE 'Handler_read_rnd_next':
//     the read's rows (the read ran on a replica, the counters were the
//     primary's: 0);
//   - the optimizer trace of the previous statement (a replica's, none
//     on the primary);
//   - SELECT @@GLOBAL.x after SET GLOBAL x on the primary (a replica
//     answered its own).
func TestSessionAndServerReads(t *testing.T) {
	s, rec := startRecordingProxy(t)
	p := topo.Primary()
	direct := sqlOpen(t, p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	emptyTable(t, direct, "ptest", "sst", "a INT")
	mustExec(t, direct, "INSERT INTO ptest.sst VALUES (1), (2), (3)")
	replicasHave(t, "SELECT COUNT(*) FROM ptest.sst", "3")
	ctx := context.Background()
	conn := func(db *sql.DB) *sql.Conn {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	one := func(c *sql.Conn, q string, col int) string {
		t.Helper()
		rows, err := c.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		v := make([]sql.NullString, len(cols))
		a := make([]any, len(cols))
		for i := range v {
			a[i] = &v[i]
		}
		if !rows.Next() {
			return "<no row>"
		}
		if err := rows.Scan(a...); err != nil {
			t.Fatal(err)
		}
		return v[col].String
	}
	replicaServed := func() bool {
		i, ok := rec.last()
		return ok && i >= 0
	}
	const read = "SELECT * FROM ptest.sst WHERE a > 0"

	// Last_query_cost of a read a replica served.
	pc := conn(openDB(t, s, ""))
	one(pc, read, 0)
	if !replicaServed() {
		t.Fatal("the read was not served by a replica")
	}
	last, _ := rec.last()
	r := topo.Replicas()[last]
	rc := conn(sqlOpen(t, r.User+":"+r.Password+"@tcp("+r.Addr()+")/"))
	one(rc, read, 0)
	want := one(rc, "SHOW SESSION STATUS LIKE 'Last_query_cost'", 1)
	// Multiplexed, the read's connection went back to its pool: the
	// counters are those of the connection the SHOW gets (docs/proxy.md).
	if c := one(pc, "SHOW SESSION STATUS LIKE 'Last_query_cost'", 1); !s.cfg.Multiplex && c != want {
		t.Fatalf("Last_query_cost after a replica read: %q, want the read's, %q (direct on %s)", c, want, r.Name)
	}

	// FLUSH STATUS, a read, the session's handler counters.
	script := func(c *sql.Conn) string {
		if _, err := c.ExecContext(ctx, "FLUSH STATUS"); err != nil {
			t.Fatal(err)
		}
		one(c, read, 0)
		return one(c, "SHOW STATUS LIKE 'Handler_read_rnd_next'", 1)
	}
	if got, want := script(conn(openDB(t, s, ""))), script(conn(direct)); got != want {
		t.Fatalf("Handler_read_rnd_next after FLUSH STATUS and a read: %s through the proxy, %s direct", got, want)
	}

	// The optimizer trace of the previous statement.
	pc = conn(openDB(t, s, ""))
	if _, err := pc.ExecContext(ctx, "SET optimizer_trace = 'enabled=on'"); err != nil {
		t.Fatal(err)
	}
	one(pc, read, 0) // on the primary: tracing pins the session there
	if q := one(pc, "SELECT QUERY FROM information_schema.OPTIMIZER_TRACE", 0); q != read {
		t.Fatalf("optimizer trace: %q, want %q", q, read)
	}
	// A SET the proxy evaluates once: its read-back must not replace the
	// SET's trace (main.using_hypergraph_optimizer).
	setX := "SET @x = (SELECT COUNT(*) FROM ptest.sst)"
	if _, err := pc.ExecContext(ctx, setX); err != nil {
		t.Fatal(err)
	}
	if q := one(pc, "SELECT QUERY FROM information_schema.OPTIMIZER_TRACE", 0); q != setX {
		t.Fatalf("optimizer trace after an evaluated SET: %q, want %q", q, setX)
	}
	if x := one(pc, "SELECT @x", 0); x != "3" {
		t.Fatalf("SELECT @x after SET @x = (SELECT COUNT(*) ...): %s, want 3", x)
	}

	// SHOW PROFILES lists the session's statements (main.show_profile):
	// profiling pins the session, as tracing does.
	pc = conn(openDB(t, s, ""))
	if _, err := pc.ExecContext(ctx, "SET profiling = 1"); err != nil {
		t.Fatal(err)
	}
	one(pc, read, 0)
	rows, err := pc.QueryContext(ctx, "SHOW PROFILES")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for rows.Next() {
		var id int
		var dur, q string
		if err := rows.Scan(&id, &dur, &q); err != nil {
			t.Fatal(err)
		}
		listed = append(listed, q)
	}
	rows.Close()
	if !slices.Contains(listed, read) {
		t.Fatalf("SHOW PROFILES after a read lists %q, not the read %q", listed, read)
	}

	// A global just set on the primary.
	var was int
	if err := direct.QueryRow("SELECT @@GLOBAL.max_connect_errors").Scan(&was); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.Exec("SET GLOBAL max_connect_errors = " + strconv.Itoa(was)) })
	set := strconv.Itoa(was + 17)
	mustExec(t, direct, "SET GLOBAL max_connect_errors = "+set)
	pc = conn(openDB(t, s, ""))
	if v := one(pc, "SELECT @@GLOBAL.max_connect_errors", 0); v != set {
		t.Fatalf("SELECT @@GLOBAL.max_connect_errors after SET GLOBAL on the primary: %s, want %s", v, set)
	}
	if v := one(pc, "SHOW GLOBAL VARIABLES LIKE 'max_connect_errors'", 1); v != set {
		t.Fatalf("SHOW GLOBAL VARIABLES after SET GLOBAL on the primary: %s, want %s", v, set)
	}
}

// TestSelectOfWritingFunction (issue 39, defect 8): a SELECT of a stored
// function that writes, routed to a replica, is refused there (1290,
// super_read_only) before anything is sent: the proxy runs it on the
// primary instead, once, counted (primary_statements_total{reason=
// "replica-read-only"}). The client got the replica's 1290.
func TestSelectOfWritingFunction(t *testing.T) {
	var mu sync.Mutex
	onReplica := 0
	s := startProxy(t, func(c *Config) {
		c.Policy = "any"
		c.OnRead = func(r ReadRoute) {
			mu.Lock()
			if r.Replica >= 0 {
				onReplica++
			}
			mu.Unlock()
		}
	})
	p := topo.Primary()
	direct := sqlOpen(t, p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	emptyTable(t, direct, "ptest", "wlog", "a INT")
	mustExec(t, direct, "DROP FUNCTION IF EXISTS ptest.wf")
	mustExec(t, direct, "CREATE FUNCTION ptest.wf() RETURNS INT DETERMINISTIC MODIFIES SQL DATA BEGIN INSERT INTO ptest.wlog VALUES (1); RETURN 7; END")
	replicasHave(t, "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'ptest' AND ROUTINE_NAME = 'wf'", "1")
	db := openDB(t, s, "")
	for _, q := range []string{"SELECT ptest.wf()", "SELECT ptest.wf() FROM DUAL WHERE 1 = 1"} {
		var v int
		if err := db.QueryRow(q).Scan(&v); err != nil || v != 7 {
			t.Fatalf("%s: %d, %v; want 7", q, v, err)
		}
	}
	var n int
	if err := direct.QueryRow("SELECT COUNT(*) FROM ptest.wlog").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows the function wrote: %d, %v; want 2", n, err)
	}
	mu.Lock()
	refused := onReplica
	mu.Unlock()
	if refused == 0 {
		t.Fatal("no read of the function was routed to a replica")
	}
	if m := grepLines(metricText(t, s), `reason="replica-read-only"`); !strings.Contains(m, "} "+strconv.Itoa(refused)) {
		t.Fatalf("the %d reads run again on the primary were not counted:\n%s", refused, m)
	}
	// A read a replica refused for another reason is the client's answer.
	if _, err := db.Exec("SELECT * FROM ptest.no_such_table"); err == nil || !strings.Contains(err.Error(), "1146") {
		t.Fatalf("a replica's other refusal: %v, want 1146", err)
	}
}

// readRecorder records which replica served each routed read
// (Config.OnRead; -1: the primary).
type readRecorder struct {
	mu     sync.Mutex
	served []int
}

// startRecordingProxy is startProxy under policy any with its routed
// reads recorded.
func startRecordingProxy(t *testing.T) (*Server, *readRecorder) {
	rec := &readRecorder{}
	s := startProxy(t, func(c *Config) {
		c.Policy = "any"
		c.OnRead = func(r ReadRoute) {
			rec.mu.Lock()
			rec.served = append(rec.served, r.Replica)
			rec.mu.Unlock()
		}
	})
	return s, rec
}

func (r *readRecorder) reset() {
	r.mu.Lock()
	r.served = r.served[:0]
	r.mu.Unlock()
}

// all is a copy of the reads' replicas so far.
func (r *readRecorder) all() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.served...)
}

// last is the latest read's replica; ok is false before any read.
func (r *readRecorder) last() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.served) == 0 {
		return 0, false
	}
	return r.served[len(r.served)-1], true
}
