package live

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// Flavor is everything the live router needs to know about one engine's
// positions; the rest of the router (pools, pipelining, waits, the cap,
// epochs, metrics) is the same for every flavor. It is modelled on how
// Vitess keeps MySQL and MariaDB apart behind one position interface
// (go/mysql/replication): the position type P carries the algebra
// (Contains and Union, gtid.Position), the flavor says how a server
// reports, exposes and waits for it.
//
// Three flavors exist: MySQL (gtid.Set: GTID sets, the exact token),
// MariaDB (gtid.MariaDBPosition, flavor_mariadb.go: session_track_system_
// variables = last_gtid, @@gtid_current_pos, MASTER_GTID_WAIT) and Scalar
// (gtid.LSN: a MySQL server's transaction count compared by value, the
// LSN-style token whose failover hazard the lab shows). PostgreSQL speaks
// another wire protocol: its commit LSNs (gtid.PGLSN) have their own
// connection layer (flavor_postgres.go) over the same decision path.
//
// A Flavor must be safe for concurrent use; those here are stateless.
type Flavor[P gtid.Position[P]] interface {
	// Name names the flavor in errors and logs.
	Name() string
	// TrackSession sets up a new primary connection so that the server
	// reports each write's position (or enough to find it) in its OK
	// packet, and proves that it does. An error says what is missing; the
	// router returns it wrapped in ErrNoSessionTracking (it refuses to
	// start rather than issue tokens it cannot trust).
	TrackSession(ctx context.Context, c SessionConn) error
	// WritePosition is the position of a write the primary acknowledged
	// with ack (the session tracking of the statement's last OK packet).
	// ok is false when ack says nothing was committed (the router then
	// checks whether rows changed: ErrMissingGTID). c is the write's own
	// connection, for a flavor whose position is not in the OK packet and
	// must be read right after the commit (as PostgreSQL's
	// pg_current_wal_lsn() is).
	WritePosition(ctx context.Context, ack Ack, c SessionConn) (pos P, ok bool, err error)
	// ExecutedQuery is a one-value query whose answer is everything a node
	// has executed: run right after a read on the same connection, it
	// contains what the read observed (the sound monotonic-reads
	// watermark). ParseExecuted parses its answer.
	ExecutedQuery() string
	ParseExecuted(text string) (P, error)
	// WaitQuery is a one-value query that blocks on the server until it
	// holds need or timeout passes, and answers 0 when it holds need
	// (WAIT_FOR_EXECUTED_GTID_SET, MASTER_GTID_WAIT). "" when the engine
	// has no such wait for P: the router then waits on its PositionSource
	// (WaitWatcher), and Config.Wait may not ask for WaitGTIDFunction.
	WaitQuery(need P, timeout time.Duration) string
	// Behind estimates how far replica trails primary (0 when it does not):
	// the router waits on the replica least behind.
	Behind(primary, replica P) int64
	// Compact widens a session token to a sound superset that stays small
	// (Config.CompactTokens); a flavor without such a form returns p.
	Compact(p P) P
}

// Ack is the session tracking of a write's last OK packet, as the router
// parsed it from its own copy of the response.
type Ack struct {
	// GTID is the session-tracking GTID text ("" when none).
	GTID string
	// StateChanged: the server reported a session state change.
	StateChanged bool
	// Vars holds the tracked system variables (nil when none).
	Vars map[string]string
}

// SessionConn is what a flavor may do on a primary connection.
type SessionConn interface {
	// Exec runs one statement and returns its OK packet's tracking.
	Exec(ctx context.Context, query string) (Ack, error)
	// ReadValue runs a one-value query and returns the value as text.
	ReadValue(ctx context.Context, query string) (string, error)
}

// Compile-time checks.
var (
	_ Flavor[gtid.Set] = MySQL{}
	_ Flavor[gtid.LSN] = Scalar{}
)

// MySQL is the flavor of MySQL GTID sets (gtid.Set): a write's GTID from
// session_track_gtids = OWN_GTID, a node's position from
// @@GLOBAL.gtid_executed, the server-side wait WAIT_FOR_EXECUTED_GTID_SET.
// It is the default flavor of a Router[gtid.Set].
type MySQL struct{}

// Name implements Flavor.
func (MySQL) Name() string { return "mysql-gtid" }

// TrackSession implements Flavor: session_track_state_change (the shared
// primary pool keeps a connection whose session state changed with its
// session instead of handing it to another), session_track_gtids =
// OWN_GTID with the OK packet required to report the change itself, and
// gtid_mode = ON.
func (MySQL) TrackSession(ctx context.Context, c SessionConn) error {
	if _, err := c.Exec(ctx, "SET SESSION session_track_state_change = ON"); err != nil {
		return fmt.Errorf("enable state-change tracking: %v", err)
	}
	if _, err := c.Exec(ctx, "SET SESSION session_track_system_variables = 'session_track_gtids'"); err != nil {
		return fmt.Errorf("enable variable tracking: %v", err)
	}
	ack, err := c.Exec(ctx, "SET SESSION session_track_gtids = OWN_GTID")
	if err != nil {
		return fmt.Errorf("set session_track_gtids: %v", err)
	}
	if !strings.EqualFold(ack.Vars["session_track_gtids"], "OWN_GTID") {
		return errors.New("the OK packet carried no session-tracking data (is CLIENT_SESSION_TRACK negotiated?)")
	}
	mode, err := c.ReadValue(ctx, "SELECT @@GLOBAL.gtid_mode")
	if err != nil {
		return fmt.Errorf("read gtid_mode: %v", err)
	}
	if !strings.EqualFold(mode, "ON") {
		return fmt.Errorf("gtid_mode is %q, want ON", mode)
	}
	return nil
}

