package mysqlwire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
)

// Dialer opens go-mysql client connections with one set of credentials.
type Dialer struct {
	// User, Password and DB are used on every connection (DB may be "").
	User, Password, DB string
	// Timeout bounds one connection attempt (and the dial's context).
	Timeout time.Duration
	// IOTimeout bounds every read and write on the connections
	// (DeadlineConn: a call without progress for that long fails and the
	// connection is cut). Zero means DefaultIOTimeout.
	IOTimeout time.Duration
	// PlainIO keeps Go's ordinary socket calls; by default connections
	// read and write with raw system calls (package rawnet), which spare
	// the Go runtime a monitor-thread wake-up after each idle spell.
	PlainIO bool
}

// DefaultIOTimeout is Dialer.IOTimeout's default: longer than any
// statement a router runs should take, short of forever.
const DefaultIOTimeout = time.Hour

// Dial connects to addr. With track it asks for CLIENT_SESSION_TRACK (the
// server then reports session state, GTIDs included, in OK packets).
func (d *Dialer) Dial(ctx context.Context, addr string, track bool) (*client.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	opt := func(c *client.Conn) error {
		if track {
			return c.SetCapability(mysql.CLIENT_SESSION_TRACK)
		}
		return nil
	}
	iot := d.IOTimeout
	if iot <= 0 {
		iot = DefaultIOTimeout
	}
	var dc *DeadlineConn
	dial := DeadlineDial(&net.Dialer{Timeout: d.Timeout}, iot, d.PlainIO, func(c *DeadlineConn) {
		// The handshake is bounded by the connection attempt's timeout
		// (go-mysql's handshake does not watch the context).
		dc = c
		if d.Timeout > 0 {
			c.Limit(time.Now().Add(d.Timeout))
		}
	})
	c, err := client.ConnectWithDialer(dctx, "", addr, d.User, d.Password, d.DB, dial, opt)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	dc.Limit(time.Time{})
	return c, nil
}

// WithCtx runs one exchange on c (run), honouring ctx by expiring c's
// deadline when ctx ends; c is then unusable (close it) and the context's
// error is returned, with run's value as run gave it (so a caller can
// release what it holds).
func WithCtx[T any](ctx context.Context, c *client.Conn, run func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	r, err := run()
	if !stop() {
		// ctx ended while the exchange ran: report the context's error
		// (its cause, when it was given one).
		if err == nil {
			err = context.Cause(ctx)
		} else {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
	}
	return r, err
}

// Exec runs one statement under ctx (WithCtx).
func Exec(ctx context.Context, c *client.Conn, q string, args ...any) (*mysql.Result, error) {
	r, err := WithCtx(ctx, c, func() (*mysql.Result, error) { return c.Execute(q, args...) })
	if err != nil {
		return nil, err
	}
	return r, nil
}

// StmtExec is Exec for a prepared statement.
func StmtExec(ctx context.Context, c *client.Conn, st *client.Stmt, args ...any) (*mysql.Result, error) {
	r, err := WithCtx(ctx, c, func() (*mysql.Result, error) { return st.Execute(args...) })
	if err != nil {
		return nil, err
	}
	return r, nil
}

// IsServerError reports whether err is (or wraps) the server's refusal of
// a statement (*mysql.MyError): the connection is still in step.
func IsServerError(err error) bool {
	var me *mysql.MyError
	return errors.As(err, &me)
}

// ExecutedQuery reads a MySQL server's executed GTID set: a lower bound
// of what the node has applied (a position, never ahead of the node). It
// is NOT an upper bound of what a read just run there saw: see
// WatermarkQuery.
const ExecutedQuery = "SELECT @@GLOBAL.gtid_executed"

// WatermarkQuery reads a monotonic-reads watermark: run right after a read
// on the same connection, its answer contains every transaction the read
// could observe. gtid_executed alone does not: MySQL commits a group in
// the engine (its rows become visible) before it adds the group's GTIDs to
// gtid_executed (binlog.cc process_commit_stage_queue; on a replica,
// Commit_order_manager), so a read can see a row whose GTID the set read
// right after it lacks (router/live TestWatermarkRace measures it). On a
// replica every transaction it applied was received first, so the
// received set (performance_schema.replication_connection_status, every
// channel) joined to gtid_executed bounds the read; on a primary the
// received set is empty and the gap remains (docs/router.md, "The commit
// race"). The answer is one GTID set text (pieces joined by commas).
const WatermarkQuery = "SELECT CONCAT(@@GLOBAL.gtid_executed, ',', IFNULL((SELECT GROUP_CONCAT(RECEIVED_TRANSACTION_SET) FROM performance_schema.replication_connection_status), ''))"

// LogStatusQuery reads gtid_executed from performance_schema.log_status,
// which copies it while holding the commit lock (MySQL's own test
// binlog_log_status_gtid_executed checks it waits for a commit in
// flight): every group whose rows are visible has its GTIDs in it, so it
// is a sound watermark on a primary too, where WatermarkQuery is not (no
// received set). It needs BACKUP_ADMIN and briefly blocks commits. The
// proxy reads it behind the reads its primary serves (docs/router.md
// "The commit race" gives its measured misses and cost).
const LogStatusQuery = "SELECT JSON_UNQUOTE(JSON_EXTRACT(LOCAL, '$.gtid_executed')) FROM performance_schema.log_status"

// BoundsQuery reads, in one statement, a node's lower and upper bounds:
// gtid_executed, a semicolon, then the replica's received set (every
// channel; empty on a primary). The lower bound is the executed set (a
// position, as ExecutedQuery); the upper bound is the executed set
// joined with the received set (as WatermarkQuery): measured by a
// statement that started after a read ended on the same server, it
// contains everything the read could observe. The live poller runs it
// for the lazy watermark (router/live, WatermarkLazy).
const BoundsQuery = "SELECT CONCAT(@@GLOBAL.gtid_executed, ';', IFNULL((SELECT GROUP_CONCAT(RECEIVED_TRANSACTION_SET) FROM performance_schema.replication_connection_status), ''))"

// ReadWatermark runs WatermarkQuery on c and parses the set.
func ReadWatermark(ctx context.Context, c *client.Conn) (gtid.Set, error) {
	s, err := ReadValue(ctx, c, WatermarkQuery)
	if err != nil {
		return gtid.Set{}, err
	}
	set, err := gtid.Parse(s)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("parse watermark: %w", err)
	}
	return set, nil
}

