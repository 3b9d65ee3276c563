package proxy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router/live"
)

// wmReader reads one node's watermark after a read that node served, on a
// connection of the proxy's own account (Backend.User), never on the
// session's: a statement there would clear the read's diagnostics (SHOW
// WARNINGS, @@warning_count, GET DIAGNOSTICS), FOUND_ROWS() and its session
// status, and under auth passthrough the client's own account usually
// lacks what the query reads. Visibility on one server only grows, so a
// watermark read after the read completed bounds what it saw.
//
// The primary's reader (and the primary's executed set that stands in
// for a replica's lost watermark, session.watermarkFromPrimary) uses
// performance_schema.log_status, sound where watermarkQuery is not (on
// the primary the received set is empty, and a commit is visible before
// gtid_executed has it; log_status copies gtid_executed under the commit
// lock: docs/router.md "The commit race"), when the server lets the
// proxy's account read it and commits through its binary log
// (mysqlwire.ProbeLogStatus, the verdict kept in ls); else watermarkQuery,
// each such read counted as
// watermark_fallbacks_total{source="primary-no-log-status"} and the
// refusal logged once. A replica's reader (watermark_source query, and
// all-gtids' reads whose OK carries no set) uses watermarkQuery:
// gtid_executed joined with the received set.
//
// Reads are batched (single flight): a session whose read has completed
// joins the next batch, which starts only after every member joined (a
// batch whose query was sent is never joined), so the one answer bounds
// what each member's read saw. One batch runs at a time, in a goroutine
// that lives while batches wait, each bounded by backend_timeout.
type wmReader struct {
	// logStatus: the primary's reader on MySQL (log_status, probed into
	// ls).
	logStatus bool
	ls        mysqlwire.LogStatus
	// stmt reads the watermark where log_status does not (MySQL:
	// watermarkQuery; MariaDB: the binary log's position joined with
	// gtid_current_pos, live.MariaDB.WatermarkQuery); parse reads its
	// answer (Config.flavor).
	stmt  string
	parse func(string) (gtid.Set, error)
	// logged: a MariaDB node's reader, which checks once (at its first
	// connection) that the node writes what it applies to its binary
	// log (log_bin and log_slave_updates), where the watermark's bound
	// comes from; unloggedNode: it does not (warned once, each batch
	// counted in unlogged).
	logged       bool
	logChecked   bool
	unloggedNode bool
	unlogged     prometheus.Counter
	fallbacks    prometheus.Counter
	// reads counts the queries run, waits the watermarks served (their
	// ratio is the batching), errors the batches that failed.
	reads, waits, errors prometheus.Counter
	log                  *slog.Logger
	b                    *Backend
	dialer               mysqlwire.Dialer
	timeout              time.Duration

	mu sync.Mutex
	// ctx is the reader's lifetime (start to stop); nil before start.
	ctx context.Context
	// next is the batch being joined (nil: none waits); running: a
	// goroutine runs batches (wg counts it).
	next    *wmBatch
	running bool
	wg      sync.WaitGroup
	// conn is the reader's connection, used by the running goroutine
	// only (nil: dialled at the next batch).
	conn *client.Conn
	// queryFn, when set, stands in for the query on conn (in-memory
	// tests, which have no server to dial).
	queryFn func(context.Context) (gtid.Set, error)
}

// wmBatch is one watermark read shared by the sessions that joined it:
// done is closed once set or err holds the answer.
type wmBatch struct {
	done chan struct{}
	set  gtid.Set
	err  error
}

// errWatermarkReaderStopped: the proxy is shutting down (or the reader
// never started): no watermark can be read.
var errWatermarkReaderStopped = errors.New("proxy: the watermark reader is not running")

// newWMReader is node b's reader; logStatus: b is the primary.
func newWMReader(cfg *Config, b *Backend, logStatus bool, m *metrics, log *slog.Logger) *wmReader {
	name := b.Name
	if logStatus {
		name = "primary"
	}
	q, logged := watermarkQuery, false
	if cfg.mariaDB() {
		// A primary's own transactions are in its binary log whatever
		// log_slave_updates says; a replica's need it.
		q, logged, logStatus = live.MariaDB{}.WatermarkQuery(), !logStatus, false
	}
	return &wmReader{
		logged:    logged,
		unlogged:  m.watermarkFallbacks.WithLabelValues("mariadb-unlogged"),
		logStatus: logStatus,
		stmt:      q,
		parse:     cfg.flavor().ParseExecuted,
		fallbacks: m.watermarkFallbacks.WithLabelValues("primary-no-log-status"),
		reads:     m.watermarkReads.WithLabelValues(name, "query"),
		waits:     m.watermarkReads.WithLabelValues(name, "served"),
		errors:    m.watermarkReads.WithLabelValues(name, "error"),
		log:       log,
		dialer:    mysqlwire.Dialer{User: b.User, Password: b.Password, Timeout: cfg.ConnectTimeout, IOTimeout: cfg.BackendTimeout, PlainIO: cfg.SocketIO != "raw"},
		b:         b,
		timeout:   cfg.BackendTimeout,
	}
}

