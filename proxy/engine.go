package proxy

import (
	"fmt"
	"strings"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router/live"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// The engines the proxy fronts (Config.Engine). Both speak the MySQL
// protocol; they differ in how a server reports a write's position, reads
// its own and waits for one. The proxy keeps every position as a GTID set
// (its tokens, views and watermarks): a MariaDB position is read as a set
// of one source per replication domain (gtid.MariaDBPosition.AsSet),
// which compares as MariaDB's own positions do.
const (
	EngineMySQL   = "mysql"
	EngineMariaDB = "mariadb"
)

// mariaDB: the backends are MariaDB servers.
func (c *Config) mariaDB() bool { return c.Engine == EngineMariaDB }

// flavor is the router's and the pollers' flavor of Engine.
func (c *Config) flavor() live.Flavor[gtid.Set] {
	if c.mariaDB() {
		return live.MariaDBSet{}
	}
	return live.MySQL{}
}

// trackSetup is the session set-up every backend connection gets (after
// the handshake, and again after a pool's COM_RESET_CONNECTION): the
// tracking of each write's GTID the router relies on (MySQL:
// session_track_gtids; MariaDB: the system variable last_gtid), and the
// state-change tracking the session relies on to know when a statement
// left state the proxy does not replay (docs/proxy-sessions.md, "When a
// session is pinned").
func (c *Config) trackSetup(allGTIDs bool) string {
	switch {
	case c.mariaDB():
		return "SET SESSION session_track_system_variables = 'last_gtid', session_track_state_change = ON"
	case allGTIDs:
		return "SET SESSION session_track_gtids = ALL_GTIDS, session_track_state_change = ON"
	}
	return "SET SESSION session_track_gtids = OWN_GTID, session_track_state_change = ON"
}

// validateEngine: engine, and what the proxy cannot do on MariaDB, each
// refused by name: a binary-log position source (binlogwatch reads
// MySQL's GTID events), the watcher wait (it waits on such a source), and
// the lazy and all-gtids watermarks (MySQL's received set and
// session_track_gtids = ALL_GTIDS). Run after validatePositions, before
// validateWatermark (whose default it sets on MariaDB: query, the
// node's gtid_current_pos read after each replica read).
func (c *Config) validateEngine() error {
	if err := oneOf("engine", &c.Engine, EngineMySQL, EngineMariaDB); err != nil {
		return err
	}
	if !c.mariaDB() {
		return nil
	}
	switch {
	case c.Positions != "poll":
		return fmt.Errorf("proxy: engine mariadb: positions %q is MySQL's binary log; use positions poll", c.Positions)
	case c.Wait == live.WaitWatcher.String():
		return fmt.Errorf("proxy: engine mariadb: wait %q needs a binary-log position source; use %s (MASTER_GTID_WAIT)", c.Wait, live.WaitGTIDFunction)
	case c.WatermarkSource == "lazy" || c.WatermarkSource == "all-gtids":
		return fmt.Errorf("proxy: engine mariadb: watermark_source %q reads MySQL's received set or ALL_GTIDS tracking; use query", c.WatermarkSource)
	}
	if c.WatermarkSource == "" {
		c.WatermarkSource = "query"
	}
	return nil
}

// checkEngine compares Engine with the primary's version text (SELECT
// VERSION()): MariaDB's ends in "-MariaDB" (with a suffix after it on
// some builds). A mismatch is an error naming both, before any client is
// served: on the wrong engine the session tracking the router relies on
// is not there.
func (c *Config) checkEngine(version string) error {
	isMariaDB := strings.Contains(strings.ToLower(version), "mariadb")
	if isMariaDB == c.mariaDB() {
		return nil
	}
	want := EngineMySQL
	if isMariaDB {
		want = EngineMariaDB
	}
	return fmt.Errorf("proxy: engine %s, but the primary %s runs %q: set engine: %s", c.Engine, c.Primary.Name, version, want)
}

// ownGTIDs is the write position an OK packet's session tracking t
// reports, as GTID-set text ("" when none): MySQL's tracked GTIDs, or
// MariaDB's last_gtid read as a set. A last_gtid that is not a MariaDB
// GTID is returned as it came, so that the session's parse of it fails
// and is counted (unparsable-session-gtid), as a MySQL one's would.
func ownGTIDs(mariaDB bool, t *mysql.SessionTrackingInfo) string {
	if t == nil {
		return ""
	}
	if !mariaDB {
		return t.GTID
	}
	v := t.Variables["last_gtid"]
	if v == "" {
		return ""
	}
	s, err := gtid.MariaDBSetOf(v)
	if err != nil {
		return v
	}
	return s.String()
}
