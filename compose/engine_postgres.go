package compose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/causallab/causallab/gtid"
)

// postgresEngine is PostgreSQL 18: a primary and streaming standbys,
// cloned with pg_basebackup (-R writes primary_conninfo, -C -S creates a
// physical replication slot per standby), apply delay by
// recovery_min_apply_delay (milliseconds, reloaded), failover by
// pg_promote() and the other standbys repointed by primary_conninfo
// (reloaded: no restart) or, when they hold WAL past the new timeline's
// switch point, by pg_rewind. Positions are LSNs on timelines.
//
// The account (Config.User) is the bootstrap superuser initdb creates,
// with password authentication (scram-sha-256) for TCP and replication.
type postgresEngine struct{}

var _ engine = postgresEngine{}

func (postgresEngine) kind() Engine { return EnginePostgres }

const (
	pgBin       = "/usr/lib/postgresql/18/bin"
	pgDockerDir = "/var/lib/postgresql/causallab"
)

var postgresSpec = &serverSpec{
	program:        pgBin + "/postgres",
	versionFile:    ".causallab-postgres-version",
	imageRepo:      "causallab/postgres",
	defaultVersion: "18.6",
	rootfsDir:      "postgres-rootfs",
	user:           "postgres",
	peerPort:       5432,
	configName:     "postgresql.conf",
	config:         pgConf,
	args: func(dir string) []string {
		return []string{pgBin + "/postgres", "-D", dir + "/data", "--config_file=" + dir + "/postgresql.conf"}
	},
	marker:      func(dir string) string { return "--config_file=" + dir + "/" },
	stopSignal:  syscall.SIGINT,
	group:       true,
	logToStderr: true,
	errorLine: func(l string) bool {
		return strings.Contains(l, "FATAL:") || strings.Contains(l, "PANIC:") || strings.Contains(l, "ERROR:")
	},
	initialize: func(cfg *Config, topoDir, dir string) (map[string]string, [][]string) {
		return map[string]string{"pwfile": cfg.Password + "\n"}, [][]string{
			{pgBin + "/initdb", "-D", dir + "/data", "-U", cfg.User, "--pwfile=" + topoDir + "/pwfile",
				"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions"},
			{"/bin/sh", "-c", pgHBAAppend(dir)},
		}
	},
	cloned: true,
	clone: func(cfg *Config, i int, dir, host string, port int) []string {
		return []string{pgBin + "/pg_basebackup", "-h", host, "-p", strconv.Itoa(port), "-U", cfg.User, "-D", dir + "/data",
			"-X", "stream", "-R", "-C", "-S", fmt.Sprintf("replica%d", i), "-c", "fast", "--no-sync"}
	},
	env: func(cfg *Config) []string {
		return []string{"PATH=" + pgBin + ":/usr/bin:/bin", "PGPASSWORD=" + cfg.Password, "LANG=C.UTF-8", "HOME=/var/lib/postgresql"}
	},
	ready:     pgReady,
	dockerDir: pgDockerDir,
	dockerInit: func(cfg *Config) string {
		return "if [ ! -f " + pgDockerDir + "/data/PG_VERSION ]; then printf '%s\\n' \"$CAUSALLAB_PASSWORD\" > /tmp/causallab-pw && " +
			pgBin + "/initdb -D " + pgDockerDir + "/data -U " + cfg.User + " --pwfile=/tmp/causallab-pw --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync --no-instructions >/dev/null && " +
			pgHBAAppend(pgDockerDir) + "; fi"
	},
	dockerClone: func(cfg *Config, i int) string {
		return fmt.Sprintf("if [ ! -f %[1]s/data/PG_VERSION ]; then PGPASSWORD=\"$CAUSALLAB_PASSWORD\" %[2]s/pg_basebackup -h \"$PRIMARY_HOST\" -p \"$PRIMARY_PORT\" -U %[3]s -D %[1]s/data -X stream -R -C -S replica%[4]d -c fast --no-sync; fi",
			pgDockerDir, pgBin, cfg.User, i)
	},
}

func (postgresEngine) server() *serverSpec { return postgresSpec }

// pgHBAAppend lets every address in with a password, for clients and
// replication (initdb's own lines cover loopback only).
func pgHBAAppend(dir string) string {
	return "printf 'host all all 0.0.0.0/0 scram-sha-256\\nhost replication all 0.0.0.0/0 scram-sha-256\\nhost all all ::/0 scram-sha-256\\nhost replication all ::/0 scram-sha-256\\n' >> " + dir + "/data/pg_hba.conf"
}

