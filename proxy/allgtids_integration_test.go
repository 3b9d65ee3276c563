package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/mysqlwire"
)

// readResult reads one result set packet by packet and returns its shape:
// one letter per packet (c column count, d column definition, e EOF, r row,
// o OK, x ERR) and the last packet's payload.
func readResult(t *testing.T, rc *rawConn) (string, []byte) {
	t.Helper()
	var (
		shape strings.Builder
		next  byte = 1
		cols  uint64
		eofs  int
	)
	for i := 0; ; i++ {
		seq, p, err := rc.read()
		if err != nil {
			t.Fatalf("after %q: %v", shape.String(), err)
		}
		if seq != next {
			t.Fatalf("packet %d (after %q): sequence %d, want %d", i, shape.String(), seq, next)
		}
		next++
		switch {
		case len(p) == 0:
			t.Fatalf("empty packet after %q", shape.String())
		case p[0] == mysql.ERR_HEADER:
			t.Fatalf("server error after %q: %s", shape.String(), p[3:])
		case i == 0:
			cols, _, _ = mysql.LengthEncodedInt(p)
			shape.WriteByte('c')
		case uint64(i) <= cols:
			shape.WriteByte('d')
		case p[0] == mysql.EOF_HEADER && len(p) < 9:
			shape.WriteByte('e')
			if eofs++; eofs == 2 {
				return shape.String(), p
			}
		case p[0] == mysql.EOF_HEADER || p[0] == mysql.OK_HEADER && eofs == 0:
			// An OK packet where a classic client expects an EOF.
			shape.WriteByte('o')
			return shape.String(), p
		default:
			shape.WriteByte('r')
		}
	}
}

// TestAllGTIDsResultFraming relays results from replica connections that
// negotiated CLIENT_DEPRECATE_EOF (watermark_source all-gtids, token-wait:
// the watermark comes from the final OK) to clients that get the classic
// framing: EOF after the column definitions, EOF (not OK) at the end, with
// the status and no session-state block. Both client kinds: go-mysql's
// client asks for CLIENT_DEPRECATE_EOF (the proxy does not offer it, so it
// is not granted) and go-sql-driver does not ask; text and binary
// (prepared) results, with rows and empty.
func TestAllGTIDsResultFraming(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		c.Policy = "token-wait"
		c.WatermarkSource = "all-gtids"
	})
	ctx := context.Background()
	setup := openDB(t, s, "")
	emptyTable(t, setup, "agframe", "t", "k INT PRIMARY KEY, v VARCHAR(8)")
	mustExec(t, setup, "INSERT INTO agframe.t VALUES (1, 'x'), (2, 'y')")
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Run("asks-deprecate-eof", func(t *testing.T) {
		rc := rawLogin(t, s.Addr(), "app", "apppw", false)
		if mysqlwire.CapsOf(rc.cc).DeprecateEOF {
			t.Fatal("the proxy granted CLIENT_DEPRECATE_EOF, which it does not offer")
		}
		for _, c := range []struct{ query, shape string }{
			{"SELECT k, v FROM agframe.t ORDER BY k", "cdderre"},
			{"SELECT k FROM agframe.t WHERE k > 5", "cdee"},
		} {
			rc.write(0, append([]byte{mysql.COM_QUERY}, c.query...))
			shape, last := readResult(t, rc)
			checkFraming(t, c.query, shape, c.shape, last)
		}
		// A binary result: prepared through the client, executed raw.
		st, err := rc.cc.Prepare("SELECT k, v FROM agframe.t WHERE k = 2")
		if err != nil {
			t.Fatal(err)
		}
		pkt := []byte{mysql.COM_STMT_EXECUTE}
		pkt = binary.LittleEndian.AppendUint32(pkt, st.ID)
		pkt = append(pkt, 0, 1, 0, 0, 0)
		rc.write(0, pkt)
		shape, last := readResult(t, rc)
		checkFraming(t, "execute", shape, "cddere", last)
		if err := rc.ping(); err != nil {
			t.Fatalf("connection out of step after the results: %v", err)
		}
	})
	t.Run("classic", func(t *testing.T) {
		db := openDB(t, s, "")
		db.SetMaxOpenConns(1)
		rows, err := db.QueryContext(ctx, "SELECT k, v FROM agframe.t ORDER BY k")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var (
				a int
				b string
			)
			if err := rows.Scan(&a, &b); err != nil {
				t.Fatal(err)
			}
			got = append(got, b)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if strings.Join(got, ",") != "x,y" {
			t.Errorf("text rows %v, want x,y", got)
		}
		var b string
		if err := db.QueryRowContext(ctx, "SELECT v FROM agframe.t WHERE k = ?", 1).Scan(&b); err != nil || b != "x" {
			t.Errorf("prepared row %q, %v; want x", b, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM agframe.t WHERE k > 5").Scan(&n); err != nil || n != 0 {
			t.Errorf("empty count %d, %v", n, err)
		}
	})
	m := metricText(t, s)
	for _, want := range []string{`kind="read",role="replica"}`, `kind="execute-read",role="replica"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("no read was relayed from a replica (%s):\n%s", want, grepLines(m, "statements_total"))
		}
	}
	if strings.Contains(m, `source="replica-query"`) {
		t.Errorf("autocommit reads of a table fell back to the watermark query:\n%s", grepLines(m, "watermark_fallbacks"))
	}
}

// checkFraming compares a result's shape and its final EOF packet: the
// status says autocommit, no more results, no session-state block.
func checkFraming(t *testing.T, what, shape, want string, last []byte) {
	t.Helper()
	if shape != want {
		t.Errorf("%s: packets %q, want %q", what, shape, want)
		return
	}
	if len(last) != 5 {
		t.Errorf("%s: final EOF is %d bytes, want 5: %x", what, len(last), last)
		return
	}
	st := binary.LittleEndian.Uint16(last[3:5])
	if st&mysql.SERVER_STATUS_AUTOCOMMIT == 0 || st&(mysql.SERVER_SESSION_STATE_CHANGED|mysql.SERVER_MORE_RESULTS_EXISTS) != 0 {
		t.Errorf("%s: final EOF status %#x", what, st)
	}
}

// TestAllGTIDsWatermarkFallback: a read whose final OK carries no
// ALL_GTIDS set (MySQL 9.7 sends none on some reads of a quiet server;
// forced here with Server.dropTracked) has its watermark read with the
// query after the response (counted as replica-query), the client gets
// its rows, and the connection stays in step for the next read; a
// monotonic read after it still sees what the first saw.
func TestAllGTIDsWatermarkFallback(t *testing.T) {
	s := startProxy(t, func(c *Config) {
		c.Policy = "token-wait"
		c.WatermarkSource = "all-gtids"
	})
	ctx := context.Background()
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	s.dropTracked.Store(true)
	db := openDB(t, s, "")
	db.SetMaxOpenConns(1)
	for i := range 5 {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT ?", i).Scan(&n); err != nil || n != i {
			t.Fatalf("prepared read %d: %d, %v", i, n, err)
		}
		if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT %d", i)).Scan(&n); err != nil || n != i {
			t.Fatalf("read %d: %d, %v", i, n, err)
		}
	}
	m := metricText(t, s)
	if !strings.Contains(m, `causallab_proxy_watermark_fallbacks_total{source="replica-query"}`) {
		t.Errorf("no read was counted as a query fallback:\n%s", grepLines(m, "watermark_fallbacks", "statements_total"))
	}
	if !strings.Contains(m, `kind="read",role="replica"}`) {
		t.Errorf("no read reached a replica:\n%s", grepLines(m, "statements_total"))
	}
}
