package mysqlwire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/causallab/causallab/gtid"
)

// LogStatusBinlogQuery answers 1 when the server commits every
// transaction through its binary log (log_bin, and log_replica_updates
// for what its applier commits), 0 otherwise. log_status waits for the
// commits in flight through the binary log's own accounting (MySQL's
// test binlog_log_status_gtid_executed: it waits on
// MYSQL_BIN_LOG::prep_xids_cond), so it is a sound watermark only where
// that covers every commit.
const LogStatusBinlogQuery = "SELECT @@GLOBAL.log_bin AND @@GLOBAL.log_replica_updates"

// ErrLogStatusNoBinlog is ProbeLogStatus's refusal for a server that
// answers log_status but does not commit everything through its binary
// log (log_bin or log_replica_updates off): there a commit need not wait
// for log_status, which is then no sounder than gtid_executed.
var ErrLogStatusNoBinlog = errors.New("log_bin or log_replica_updates is off: log_status does not wait for every commit in flight")

// ProbeLogStatus finds out whether LogStatusQuery is a sound watermark on
// the server that read (a one-value query on one of its connections)
// reaches: the server commits through its binary log
// (LogStatusBinlogQuery) and answers log_status with a GTID set (it
// needs BACKUP_ADMIN). refusal says why not: the server's own refusal
// (a *mysql.MyError, as ER_SPECIFIC_ACCESS_DENIED_ERROR without
// BACKUP_ADMIN), ErrLogStatusNoBinlog, or an answer that is not a GTID
// set; the connection is still in step after it. err is any other
// failure (the connection's: the caller closes it).
func ProbeLogStatus(ctx context.Context, read func(ctx context.Context, query string) (string, error)) (refusal, err error) {
	v, err := read(ctx, LogStatusBinlogQuery)
	if err != nil {
		if IsServerError(err) {
			return err, nil
		}
		return nil, err
	}
	if strings.TrimSpace(v) != "1" {
		return ErrLogStatusNoBinlog, nil
	}
	v, err = read(ctx, LogStatusQuery)
	if err != nil {
		if IsServerError(err) {
			return err, nil
		}
		return nil, err
	}
	if _, perr := gtid.Parse(v); perr != nil {
		return fmt.Errorf("log_status answered %q: %w", Excerpt(v), perr), nil
	}
	return nil, nil
}

// LogStatus is one server's verdict on LogStatusQuery as its watermark:
// unknown until a probe (ProbeLogStatus) gets an answer, then kept. It
// is safe for concurrent use; the zero value is unknown.
type LogStatus struct {
	// state: 0 unknown, 1 sound, 2 refused.
	state atomic.Int32
}

// Probe probes the server (ProbeLogStatus through read) unless the
// verdict is known. first is the refusal when this call decided it (a
// caller logs it once); err is the connection's failure (the verdict
// stays unknown: the next connection probes again).
func (l *LogStatus) Probe(ctx context.Context, read func(ctx context.Context, query string) (string, error)) (first, err error) {
	if l.state.Load() != 0 {
		return nil, nil
	}
	refusal, err := ProbeLogStatus(ctx, read)
	switch {
	case err != nil:
		return nil, err
	case refusal == nil:
		l.state.CompareAndSwap(0, 1)
	case l.state.CompareAndSwap(0, 2):
		return refusal, nil
	}
	return nil, nil
}

// Sound reports that the server answered the probe: LogStatusQuery is
// its watermark.
func (l *LogStatus) Sound() bool { return l.state.Load() == 1 }

// Known reports that a probe got an answer (sound or refused).
func (l *LogStatus) Known() bool { return l.state.Load() != 0 }
