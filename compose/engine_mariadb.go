package compose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"syscall"
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
type mariadbEngine struct{}

var _ engine = mariadbEngine{}

func (mariadbEngine) kind() Engine { return EngineMariaDB }

const mariadbDir = "/var/lib/causallab"

var mariadbSpec = &serverSpec{
	program:        "/usr/sbin/mariadbd",
	versionFile:    ".causallab-mariadb-version",
	imageRepo:      "causallab/mariadb",
	defaultVersion: "11.8.9",
	rootfsDir:      "mariadb-rootfs",
	peerPort:       3306,
	configName:     "my.cnf",
	config:         mariadbCnf,
	args: func(dir string) []string {
		return []string{"/usr/sbin/mariadbd", "--defaults-file=" + dir + "/my.cnf", "--user=root"}
	},
	marker:     func(dir string) string { return "--defaults-file=" + dir + "/" },
	stopSignal: syscall.SIGTERM,
	errorLine:  bracketError,
	initialize: func(cfg *Config, topoDir, dir string) (map[string]string, [][]string) {
		cnf := "--defaults-file=" + dir + "/my.cnf"
		return map[string]string{"init.sql": mariadbInitSQL(cfg)}, [][]string{
			{"/usr/bin/mariadb-install-db", cnf, "--user=root", "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve", "--force"},
			// The accounts, outside the binary log (--skip-log-bin), then
			// SHUTDOWN from the init file itself.
			{"/usr/sbin/mariadbd", cnf, "--user=root", "--skip-networking", "--skip-log-bin", "--init-file=" + topoDir + "/init.sql"},
		}
	},
	ready:     mysqlReady,
	dockerDir: mariadbDir,
	dockerInit: func(*Config) string {
		cnf := "--defaults-file=" + mariadbDir + "/my.cnf"
		return "if [ ! -d " + mariadbDir + "/data/mysql ]; then mariadb-install-db " + cnf + " --user=root --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve --force >/dev/null && " +
			"mariadbd " + cnf + " --user=root --skip-networking --skip-log-bin --init-file=/tmp/causallab-init.sql; fi"
	},
}

func (mariadbEngine) server() *serverSpec { return mariadbSpec }

// mariadbCnf renders the [mysqld] section of MariaDB server serverID.
// Replicas (i > 0) start read_only (MariaDB has no SET PERSIST; compose
// sets read_only again after a restart by role).
func mariadbCnf(cfg *Config, serverID, i, port int, dir, bind string) string {
	set := map[string]string{
		"server-id":                      fmt.Sprint(serverID),
		"port":                           fmt.Sprint(port),
		"bind-address":                   bind,
		"log-bin":                        "binlog",
		"binlog_format":                  "ROW", // as MySQL: a replica replays rows, not statements under its own settings
		"relay-log":                      "relay",
		"log-slave-updates":              "ON",
		"skip-name-resolve":              "ON",
		"innodb_buffer_pool_size":        "64M",
		"innodb_log_file_size":           "16M",
		"innodb_doublewrite":             "OFF",
		"innodb_flush_log_at_trx_commit": "2",
		"sync_binlog":                    "0",
		"performance_schema":             "OFF",
		"max_connections":                "300",
		"datadir":                        dir + "/data",
		"socket":                         dir + "/mysql.sock",
		"pid-file":                       dir + "/mysqld.pid",
		"tmpdir":                         dir,
	}
	if dir != mariadbDir {
		set["log-error"] = dir + "/error.log"
	}
	if i > 0 {
		set["read_only"] = "ON"
	}
	for k, v := range cfg.MyCnf {
		set[k] = v
	}
	return renderCnf(set)
}

// renderCnf writes a [mysqld] section with sorted keys.
func renderCnf(set map[string]string) string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("[mysqld]\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, set[k])
	}
	return b.String()
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

func (mariadbEngine) openDB(n Node, user, password string, log *slog.Logger) (*sql.DB, error) {
	return mysqlPool(n.Addr(), user, password, 3*time.Second, log)
}

func (mariadbEngine) adminUser(cfg *Config) string { return mariadbAdmin(cfg) }

