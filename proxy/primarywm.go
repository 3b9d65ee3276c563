package proxy

import (
	"errors"
	"log/slog"
	"sync/atomic"

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
// proxy's account may read it (BACKUP_ADMIN), else watermarkQuery, each
// such read counted as watermark_fallbacks_total{source=
// "primary-no-log-status"} (the commit race's gap stays open there) and
// the refusal logged once.
type primaryWatermark struct {
	// state: 0 not probed yet, 1 log_status answers, 2 refused.
	state     atomic.Int32
	fallbacks prometheus.Counter
	log       *slog.Logger
}

func newPrimaryWatermark(m *metrics, log *slog.Logger) *primaryWatermark {
	return &primaryWatermark{fallbacks: m.watermarkFallbacks.WithLabelValues("primary-no-log-status"), log: log}
}

// probe runs on a new primary connection (inside dialBackend's connect
// deadline) until the answer is known: log_status answered, or the server
// refused it with an error of its own. Any other error is the
// connection's and is returned (the dial fails as it would have).
func (w *primaryWatermark) probe(c *client.Conn) error {
	if w == nil || w.state.Load() != 0 {
		return nil
	}
	r, err := c.Execute(mysqlwire.LogStatusQuery)
	var me *mysql.MyError
	switch {
	case err == nil:
		r.Close()
		w.state.Store(1)
	case errors.As(err, &me):
		if w.state.CompareAndSwap(0, 2) {
			w.log.Warn("proxy: the primary refused performance_schema.log_status; monotonic-reads watermarks of reads served by the primary use gtid_executed, which can lack a transaction the read saw (grant BACKUP_ADMIN; docs/router.md, \"The commit race\")",
				"code", me.Code, "message", me.Message)
		}
	default:
		return err
	}
	return nil
}

// cmd is the watermark command for a primary connection: nil (use
// watermarkCmd) unless log_status answered.
func (w *primaryWatermark) cmd() []byte {
	if w != nil && w.state.Load() == 1 {
		return logStatusCmd
	}
	return nil
}
