package proxy

import (
	"context"
	"database/sql"
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

// TestPrimaryWatermarkLogStatus: the proxy's primary watermark reader
// reads performance_schema.log_status on a connection of the proxy's
// account when that account may (the compose account has every
// privilege), and the set contains the primary's gtid_executed read
// before it; with an account without BACKUP_ADMIN the server refuses it,
// the proxy keeps serving with watermarkQuery and counts every such
// watermark as watermark_fallbacks_total{source="primary-no-log-status"}.
func TestPrimaryWatermarkLogStatus(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := func(t *testing.T, s *Server) gtid.Set {
		t.Helper()
		pu := topo.Primary()
		d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
		c, err := d.Dial(ctx, pu.Addr(), false)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		bs, err := mysqlwire.ReadExecuted(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := s.topo.Load().primaryWM.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ws.Contains(bs) {
			t.Fatalf("watermark %v lacks gtid_executed read before it, %v", ws, bs)
		}
		return ws
	}
	t.Run("log-status", func(t *testing.T) {
		s := startProxy(t, nil)
		read(t, s)
		if !s.topo.Load().primaryWM.ls.Sound() {
			t.Fatal("the reader does not use log_status although the proxy's account may read it")
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
		read(t, s)
		if ls := &s.topo.Load().primaryWM.ls; !ls.Known() || ls.Sound() {
			t.Fatalf("probe verdict known %v sound %v, want refused", ls.Known(), ls.Sound())
		}
		// A client's session still works through the proxy.
		db := openDB(t, s, "")
		db.SetMaxOpenConns(1) // the last statement runs after SELECT 1's watermark
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("SELECT 1 through the proxy: %d, %v", one, err)
		}
		var tok sql.NullString
		if err := db.QueryRowContext(ctx, "SELECT @causal_token").Scan(&tok); err != nil {
			t.Fatal(err)
		}
		// One fallback for every query the reader ran (the read above,
		// and the reads through the proxy the primary served).
		m := metricText(t, s)
		queries := metricSum(m, `causallab_proxy_watermark_reads_total{node="primary",result="query"}`)
		if got := metricSum(m, `causallab_proxy_watermark_fallbacks_total{source="primary-no-log-status"}`); got != queries || got == 0 {
			t.Errorf("%d fallbacks counted, want one for each of the reader's %d queries:\n%s", got, queries,
				grepLines(m, "watermark", "statements_total"))
		}
	})
}