// WritePosition implements Flavor: the tracked GTID, parsed.
func (MySQL) WritePosition(_ context.Context, ack Ack, _ SessionConn) (gtid.Set, bool, error) {
	if ack.GTID == "" {
		return gtid.Set{}, false, nil
	}
	set, err := gtid.Parse(ack.GTID)
	if err != nil {
		return gtid.Set{}, false, fmt.Errorf("unparsable GTID %q: %w", ack.GTID, err)
	}
	return set, true, nil
}

// ExecutedQuery implements Flavor.
func (MySQL) ExecutedQuery() string { return mysqlwire.ExecutedQuery }

// WatermarkQuery implements Watermarker: gtid_executed joined with the
// replica's received set (mysqlwire.WatermarkQuery: gtid_executed alone
// can lack a transaction a read saw).
func (MySQL) WatermarkQuery() string { return mysqlwire.WatermarkQuery }

// Watermarker is a Flavor whose monotonic-reads watermark query differs
// from its ExecutedQuery: the executed position is a lower bound of what a
// node applied (positions, waits), the watermark an upper bound of what a
// read there saw. Its answer is parsed with ParseExecuted.
type Watermarker interface {
	WatermarkQuery() string
}

var _ Watermarker = MySQL{}

// LogStatusFlavor is a Flavor whose servers may answer
// performance_schema.log_status (MySQL): gtid_executed copied while no
// commit is in flight, so, read after a read ended, it holds everything
// the read could observe, on a primary too (where the WatermarkQuery's
// received set is empty and gtid_executed can lack a commit already
// visible: docs/router.md "The commit race"), and on a replica without
// the received set's over-estimate (what it received but has not
// applied). Whether a server answers it is probed once per server
// (mysqlwire.ProbeLogStatus: it needs BACKUP_ADMIN and the binary log);
// where it does not, the router and the poller use the flavor's other
// queries and count it. Its answer is parsed with ParseExecuted.
type LogStatusFlavor interface {
	LogStatusQuery() string
}

// LogStatusQuery implements LogStatusFlavor: mysqlwire.LogStatusQuery.
func (MySQL) LogStatusQuery() string { return mysqlwire.LogStatusQuery }

var _ LogStatusFlavor = MySQL{}

// watermarkQuery is f's watermark query: WatermarkQuery when f has one,
// else ExecutedQuery.
func watermarkQuery[P gtid.Position[P]](f Flavor[P]) string {
	if w, ok := any(f).(Watermarker); ok {
		return w.WatermarkQuery()
	}
	return f.ExecutedQuery()
}

// ParseExecuted implements Flavor.
func (MySQL) ParseExecuted(text string) (gtid.Set, error) { return gtid.Parse(text) }

// WaitQuery implements Flavor: WAIT_FOR_EXECUTED_GTID_SET.
func (MySQL) WaitQuery(need gtid.Set, timeout time.Duration) string {
	return mysqlwire.WaitForExecutedQuery(need, timeout)
}

// Behind implements Flavor: the difference of the transaction counts.
func (MySQL) Behind(primary, replica gtid.Set) int64 {
	if pc, c := primary.Count(), replica.Count(); pc > c {
		return int64(min(pc-c, 1<<62))
	}
	return 0
}

// Compact implements Flavor: each source's prefix 1-max (gtid.Set.Prefixes).
func (MySQL) Compact(p gtid.Set) gtid.Set { return p.Prefixes() }

// Scalar is the flavor of scalar positions on MySQL (gtid.LSN): a node's
// position is the number of transactions in its @@GLOBAL.gtid_executed,
// compared by value whatever the timeline, which is how an LSN-style token
// behaves (after a failover the new primary reaches the same numbers
// without holding the same transactions). A write's position is the
// primary's count read on the write's connection right after the commit
// (as PostgreSQL's pg_current_wal_lsn() would be): at least the commit's
// own position. The server cannot wait for a count, so routers of this
// flavor wait on their PositionSource.
type Scalar struct{}

// Name implements Flavor.
func (Scalar) Name() string { return "scalar" }

// TrackSession implements Flavor as MySQL does: the tracked GTID tells
// whether a statement committed a transaction.
func (Scalar) TrackSession(ctx context.Context, c SessionConn) error {
	return MySQL{}.TrackSession(ctx, c)
}

// WritePosition implements Flavor: when the OK packet reports a commit,
// the count of @@GLOBAL.gtid_executed read right after it.
func (s Scalar) WritePosition(ctx context.Context, ack Ack, c SessionConn) (gtid.LSN, bool, error) {
	if ack.GTID == "" {
		return 0, false, nil
	}
	text, err := c.ReadValue(ctx, s.ExecutedQuery())
	if err != nil {
		return 0, false, fmt.Errorf("read the primary's position after the write: %w", err)
	}
	p, err := s.ParseExecuted(text)
	if err != nil {
		return 0, false, err
	}
	return p, true, nil
}

// ExecutedQuery implements Flavor.
func (Scalar) ExecutedQuery() string { return mysqlwire.ExecutedQuery }

// ParseExecuted implements Flavor: the set's transaction count.
func (Scalar) ParseExecuted(text string) (gtid.LSN, error) {
	set, err := gtid.Parse(text)
	if err != nil {
		return 0, err
	}
	return gtid.LSN(set.Count()), nil
}

// WaitQuery implements Flavor: none.
func (Scalar) WaitQuery(gtid.LSN, time.Duration) string { return "" }

// Behind implements Flavor.
func (Scalar) Behind(primary, replica gtid.LSN) int64 {
	if primary > replica {
		return int64(min(uint64(primary-replica), 1<<62))
	}
	return 0
}

// Compact implements Flavor: a scalar is already compact.
func (Scalar) Compact(p gtid.LSN) gtid.LSN { return p }
