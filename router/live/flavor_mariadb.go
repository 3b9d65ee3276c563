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

// Compile-time check.
var _ Flavor[gtid.MariaDBPosition] = MariaDB{}

// mariaDBTrackedVar is the system variable whose change MariaDB reports in
// each committing statement's OK packet.
const mariaDBTrackedVar = "last_gtid"

// MariaDB is the flavor of MariaDB GTID positions (gtid.MariaDBPosition:
// one GTID per replication domain, compared per domain by sequence number
// alone). A write's position is the GTID MariaDB reports in the OK packet
// through session_track_system_variables = last_gtid; a node's position is
// @@GLOBAL.gtid_current_pos (what it applied as a replica and what it
// wrote as a primary); the server-side wait is MASTER_GTID_WAIT.
//
// The comparison is MariaDB's: after a failover the new primary's writes
// in a domain raise its sequence number past a lost write's, so a token
// naming the lost write is then satisfied by a node that never had it.
// The router follows the engine here on purpose (the lab counts what that
// does to read-your-writes; a topology epoch, Policy.CheckEpoch, is the
// defence).
type MariaDB struct{}

// Name implements Flavor.
func (MariaDB) Name() string { return "mariadb-gtid" }

// TrackSession implements Flavor: session_track_state_change (the shared
// primary pool keeps a connection whose session state changed with its
// session) and session_track_system_variables = last_gtid, proven by
// reading the list back, and the binary log on (without it no GTID is
// assigned).
func (MariaDB) TrackSession(ctx context.Context, c SessionConn) error {
	if _, err := c.Exec(ctx, "SET SESSION session_track_state_change = ON"); err != nil {
		return fmt.Errorf("enable state-change tracking: %v", err)
	}
	ack, err := c.Exec(ctx, "SET SESSION session_track_system_variables = '"+mariaDBTrackedVar+"'")
	if err != nil {
		return fmt.Errorf("set session_track_system_variables: %v", err)
	}
	if !ack.StateChanged && ack.Vars == nil {
		return errors.New("the OK packet carried no session-tracking data (is CLIENT_SESSION_TRACK negotiated?)")
	}
	list, err := c.ReadValue(ctx, "SELECT @@SESSION.session_track_system_variables")
	if err != nil {
		return fmt.Errorf("read session_track_system_variables: %v", err)
	}
	if !strings.EqualFold(list, mariaDBTrackedVar) {
		return fmt.Errorf("session_track_system_variables is %q, want %s", list, mariaDBTrackedVar)
	}
	logBin, err := c.ReadValue(ctx, "SELECT @@GLOBAL.log_bin")
	if err != nil {
		return fmt.Errorf("read log_bin: %v", err)
	}
	if logBin != "1" && !strings.EqualFold(logBin, "ON") {
		return fmt.Errorf("log_bin is %q, want ON (no binary log: no GTIDs)", logBin)
	}
	return nil
}

// WritePosition implements Flavor: the tracked last_gtid, as a position of
// one domain. A statement that committed nothing reports no change.
func (MariaDB) WritePosition(_ context.Context, ack Ack, _ SessionConn) (gtid.MariaDBPosition, bool, error) {
	text, ok := ack.Vars[mariaDBTrackedVar]
	if !ok || text == "" {
		return gtid.MariaDBPosition{}, false, nil
	}
	g, err := gtid.ParseMariaDBGTID(text)
	if err != nil {
		return gtid.MariaDBPosition{}, false, fmt.Errorf("unparsable last_gtid %q: %w", text, err)
	}
	p, err := gtid.NewMariaDBPosition(g)
	if err != nil {
		return gtid.MariaDBPosition{}, false, err
	}
	return p, true, nil
}

// mariaDBExecutedQuery reads a MariaDB node's position.
const mariaDBExecutedQuery = "SELECT @@GLOBAL.gtid_current_pos"

// ExecutedQuery implements Flavor.
func (MariaDB) ExecutedQuery() string { return mariaDBExecutedQuery }

// mariaDBWatermarkQuery reads an upper bound of what a read on a MariaDB
// node saw: its binary log's position joined with gtid_current_pos (both
// lists in one answer; ParseExecuted keeps each domain's highest).
// gtid_current_pos alone is not one on a replica: there it is
// gtid_slave_pos, which the applier updates after the transaction is
// visible (on MariaDB 11.8, 357 of 11,043 replica reads followed by it
// on the same connection saw a transaction it lacked, the joined query
// 0 of 11,045: TestWatermarkRace in livetest/mariadb). A transaction is in the binary log before it
// commits, so gtid_binlog_pos is the bound on a primary and on a replica
// that logs what it applies (log_slave_updates, which compose sets).
const mariaDBWatermarkQuery = "SELECT CONCAT_WS(',', NULLIF(@@GLOBAL.gtid_binlog_pos, ''), NULLIF(@@GLOBAL.gtid_current_pos, ''))"

