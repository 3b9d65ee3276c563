package compose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// mysqlFlavor is how MySQL or MariaDB says what both do over the MySQL
// protocol: the words of the replication statements, the variables that
// hold a server's GTIDs, the function that waits for them, and how two
// positions compare. The engine half the two share (mysqlFamily) is
// written once against it, as Vitess keeps its flavors apart behind one
// interface; what the two do differently (repoint, restarted, the
// accounts) stays in engine_mysql.go and engine_mariadb.go.
type mysqlFlavor struct {
	// replica is the noun of the replication statements: START <replica>,
	// STOP <replica> IO_THREAD, RESET <replica> ALL (MySQL: REPLICA;
	// MariaDB: SLAVE).
	replica string
	// binlogPos names the variable of what the server has written to its
	// binary log (gtid_executed; gtid_binlog_pos), currentPos the one of
	// what it has written or applied (gtid_executed; gtid_current_pos).
	binlogPos, currentPos string
	// fence makes a server refuse the user's writes (SET PERSIST
	// super_read_only=ON; SET GLOBAL read_only=ON); writable undoes it on
	// a promoted replica.
	fence    string
	writable []string
	// wait is the function that waits on a replica for a position, with a
	// timeout in seconds, and returns 0 once it is reached
	// (WAIT_FOR_EXECUTED_GTID_SET; MASTER_GTID_WAIT).
	wait string
	// recursion is the session variable bounding a recursive CTE's depth
	// (cte_max_recursion_depth; max_recursive_iterations).
	recursion string
	// statusQuery reads a node's server uuid ('' for MariaDB, which has
	// none), current position and read-only flag, in that order.
	statusQuery string
	// change is the statement that points a replica at src with an apply
	// delay (whole seconds), by GTID.
	change func(src Node, delay time.Duration) string
	// setDelay is the statement that changes only the apply delay
	// (a %d of seconds); delayStopsIO: it needs the IO thread stopped too
	// (MariaDB), not only the SQL thread (MySQL).
	setDelay     string
	delayStopsIO bool
	// gained returns, on conn, what the server's binlogPos gained since
	// before (the heavy transaction's GTIDs).
	gained func(ctx context.Context, conn *sql.Conn, before string) (string, error)
	// survivors is the union of what nodes have applied or received: a
	// failover's stand-in for an old primary that does not answer.
	survivors func(ctx context.Context, t *Topology, nodes []Node) string
	// lost returns what position old has that cur lacks, in the flavor's
	// text form (asking n when the server computes it).
	lost func(ctx context.Context, t *Topology, n Node, old, cur string) (string, error)
	// applied reports whether a lagging replica has applied everything it
	// received (st is its replica status, ns its status so far).
	applied func(ctx context.Context, db *sql.DB, st replicaStatus, ns *NodeStatus) bool
}

// mysqlFamily is the engine half MySQL and MariaDB share, for the
// flavor f; mysqlEngine and mariadbEngine embed it.
type mysqlFamily struct{ f *mysqlFlavor }

// mysqlDockerDir is a MySQL or MariaDB server's directory in its
// container.
const mysqlDockerDir = "/var/lib/causallab"

// mysqlFamilySpec is sp with what MySQL's and MariaDB's servers share:
// the MySQL port, my.cnf in the server's directory (whose
// --defaults-file marks the process as ours), SIGTERM, "[ERROR]" log
// lines, readiness by @@datadir.
func mysqlFamilySpec(sp serverSpec) *serverSpec {
	sp.peerPort = 3306
	sp.configName = "my.cnf"
	sp.marker = func(dir string) string { return "--defaults-file=" + dir + "/" }
	sp.stopSignal = syscall.SIGTERM
	sp.errorLine = bracketError
	sp.ready = mysqlReady
	sp.dockerDir = mysqlDockerDir
	return &sp
}

