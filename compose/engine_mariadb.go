package compose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/causallab/causallab/gtid"
)

// mariadbEngine is MariaDB 11.8: GTIDs domain-server-seq, replicas wired
// with CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos, read_only fencing,
// MASTER_GTID_WAIT, and what a failover lost as per-domain sequence
// ranges.
//
// Accounts: MariaDB's read_only does not stop a user holding READ_ONLY
// ADMIN, which ALL PRIVILEGES includes, and setting read_only needs it.
// So the user's account (Config.User) gets every privilege but READ_ONLY
// ADMIN (a fenced server refuses its writes, as MySQL's super_read_only
// does), and compose's own connections use <user>_admin (same password)
// with all of them.
type mariadbEngine struct{ mysqlFamily }

// flavorMariaDB is MariaDB's way of saying what it shares with MySQL.
var flavorMariaDB = &mysqlFlavor{
	replica:     "SLAVE",
	binlogPos:   "gtid_binlog_pos",
	currentPos:  "gtid_current_pos",
	fence:       "SET GLOBAL read_only=ON",
	writable:    []string{"SET GLOBAL read_only=OFF"},
	wait:        "MASTER_GTID_WAIT",
	recursion:   "max_recursive_iterations",
	statusQuery: "SELECT '', @@gtid_current_pos, @@read_only",
	change: func(src Node, delay time.Duration) string {
		return fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='%s', MASTER_PASSWORD='%s', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_DELAY=%d",
			src.PeerHost, src.PeerPort, src.User, src.Password, int(delay/time.Second))
	},
	// MariaDB needs both threads stopped for CHANGE MASTER.
	setDelay:     "CHANGE MASTER TO MASTER_DELAY=%d",
	delayStopsIO: true,
	gained: func(ctx context.Context, conn *sql.Conn, before string) (string, error) {
		var after string
		if err := conn.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&after); err != nil {
			return "", err
		}
		return mariadbAhead(after, before)
	},
	survivors: mariadbSurvivors,
	lost: func(_ context.Context, _ *Topology, _ Node, old, cur string) (string, error) {
		return mariadbAhead(old, cur)
	},
	// Lagging only while something received is not applied yet.
	applied: func(_ context.Context, _ *sql.DB, st replicaStatus, ns *NodeStatus) bool {
		io, err1 := gtid.ParseMariaDBPosition(strings.TrimSpace(st.Retrieved))
		cur, err2 := gtid.ParseMariaDBPosition(ns.Position)
		return err1 == nil && err2 == nil && cur.Contains(io)
	},
}

var _ engine = mariadbEngine{}

func (mariadbEngine) kind() Engine { return EngineMariaDB }

var mariadbSpec = mysqlFamilySpec(serverSpec{
	program:        "/usr/sbin/mariadbd",
	versionFile:    ".causallab-mariadb-version",
	imageRepo:      "causallab/mariadb",
	defaultVersion: "11.8.9",
	rootfsDir:      "mariadb-rootfs",
	config:         mariadbCnf,
	args: func(dir string) []string {
		return []string{"/usr/sbin/mariadbd", "--defaults-file=" + dir + "/my.cnf", "--user=root"}
	},
	initialize: func(cfg *Config, topoDir, dir string) (map[string]string, [][]string) {
		cnf := "--defaults-file=" + dir + "/my.cnf"
		return map[string]string{"init.sql": mariadbInitSQL(cfg)}, [][]string{
			{"/usr/bin/mariadb-install-db", cnf, "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve", "--force"},
			// The accounts, outside the binary log (--skip-log-bin), then
			// SHUTDOWN from the init file itself.
			{"/usr/sbin/mariadbd", cnf, "--user=root", "--skip-networking", "--skip-log-bin", "--init-file=" + topoDir + "/init.sql"},
		}
	},
	dockerInit: func(*Config) string {
		cnf := "--defaults-file=" + mysqlDockerDir + "/my.cnf"
		return "if [ ! -d " + mysqlDockerDir + "/data/mysql ]; then mariadb-install-db " + cnf + " --user=root --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve --force >/dev/null && " +
			"mariadbd " + cnf + " --user=root --skip-networking --skip-log-bin --init-file=/tmp/causallab-init.sql; fi"
	},
})

func (mariadbEngine) server() *serverSpec { return mariadbSpec }

// mariadbCnf renders the [mysqld] section of MariaDB server serverID.
// Replicas (i > 0) start read_only (MariaDB has no SET PERSIST; compose
// sets read_only again after a restart by role).
func mariadbCnf(cfg *Config, serverID, i, port int, dir, bind string) string {
	set := mysqlFamilyCnf(serverID, port, dir, bind)
	set["binlog_format"] = "ROW" // as MySQL: a replica replays rows, not statements under its own settings
	set["log-slave-updates"] = "ON"
	set["innodb_log_file_size"] = "16M"
	if i > 0 {
		set["read_only"] = "ON"
	}
	return renderSettings("[mysqld]\n", "=", set, cfg.MyCnf)
}

