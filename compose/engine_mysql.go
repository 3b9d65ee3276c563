package compose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// mysqlEngine is MySQL 9.7: GTID sets, SOURCE_AUTO_POSITION replicas,
// super_read_only fencing, GTID_SUBTRACT for what a failover lost.
type mysqlEngine struct{}

var _ engine = mysqlEngine{}

func (mysqlEngine) kind() Engine { return EngineMySQL }

var mysqlSpec = &serverSpec{
	program:        "/usr/sbin/mysqld",
	versionFile:    ".causallab-mysql-version",
	imageRepo:      "causallab/mysql",
	defaultVersion: "9.7.4",
	rootfsDir:      "mysql-rootfs",
	peerPort:       3306,
	configName:     "my.cnf",
	config: func(cfg *Config, serverID, _, port int, dir, bind string) string {
		return cfg.myCnf(serverID, port, dir, bind)
	},
	args: func(dir string) []string {
		return []string{"mysqld", "--defaults-file=" + dir + "/my.cnf", "--user=root"}
	},
	marker:     func(dir string) string { return "--defaults-file=" + dir + "/" },
	stopSignal: syscall.SIGTERM,
	errorLine:  bracketError,
	initialize: func(cfg *Config, topoDir, dir string) (map[string]string, [][]string) {
		return map[string]string{"init.sql": initSQL(cfg)},
			[][]string{{"mysqld", "--defaults-file=" + dir + "/my.cnf", "--user=root", "--initialize-insecure", "--init-file=" + topoDir + "/init.sql"}}
	},
	skip:      []string{"auto.cnf"},
	ready:     mysqlReady,
	dockerDir: "/var/lib/causallab",
	dockerInit: func(*Config) string {
		cnf := "--defaults-file=/var/lib/causallab/my.cnf --user=root"
		return "if [ ! -d /var/lib/causallab/data/mysql ]; then mysqld " + cnf + " --initialize-insecure --init-file=/tmp/causallab-init.sql; fi"
	},
}

func (mysqlEngine) server() *serverSpec { return mysqlSpec }

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

func (mysqlEngine) openDB(n Node, user, password string, log *slog.Logger) (*sql.DB, error) {
	return mysqlPool(n.Addr(), user, password, 3*time.Second, log)
}

func (mysqlEngine) adminUser(*Config) string { return "" }