// WatermarkQuery implements Watermarker: mariaDBWatermarkQuery.
func (MariaDB) WatermarkQuery() string { return mariaDBWatermarkQuery }

var _ Watermarker = MariaDB{}

// ParseExecuted implements Flavor: a position, or the watermark query's
// joined lists (several GTIDs of a domain: the highest counts, as
// gtid.ParseMariaDBWait reads them).
func (MariaDB) ParseExecuted(text string) (gtid.MariaDBPosition, error) {
	return gtid.ParseMariaDBWait(text)
}

// WaitQuery implements Flavor: MASTER_GTID_WAIT(pos, seconds), which
// answers 0 once the node's gtid_slave_pos reaches pos in every domain
// and -1 at the timeout. The position's text is digits, '-' and ',' only
// (gtid.MariaDBPosition.String), so it needs no escaping.
func (MariaDB) WaitQuery(need gtid.MariaDBPosition, timeout time.Duration) string {
	return "SELECT MASTER_GTID_WAIT(_utf8mb4'" + need.String() + "', " + mysqlwire.WaitSeconds(timeout) + ")"
}

// Behind implements Flavor: the sum over the primary's domains of how far
// the replica's sequence number trails.
func (MariaDB) Behind(primary, replica gtid.MariaDBPosition) int64 {
	var n uint64
	for _, g := range primary.GTIDs() {
		r, _ := replica.Domain(g.Domain)
		if g.Seq > r.Seq {
			n += min(g.Seq-r.Seq, 1<<62)
		}
		n = min(n, 1<<62)
	}
	return int64(n)
}

// Compact implements Flavor: a position is already one GTID per domain.
func (MariaDB) Compact(p gtid.MariaDBPosition) gtid.MariaDBPosition { return p }

// Compile-time check.
var _ Flavor[gtid.Set] = MariaDBSet{}

// MariaDBSet is the MariaDB flavor for code that keeps GTID sets (the
// proxy, its tokens): the same statements as MariaDB, each position read
// as a set of one source per domain (gtid.MariaDBPosition.AsSet), which
// contains another exactly when MariaDB's comparison says so; a wait is
// MASTER_GTID_WAIT on the set's position (gtid.MariaDBWaitPosition).
type MariaDBSet struct{}

// Name implements Flavor.
func (MariaDBSet) Name() string { return "mariadb-gtid" }

// TrackSession implements Flavor: MariaDB's.
func (MariaDBSet) TrackSession(ctx context.Context, c SessionConn) error {
	return MariaDB{}.TrackSession(ctx, c)
}

// WritePosition implements Flavor: the tracked last_gtid as a set.
func (MariaDBSet) WritePosition(ctx context.Context, ack Ack, c SessionConn) (gtid.Set, bool, error) {
	p, ok, err := MariaDB{}.WritePosition(ctx, ack, c)
	if !ok || err != nil {
		return gtid.Set{}, ok, err
	}
	s, err := p.AsSet()
	return s, err == nil, err
}

// ExecutedQuery implements Flavor: @@GLOBAL.gtid_current_pos.
func (MariaDBSet) ExecutedQuery() string { return mariaDBExecutedQuery }

// ParseExecuted implements Flavor: MariaDB's, as a set.
func (MariaDBSet) ParseExecuted(text string) (gtid.Set, error) {
	p, err := MariaDB{}.ParseExecuted(text)
	if err != nil {
		return gtid.Set{}, err
	}
	return p.AsSet()
}

// WatermarkQuery implements Watermarker: MariaDB's.
func (MariaDBSet) WatermarkQuery() string { return mariaDBWatermarkQuery }

var _ Watermarker = MariaDBSet{}

// WaitQuery implements Flavor: MASTER_GTID_WAIT on need's position. A set
// that did not come from MariaDB (no MariaDB wait position) waits for
// a position no server reaches, so the wait times out rather than passes.
func (MariaDBSet) WaitQuery(need gtid.Set, timeout time.Duration) string {
	p, err := gtid.MariaDBWaitPosition(need)
	if err != nil {
		p = gtid.MustParseMariaDBPosition("4294967295-0-18446744073709551615")
	}
	return MariaDB{}.WaitQuery(p, timeout)
}

// Behind implements Flavor: MySQL's (the transaction counts, which here
// are the sums of the domains' sequence numbers).
func (MariaDBSet) Behind(primary, replica gtid.Set) int64 { return MySQL{}.Behind(primary, replica) }

// Compact implements Flavor: a position's set is already one interval
// per domain.
func (MariaDBSet) Compact(p gtid.Set) gtid.Set { return p }
