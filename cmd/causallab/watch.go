package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/causallab/causallab/binlogwatch"
)

// watchFlags are the flags of `causallab watch`.
type watchFlags struct {
	replicas  []string
	primary   string
	format    string
	interval  time.Duration
	heartbeat time.Duration
	proxysql  []string
	// proxysqlBatch > 0: I3/I4 range lines at most once per period (the
	// reader's -t; ProxySQL 3.0.8+). 0: an I1/I2 line per transaction.
	proxysqlBatch time.Duration
	// proxysqlOnShrink: fence (ProxySQL keeps what it learned: 3.x) or
	// rebootstrap (ProxySQL forgets on disconnect: 2.x).
	proxysqlOnShrink string
	metrics          string
	noAhead          bool
}

func newWatchCmd() *cobra.Command {
	var f watchFlags
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Stream each replica's binlog: its live GTID set and health",
		Long: `watch keeps, for every replica, a lower bound of its executed GTID set, read
from the replica's own binary log and confirmed against @@gtid_executed, and
shows it live: a refreshing table on a terminal, or one JSON line per change
with --format json. With --primary it also shows how many transactions each
replica lacks. --proxysql serves a replica's set with ProxySQL's binlog-reader
protocol (what proxysql_mysqlbinlog speaks): ST= on connect, then an I1/I2 line
per transaction, or with --proxysql-batch I3/I4 ranges (ProxySQL 3.0.8 or
later). When the replica loses GTIDs ProxySQL was sent (reset, restore),
ProxySQL 3.x keeps them: --proxysql-on-shrink fence (the default) then serves no
client until the replica has them again; rebootstrap (for 2.x, which forgets on
disconnect) reconnects clients to a fresh ST=. See docs/binlogwatch.md.`,
		Example: `  causallab watch --replica r1=causallab:causallab@tcp(127.0.0.1:3307)/ \
    --format json
  causallab watch --primary 'u:p@tcp(db0:3306)/' \
    --replica 'r1=u:p@tcp(db1:3306)/' --proxysql r1=:6020`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseZero(cmd, []defaultIfZero{{name: "heartbeat"}}); err != nil {
				return err
			}
			return runWatch(cmd.Context(), cmd.OutOrStdout(), &f)
		},
	}
	cmd.Flags().StringArrayVar(&f.replicas, "replica", nil, "replica to watch, name=DSN (go-sql-driver DSN, e.g. u:p@tcp(host:port)/); repeatable")
	cmd.Flags().StringVar(&f.primary, "primary", "", "primary DSN, to report transactions behind (optional)")
	cmd.Flags().StringVar(&f.format, "format", "table", "output: table (refreshing on a terminal) or json (one line per change)")
	cmd.Flags().DurationVar(&f.interval, "interval", 500*time.Millisecond, "table refresh interval")
	cmd.Flags().DurationVar(&f.heartbeat, "heartbeat", time.Second, "binlog heartbeat period (read timeout is 3x)")
	cmd.Flags().StringArrayVar(&f.proxysql, "proxysql", nil, "serve a replica's set with the ProxySQL binlog-reader protocol, name=listen-address; repeatable")
	cmd.Flags().DurationVar(&f.proxysqlBatch, "proxysql-batch", 0, "send --proxysql updates as I3/I4 ranges at most once per period, e.g. 100ms (ProxySQL 3.0.8+); 0: one I1/I2 line per transaction")
	cmd.Flags().StringVar(&f.proxysqlOnShrink, "proxysql-on-shrink", "fence", "when the replica loses GTIDs ProxySQL was sent: fence (serve no client until it has them again; ProxySQL 3.x) or rebootstrap (reconnect clients to a fresh ST=; only for ProxySQL 2.x, which forgets on disconnect)")
	cmd.Flags().StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics on this address (/metrics)")
	cmd.Flags().BoolVar(&f.noAhead, "no-ahead", false, "do not keep a wait parked on each replica's predicted next GTID (saves one connection per replica; publishes one round trip later)")
	_ = cmd.MarkFlagRequired("replica")
	return cmd
}

func watcherConfig(name, dsn string, hb time.Duration, noAhead bool, met *binlogwatch.Metrics) (binlogwatch.Config, error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return binlogwatch.Config{}, fmt.Errorf("DSN of %q: %w", name, err)
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return binlogwatch.Config{}, fmt.Errorf("DSN of %q: address %q: %w", name, c.Addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return binlogwatch.Config{}, fmt.Errorf("DSN of %q: port %q: %w", name, port, err)
	}
	return binlogwatch.Config{Name: name, Host: host, Port: uint16(p), User: c.User, Password: c.Passwd,
		HeartbeatPeriod: hb, DisableAhead: noAhead, Metrics: met, Logger: slog.Default()}, nil
}