func (e mariadbEngine) wire(ctx context.Context, t *Topology) error {
	p := t.Primary()
	reps := t.Replicas()
	errs := make([]error, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Go(func() { errs[i] = e.pointAt(ctx, t, r, p, t.cfg.applyDelay(replicaIndex(r.Name)), nil) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pointAt makes r replicate from src with MASTER_USE_GTID=slave_pos and
// waits until its IO thread runs. A non-nil startPos is set as
// gtid_slave_pos first.
func (mariadbEngine) pointAt(ctx context.Context, t *Topology, r, src Node, delay time.Duration, startPos *string) error {
	change := fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='%s', MASTER_PASSWORD='%s', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_DELAY=%d",
		src.PeerHost, src.PeerPort, src.User, src.Password, int(delay/time.Second))
	stmts := []string{"STOP SLAVE", "RESET SLAVE ALL", change}
	if startPos != nil {
		stmts = append(stmts, "SET GLOBAL gtid_slave_pos = '"+*startPos+"'")
	}
	if err := t.exec(ctx, r, append(stmts, "START SLAVE", "SET GLOBAL read_only=ON")...); err != nil {
		return err
	}
	return t.awaitIOThread(ctx, r, src)
}

func (mariadbEngine) source(ctx context.Context, t *Topology, n Node) (replSource, error) {
	return mysqlEngine{}.source(ctx, t, n)
}

// position reads a MariaDB position variable of n.
func (mariadbEngine) position(ctx context.Context, t *Topology, n Node, variable string) (gtid.MariaDBPosition, error) {
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
	delay := time.Duration(0)
	if st, err := t.replicaStatus(ctx, r); err == nil {
		delay = time.Duration(st.Delay) * time.Second
	}
	rPos, err := e.position(ctx, t, r, "gtid_current_pos")
	if err != nil {
		return "", err
	}
	pPos, err := e.position(ctx, t, p, "gtid_current_pos")
	if err != nil {
		return "", err
	}
	ahead := rPos.Ahead(pPos)
	var start *string
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
		s := pos.String()
		start = &s
	}
	if err := e.pointAt(ctx, t, r, p, delay, start); err != nil {
		return "", err
	}
	return gtid.FormatMariaDBRanges(ahead), nil
}

func (mariadbEngine) fence(ctx context.Context, t *Topology, n Node) error {
	return t.exec(ctx, n, "SET GLOBAL read_only=ON")
}

// restarted sets read_only by role after a restart (MariaDB does not
// persist SET GLOBAL).
func (mariadbEngine) restarted(ctx context.Context, t *Topology, n Node) error {
	if n.Role == RolePrimary {
		return t.exec(ctx, n, "SET GLOBAL read_only=OFF")
	}
	return t.exec(ctx, n, "SET GLOBAL read_only=ON")
}

func (mariadbEngine) setApplier(ctx context.Context, t *Topology, n Node, run bool) error {
	if run {
		return t.exec(ctx, n, "START SLAVE SQL_THREAD")
	}
	return t.exec(ctx, n, "STOP SLAVE SQL_THREAD")
}

func (mariadbEngine) setReceiver(ctx context.Context, t *Topology, n Node, run bool) error {
	if run {
		return t.exec(ctx, n, "START SLAVE IO_THREAD")
	}
	return t.exec(ctx, n, "STOP SLAVE IO_THREAD")
}

func (mariadbEngine) checkApplyDelay(d time.Duration) error { return wholeSeconds(d) }

// setApplyDelay changes MASTER_DELAY; MariaDB needs both threads stopped
// for CHANGE MASTER, so both are stopped and restarted as they were.
func (mariadbEngine) setApplyDelay(ctx context.Context, t *Topology, n Node, d time.Duration) error {
	st, err := t.replicaStatus(ctx, n)
	if err != nil {
		return err
	}
	stmts := []string{"STOP SLAVE", fmt.Sprintf("CHANGE MASTER TO MASTER_DELAY=%d", int(d/time.Second))}
	if st.IORunning != "No" {
		stmts = append(stmts, "START SLAVE IO_THREAD")
	}
	if st.SQLRunning == "Yes" {
		stmts = append(stmts, "START SLAVE SQL_THREAD")
	}
	return t.exec(ctx, n, stmts...)
}

func (e mariadbEngine) heavy(ctx context.Context, t *Topology, p Node, rows int) (HeavyResult, error) {
	if err := t.exec(ctx, p,
		"CREATE DATABASE IF NOT EXISTS causallab_fault",
		"CREATE TABLE IF NOT EXISTS "+HeavyTable+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, pad CHAR(100) NOT NULL)"); err != nil {
		return HeavyResult{}, err
	}
	db, err := t.db(p)
	if err != nil {
		return HeavyResult{}, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return HeavyResult{}, err
	}
	defer conn.Close()
	var before string
	if err := conn.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&before); err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction: %w", err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION max_recursive_iterations=%d", rows+1)); err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction: %w", err)
	}
	began := time.Now()
	res, err := conn.ExecContext(ctx, fmt.Sprintf(
		"INSERT INTO %s (pad) WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM seq WHERE n < %d) SELECT REPEAT('x', 100) FROM seq", HeavyTable, rows))
	if err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction on %s: %w", p.Name, err)
	}
	out := HeavyResult{Elapsed: time.Since(began)}
	out.Rows, _ = res.RowsAffected()
	var after string
	if err := conn.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&after); err != nil {
		return out, fmt.Errorf("compose: heavy transaction GTIDs: %w", err)
	}
	b, err1 := gtid.ParseMariaDBPosition(before)
	a, err2 := gtid.ParseMariaDBPosition(after)
	if err := errors.Join(err1, err2); err != nil {
		return out, fmt.Errorf("compose: heavy transaction GTIDs: %w", err)
	}
	out.GTIDs = gtid.FormatMariaDBRanges(a.Ahead(b))
	return out, nil
}