// ReadValue runs query on c and returns the first column of its first row
// as text (a copy).
func ReadValue(ctx context.Context, c *client.Conn, query string) (string, error) {
	r, err := Exec(ctx, c, query)
	if err != nil {
		return "", err
	}
	defer r.Close()
	s, err := r.GetString(0, 0)
	if err != nil {
		return "", fmt.Errorf("%s: %w", query, err)
	}
	return strings.Clone(s), nil
}

// ReadExecuted runs ExecutedQuery on c and parses the set.
func ReadExecuted(ctx context.Context, c *client.Conn) (gtid.Set, error) {
	s, err := ReadValue(ctx, c, ExecutedQuery)
	if err != nil {
		return gtid.Set{}, err
	}
	set, err := gtid.Parse(s)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("parse gtid_executed: %w", err)
	}
	return set, nil
}

// WaitSeconds is a wait's timeout as WAIT_FOR_EXECUTED_GTID_SET and
// MASTER_GTID_WAIT take it: seconds with millisecond precision, at least
// 0.001 (0 would not wait at all).
func WaitSeconds(d time.Duration) string {
	return strconv.FormatFloat(max(d.Seconds(), 0.001), 'f', 3, 64)
}

// WaitSlack is how long past its own timeout a wait function may take to
// answer before the caller gives up on it (and kills it).
const WaitSlack = 100 * time.Millisecond

// WaitForExecutedQuery is SELECT WAIT_FOR_EXECUTED_GTID_SET(set, timeout):
// it answers 0 once the server's gtid_executed contains set, 1 when the
// timeout passed. It is built from a parsed set, whose canonical text holds
// only hex digits, letters, digits, '_', ':', '-' and ',' (never a quote),
// so it is safe to inline; a text query needs no prepared statement (one
// round trip, and it can be pipelined). The literal carries its character
// set (_utf8mb4): a proxy runs the wait on the client's own connection,
// whose collation_connection may be utf16 or utf32, which would read the
// bytes as another set (an empty one: the wait answered 0 at once).
func WaitForExecutedQuery(set gtid.Set, timeout time.Duration) string {
	return "SELECT WAIT_FOR_EXECUTED_GTID_SET(_utf8mb4'" + set.CompactString() + "', " + WaitSeconds(timeout) + ")"
}

// WaitForExecuted runs WaitForExecutedQuery on c and reports whether the
// server contains set (false: the timeout passed).
func WaitForExecuted(ctx context.Context, c *client.Conn, set gtid.Set, timeout time.Duration) (bool, error) {
	return WaitAnswer(Exec(ctx, c, WaitForExecutedQuery(set, timeout)))
}

// WaitAnswer reads a wait function's answer (WAIT_FOR_EXECUTED_GTID_SET,
// MASTER_GTID_WAIT): 0 means the server reached the position.
func WaitAnswer(r *mysql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	defer r.Close()
	v, err := r.GetInt(0, 0)
	if err != nil {
		return false, err
	}
	return v == 0, nil
}

// Excerpt shortens a statement for an error message.
func Excerpt(q string) string {
	if len(q) > 60 {
		return q[:60] + "..."
	}
	return q
}
