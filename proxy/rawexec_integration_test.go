package proxy

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestPreparedExecutePaths runs prepared statements through
// handleStmtExecute (the client's packet and the binary result relayed
// unchanged) and checks results and the path counter: all types with and
// without NULLs, and parameters sent as COM_STMT_SEND_LONG_DATA (which the
// statement memory moves into the execution). The proxy does not offer
// CLIENT_COMPRESS, so go-sql-driver's compress=true falls back to plain.
func TestPreparedExecutePaths(t *testing.T) {
	s := startProxy(t, nil)
	ctx := context.Background()
	setup := openDB(t, s, "")
	emptyTable(t, setup, "rawexec", "t", "k INT PRIMARY KEY, s VARCHAR(4000), f DOUBLE, d DATETIME(6), b BLOB")

	type row struct {
		k int
		s sql.NullString
		f sql.NullFloat64
		d sql.NullTime
		b []byte
	}
	check := func(t *testing.T, db *sql.DB, want row) {
		t.Helper()
		// Read through the primary (FOR SHARE) and through a routed read
		// (with the session's token, so it waits for the write).
		var tok string
		if err := db.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			"SELECT k, s, f, d, b FROM rawexec.t WHERE k = ? FOR SHARE",
			"/* causal_token:" + tok + " */ SELECT k, s, f, d, b FROM rawexec.t WHERE k = ?",
		} {
			st, err := db.PrepareContext(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var got row
			err = st.QueryRowContext(ctx, want.k).Scan(&got.k, &got.s, &got.f, &got.d, &got.b)
			st.Close()
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if got.k != want.k || got.s != want.s || got.f != want.f || !got.d.Time.Equal(want.d.Time) || got.d.Valid != want.d.Valid || string(got.b) != string(want.b) {
				t.Fatalf("%s:\n got %+v\nwant %+v", q, got, want)
			}
		}
	}
	when := time.Date(2026, 11, 30, 12, 34, 56, 789000000, time.UTC)

	t.Run("raw", func(t *testing.T) {
		db := openDB(t, s, "parseTime=true&loc=UTC")
		db.SetMaxOpenConns(1)
		ins, err := db.PrepareContext(ctx, "INSERT INTO rawexec.t VALUES (?, ?, ?, ?, ?)")
		if err != nil {
			t.Fatal(err)
		}
		defer ins.Close()
		rows := []row{
			{k: 1, s: sql.NullString{String: "one", Valid: true}, f: sql.NullFloat64{Float64: 1.5, Valid: true}, d: sql.NullTime{Time: when, Valid: true}, b: []byte{0, 1, 2, 0xfe, 0xff}},
			{k: 2}, // NULLs everywhere: the NULL bitmap goes through raw
			{k: 3, s: sql.NullString{String: strings.Repeat("é", 500), Valid: true}, f: sql.NullFloat64{Float64: -2e300, Valid: true}},
		}
		for _, r := range rows {
			var b any
			if r.b != nil {
				b = r.b
			}
			if _, err := ins.ExecContext(ctx, r.k, r.s, r.f, r.d, b); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range rows {
			check(t, db, r)
		}
	})

	t.Run("long-data", func(t *testing.T) {
		// go-sql-driver sends a value of at least maxAllowedPacket/(params+1)
		// bytes with COM_STMT_SEND_LONG_DATA.
		db := openDB(t, s, "parseTime=true&loc=UTC&maxAllowedPacket=3000")
		db.SetMaxOpenConns(1)
		big := strings.Repeat("L", 2500)
		mustExec(t, db, "INSERT INTO rawexec.t (k, s) VALUES (?, ?)", 10, big)
		check(t, db, row{k: 10, s: sql.NullString{String: big, Valid: true}})
		// A routed read whose parameter is sent as long data.
		var k int
		if err := db.QueryRowContext(ctx, "SELECT ? = REPEAT('L', 2500)", big).Scan(&k); err != nil || k != 1 {
			t.Fatalf("long-data parameter on a routed read: %d %v", k, err)
		}
	})

	m := metricText(t, s)
	for _, want := range []string{
		`causallab_proxy_stmt_executes_total{path="raw",reason=""}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "causallab_proxy_stmt_executes_total"))
		}
	}
}

// TestMonotonicReadsWatermark checks the replica read's watermark under
// token-wait and token-ryw-mr, for every watermark source (lazy: the
// poller's bound, taken only when the session moves, with a write of the
// session's every fifth read so that one stuck on the stale replica
// moves; the query pipelined behind every replica read; and the
// ALL_GTIDS set in the read's own final OK packet): with one replica's applier
// stopped, a session that has seen a row on the other replica never reads
// without it again, for plain and for prepared reads. Under token-ryw
// (no monotonic reads) the same reads do go back in time, which shows the
// scenario has teeth.
func TestMonotonicReadsWatermark(t *testing.T) {
	s0 := startProxy(t, nil)
	ctx := context.Background()
	setup := openDB(t, s0, "")
	emptyTable(t, setup, "mrwm", "t", "k INT PRIMARY KEY")
	emptyTable(t, setup, "mrwm", "w", "k INT PRIMARY KEY AUTO_INCREMENT")
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	reps := topo.Replicas()
	stale, fresh := reps[1], reps[0]
	if err := topo.StopApplier(ctx, stale.Name); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := topo.StartApplier(ctx, stale.Name); err != nil {
			t.Error(err)
		}
		if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
			t.Error(err)
		}
	}()
	// The write goes straight to the primary: the reading sessions hold no
	// token for it, so only monotonic reads can keep it visible.
	pdb, err := topo.DB(topo.Primary().Name)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, pdb, "INSERT INTO mrwm.t VALUES (1)")
	fdb, err := topo.DB(fresh.Name)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := fdb.QueryRowContext(ctx, "SELECT COUNT(*) FROM mrwm.t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never applied the write", fresh.Name)
		}
		time.Sleep(10 * time.Millisecond)
	}

	const reads = 40
	// run reads the row count under reads consistent_read_ids in order and
	// returns how many reads went back in time and how many saw the row.
	run := func(t *testing.T, policy, source string, prepared, writes bool) (backwards, seen int) {
		s := startProxy(t, func(c *Config) {
			c.Policy = policy
			c.WaitBudget = 20 * time.Millisecond
			c.FallbackPerSecond = 0
			c.WatermarkSource = source
		})
		if source == "all-gtids" {
			defer func() {
				// The reads' own OK packets carried the watermark: no
				// query was needed after any of them.
				m := metricText(t, s)
				if strings.Contains(m, `causallab_proxy_watermark_fallbacks_total{source="replica-query"}`) {
					t.Errorf("all-gtids reads fell back to the query:\n%s", grepLines(m, "watermark_fallbacks"))
				}
			}()
		}
		db := openDB(t, s, "")
		db.SetMaxOpenConns(1)
		for i := range reads {
			if writes && i%5 == 4 {
				// A write of the session's own: its token keeps the next
				// read off the stale replica, so a session stuck there
				// (a session stays on its last replica while it
				// qualifies, router.Session.LastReplica) moves.
				if _, err := db.ExecContext(ctx, "INSERT INTO mrwm.w VALUES ()"); err != nil {
					t.Fatal(err)
				}
			}
			q := fmt.Sprintf("/* consistent_read_id:mr%d */ SELECT COUNT(*) FROM mrwm.t WHERE k >= 1", i)
			var n int
			if prepared {
				q = fmt.Sprintf("/* consistent_read_id:mr%d */ SELECT COUNT(*) FROM mrwm.t WHERE k >= ?", i)
				st, err := db.PrepareContext(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				err = st.QueryRowContext(ctx, 1).Scan(&n)
				st.Close()
				if err != nil {
					t.Fatal(err)
				}
			} else if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			switch {
			case n == 1:
				seen++
			case seen > 0:
				backwards++
			}
		}
		if m := metricText(t, s); !strings.Contains(m, `role="replica"} `) {
			// Reads served by the primary alone would pass vacuously.
			t.Errorf("%s %s: no read was served by a replica:\n%s", policy, source, grepLines(m, "statements_total", "backend_errors", "causallab_router_reads_total", "causallab_router_node_errors", "pool_acquire_failures"))
		}
		return backwards, seen
	}
	for _, source := range []string{"lazy", "query", "all-gtids"} {
		for _, prepared := range []bool{false, true} {
			name := source + "/query"
			if prepared {
				name = source + "/prepared"
			}
			t.Run(name, func(t *testing.T) {
				for _, policy := range []string{"token-wait", "token-ryw-mr"} {
					if back, seen := run(t, policy, source, prepared, true); back != 0 || seen == 0 {
						t.Errorf("%s: %d of %d reads went back in time after the row was seen (%d saw it)", policy, back, reads, seen)
					}
				}
				// A random replica per read (policy any, no watermark):
				// some reads go back in time, so the scenario has teeth.
				// (token-ryw no longer shows it: its session stays on the
				// replica it first read while that one qualifies.)
				if back, seen := run(t, "any", source, prepared, false); back == 0 {
					t.Errorf("any: no read went back in time (%d saw the row): the scenario has no teeth", seen)
				}
			})
		}
	}
}

// TestPreparedExecuteWithoutTypes sends the first execution of a
// statement without its parameter types (new-params-bound flag 0): the
// proxy relays it as it came and the client gets MySQL's own answer, the
// same error as from MySQL direct to a client that, like the proxy's,
// did not negotiate query attributes (MySQL reads the packet differently
// with them).
func TestPreparedExecuteWithoutTypes(t *testing.T) {
	s := startProxy(t, nil)
	p := topo.Primary()
	answer := func(addr, user, password string) *mysql.MyError {
		t.Helper()
		c, err := client.Connect(addr, user, password, "", func(c *client.Conn) error {
			c.UnsetCapability(mysql.CLIENT_QUERY_ATTRIBUTES)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		st, err := c.Prepare("SELECT ? IS NULL")
		if err != nil {
			t.Fatal(err)
		}
		pkt := []byte{0, 0, 0, 0, mysql.COM_STMT_EXECUTE}
		pkt = binary.LittleEndian.AppendUint32(pkt, st.ID)
		pkt = append(pkt, 0, 1, 0, 0, 0, 0 /* null bitmap */, 0 /* no types */)
		c.ResetSequence()
		if err := c.WritePacket(pkt); err != nil {
			t.Fatal(err)
		}
		r, err := c.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		if r[0] != mysql.ERR_HEADER {
			t.Fatalf("answer %x, want an error", r)
		}
		var me *mysql.MyError
		if !errors.As(c.HandleErrorPacket(r), &me) {
			t.Fatalf("unreadable error packet %x", r)
		}
		return me
	}
	direct := answer(p.Addr(), p.User, p.Password)
	proxied := answer(s.Addr(), "app", "apppw")
	if proxied.Code != direct.Code || proxied.State != direct.State || proxied.Message != direct.Message {
		t.Fatalf("through the proxy: %v; direct: %v", proxied, direct)
	}
}

// TestLargeReadWithWatermark sends a read of more than 16 MiB (split into
// several packets) under token-wait, so the watermark query follows a
// multi-packet command: the response must still be read in step.
func TestLargeReadWithWatermark(t *testing.T) {
	s := startProxy(t, func(c *Config) { c.WatermarkSource = "query" })
	db := openDB(t, s, "")
	db.SetMaxOpenConns(1)
	big := strings.Repeat("x", 17<<20)
	for i := range 2 { // twice: the connection is still in step after it
		var n int
		if err := db.QueryRow("SELECT LENGTH('" + big + "')").Scan(&n); err != nil || n != len(big) {
			t.Fatalf("read %d: %d, %v", i, n, err)
		}
	}
	m := metricText(t, s)
	if !strings.Contains(m, `causallab_proxy_statements_total{kind="read",role="replica"}`) {
		t.Fatalf("the large read was not served by a replica:\n%s", grepLines(m, "causallab_proxy_statements_total"))
	}
}
