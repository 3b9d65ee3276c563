package proxy

import (
	"context"
	"log/slog"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/internal/mysqlwire"
)

// logStatusCmd is mysqlwire.LogStatusQuery's COM_QUERY payload (never
// modified): the primary's watermark, sound where watermarkQuery is not
// (on the primary the received set is empty, and a commit is visible
// before gtid_executed has it; log_status copies gtid_executed under the
// commit lock: docs/router.md "The commit race").
var logStatusCmd = append([]byte{mysql.COM_QUERY}, mysqlwire.LogStatusQuery...)

// primaryWatermark decides, once per proxy, which query reads a read's
// watermark on the primary: performance_schema.log_status when the
// server lets the proxy's account read it (BACKUP_ADMIN) and commits
// through its binary log (mysqlwire.ProbeLogStatus, the verdict kept in
// ls), else watermarkQuery, each such read counted as
// watermark_fallbacks_total{source="primary-no-log-status"} (the commit
// race's gap stays open there) and the refusal logged once.
type primaryWatermark struct {
	ls        mysqlwire.LogStatus
	fallbacks prometheus.Counter
	log       *slog.Logger
}

func newPrimaryWatermark(m *metrics, log *slog.Logger) *primaryWatermark {
	return &primaryWatermark{fallbacks: m.watermarkFallbacks.WithLabelValues("primary-no-log-status"), log: log}
}

// probe runs on a new primary connection (inside dialBackend's connect
// deadline, ctx) until the verdict is known: log_status answered, or the
// server refused it. Any other error is the connection's and is returned
// (the dial fails as it would have).
func (w *primaryWatermark) probe(ctx context.Context, c *client.Conn) error {
	if w == nil {
		return nil
	}
	refusal, err := w.ls.Probe(ctx, func(ctx context.Context, q string) (string, error) { return mysqlwire.ReadValue(ctx, c, q) })
	if refusal != nil {
		w.log.Warn("proxy: performance_schema.log_status is not the primary's watermark; monotonic-reads watermarks of reads served by the primary use gtid_executed, which can lack a transaction the read saw (grant BACKUP_ADMIN; docs/router.md, \"The commit race\")",
			"reason", refusal.Error())
	}
	return err
}

// cmd is the watermark command for a primary connection: nil (use
// watermarkCmd) unless log_status answered.
func (w *primaryWatermark) cmd() []byte {
	if w != nil && w.ls.Sound() {
		return logStatusCmd
	}
	return nil
}