// mariadbInitSQL creates the user's account (all privileges but READ_ONLY
// ADMIN) and compose's admin account, then shuts the server down.
func mariadbInitSQL(cfg *Config) string {
	return fmt.Sprintf("CREATE USER '%[1]s'@'%%' IDENTIFIED BY '%[2]s';\n"+
		"GRANT ALL PRIVILEGES ON *.* TO '%[1]s'@'%%' WITH GRANT OPTION;\n"+
		"REVOKE READ_ONLY ADMIN ON *.* FROM '%[1]s'@'%%';\n"+
		"CREATE USER '%[3]s'@'%%' IDENTIFIED BY '%[2]s';\n"+
		"GRANT ALL PRIVILEGES ON *.* TO '%[3]s'@'%%' WITH GRANT OPTION;\n"+
		"SHUTDOWN;\n", cfg.User, cfg.Password, mariadbAdmin(cfg))
}

func mariadbAdmin(cfg *Config) string { return cfg.User + "_admin" }

func (mariadbEngine) adminUser(cfg *Config) string { return mariadbAdmin(cfg) }

// mariadbPosition reads a MariaDB position variable of n.
func mariadbPosition(ctx context.Context, t *Topology, n Node, variable string) (gtid.MariaDBPosition, error) {
	s, err := t.queryString(ctx, n, "SELECT @@"+variable)
	if err != nil {
		return gtid.MariaDBPosition{}, err
	}
	p, err := gtid.ParseMariaDBPosition(s)
	if err != nil {
		return gtid.MariaDBPosition{}, fmt.Errorf("compose: %s of %s: %w", variable, n.Name, err)
	}
	return p, nil
}

// repoint points r at p keeping its MASTER_DELAY and returns, per domain,
// the sequence numbers r has applied past p's position. MariaDB's primary
// refuses a replica whose gtid_slave_pos names a GTID its binary log lacks
// ("connecting slave requested to start from GTID ..., which is not in the
// master's binlog"), so such a replica starts from p's position instead:
// it keeps the errant transactions in its data (as a MySQL replica does),
// they are returned and counted in Stats().ErrantOnRepoint.
func (e mariadbEngine) repoint(ctx context.Context, t *Topology, r, p Node) (string, error) {
	delay := delayOf(ctx, t, r)
	rPos, err := mariadbPosition(ctx, t, r, "gtid_current_pos")
	if err != nil {
		return "", err
	}
	pPos, err := mariadbPosition(ctx, t, p, "gtid_current_pos")
	if err != nil {
		return "", err
	}
	ahead := rPos.Ahead(pPos)
	var start []string
	if len(ahead) > 0 {
		// r's position, with p's GTID in the domains where r is ahead
		// (and none where p has none: r starts that domain afresh).
		var gs []gtid.MariaDBGTID
		for _, g := range rPos.GTIDs() {
			pg, ok := pPos.Domain(g.Domain)
			switch {
			case !ok:
				continue
			case pg.Seq < g.Seq:
				g = pg
			}
			gs = append(gs, g)
		}
		pos, err := gtid.NewMariaDBPosition(gs...)
		if err != nil {
			return "", err
		}
		start = append(start, "SET GLOBAL gtid_slave_pos = '"+pos.String()+"'")
	}
	if err := e.pointAt(ctx, t, r, p, delay, start...); err != nil {
		return "", err
	}
	return gtid.FormatMariaDBRanges(ahead), nil
}

// restarted sets read_only by role after a restart (MariaDB does not
// persist SET GLOBAL).
func (mariadbEngine) restarted(ctx context.Context, t *Topology, n Node) error {
	if n.Role == RolePrimary {
		return t.exec(ctx, n, "SET GLOBAL read_only=OFF")
	}
	return t.exec(ctx, n, "SET GLOBAL read_only=ON")
}

// mariadbAhead formats, per domain, the sequence numbers position a has
// past position b.
func mariadbAhead(a, b string) (string, error) {
	ap, err1 := gtid.ParseMariaDBPosition(a)
	bp, err2 := gtid.ParseMariaDBPosition(b)
	if err := errors.Join(err1, err2); err != nil {
		return "", err
	}
	return gtid.FormatMariaDBRanges(ap.Ahead(bp)), nil
}

// mariadbSurvivors is the union of what the nodes applied
// (gtid_current_pos) or received (Gtid_IO_Pos).
func mariadbSurvivors(ctx context.Context, t *Topology, nodes []Node) string {
	var pos gtid.MariaDBPosition
	for _, r := range nodes {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		cur, err1 := mariadbPosition(sctx, t, r, "gtid_current_pos")
		st, err2 := t.replicaStatus(sctx, r)
		cancel()
		if err1 == nil {
			pos = pos.Union(cur)
		}
		if err2 == nil {
			if io, err := gtid.ParseMariaDBPosition(strings.TrimSpace(st.Retrieved)); err == nil {
				pos = pos.Union(io)
			}
		}
	}
	return pos.String()
}