// promote fences the old primary (read_only) and reads its
// gtid_binlog_pos, or when it does not answer takes the union of what the
// survivors applied or received; drains the candidate (only if its applier
// runs without MASTER_DELAY, for at most 10 s, with MASTER_GTID_WAIT),
// makes it a writable primary and reports, per domain, the sequence
// numbers it lacks.
func (e mariadbEngine) promote(ctx context.Context, t *Topology, f *failoverPlan) error {
	old, cand, res := f.old, f.cand, f.res
	var oldPos gtid.MariaDBPosition
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := t.exec(fctx, old, "SET GLOBAL read_only=ON")
	if err == nil {
		oldPos, err = e.position(fctx, t, old, "gtid_binlog_pos")
	}
	cancel()
	res.OldPrimaryReachable = err == nil
	if !res.OldPrimaryReachable {
		f.unreachable(err)
		for _, r := range append([]Node{cand}, f.others...) {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			cur, err1 := e.position(sctx, t, r, "gtid_current_pos")
			st, err2 := t.replicaStatus(sctx, r)
			cancel()
			if err1 == nil {
				oldPos = oldPos.Union(cur)
			}
			if err2 == nil {
				if io, err := gtid.ParseMariaDBPosition(strings.TrimSpace(st.Retrieved)); err == nil {
					oldPos = oldPos.Union(io)
				}
			}
		}
	}
	st, err := t.replicaStatus(ctx, cand)
	if err != nil {
		return err
	}
	if err := t.exec(ctx, cand, "STOP SLAVE IO_THREAD"); err != nil {
		return err
	}
	if st.SQLRunning == "Yes" && st.Delay == 0 {
		st2, err := t.replicaStatus(ctx, cand)
		if err == nil && st2.Retrieved != "" {
			_, err = t.queryString(ctx, cand, "SELECT MASTER_GTID_WAIT(?, 10)", st2.Retrieved)
		}
		if err != nil {
			return fmt.Errorf("compose: draining %s: %w", cand.Name, err)
		}
	}
	if err := t.exec(ctx, cand, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only=OFF"); err != nil {
		return err
	}
	newPos, err := e.position(ctx, t, cand, "gtid_current_pos")
	if err != nil {
		return err
	}
	res.LostGTIDs = gtid.FormatMariaDBRanges(oldPos.Ahead(newPos))
	return nil
}

// waitReplicated waits with MASTER_GTID_WAIT for the primary's
// gtid_binlog_pos on every replica.
func (mariadbEngine) waitReplicated(ctx context.Context, t *Topology, timeout time.Duration) error {
	p := t.Primary()
	pos, err := t.queryString(ctx, p, "SELECT @@gtid_binlog_pos")
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range t.Replicas() {
		v, err := t.queryString(ctx, r, "SELECT MASTER_GTID_WAIT(?, ?)", pos, timeout.Seconds())
		if err != nil {
			errs = append(errs, err)
		} else if v != "0" {
			errs = append(errs, fmt.Errorf("compose: %s did not reach %s within %v", r.Name, pos, timeout))
		}
	}
	return errors.Join(errs...)
}

func (e mariadbEngine) status(ctx context.Context, t *Topology, ns *NodeStatus) {
	n := ns.Node
	db, err := t.db(n)
	if err == nil {
		var ro int
		err = db.QueryRowContext(ctx, "SELECT @@gtid_current_pos, @@read_only").Scan(&ns.GTIDExecuted, &ro)
		ns.ReadOnly = ro == 1
		ns.Position = ns.GTIDExecuted
	}
	if err != nil {
		ns.Health = HealthUnreachable
		ns.LastError = err.Error()
		return
	}
	st, err := t.replicaStatus(ctx, n)
	if err != nil {
		ns.Health = HealthUnreachable
		ns.LastError = err.Error()
		return
	}
	ns.fromReplicaStatus(st)
	if n.Role == RoleReplica && ns.Health == HealthLagging {
		// Lagging only while something received is not applied yet.
		io, err1 := gtid.ParseMariaDBPosition(strings.TrimSpace(st.Retrieved))
		cur, err2 := gtid.ParseMariaDBPosition(ns.Position)
		if err1 == nil && err2 == nil && cur.Contains(io) {
			ns.Health = HealthOK
		}
	}
}