// start lets the reader run batches until ctx ends (Serve's), and reads
// once at once: the reader's connection is open from the start, so that
// the server's connection count (Threads_connected) does not grow at a
// client's first read (a failure here is counted and retried by the next
// read).
func (w *wmReader) start(ctx context.Context) {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	go func() { _, _ = w.read(ctx) }()
}

// stop waits for the running batch (its ctx ended) and closes the
// connection.
func (w *wmReader) stop() {
	w.wg.Wait()
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// read returns the node's watermark read by a query sent after read
// was called (the caller's read has completed), or why it could not be
// read; ctx bounds the wait (the session's).
func (w *wmReader) read(ctx context.Context) (gtid.Set, error) {
	w.mu.Lock()
	if w.ctx == nil || w.ctx.Err() != nil {
		w.mu.Unlock()
		return gtid.Set{}, errWatermarkReaderStopped
	}
	if w.next == nil {
		w.next = &wmBatch{done: make(chan struct{})}
	}
	b := w.next
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.run(w.ctx)
	}
	w.mu.Unlock()
	select {
	case <-b.done:
		w.waits.Inc()
		return b.set, b.err
	case <-ctx.Done():
		return gtid.Set{}, context.Cause(ctx)
	}
}

// run runs the waiting batches one after another until none waits.
func (w *wmReader) run(ctx context.Context) {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		b := w.next
		w.next = nil
		if b == nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		b.set, b.err = w.query(ctx)
		close(b.done)
	}
}

// query runs one watermark query (dialling and probing first when the
// reader has no connection), bounded by backend_timeout. After a failure
// that is not the server's, the connection is closed (the next batch
// dials again).
func (w *wmReader) query(ctx context.Context) (gtid.Set, error) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	w.reads.Inc()
	queryOn := w.queryOn
	if w.queryFn != nil {
		queryOn = w.queryFn
	}
	set, err := queryOn(ctx)
	if err != nil {
		w.errors.Inc()
		if !mysqlwire.IsServerError(err) && w.conn != nil {
			_ = w.conn.Close()
			w.conn = nil
		}
		return gtid.Set{}, backendErr(w.b, "watermark", err)
	}
	return set, nil
}

func (w *wmReader) queryOn(ctx context.Context) (gtid.Set, error) {
	if w.conn == nil {
		c, err := w.dialer.Dial(ctx, w.b.Addr, false)
		if err != nil {
			return gtid.Set{}, err
		}
		w.conn = c
	}
	if w.logged {
		if err := w.checkLogged(ctx); err != nil {
			return gtid.Set{}, err
		}
	}
	q := w.stmt
	if w.logStatus {
		if err := w.probe(ctx, w.conn); err != nil {
			return gtid.Set{}, err
		}
		q = mysqlwire.LogStatusQuery
		if !w.ls.Sound() {
			q = w.stmt
			w.fallbacks.Inc()
		}
	}
	v, err := mysqlwire.ReadValue(ctx, w.conn, q)
	if err != nil {
		return gtid.Set{}, err
	}
	return w.parse(v)
}

// checkLogged reads once whether the MariaDB node logs what it applies
// (log_bin and log_slave_updates): without it, the binary log's position
// lacks what the node replicated and the watermark is gtid_current_pos
// alone, which can lack a transaction a read saw (docs/proxy-mariadb.md).
// Such a node is warned about once and each of its batches counted
// (watermark_fallbacks_total{source="mariadb-unlogged"}).
func (w *wmReader) checkLogged(ctx context.Context) error {
	if !w.logChecked {
		v, err := mysqlwire.ReadValue(ctx, w.conn, "SELECT @@GLOBAL.log_bin AND @@GLOBAL.log_slave_updates")
		if err != nil {
			return err
		}
		w.logChecked, w.unloggedNode = true, v != "1"
		if w.unloggedNode {
			w.log.Warn("proxy: this MariaDB node does not write what it applies to its binary log (log_bin, log_slave_updates): its monotonic-reads watermark is gtid_current_pos, which can lack a transaction a read saw (docs/proxy-mariadb.md)", "backend", w.b.Name)
		}
	}
	if w.unloggedNode {
		w.unlogged.Inc()
	}
	return nil
}

// probe runs on the reader's connection until the verdict is known:
// log_status answered, or the server refused it. Any other error is the
// connection's and is returned.
func (w *wmReader) probe(ctx context.Context, c *client.Conn) error {
	refusal, err := w.ls.Probe(ctx, func(ctx context.Context, q string) (string, error) { return mysqlwire.ReadValue(ctx, c, q) })
	if refusal != nil {
		w.log.Warn("proxy: performance_schema.log_status is not the primary's watermark; monotonic-reads watermarks of reads served by the primary use gtid_executed, which can lack a transaction the read saw (grant BACKUP_ADMIN to the proxy's backend account; docs/router.md, \"The commit race\")",
			"reason", refusal.Error())
	}
	return err
}