// mysqlReady asks a MySQL-protocol server for its data directory.
func mysqlReady(ctx context.Context, cfg *Config, addr string) (string, error) {
	db, err := mysqlPool(addr, cfg.User, cfg.Password, time.Second, cfg.Logger)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var datadir string
	err = db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&datadir)
	return datadir, err
}

// mysqlPool opens a go-sql-driver pool (MySQL and MariaDB).
func mysqlPool(addr, user, password string, timeout time.Duration, log *slog.Logger) (*sql.DB, error) {
	mc := mysql.NewConfig()
	mc.User, mc.Passwd, mc.Net, mc.Addr = user, password, "tcp", addr
	mc.Timeout = timeout
	mc.Logger = driverLogger{log}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// mysqlFamilyCnf is the part of a [mysqld] section that MySQL and
// MariaDB server serverID share; dir is the server's directory as the
// server sees it.
func mysqlFamilyCnf(serverID, port int, dir, bind string) map[string]string {
	set := map[string]string{
		"server-id":                      fmt.Sprint(serverID),
		"port":                           fmt.Sprint(port),
		"bind-address":                   bind,
		"log-bin":                        "binlog",
		"relay-log":                      "relay",
		"skip-name-resolve":              "ON",
		"innodb_buffer_pool_size":        "64M",
		"innodb_doublewrite":             "OFF",
		"innodb_flush_log_at_trx_commit": "2",
		"sync_binlog":                    "0",
		"performance_schema":             "OFF",
		"max_connections":                "300",
	}
	if dir != "" {
		set["datadir"] = dir + "/data"
		set["socket"] = dir + "/mysql.sock"
		set["pid-file"] = dir + "/mysqld.pid"
		set["log-error"] = dir + "/error.log"
		set["tmpdir"] = dir
	}
	return set
}

// renderSettings writes set, overridden by the user's extra settings, one
// "name<sep>value" line per setting in sorted order after header (my.cnf:
// "[mysqld]\n" and "="; postgresql.conf: "" and " = ").
func renderSettings(header, sep string, set, extra map[string]string) string {
	for k, v := range extra {
		set[k] = v
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(header)
	for _, k := range keys {
		b.WriteString(k + sep + set[k] + "\n")
	}
	return b.String()
}

func (mysqlFamily) openDB(n Node, user, password string, log *slog.Logger) (*sql.DB, error) {
	return mysqlPool(n.Addr(), user, password, 3*time.Second, log)
}

// wire points every replica at the primary and waits for its IO thread.
func (m mysqlFamily) wire(ctx context.Context, t *Topology) error {
	p := t.Primary()
	return parallel(t.Replicas(), func(r Node) error {
		return m.pointAt(ctx, t, r, p, t.cfg.applyDelay(replicaIndex(r.Name)))
	})
}

// pointAt makes r replicate from src by GTID with the apply delay, the
// statements before (if any) run before it starts, and waits until its
// IO thread runs. r is fenced: a replica refuses the user's writes.
func (m mysqlFamily) pointAt(ctx context.Context, t *Topology, r, src Node, delay time.Duration, before ...string) error {
	stmts := append([]string{"STOP " + m.f.replica, "RESET " + m.f.replica + " ALL", m.f.change(src, delay)}, before...)
	stmts = append(stmts, "START "+m.f.replica, m.f.fence)
	err := t.exec(ctx, r, stmts...)
	for try := 0; try < 3 && isRunningReplicaThreads(err); try++ {
		// A server just restarted starts its replication threads in the
		// background: they can start between STOP and RESET (3081 on a
		// loaded machine). Stop them again.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
		err = t.exec(ctx, r, stmts...)
	}
	if err != nil {
		return err
	}
	return t.awaitIOThread(ctx, r, src)
}

// isRunningReplicaThreads reports MySQL's 3081 (ER_REPLICA_CHANNEL_MUST_STOP:
// an operation that needs the replication threads stopped found them
// running).
func isRunningReplicaThreads(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 3081
}

// awaitIOThread waits until replica r's IO thread runs (MySQL, MariaDB).
func (t *Topology) awaitIOThread(ctx context.Context, r, src Node) error {
	var st replicaStatus
	return poll(ctx, t.cfg.StartTimeout, 50*time.Millisecond, func() (bool, error) {
		var err error
		if st, err = t.replicaStatus(ctx, r); err != nil {
			return false, err
		}
		if st.IORunning == "No" && st.LastIOError != "" {
			return false, fmt.Errorf("compose: %s cannot replicate from %s: %s", r.Name, src.Name, st.LastIOError)
		}
		return st.IORunning == "Yes", nil
	}, func() error {
		return fmt.Errorf("compose: %s did not connect to %s within %v (IO thread %s, last error %q)", r.Name, src.Name, t.cfg.StartTimeout, st.IORunning, st.LastIOError)
	})
}

// replicaIndex is i for "replica<i>", 0 otherwise.
func replicaIndex(name string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(name, "replica"))
	return i
}

func (mysqlFamily) source(ctx context.Context, t *Topology, n Node) (replSource, error) {
	st, err := t.replicaStatus(ctx, n)
	if err != nil {
		return replSource{}, err
	}
	return replSource{configured: st.configured, host: st.SourceHost, port: st.SourcePort}, nil
}

// delayOf is replica r's apply delay (0 when its status cannot be read).
func delayOf(ctx context.Context, t *Topology, r Node) time.Duration {
	if st, err := t.replicaStatus(ctx, r); err == nil {
		return time.Duration(st.Delay) * time.Second
	}
	return 0
}

func (m mysqlFamily) fence(ctx context.Context, t *Topology, n Node) error {
	return t.exec(ctx, n, m.f.fence)
}

func (m mysqlFamily) setApplier(ctx context.Context, t *Topology, n Node, run bool) error {
	return t.exec(ctx, n, startStop(run)+" "+m.f.replica+" SQL_THREAD")
}

func (m mysqlFamily) setReceiver(ctx context.Context, t *Topology, n Node, run bool) error {
	return t.exec(ctx, n, startStop(run)+" "+m.f.replica+" IO_THREAD")
}

// startStop is the verb of a replication thread statement that makes it
// run (START) or not (STOP).
func startStop(run bool) string {
	if run {
		return "START"
	}
	return "STOP"
}

// wholeSeconds is MySQL's and MariaDB's apply-delay rule.
func wholeSeconds(d time.Duration) error {
	if d < 0 || d%time.Second != 0 {
		return fmt.Errorf("apply delay %v is not a whole, non-negative number of seconds", d)
	}
	return nil
}

func (mysqlFamily) checkApplyDelay(d time.Duration) error { return wholeSeconds(d) }

// setApplyDelay changes the apply delay with the threads the flavor needs
// stopped for it, and starts them again as they were.
func (m mysqlFamily) setApplyDelay(ctx context.Context, t *Topology, n Node, d time.Duration) error {
	st, err := t.replicaStatus(ctx, n)
	if err != nil {
		return err
	}
	stop := "STOP " + m.f.replica + " SQL_THREAD"
	if m.f.delayStopsIO {
		stop = "STOP " + m.f.replica
	}
	stmts := []string{stop, fmt.Sprintf(m.f.setDelay, int(d/time.Second))}
	if m.f.delayStopsIO && st.IORunning != "No" {
		stmts = append(stmts, "START "+m.f.replica+" IO_THREAD")
	}
	if st.SQLRunning == "Yes" {
		stmts = append(stmts, "START "+m.f.replica+" SQL_THREAD")
	}
	return t.exec(ctx, n, stmts...)
}

func (m mysqlFamily) heavy(ctx context.Context, t *Topology, p Node, rows int) (HeavyResult, error) {
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
	if err := conn.QueryRowContext(ctx, "SELECT @@"+m.f.binlogPos).Scan(&before); err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction: %w", err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION %s=%d", m.f.recursion, rows+1)); err != nil {
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
	if out.GTIDs, err = m.f.gained(ctx, conn, before); err != nil {
		return out, fmt.Errorf("compose: heavy transaction GTIDs: %w", err)
	}
	return out, nil
}