// wire points every replica at the primary and waits for its IO thread.
func (e mysqlEngine) wire(ctx context.Context, t *Topology) error {
	p := t.Primary()
	reps := t.Replicas()
	errs := make([]error, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Go(func() {
			errs[i] = e.pointAt(ctx, t, r, p, t.cfg.applyDelay(replicaIndex(r.Name)))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pointAt makes r replicate from src with auto-position and waits until
// its IO thread runs.
func (mysqlEngine) pointAt(ctx context.Context, t *Topology, r, src Node, delay time.Duration) error {
	change := fmt.Sprintf("CHANGE REPLICATION SOURCE TO SOURCE_HOST='%s', SOURCE_PORT=%d, SOURCE_USER='%s', SOURCE_PASSWORD='%s', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1, SOURCE_CONNECT_RETRY=1, SOURCE_RETRY_COUNT=86400, SOURCE_DELAY=%d",
		src.PeerHost, src.PeerPort, src.User, src.Password, int(delay/time.Second))
	if err := t.exec(ctx, r, "STOP REPLICA", "RESET REPLICA ALL", change, "START REPLICA", "SET PERSIST super_read_only=ON"); err != nil {
		return err
	}
	return t.awaitIOThread(ctx, r, src)
}

// awaitIOThread waits until replica r's IO thread runs (MySQL, MariaDB).
func (t *Topology) awaitIOThread(ctx context.Context, r, src Node) error {
	deadline := time.Now().Add(t.cfg.StartTimeout)
	for {
		st, err := t.replicaStatus(ctx, r)
		if err != nil {
			return err
		}
		if st.IORunning == "Yes" {
			return nil
		}
		if st.IORunning == "No" && st.LastIOError != "" {
			return fmt.Errorf("compose: %s cannot replicate from %s: %s", r.Name, src.Name, st.LastIOError)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("compose: %s did not connect to %s within %v (IO thread %s, last error %q)", r.Name, src.Name, t.cfg.StartTimeout, st.IORunning, st.LastIOError)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// replicaIndex is i for "replica<i>", 0 otherwise.
func replicaIndex(name string) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(name, "replica"))
	return i
}

func (mysqlEngine) source(ctx context.Context, t *Topology, n Node) (replSource, error) {
	st, err := t.replicaStatus(ctx, n)
	if err != nil {
		return replSource{}, err
	}
	return replSource{configured: st.configured, host: st.SourceHost, port: st.SourcePort}, nil
}

// repoint points replica r at primary p with auto-position, keeping its
// SOURCE_DELAY, and returns the GTIDs r has executed that p lacks.
func (e mysqlEngine) repoint(ctx context.Context, t *Topology, r, p Node) (string, error) {
	delay := time.Duration(0)
	if st, err := t.replicaStatus(ctx, r); err == nil {
		delay = time.Duration(st.Delay) * time.Second
	}
	if err := e.pointAt(ctx, t, r, p, delay); err != nil {
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

func (mysqlEngine) fence(ctx context.Context, t *Topology, n Node) error {
	return t.exec(ctx, n, "SET PERSIST super_read_only=ON")
}

func (mysqlEngine) restarted(context.Context, *Topology, Node) error { return nil }

func (mysqlEngine) setApplier(ctx context.Context, t *Topology, n Node, run bool) error {
	if run {
		return t.exec(ctx, n, "START REPLICA SQL_THREAD")
	}
	return t.exec(ctx, n, "STOP REPLICA SQL_THREAD")
}

func (mysqlEngine) setReceiver(ctx context.Context, t *Topology, n Node, run bool) error {
	if run {
		return t.exec(ctx, n, "START REPLICA IO_THREAD")
	}
	return t.exec(ctx, n, "STOP REPLICA IO_THREAD")
}

// wholeSeconds is MySQL's and MariaDB's apply-delay rule.
func wholeSeconds(d time.Duration) error {
	if d < 0 || d%time.Second != 0 {
		return fmt.Errorf("apply delay %v is not a whole, non-negative number of seconds", d)
	}
	return nil
}

func (mysqlEngine) checkApplyDelay(d time.Duration) error { return wholeSeconds(d) }

func (mysqlEngine) setApplyDelay(ctx context.Context, t *Topology, n Node, d time.Duration) error {
	st, err := t.replicaStatus(ctx, n)
	if err != nil {
		return err
	}
	stmts := []string{"STOP REPLICA SQL_THREAD", fmt.Sprintf("CHANGE REPLICATION SOURCE TO SOURCE_DELAY=%d", int(d/time.Second))}
	if st.SQLRunning == "Yes" {
		stmts = append(stmts, "START REPLICA SQL_THREAD")
	}
	return t.exec(ctx, n, stmts...)
}

func (mysqlEngine) heavy(ctx context.Context, t *Topology, p Node, rows int) (HeavyResult, error) {
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
	if err := conn.QueryRowContext(ctx, "SELECT @@gtid_executed").Scan(&before); err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction: %w", err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION cte_max_recursion_depth=%d", rows+1)); err != nil {
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
	if err := conn.QueryRowContext(ctx, "SELECT GTID_SUBTRACT(@@gtid_executed, ?)", before).Scan(&out.GTIDs); err != nil {
		return out, fmt.Errorf("compose: heavy transaction GTIDs: %w", err)
	}
	return out, nil
}

// promote fences the old primary (super_read_only) and reads its
// gtid_executed, or, when it does not answer, takes the union of what the
// survivors executed or received; drains the candidate's relay log (only
// if its applier runs without SOURCE_DELAY, for at most 10 s), makes it a
// writable primary and computes the lost GTIDs with GTID_SUBTRACT.
func (mysqlEngine) promote(ctx context.Context, t *Topology, f *failoverPlan) error {
	old, cand, res := f.old, f.cand, f.res
	var oldExec string
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := t.exec(fctx, old, "SET PERSIST super_read_only=ON")
	if err == nil {
		oldExec, err = t.queryString(fctx, old, "SELECT @@gtid_executed")
	}
	cancel()
	res.OldPrimaryReachable = err == nil
	if !res.OldPrimaryReachable {
		f.unreachable(err)
		var parts []string
		for _, r := range append([]Node{cand}, f.others...) {
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
		oldExec = strings.Join(parts, ",")
	}

	st, err := t.replicaStatus(ctx, cand)
	if err != nil {
		return err
	}
	if err := t.exec(ctx, cand, "STOP REPLICA IO_THREAD"); err != nil {
		return err
	}
	if st.SQLRunning == "Yes" && st.Delay == 0 {
		st2, err := t.replicaStatus(ctx, cand)
		if err == nil && st2.Retrieved != "" {
			_, err = t.queryString(ctx, cand, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, 10)", st2.Retrieved)
		}
		if err != nil {
			return fmt.Errorf("compose: draining %s: %w", cand.Name, err)
		}
	}
	if err := t.exec(ctx, cand, "STOP REPLICA", "RESET REPLICA ALL", "SET PERSIST super_read_only=OFF", "SET PERSIST read_only=OFF"); err != nil {
		return err
	}
	newExec, err := t.queryString(ctx, cand, "SELECT @@gtid_executed")
	if err != nil {
		return err
	}
	res.LostGTIDs, err = t.queryString(ctx, cand, "SELECT GTID_SUBTRACT(?, ?)", oldExec, newExec)
	if err != nil {
		return err
	}
	res.LostGTIDs = strings.ReplaceAll(res.LostGTIDs, "\n", "")
	return nil
}

// waitReplicated waits until every current replica has executed what the
// primary has executed now (WAIT_FOR_EXECUTED_GTID_SET), up to timeout.
func (mysqlEngine) waitReplicated(ctx context.Context, t *Topology, timeout time.Duration) error {
	p := t.Primary()
	set, err := t.queryString(ctx, p, "SELECT @@gtid_executed")
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range t.Replicas() {
		v, err := t.queryString(ctx, r, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)", set, timeout.Seconds())
		if err != nil {
			errs = append(errs, err)
		} else if v != "0" {
			errs = append(errs, fmt.Errorf("compose: %s did not reach %s within %v", r.Name, set, timeout))
		}
	}
	return errors.Join(errs...)
}

func (mysqlEngine) status(ctx context.Context, t *Topology, ns *NodeStatus) {
	n := ns.Node
	db, err := t.db(n)
	if err == nil {
		var ro int
		err = db.QueryRowContext(ctx, "SELECT @@server_uuid, @@gtid_executed, @@super_read_only").Scan(&ns.ServerUUID, &ns.GTIDExecuted, &ro)
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
	if n.Role != RoleReplica {
		return
	}
	if ns.Health == HealthLagging {
		// Seconds_Behind_Source reads 1 for a moment after a replica has
		// applied everything; lagging means there is also something
		// received but not applied.
		var applied int
		err := db.QueryRowContext(ctx, "SELECT GTID_SUBSET(?, ?)", st.Retrieved, st.Executed).Scan(&applied)
		if err == nil && applied == 1 {
			ns.Health = HealthOK
		}
	}
}
