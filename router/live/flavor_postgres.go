package live

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/gtid"
)

// Compile-time check.
var _ Flavor[gtid.PGLSN] = Postgres{}

// Postgres is the flavor of PostgreSQL commit LSNs (gtid.PGLSN), compared
// by value whatever the timeline: a write's position is
// pg_current_wal_lsn() read on the write's own connection right after
// the commit returned, a node's position is pg_last_wal_replay_lsn() on a
// standby and pg_current_wal_lsn() on the primary, and there is no
// server-side wait (PostgreSQL 18 has neither WAIT FOR LSN nor
// pg_wal_replay_wait: compose/enginetest/postgres checks), so routers of
// this flavor wait on their PositionSource: NewPGPositions builds one
// that polls the standbys (NewPGPoller) or reads the primary's walsender
// feedback (package walwatch), optionally with polling as a counted
// fallback.
//
// Why pg_current_wal_lsn() and not pg_current_wal_insert_lsn(): with
// synchronous_commit on (the default) the commit record is written and
// flushed before COMMIT returns, so the WAL write position read after it
// is at or past the commit record's end; the insert position may also
// count other sessions' records not yet written, which only asks more of
// the standby (compose/enginetest/postgres measures both: the write
// position was always enough).
//
// PostgreSQL is not MySQL's wire protocol: a Router[gtid.PGLSN] does its
// I/O through PGRouter (pgx), which runs writes and reads on its own
// connections and hands positions to the router's decision path
// (LiveSession.RecordAck, LiveSession.QueryFunc). The SessionConn a
// Postgres flavor method gets is a pgx connection (pgSessionConn).
type Postgres struct{}

// Name implements Flavor.
func (Postgres) Name() string { return "postgres-lsn" }

// pgInRecoveryQuery says whether a server is a standby.
const pgInRecoveryQuery = "SELECT pg_is_in_recovery()::text"

// TrackSession implements Flavor: the server must be a primary (not in
// recovery), or pg_current_wal_lsn() fails after every write.
func (Postgres) TrackSession(ctx context.Context, c SessionConn) error {
	rec, err := c.ReadValue(ctx, pgInRecoveryQuery)
	if err != nil {
		return fmt.Errorf("read pg_is_in_recovery(): %v", err)
	}
	if rec != "false" {
		return fmt.Errorf("pg_is_in_recovery() is %q: the node is a standby, not a primary", rec)
	}
	return nil
}

// pgWriteLSNQuery is a write's token, read on its connection after the
// commit.
const pgWriteLSNQuery = "SELECT pg_current_wal_lsn()::text"

// WritePosition implements Flavor: pg_current_wal_lsn() on the write's
// connection. PGSession.Exec calls it after every statement it ran
// (PostgreSQL's command tags carry no position).
func (f Postgres) WritePosition(ctx context.Context, _ Ack, c SessionConn) (gtid.PGLSN, bool, error) {
	text, err := c.ReadValue(ctx, pgWriteLSNQuery)
	if err != nil {
		return 0, false, fmt.Errorf("read pg_current_wal_lsn() after the write: %w", err)
	}
	p, err := f.ParseExecuted(text)
	if err != nil {
		return 0, false, err
	}
	return p, true, nil
}

// pgExecutedQuery reads a node's position on a primary or a standby.
const pgExecutedQuery = "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text"

// ExecutedQuery implements Flavor.
func (Postgres) ExecutedQuery() string { return pgExecutedQuery }

// pgStandbyQuery reads a standby's replay position: once the node is
// promoted it stays where recovery ended (PostgreSQL's documentation of
// pg_last_wal_replay_lsn()), so a promotion the router has not been told
// of never shows as the new timeline's position.
const pgStandbyQuery = "SELECT pg_last_wal_replay_lsn()::text"

// StandbyQuery implements StandbyQuerier.
func (Postgres) StandbyQuery() string { return pgStandbyQuery }

var _ StandbyQuerier = Postgres{}