// promote fences the old primary and reads its binary log position, or,
// when it does not answer, takes the union of what the survivors applied
// or received; drains the candidate (only if its applier runs without an
// apply delay, for at most 10 s, with the flavor's wait function), makes
// it a writable primary and computes what it lacks.
func (m mysqlFamily) promote(ctx context.Context, t *Topology, f *failoverPlan) error {
	old, cand, res := f.old, f.cand, f.res
	var oldPos string
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := t.exec(fctx, old, m.f.fence)
	if err == nil {
		oldPos, err = t.queryString(fctx, old, "SELECT @@"+m.f.binlogPos)
	}
	cancel()
	res.OldPrimaryReachable = err == nil
	if !res.OldPrimaryReachable {
		f.unreachable(err)
		oldPos = m.f.survivors(ctx, t, append([]Node{cand}, f.others...))
	}
	st, err := t.replicaStatus(ctx, cand)
	if err != nil {
		return err
	}
	if err := t.exec(ctx, cand, "STOP "+m.f.replica+" IO_THREAD"); err != nil {
		return err
	}
	if st.SQLRunning == "Yes" && st.Delay == 0 {
		st2, err := t.replicaStatus(ctx, cand)
		if err == nil && st2.Retrieved != "" {
			_, err = t.queryString(ctx, cand, "SELECT "+m.f.wait+"(?, 10)", st2.Retrieved)
		}
		if err != nil {
			return fmt.Errorf("compose: draining %s: %w", cand.Name, err)
		}
	}
	if err := t.exec(ctx, cand, append([]string{"STOP " + m.f.replica, "RESET " + m.f.replica + " ALL"}, m.f.writable...)...); err != nil {
		return err
	}
	newPos, err := t.queryString(ctx, cand, "SELECT @@"+m.f.currentPos)
	if err != nil {
		return err
	}
	res.LostGTIDs, err = m.f.lost(ctx, t, cand, oldPos, newPos)
	return err
}