// pgConf renders postgresql.conf of server serverID (replica index i).
func pgConf(cfg *Config, _, i, port int, dir, bind string) string {
	if bind == "0.0.0.0" {
		bind = "*"
	}
	set := map[string]string{
		"listen_addresses":             "'" + bind + "'",
		"port":                         strconv.Itoa(port),
		"unix_socket_directories":      "'" + dir + "'",
		"external_pid_file":            "'" + dir + "/server.pid'",
		"wal_level":                    "replica",
		"max_wal_senders":              "20",
		"max_replication_slots":        "20",
		"wal_keep_size":                "'256MB'",
		"hot_standby":                  "on",
		"hot_standby_feedback":         "on",
		"wal_log_hints":                "on",
		"full_page_writes":             "on",
		"fsync":                        "off",
		"shared_buffers":               "'32MB'",
		"dynamic_shared_memory_type":   "mmap", // a chroot has no usable /dev/shm
		"max_connections":              "300",
		"wal_receiver_status_interval": "'1s'",
		"wal_retrieve_retry_interval":  "'200ms'",
		"log_destination":              "'stderr'",
		"logging_collector":            "off",
		"log_line_prefix":              "'%m [%p] '",
	}
	// Commits ask the standbys for a status reply once applied, so the
	// primary's pg_stat_replication.replay_lsn (walwatch) follows replay
	// within a round trip, not up to wal_receiver_status_interval later.
	// No synchronous_standby_names: no commit waits for a standby. Cost:
	// one status reply per commit per standby (docs/benchmarks-walwatch.md).
	set["synchronous_commit"] = "remote_apply"
	if i > 0 {
		set["recovery_min_apply_delay"] = fmt.Sprintf("'%dms'", cfg.applyDelay(i).Milliseconds())
	}
	return renderSettings("", " = ", set, cfg.MyCnf)
}

// pgConnConfig is pgx's configuration for addr with an account.
func pgConnConfig(addr, user, password string, timeout time.Duration) (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable", user, password, addr))
	if err != nil {
		return nil, err
	}
	cc.ConnectTimeout = timeout
	return cc, nil
}

// pgReady asks a PostgreSQL server for its data directory.
func pgReady(ctx context.Context, cfg *Config, addr string) (string, error) {
	cc, err := pgConnConfig(addr, cfg.User, cfg.Password, time.Second)
	if err != nil {
		return "", err
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dir string
	err = conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir)
	return dir, err
}

func (postgresEngine) openDB(n Node, user, password string, _ *slog.Logger) (*sql.DB, error) {
	cc, err := pgConnConfig(n.Addr(), user, password, 3*time.Second)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cc), nil
}

func (postgresEngine) adminUser(*Config) string { return "" }

// conninfo is the primary_conninfo by which replica r reaches p.
func pgConninfo(r, p Node) string {
	return fmt.Sprintf("host=%s port=%d user=%s password=%s application_name=%s", p.PeerHost, p.PeerPort, p.User, p.Password, r.Name)
}

// wire waits until every standby (cloned and configured by pg_basebackup)
// streams from the primary.
func (e postgresEngine) wire(ctx context.Context, t *Topology) error {
	p := t.Primary()
	return parallel(t.Replicas(), func(r Node) error { return e.awaitStreaming(ctx, t, r, p, t.cfg.StartTimeout) })
}

// awaitStreaming waits until r's WAL receiver streams from p.
func (postgresEngine) awaitStreaming(ctx context.Context, t *Topology, r, p Node, limit time.Duration) error {
	var last string
	return poll(ctx, limit, 50*time.Millisecond, func() (bool, error) {
		var status sql.NullString
		var port sql.NullInt64
		db, err := t.db(r)
		if err == nil {
			err = db.QueryRowContext(ctx, "SELECT status, sender_port FROM pg_stat_wal_receiver").Scan(&status, &port)
		}
		switch {
		case err == nil && status.String == "streaming" && int(port.Int64) == p.PeerPort:
			return true, nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			last = err.Error()
		default:
			last = fmt.Sprintf("WAL receiver %q from port %d", status.String, port.Int64)
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("compose: %s did not stream from %s within %v (%s)", r.Name, p.Name, limit, last)
	})
}

// parseConninfo reads host and port from a libpq keyword=value string.
func parseConninfo(s string) (host string, port int) {
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, "'")
		switch k {
		case "host":
			host = v
		case "port":
			port, _ = strconv.Atoi(v)
		}
	}
	return host, port
}