func runWatch(ctx context.Context, out io.Writer, f *watchFlags) error {
	if f.format != "table" && f.format != "json" {
		return withExitCode(2, fmt.Errorf("--format %q: want table or json", f.format))
	}
	if f.interval <= 0 {
		return withExitCode(2, fmt.Errorf("--interval %v must be positive", f.interval))
	}
	reg := prometheus.NewRegistry()
	met, err := binlogwatch.NewMetrics(reg)
	if err != nil {
		return err
	}
	var replicas []*binlogwatch.Watcher
	for _, spec := range f.replicas {
		name, dsn, ok := strings.Cut(spec, "=")
		if !ok || name == "" {
			return withExitCode(2, fmt.Errorf("--replica %q: want name=DSN", spec))
		}
		cfg, err := watcherConfig(name, dsn, f.heartbeat, f.noAhead, met)
		if err != nil {
			return withExitCode(2, err)
		}
		w, err := binlogwatch.New(cfg)
		if err != nil {
			return withExitCode(2, err)
		}
		replicas = append(replicas, w)
	}
	var primary *binlogwatch.Watcher
	if f.primary != "" {
		cfg, err := watcherConfig("primary", f.primary, f.heartbeat, f.noAhead, met)
		if err != nil {
			return withExitCode(2, err)
		}
		if primary, err = binlogwatch.New(cfg); err != nil {
			return withExitCode(2, err)
		}
	}
	group, err := binlogwatch.NewGroup(primary, replicas...)
	if err != nil {
		return withExitCode(2, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	onShrink, err := binlogwatch.ParseShrinkPolicy(f.proxysqlOnShrink)
	if err != nil {
		return withExitCode(2, fmt.Errorf("--proxysql-on-shrink: %w", err))
	}
	pcfg := binlogwatch.ProxySQLConfig{Batch: f.proxysqlBatch, OnShrink: onShrink, Logger: slog.Default()}
	errc := make(chan error, 1+len(f.proxysql))
	var servers []*binlogwatch.ProxySQLServer
	for _, spec := range f.proxysql {
		name, _, ok := strings.Cut(spec, "=")
		w := group.Watcher(name)
		if !ok || w == nil {
			return withExitCode(2, fmt.Errorf("--proxysql %q: want name=address with a --replica name", spec))
		}
		srv, err := binlogwatch.NewProxySQLServer(w, pcfg)
		if err != nil {
			return withExitCode(2, fmt.Errorf("--proxysql %q: %w", spec, err))
		}
		servers = append(servers, srv)
	}
	for i, spec := range f.proxysql {
		_, addr, _ := strings.Cut(spec, "=")
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := servers[i]
		go func() { errc <- srv.Serve(ctx, ln) }()
	}
	if f.metrics != "" {
		ln, err := net.Listen("tcp", f.metrics)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		context.AfterFunc(ctx, func() { hs.Close() })
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = group.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if f.format == "json" {
		sources := group.Replicas()
		if primary != nil {
			sources = append([]*binlogwatch.Watcher{primary}, sources...)
		}
		return watchJSON(ctx, out, group, sources, errc)
	}
	return watchTable(ctx, out, group, f.interval, errc)
}

// watchLine is one JSON line of `watch --format json`. A time not known
// yet (before the watcher's first publish, or its first binlog event) is
// left out, never written as Go's zero time.
type watchLine struct {
	// Time is when the watcher published this status.
	Time       *time.Time `json:"time,omitempty"`
	Replica    string     `json:"replica"`
	ServerUUID string     `json:"server_uuid"`
	Executed   string     `json:"executed"`
	Health     string     `json:"health"`
	Reason     string     `json:"reason,omitempty"`
	// LastEvent is when the replica's binlog last sent an event.
	LastEvent *time.Time `json:"last_event,omitempty"`
	Seq       uint64     `json:"seq"`
	Behind    int64      `json:"behind"`
}

func lineOf(st binlogwatch.ReplicaStatus) watchLine {
	known := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return watchLine{Time: known(st.Published), Replica: st.Replica, ServerUUID: st.ServerUUID, Executed: st.Executed.CompactString(),
		Health: st.Health.String(), Reason: st.Reason, LastEvent: known(st.LastEvent), Seq: st.Seq, Behind: st.Behind}
}

// lineKey is what makes a JSON line news: a heartbeat moves last_event
// and seq but is not a change.
type lineKey struct {
	uuid, executed, health, reason string
	behind                         int64
}

func keyOf(l watchLine) lineKey {
	return lineKey{uuid: l.ServerUUID, executed: l.Executed, health: l.Health, reason: l.Reason, behind: l.Behind}
}

// watchJSON prints one JSON line per replica whenever its server_uuid,
// executed set, health, reason or distance to the primary changes. sources
// are the watchers whose publishes can change a line (the replicas and the
// primary).
func watchJSON(ctx context.Context, out io.Writer, g *binlogwatch.Group, sources []*binlogwatch.Watcher, errc <-chan error) error {
	enc := json.NewEncoder(out)
	kick := make(chan struct{}, 1)
	for _, w := range sources {
		s := w.Snapshot() // taken before the first emit: no publish is missed
		go func() {
			for {
				select {
				case <-s.Changed():
				case <-ctx.Done():
					return
				}
				s = w.Snapshot()
				select {
				case kick <- struct{}{}:
				default: // a signal is pending: it covers this publish too
				}
			}
		}()
	}
	last := map[string]lineKey{}
	emit := func() error {
		for _, st := range g.Status() {
			l := lineOf(st)
			k := keyOf(l)
			if prev, ok := last[l.Replica]; ok && prev == k {
				continue
			}
			last[l.Replica] = k
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
		return nil
	}
	if err := emit(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-kick:
			if err := emit(); err != nil {
				return err
			}
		}
	}
}

func watchTable(ctx context.Context, out io.Writer, g *binlogwatch.Group, every time.Duration, errc <-chan error) error {
	tty := false
	if f, ok := out.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if tty {
			fmt.Fprint(out, "\033[H\033[2J")
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REPLICA\tHEALTH\tBEHIND\tLAST EVENT\tEXECUTED\tREASON")
		for _, st := range g.Status() {
			behind := "-"
			if st.Behind >= 0 {
				behind = strconv.FormatInt(st.Behind, 10)
			}
			age := "-"
			if !st.LastEvent.IsZero() {
				age = time.Since(st.LastEvent).Round(time.Millisecond).String() + " ago"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", st.Replica, st.Health, behind, age, st.Executed.CompactString(), st.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if !tty {
			fmt.Fprintln(out)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-t.C:
		}
	}
}