// waitReplicated waits until every current replica has what the primary
// has written now (the flavor's wait function), up to timeout.
func (m mysqlFamily) waitReplicated(ctx context.Context, t *Topology, timeout time.Duration) error {
	pos, err := t.queryString(ctx, t.Primary(), "SELECT @@"+m.f.binlogPos)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range t.Replicas() {
		v, err := t.queryString(ctx, r, "SELECT "+m.f.wait+"(?, ?)", pos, timeout.Seconds())
		if err != nil {
			errs = append(errs, err)
		} else if v != "0" {
			errs = append(errs, fmt.Errorf("compose: %s did not reach %s within %v", r.Name, pos, timeout))
		}
	}
	return errors.Join(errs...)
}

func (m mysqlFamily) status(ctx context.Context, t *Topology, ns *NodeStatus) {
	n := ns.Node
	db, err := t.db(n)
	if err == nil {
		var ro int
		err = db.QueryRowContext(ctx, m.f.statusQuery).Scan(&ns.ServerUUID, &ns.GTIDExecuted, &ro)
		ns.ReadOnly = ro == 1
		ns.Position = ns.GTIDExecuted
	}
	var st replicaStatus
	if err == nil {
		st, err = t.replicaStatus(ctx, n)
	}
	if err != nil {
		ns.Health = HealthUnreachable
		ns.LastError = err.Error()
		return
	}
	ns.fromReplicaStatus(st)
	// Seconds_Behind_Source reads 1 for a moment after a replica has
	// applied everything; lagging means there is also something received
	// but not applied.
	if n.Role == RoleReplica && ns.Health == HealthLagging && m.f.applied(ctx, db, st, ns) {
		ns.Health = HealthOK
	}
}