func (postgresEngine) source(ctx context.Context, t *Topology, n Node) (replSource, error) {
	var rec bool
	var ci string
	db, err := t.db(n)
	if err == nil {
		err = db.QueryRowContext(ctx, "SELECT pg_is_in_recovery(), current_setting('primary_conninfo')").Scan(&rec, &ci)
	}
	if err != nil {
		return replSource{}, fmt.Errorf("compose: replication source of %s: %w", n.Name, err)
	}
	host, port := parseConninfo(ci)
	return replSource{configured: rec && host != "", host: host, port: port}, nil
}

// pgTimeline is the timeline of n's current WAL: the primary's insert
// position, a standby's WAL receiver (else its last restart point).
func pgTimeline(ctx context.Context, t *Topology, n Node) (uint32, error) {
	var tli int64
	err := t.queryRow(ctx, n, `SELECT CASE WHEN pg_is_in_recovery()
		THEN COALESCE((SELECT received_tli FROM pg_stat_wal_receiver WHERE received_tli > 0), (SELECT timeline_id FROM pg_control_checkpoint()))
		ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END`, &tli)
	return uint32(tli), err
}

// pgHistory reads the timeline history of primary p's current timeline.
func pgHistory(ctx context.Context, t *Topology, p Node) (gtid.PGHistory, error) {
	tli, err := pgTimeline(ctx, t, p)
	if err != nil {
		return gtid.PGHistory{}, err
	}
	if tli == 1 {
		return gtid.PGHistory{Timeline: 1}, nil
	}
	text, err := t.queryString(ctx, p, fmt.Sprintf("SELECT pg_read_file('pg_wal/%08X.history')", tli))
	if err != nil {
		return gtid.PGHistory{}, err
	}
	return gtid.ParsePGHistory(tli, text)
}

// pgLSN reads one LSN-valued expression on n (the zero LSN for NULL).
func pgLSN(ctx context.Context, t *Topology, n Node, expr string) (gtid.PGLSN, error) {
	s, err := t.queryString(ctx, n, "SELECT ("+expr+")::text")
	if err != nil || s == "" {
		return 0, err
	}
	return gtid.ParsePGLSN(s)
}

// standbyEnd is the furthest WAL a standby holds: received or replayed.
func standbyEnd(ctx context.Context, t *Topology, n Node) (gtid.PGLSN, error) {
	return pgLSN(ctx, t, n, "GREATEST(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())")
}

// repoint points standby r at primary p: a slot for it on p, then, when
// r's WAL is all within p's timeline history, primary_conninfo and
// primary_slot_name reloaded; otherwise (r holds WAL past the switch
// point) pg_rewind from p while r is down, which discards that WAL: the
// returned range.
func (e postgresEngine) repoint(ctx context.Context, t *Topology, r, p Node) (string, error) {
	slot := r.Name
	if _, err := t.queryString(ctx, p, "SELECT count(pg_create_physical_replication_slot($1, true)) FROM (SELECT 1) x WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", slot); err != nil {
		return "", err
	}
	hist, err := pgHistory(ctx, t, p)
	if err != nil {
		return "", err
	}
	rTLI, err := pgTimeline(ctx, t, r)
	if err != nil {
		return "", err
	}
	end, err := standbyEnd(ctx, t, r)
	if err != nil {
		return "", err
	}
	ci := pgConninfo(r, p)
	at := gtid.PGPosition{Timeline: hist.Timeline, LSN: ^gtid.PGLSN(0)}
	if rTLI == hist.Timeline || hist.Contains(at, gtid.PGPosition{Timeline: rTLI, LSN: end}) {
		if err := t.exec(ctx, r, "ALTER SYSTEM SET primary_conninfo = '"+ci+"'", "ALTER SYSTEM SET primary_slot_name = '"+slot+"'", "SELECT pg_reload_conf()"); err != nil {
			return "", err
		}
		return "", e.awaitStreaming(ctx, t, r, p, t.cfg.StartTimeout)
	}
	from, _ := hist.SwitchPoint(rTLI)
	lost := gtid.PGRange{Timeline: rTLI, From: from, To: end}
	delay, err := t.queryString(ctx, r, "SELECT current_setting('recovery_min_apply_delay')")
	if err != nil {
		return "", err
	}
	script := fmt.Sprintf(`set -e
%[1]s/pg_rewind --target-pgdata="$CAUSALLAB_DIR/data" --config-file="$CAUSALLAB_DIR/postgresql.conf" --source-server='%[2]s dbname=postgres' --write-recovery-conf --no-sync
printf "primary_slot_name = '%[3]s'\nrecovery_min_apply_delay = '%[4]s'\n" >> "$CAUSALLAB_DIR/data/postgresql.auto.conf"
`, pgBin, ci, slot, delay)
	t.mu.Lock()
	t.stats.RewindOnRepoint++
	t.mu.Unlock()
	t.log.Debug("compose: standby holds WAL past the new timeline's switch point; pg_rewind", "node", r.Name, "primary", p.Name, "lost", lost.String())
	if err := t.be.offline(ctx, r.Name, script); err != nil {
		return "", fmt.Errorf("compose: pg_rewind of %s from %s: %w", r.Name, p.Name, err)
	}
	return lost.String(), e.awaitStreaming(ctx, t, r, p, t.cfg.StartTimeout)
}

