package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// userWithoutBackupAdmin creates (afresh) an account with every privilege
// but BACKUP_ADMIN, which performance_schema.log_status needs, and waits
// until the replicas have it.
func userWithoutBackupAdmin(t *testing.T, ctx context.Context, user, password string) {
	t.Helper()
	pu := topo.Primary()
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	c, err := d.Dial(ctx, pu.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{"DROP USER IF EXISTS '" + user + "'@'%'", "CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'",
		"GRANT ALL PRIVILEGES ON *.* TO '" + user + "'@'%'", "REVOKE BACKUP_ADMIN ON *.* FROM '" + user + "'@'%'"} {
		if _, err := mysqlwire.Exec(ctx, c, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestPrimaryWatermarkLogStatus: a primary connection reads its
// watermark from performance_schema.log_status when the proxy's account
// may (the compose account has every privilege), and the set contains
// the primary's gtid_executed read before it; with an account without
// BACKUP_ADMIN the server refuses it, the proxy keeps serving with
// watermarkQuery and counts every such watermark as
// watermark_fallbacks_total{source="primary-no-log-status"}.
func TestPrimaryWatermarkLogStatus(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := func(t *testing.T, s *Server) (*backendConn, gtid.Set) {
		t.Helper()
		bc, err := dialBackend(ctx, &s.cfg.Primary, account{}, "", "", 0, &s.cfg, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(bc.close)
		before, err := bc.exec(ctx, mysqlwire.ExecutedQuery)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := before.GetString(0, 0)
		bs, err := gtid.Parse(strings.Clone(b))
		if err != nil {
			t.Fatal(err)
		}
		r, err := bc.exec(ctx, string(bc.watermark()[1:]))
		if err != nil {
			t.Fatal(err)
		}
		w, _ := r.GetString(0, 0)
		ws, err := gtid.Parse(strings.Clone(w))
		if err != nil {
			t.Fatalf("watermark %q: %v", w, err)
		}
		if !ws.Contains(bs) {
			t.Fatalf("watermark %v lacks gtid_executed read before it, %v", ws, bs)
		}
		return bc, ws
	}
	t.Run("log-status", func(t *testing.T) {
		s := startProxy(t, nil)
		bc, _ := read(t, s)
		if string(bc.wmCmd) != string(logStatusCmd) {
			t.Fatalf("the primary connection's watermark command is %q, want log_status", bc.watermark())
		}
		if m := metricText(t, s); !strings.Contains(m, `causallab_proxy_watermark_fallbacks_total{source="primary-no-log-status"} 0`) {
			t.Errorf("a fallback counted although log_status answered:\n%s", grepLines(m, "watermark_fallbacks"))
		}
	})
	t.Run("refused", func(t *testing.T) {
		userWithoutBackupAdmin(t, ctx, "nologstatus", "nlpw")
		s := startProxy(t, func(cfg *Config) {
			cfg.Primary.User, cfg.Primary.Password = "nologstatus", "nlpw"
		})
		bc, _ := read(t, s)
		if bc.wmCmd != nil {
			t.Fatalf("the primary connection's watermark command is %q, want watermarkQuery", bc.wmCmd)
		}
		if ls := &s.cfg.primaryWM.ls; !ls.Known() || ls.Sound() {
			t.Fatalf("probe verdict known %v sound %v, want refused", ls.Known(), ls.Sound())
		}
		// A client's session still works through the proxy.
		db := openDB(t, s, "")
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 through the proxy: %d, %v", one, err)
		}
		// One fallback for read's watermark above, and one for each read
		// through the proxy the primary served: the SELECT 1 goes to a
		// replica unless the router found none (a loaded machine's poll
		// overran: reason no-replica-up; seen in a full-suite run), and
		// a read the primary serves reads its watermark there too.
		m := metricText(t, s)
		onPrimary := metricSum(m, `causallab_proxy_statements_total{kind="read",role="primary"}`)
		if got := metricSum(m, `causallab_proxy_watermark_fallbacks_total{source="primary-no-log-status"}`); got != 1+onPrimary {
			t.Errorf("%d fallbacks counted, want 1 + %d reads the primary served:\n%s", got, onPrimary,
				grepLines(m, "watermark_fallbacks", "statements_total", "causallab_router_reads_total"))
		}
	})
}
