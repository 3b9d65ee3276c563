package walwatch

import (
	"fmt"
	"strconv"
	"time"

	"github.com/causallab/causallab/gtid"
)

// tickQuery is the one query per tick: the watched server's recovery
// state, timeline and default synchronous_commit, and one row per
// walsender (none: one row of NULL walsender columns). Every column is
// text ("" for NULL) so that parseTick, a pure function, reads it all.
// The timeline is the primary's current WAL file's (as compose reads it);
// pg_walfile_name fails in recovery, hence the CASE.
const tickQuery = `SELECT pg_is_in_recovery()::text,
	CASE WHEN pg_is_in_recovery() THEN '' ELSE (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint)::text END,
	current_setting('synchronous_commit'),
	COALESCE(r.application_name, ''), COALESCE(s.slot_name::text, ''), COALESCE(r.pid::text, ''),
	COALESCE((extract(epoch FROM r.backend_start) * 1000000)::bigint::text, ''),
	COALESCE(r.state, ''), COALESCE(r.replay_lsn::text, ''),
	COALESCE((extract(epoch FROM now() - r.reply_time) * 1000000)::bigint::text, '')
FROM (SELECT 1) AS one LEFT JOIN pg_stat_replication AS r ON true
	LEFT JOIN pg_replication_slots AS s ON s.active_pid = r.pid`

// tickColumns is the number of columns of tickQuery.
const tickColumns = 10

// observation is one tick's answer, parsed.
type observation struct {
	// InRecovery: the watched server is a standby, not a primary.
	InRecovery bool
	// Timeline is the primary's current timeline (0 in recovery).
	Timeline uint32
	// SyncCommit is the server's default synchronous_commit.
	SyncCommit string
	// Rows are the walsenders, in the server's order.
	Rows []walsender
}

// walsender is one row of pg_stat_replication.
type walsender struct {
	// App is application_name; Slot the replication slot the walsender
	// streams for ("" without one).
	App, Slot string
	// Session identifies the walsender: its pid and backend start.
	Session session
	// State is the walsender's state (streaming, catchup, startup,
	// backup, stopping).
	State string
	// Replay is replay_lsn; HasReplay is false while it is NULL.
	Replay    gtid.PGLSN
	HasReplay bool
	// ReplyAge is now() - reply_time; HasReply false while NULL.
	ReplyAge time.Duration
	HasReply bool
}

// session identifies one walsender connection.
type session struct {
	PID   int64
	Start int64 // backend_start, µs since the Unix epoch
}

// parseTick reads tickQuery's rows. Every row repeats the server columns;
// a row whose pid is NULL is the LEFT JOIN's empty side (no walsender).
func parseTick(rows [][]string) (observation, error) {
	if len(rows) == 0 {
		return observation{}, fmt.Errorf("walwatch: pg_stat_replication query returned no row")
	}
	var o observation
	for i, r := range rows {
		if len(r) != tickColumns {
			return observation{}, fmt.Errorf("walwatch: row %d has %d columns, want %d", i, len(r), tickColumns)
		}
		rec, err := strconv.ParseBool(r[0])
		if err != nil {
			return observation{}, fmt.Errorf("walwatch: pg_is_in_recovery() %q: %v", r[0], err)
		}
		var tli uint64
		if r[1] != "" {
			if tli, err = strconv.ParseUint(r[1], 10, 32); err != nil || tli == 0 {
				return observation{}, fmt.Errorf("walwatch: timeline %q is not a timeline ID", r[1])
			}
		}
		if rec == (r[1] != "") {
			return observation{}, fmt.Errorf("walwatch: timeline %q with pg_is_in_recovery() %v", r[1], rec)
		}
		if i == 0 {
			o.InRecovery, o.Timeline, o.SyncCommit = rec, uint32(tli), r[2]
		} else if o.InRecovery != rec || o.Timeline != uint32(tli) || o.SyncCommit != r[2] {
			return observation{}, fmt.Errorf("walwatch: row %d disagrees with row 0 on the server's columns", i)
		}
		if r[5] == "" {
			if len(rows) > 1 || r[3] != "" || r[4] != "" {
				return observation{}, fmt.Errorf("walwatch: row %d has no walsender pid", i)
			}
			continue
		}
		w, err := parseWalsender(r[3:])
		if err != nil {
			return observation{}, fmt.Errorf("walwatch: row %d (%q): %w", i, r[3], err)
		}
		o.Rows = append(o.Rows, w)
	}
	return o, nil
}

// parseWalsender reads application_name, slot_name, pid, backend_start,
// state, replay_lsn and the reply's age.
func parseWalsender(c []string) (walsender, error) {
	w := walsender{App: c[0], Slot: c[1], State: c[4]}
	c = append(c[:1:1], c[2:]...)
	var err error
	if w.Session.PID, err = strconv.ParseInt(c[1], 10, 64); err != nil || w.Session.PID <= 0 {
		return walsender{}, fmt.Errorf("pid %q is not a process ID", c[1])
	}
	if w.Session.Start, err = strconv.ParseInt(c[2], 10, 64); err != nil {
		return walsender{}, fmt.Errorf("backend_start %q: %v", c[2], err)
	}
	if c[4] != "" {
		if w.Replay, err = gtid.ParsePGLSN(c[4]); err != nil {
			return walsender{}, fmt.Errorf("replay_lsn: %w", err)
		}
		w.HasReplay = true
	}
	if c[5] != "" {
		us, err := strconv.ParseInt(c[5], 10, 64)
		if err != nil {
			return walsender{}, fmt.Errorf("reply age %q: %v", c[5], err)
		}
		// A standby's clock ahead of the primary's makes the age negative:
		// read as a fresh reply.
		w.ReplyAge, w.HasReply = time.Duration(max(us, 0))*time.Microsecond, true
		if us > int64(1<<62)/1000 {
			w.ReplyAge = time.Duration(1 << 62)
		}
	}
	return w, nil
}