// fence makes a former primary refuse writes by default
// (default_transaction_read_only, reloaded). This is softer than MySQL's
// super_read_only: a session may still SET TRANSACTION READ WRITE.
func (postgresEngine) fence(ctx context.Context, t *Topology, n Node) error {
	return reloadAwait(ctx, t, n, "default_transaction_read_only", "on", "ALTER SYSTEM SET default_transaction_read_only = on")
}

func (postgresEngine) restarted(context.Context, *Topology, Node) error { return nil }

func (postgresEngine) setApplier(ctx context.Context, t *Topology, n Node, run bool) error {
	if run {
		return t.exec(ctx, n, "SELECT pg_wal_replay_resume()")
	}
	return t.exec(ctx, n, "SELECT pg_wal_replay_pause()")
}

// setReceiver clears primary_conninfo (the WAL receiver stops) or points
// it at the current primary again. pg_reload_conf only signals the
// server; stopping returns once no WAL receiver runs, so that nothing
// written after the call reaches n (under load the receiver outlived the
// reload by more than a write's round trip).
func (postgresEngine) setReceiver(ctx context.Context, t *Topology, n Node, run bool) error {
	ci := ""
	if run {
		ci = pgConninfo(n, t.Primary())
	}
	if err := reloadAwait(ctx, t, n, "primary_conninfo", ci, "ALTER SYSTEM SET primary_conninfo = '"+ci+"'"); err != nil || run {
		return err
	}
	return awaitNoReceiver(ctx, t, n, 30*time.Second)
}

// awaitNoReceiver waits until standby n runs no WAL receiver.
func awaitNoReceiver(ctx context.Context, t *Topology, n Node, limit time.Duration) error {
	var pid sql.NullInt64
	return poll(ctx, limit, 20*time.Millisecond, func() (bool, error) {
		err := t.queryRow(ctx, n, "SELECT pid FROM pg_stat_wal_receiver", &pid)
		switch {
		case errors.Is(err, sql.ErrNoRows) || (err == nil && !pid.Valid):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("compose: %s: waiting for its WAL receiver to stop: %w", n.Name, err)
		}
		return false, nil
	}, func() error {
		return fmt.Errorf("compose: %s: WAL receiver (pid %d) still running %v after primary_conninfo was cleared", n.Name, pid.Int64, limit)
	})
}

func (postgresEngine) checkApplyDelay(d time.Duration) error {
	if d < 0 || d%time.Millisecond != 0 {
		return fmt.Errorf("apply delay %v is not a whole, non-negative number of milliseconds", d)
	}
	return nil
}

func (postgresEngine) setApplyDelay(ctx context.Context, t *Topology, n Node, d time.Duration) error {
	return reloadAwait(ctx, t, n, "recovery_min_apply_delay", strconv.FormatInt(d.Milliseconds(), 10),
		fmt.Sprintf("ALTER SYSTEM SET recovery_min_apply_delay = '%dms'", d.Milliseconds()))
}

// reloadAwait runs stmts (ALTER SYSTEM ...) and pg_reload_conf on n, then
// waits until n's sessions see setting name at want (pg_settings' text, in
// the setting's base unit). pg_reload_conf only signals the server: a
// status read or fault right after it could still see the old value.
func reloadAwait(ctx context.Context, t *Topology, n Node, name, want string, stmts ...string) error {
	if err := t.exec(ctx, n, append(stmts, "SELECT pg_reload_conf()")...); err != nil {
		return err
	}
	const limit = 30 * time.Second
	var got string
	return poll(ctx, limit, 20*time.Millisecond, func() (bool, error) {
		var err error
		got, err = t.queryString(ctx, n, "SELECT setting FROM pg_settings WHERE name = $1", name)
		return got == want, err
	}, func() error {
		return fmt.Errorf("compose: %s: %s is %q %v after the reload, want %q", n.Name, name, got, limit, want)
	})
}