// pgPollFlavor is the flavor of a PostgreSQL poller (NewPGPoller):
// Postgres with its two position queries bound to the router's timeline
// (setTimeline; PGRouter sets it from its primary at start and on each
// failover). A node that holds the history file of the next timeline
// answers NULL, the zero LSN, which contains no token: it has been
// promoted, or it knows of a promotion and may have replayed the new
// timeline (a standby streaming from the new primary fetches the history
// file before it replays past the switch point; pg_rewind copies it), and
// gtid.PGLSN carries no timeline: a new timeline's LSN past a lost
// write's would pass its token. The position is read before the file is
// looked for (a subquery the planner keeps), so an LSN reported with the
// file absent was on the router's timeline when read. Until a timeline is
// set the queries are Postgres'. Looking for the file is
// pg_stat_file(path, true): the poll user needs EXECUTE on it (a
// superuser, or GRANT EXECUTE ON FUNCTION pg_stat_file(text, boolean));
// without it every poll fails and no standby is used.
type pgPollFlavor struct {
	Postgres
	q atomic.Pointer[pgTimelineQueries]
}

// pgTimelineQueries are the poll queries for one timeline.
type pgTimelineQueries struct {
	timeline          uint32
	executed, standby string
}

var (
	_ Flavor[gtid.PGLSN] = (*pgPollFlavor)(nil)
	_ StandbyQuerier     = (*pgPollFlavor)(nil)
)

// pgOnTimeline wraps position query q (one LSN column named lsn) so it
// answers NULL on a node that holds timeline tli+1's history file.
func pgOnTimeline(q string, tli uint32) string {
	return fmt.Sprintf("SELECT (CASE WHEN (pg_stat_file('pg_wal/%08X.history', true)).size IS NULL THEN s.lsn END)::text FROM (%s OFFSET 0) s", tli+1, q)
}

// setTimeline binds the queries to timeline tli (0: unbound).
func (f *pgPollFlavor) setTimeline(tli uint32) {
	if tli == 0 {
		f.q.Store(nil)
		return
	}
	f.q.Store(&pgTimelineQueries{timeline: tli,
		executed: pgOnTimeline("SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS lsn", tli),
		standby:  pgOnTimeline("SELECT pg_last_wal_replay_lsn() AS lsn", tli)})
}

// timeline is the bound timeline (0: none).
func (f *pgPollFlavor) timeline() uint32 {
	if q := f.q.Load(); q != nil {
		return q.timeline
	}
	return 0
}

// ExecutedQuery implements Flavor.
func (f *pgPollFlavor) ExecutedQuery() string {
	if q := f.q.Load(); q != nil {
		return q.executed
	}
	return pgExecutedQuery
}

// StandbyQuery implements StandbyQuerier.
func (f *pgPollFlavor) StandbyQuery() string {
	if q := f.q.Load(); q != nil {
		return q.standby
	}
	return pgStandbyQuery
}

// pgTimelineQuery reads a primary's timeline: that of the WAL segment it
// inserts into (pg_control_checkpoint() lags a promotion until its
// checkpoint).
const pgTimelineQuery = "SELECT pg_walfile_name(pg_current_wal_lsn())"

// parsePGTimeline reads the timeline from a WAL file name (its first
// eight hex digits).
func parsePGTimeline(walfile string) (uint32, error) {
	if len(walfile) < 8 {
		return 0, fmt.Errorf("WAL file name %q: too short for a timeline", walfile)
	}
	tli, err := strconv.ParseUint(walfile[:8], 16, 32)
	if err != nil || tli == 0 {
		return 0, fmt.Errorf("WAL file name %q: no timeline in its first 8 hex digits", walfile)
	}
	return uint32(tli), nil
}

// ParseExecuted implements Flavor. A standby that has replayed nothing
// yet answers NULL, which pgx reads as "": the zero LSN.
func (Postgres) ParseExecuted(text string) (gtid.PGLSN, error) {
	if strings.TrimSpace(text) == "" {
		return 0, nil
	}
	return gtid.ParsePGLSN(text)
}

// WaitQuery implements Flavor: none in PostgreSQL 18.
func (Postgres) WaitQuery(gtid.PGLSN, time.Duration) string { return "" }

// Behind implements Flavor: bytes of WAL.
func (Postgres) Behind(primary, replica gtid.PGLSN) int64 {
	if primary > replica {
		return int64(min(uint64(primary-replica), 1<<62))
	}
	return 0
}

// Compact implements Flavor: an LSN is already compact.
func (Postgres) Compact(p gtid.PGLSN) gtid.PGLSN { return p }
