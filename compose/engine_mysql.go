package compose

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// mysqlEngine is MySQL 9.7: GTID sets, SOURCE_AUTO_POSITION replicas,
// super_read_only fencing, GTID_SUBTRACT for what a failover lost.
type mysqlEngine struct{ mysqlFamily }

// flavorMySQL is MySQL's way of saying what it shares with MariaDB.
var flavorMySQL = &mysqlFlavor{
	replica:     "REPLICA",
	binlogPos:   "gtid_executed",
	currentPos:  "gtid_executed",
	fence:       "SET PERSIST super_read_only=ON",
	writable:    []string{"SET PERSIST super_read_only=OFF", "SET PERSIST read_only=OFF"},
	wait:        "WAIT_FOR_EXECUTED_GTID_SET",
	recursion:   "cte_max_recursion_depth",
	statusQuery: "SELECT @@server_uuid, @@gtid_executed, @@super_read_only",
	change: func(src Node, delay time.Duration) string {
		return fmt.Sprintf("CHANGE REPLICATION SOURCE TO SOURCE_HOST='%s', SOURCE_PORT=%d, SOURCE_USER='%s', SOURCE_PASSWORD='%s', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1, SOURCE_CONNECT_RETRY=1, SOURCE_RETRY_COUNT=86400, SOURCE_DELAY=%d",
			src.PeerHost, src.PeerPort, src.User, src.Password, int(delay/time.Second))
	},
	setDelay: "CHANGE REPLICATION SOURCE TO SOURCE_DELAY=%d",
	gained: func(ctx context.Context, conn *sql.Conn, before string) (string, error) {
		var s string
		err := conn.QueryRowContext(ctx, "SELECT GTID_SUBTRACT(@@gtid_executed, ?)", before).Scan(&s)
		return s, err
	},
	survivors: mysqlSurvivors,
	lost: func(ctx context.Context, t *Topology, n Node, old, cur string) (string, error) {
		s, err := t.queryString(ctx, n, "SELECT GTID_SUBTRACT(?, ?)", old, cur)
		return strings.ReplaceAll(s, "\n", ""), err
	},
	applied: func(ctx context.Context, db *sql.DB, st replicaStatus, _ *NodeStatus) bool {
		var applied int
		err := db.QueryRowContext(ctx, "SELECT GTID_SUBSET(?, ?)", st.Retrieved, st.Executed).Scan(&applied)
		return err == nil && applied == 1
	},
}

var _ engine = mysqlEngine{}

func (mysqlEngine) kind() Engine { return EngineMySQL }

var mysqlSpec = mysqlFamilySpec(serverSpec{
	program:        "/usr/sbin/mysqld",
	versionFile:    ".causallab-mysql-version",
	imageRepo:      "causallab/mysql",
	defaultVersion: "9.7.4",
	rootfsDir:      "mysql-rootfs",
	config: func(cfg *Config, serverID, _, port int, dir, bind string) string {
		return cfg.myCnf(serverID, port, dir, bind)
	},
	args: func(dir string) []string {
		return []string{"mysqld", "--defaults-file=" + dir + "/my.cnf", "--user=root"}
	},
	initialize: func(cfg *Config, topoDir, dir string) (map[string]string, [][]string) {
		return map[string]string{"init.sql": initSQL(cfg)},
			[][]string{{"mysqld", "--defaults-file=" + dir + "/my.cnf", "--user=root", "--initialize-insecure", "--init-file=" + topoDir + "/init.sql"}}
	},
	skip: []string{"auto.cnf"},
	dockerInit: func(*Config) string {
		cnf := "--defaults-file=" + mysqlDockerDir + "/my.cnf --user=root"
		return "if [ ! -d " + mysqlDockerDir + "/data/mysql ]; then mysqld " + cnf + " --initialize-insecure --init-file=/tmp/causallab-init.sql; fi"
	},
})

func (mysqlEngine) server() *serverSpec { return mysqlSpec }

func (mysqlEngine) adminUser(*Config) string { return "" }

// repoint points replica r at primary p with auto-position, keeping its
// SOURCE_DELAY, and returns the GTIDs r has executed that p lacks.
func (e mysqlEngine) repoint(ctx context.Context, t *Topology, r, p Node) (string, error) {
	if err := e.pointAt(ctx, t, r, p, delayOf(ctx, t, r)); err != nil {
		return "", err
	}
	pExec, err := t.queryString(ctx, p, "SELECT @@gtid_executed")
	if err != nil {
		return "", err
	}
	errant, err := t.queryString(ctx, r, "SELECT GTID_SUBTRACT(@@gtid_executed, ?)", pExec)
	if err != nil {
		return "", err
	}
	return strings.ReplaceAll(errant, "\n", ""), nil
}

func (mysqlEngine) restarted(context.Context, *Topology, Node) error { return nil }

// mysqlSurvivors joins the GTID sets the nodes executed or retrieved.
func mysqlSurvivors(ctx context.Context, t *Topology, nodes []Node) string {
	var parts []string
	for _, r := range nodes {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := t.replicaStatus(sctx, r)
		cancel()
		if err != nil {
			continue
		}
		for _, s := range []string{st.Executed, st.Retrieved} {
			if s = strings.TrimSpace(s); s != "" {
				parts = append(parts, s)
			}
		}
	}
	return strings.Join(parts, ",")
}