func (postgresEngine) heavy(ctx context.Context, t *Topology, p Node, rows int) (HeavyResult, error) {
	if err := t.exec(ctx, p,
		"CREATE SCHEMA IF NOT EXISTS causallab_fault",
		"CREATE TABLE IF NOT EXISTS "+HeavyTable+" (id BIGSERIAL PRIMARY KEY, pad CHAR(100) NOT NULL)"); err != nil {
		return HeavyResult{}, err
	}
	tli, err := pgTimeline(ctx, t, p)
	if err != nil {
		return HeavyResult{}, err
	}
	before, err := pgLSN(ctx, t, p, "pg_current_wal_lsn()")
	if err != nil {
		return HeavyResult{}, err
	}
	db, err := t.db(p)
	if err != nil {
		return HeavyResult{}, err
	}
	began := time.Now()
	res, err := db.ExecContext(ctx, "INSERT INTO "+HeavyTable+" (pad) SELECT repeat('x', 100) FROM generate_series(1, $1)", rows)
	if err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction on %s: %w", p.Name, err)
	}
	out := HeavyResult{Elapsed: time.Since(began)}
	out.Rows, _ = res.RowsAffected()
	after, err := pgLSN(ctx, t, p, "pg_current_wal_lsn()")
	if err != nil {
		return out, err
	}
	out.GTIDs = gtid.PGRange{Timeline: tli, From: before, To: after}.String()
	return out, nil
}

// promote fences the old primary and reads its WAL end (when it does not
// answer: the furthest WAL any survivor received, a lower bound), drains
// the candidate (only when its replay is neither paused nor delayed, for
// at most 10 s), promotes it with pg_promote(), and reports the old
// timeline's WAL past the new timeline's switch point as lost.
func (e postgresEngine) promote(ctx context.Context, t *Topology, f *failoverPlan) error {
	old, cand, res := f.old, f.cand, f.res
	var oldEnd gtid.PGLSN
	var oldTLI uint32
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := e.fence(fctx, t, old)
	if err == nil {
		oldTLI, err = pgTimeline(fctx, t, old)
	}
	if err == nil {
		oldEnd, err = pgLSN(fctx, t, old, "pg_current_wal_lsn()")
	}
	cancel()
	res.OldPrimaryReachable = err == nil
	if !res.OldPrimaryReachable {
		f.unreachable(err)
		for _, r := range append([]Node{cand}, f.others...) {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			end, err := standbyEnd(sctx, t, r)
			if err == nil && end > oldEnd {
				oldEnd = end
				oldTLI, _ = pgTimeline(sctx, t, r)
			}
			cancel()
		}
	}
	var paused string
	var delayMS int64
	if err := t.queryRow(ctx, cand, "SELECT pg_get_wal_replay_pause_state(), (SELECT setting::bigint FROM pg_settings WHERE name = 'recovery_min_apply_delay')", &paused, &delayMS); err != nil {
		return err
	}
	if paused == "not paused" && delayMS == 0 {
		if err := e.drain(ctx, t, cand, 10*time.Second); err != nil {
			return fmt.Errorf("compose: draining %s: %w", cand.Name, err)
		}
	}
	var ok bool
	if err := t.queryRow(ctx, cand, "SELECT pg_promote(true, 30)", &ok); err != nil || !ok {
		return fmt.Errorf("compose: pg_promote() on %s: %v (promoted %v)", cand.Name, err, ok)
	}
	if err := t.exec(ctx, cand, "ALTER SYSTEM RESET primary_conninfo", "ALTER SYSTEM RESET primary_slot_name",
		"ALTER SYSTEM RESET recovery_min_apply_delay", "ALTER SYSTEM RESET default_transaction_read_only", "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	hist, err := pgHistory(ctx, t, cand)
	if err != nil {
		return err
	}
	res.NewTimeline = hist.Timeline
	if sw, ok := hist.SwitchPoint(oldTLI); ok && sw != ^gtid.PGLSN(0) {
		res.SwitchPoint = sw.String()
		if oldEnd > sw {
			r := gtid.PGRange{Timeline: oldTLI, From: sw, To: oldEnd}
			res.LostWAL, res.LostWALBytes = r.String(), r.Bytes()
		}
	}
	return nil
}

// drain waits until standby n has replayed what it received.
func (postgresEngine) drain(ctx context.Context, t *Topology, n Node, limit time.Duration) error {
	return poll(ctx, limit, 10*time.Millisecond, func() (bool, error) {
		var done bool
		err := t.queryRow(ctx, n, "SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn() OR pg_last_wal_receive_lsn() IS NULL", &done)
		return done, err
	}, func() error { return fmt.Errorf("not replayed within %v", limit) })
}

// waitReplicated polls every standby's pg_last_wal_replay_lsn() until it
// reaches the primary's pg_current_wal_lsn() as it is now (PostgreSQL 18
// has no server-side wait for an LSN).
func (postgresEngine) waitReplicated(ctx context.Context, t *Topology, timeout time.Duration) error {
	target, err := pgLSN(ctx, t, t.Primary(), "pg_current_wal_lsn()")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	var errs []error
	for _, r := range t.Replicas() {
		var at gtid.PGLSN
		err := poll(ctx, time.Until(deadline), 10*time.Millisecond, func() (bool, error) {
			var err error
			at, err = pgLSN(ctx, t, r, "pg_last_wal_replay_lsn()")
			return at >= target, err
		}, func() error {
			return fmt.Errorf("compose: %s did not reach %s within %v (at %s)", r.Name, target, timeout, at)
		})
		if err != nil && err == ctx.Err() {
			return err
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (postgresEngine) status(ctx context.Context, t *Topology, ns *NodeStatus) {
	n := ns.Node
	var (
		rec           bool
		ro, ci        string
		pos, recv     sql.NullString
		behind        sql.NullFloat64
		lag, delayMS  sql.NullInt64
		paused        sql.NullString
		wrStatus      sql.NullString
		wrHost        sql.NullString
		wrPort, wrTLI sql.NullInt64
	)
	err := t.queryRow(ctx, n, `SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only'), current_setting('primary_conninfo'),
		CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text,
		pg_last_wal_receive_lsn()::text,
		CASE WHEN pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn() THEN extract(epoch FROM now() - pg_last_xact_replay_timestamp()) ELSE 0 END,
		pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint,
		(SELECT setting::bigint FROM pg_settings WHERE name = 'recovery_min_apply_delay'),
		CASE WHEN pg_is_in_recovery() THEN pg_get_wal_replay_pause_state() END,
		(SELECT status FROM pg_stat_wal_receiver), (SELECT sender_host FROM pg_stat_wal_receiver),
		(SELECT sender_port FROM pg_stat_wal_receiver), (SELECT received_tli FROM pg_stat_wal_receiver)`,
		&rec, &ro, &ci, &pos, &recv, &behind, &lag, &delayMS, &paused, &wrStatus, &wrHost, &wrPort, &wrTLI)
	var tli uint32
	if err == nil {
		tli, err = pgTimeline(ctx, t, n)
	}
	if err != nil {
		ns.Health = HealthUnreachable
		ns.LastError = err.Error()
		return
	}
	ns.Health = HealthOK
	ns.ReadOnly = rec || ro == "on"
	ns.Position = fmt.Sprintf("%d:%s", tli, pos.String)
	if rec {
		host, port := parseConninfo(ci)
		ns.RetrievedGTIDs = recv.String
		ns.SourceDelayMS = delayMS.Int64
		ns.SourceDelay = int(delayMS.Int64 / 1000)
		ns.LagBytes = lag.Int64
		ns.SecondsBehind = int(behind.Float64)
		switch {
		case ci == "":
			ns.IORunning = "No"
		case wrStatus.String == "streaming":
			ns.IORunning = "Yes"
		default:
			ns.IORunning = "Connecting"
		}
		ns.SQLRunning = "Yes"
		if paused.String != "not paused" {
			ns.SQLRunning = "No"
		}
		if host != "" {
			ns.Source = fmt.Sprintf("%s:%d", host, port)
		}
	}
	if n.Role != RoleReplica {
		return
	}
	switch {
	case !rec:
		ns.Health = HealthBroken
		ns.LastError = "not in recovery: this server is not a standby"
	case ns.IORunning != "Yes" || ns.SQLRunning != "Yes":
		ns.Health = HealthStopped
	case ns.SecondsBehind >= LagThreshold && ns.LagBytes > 0:
		ns.Health = HealthLagging
	}
}
