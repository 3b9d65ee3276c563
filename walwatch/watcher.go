package walwatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/causallab/causallab/gtid"
)

// Snapshot is one published state of a watcher: immutable.
type Snapshot struct {
	// Primary is the address of the watched primary.
	Primary string
	// PrimaryUp is false when the last tick got no answer.
	PrimaryUp bool
	// Timeline is the primary's timeline at the last answer (0: none yet).
	Timeline uint32
	// ApplyFeedback: the primary's default synchronous_commit is
	// remote_apply, so its commits ask standbys for a reply once applied
	// (see the package doc's Freshness).
	ApplyFeedback bool
	// At is the time of the last tick that got an answer (zero: none).
	At time.Time
	// Seq counts publishes.
	Seq uint64
	// Standbys by Name.
	Standbys map[string]StandbyState

	changed chan struct{} // closed when a snapshot with new positions or health replaces this one
}

// Changed is closed once a later snapshot changes a position or a
// health.
func (s *Snapshot) Changed() <-chan struct{} { return s.changed }

// Watcher publishes the replay positions of a primary's standbys, read
// from pg_stat_replication every Config.Interval. Run drives it; every
// other method is safe for concurrent use and never blocks on I/O.
type Watcher struct {
	cfg      Config
	m        *metrics
	cur      atomic.Pointer[Snapshot]
	target   atomic.Pointer[string] // the primary Run should watch
	retarget chan struct{}          // one pending kick for Run (capacity 1)
}

// New validates cfg. Call Run to start watching.
func New(cfg Config) (*Watcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Standbys = append([]Standby(nil), cfg.Standbys...)
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("walwatch: metrics: %w", err)
	}
	w := &Watcher{cfg: cfg, m: m, retarget: make(chan struct{}, 1)}
	w.target.Store(&cfg.Primary)
	w.cur.Store(&Snapshot{Primary: cfg.Primary, Standbys: newTracker(cfg.Standbys, cfg.StaleAfter).snapshotStates(), changed: make(chan struct{})})
	return w, nil
}

// Name is the configured name.
func (w *Watcher) Name() string { return w.cfg.Name }

// Standbys are the configured standbys.
func (w *Watcher) Standbys() []Standby { return append([]Standby(nil), w.cfg.Standbys...) }

// Snapshot returns the current published state; it never blocks.
func (w *Watcher) Snapshot() *Snapshot { return w.cur.Load() }

// Stats returns the counters.
func (w *Watcher) Stats() Stats {
	return Stats{Ticks: w.m.nTicks.Load(), TickErrors: w.m.nTickErrors.Load(), Publishes: w.m.nPublishes.Load(),
		Reconnects: w.m.nReconnects.Load(), Regressions: w.m.nRegressions.Load(), TimelineSwitches: w.m.nTimelineSwitches.Load()}
}

// Position returns the standby's published replay LSN and its health;
// HealthPrimaryDown when no tick got an answer for Config.DownAfter. An
// unknown name is (0, HealthUnknown).
func (w *Watcher) Position(name string) (gtid.PGLSN, Health) {
	s := w.cur.Load()
	st, ok := s.Standbys[name]
	if !ok {
		return 0, HealthUnknown
	}
	if st.Health == HealthStreaming && w.cfg.Now().Sub(s.At) > w.cfg.DownAfter {
		return st.ReplayLSN, HealthPrimaryDown
	}
	return st.ReplayLSN, st.Health
}

// ErrUnknownStandby is WaitFor's error for a name not configured.
var ErrUnknownStandby = errors.New("walwatch: unknown standby")

// WaitFor blocks until the standby's published replay LSN is at least
// want while it is HealthStreaming, or ctx ends (its error returned).
func (w *Watcher) WaitFor(ctx context.Context, name string, want gtid.PGLSN) error {
	for {
		s := w.cur.Load()
		st, ok := s.Standbys[name]
		if !ok {
			return fmt.Errorf("%w %q", ErrUnknownStandby, name)
		}
		if st.Health == HealthStreaming && st.Known && st.ReplayLSN >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.changed:
		}
	}
}

// Retarget makes Run watch the primary at addr from its next tick (after
// a failover: the promoted standby's pg_stat_replication). Every session
// is dropped and every standby is HealthUnknown until the new primary
// answers; Snapshot().Primary says when Run took it. It never blocks: the
// last address given wins.
func (w *Watcher) Retarget(addr string) error {
	if addr == "" {
		return errors.New("walwatch: retarget: empty address")
	}
	w.target.Store(&addr)
	select {
	case w.retarget <- struct{}{}:
	default: // a kick is pending: Run reads the latest target
	}
	return nil
}

// publish stores a snapshot from tr's states. It wakes waiters (a new
// changed channel) only when a position or a health changed.
func (w *Watcher) publish(tr *tracker, primary string, up bool, applyFeedback bool, at time.Time) {
	old := w.cur.Load()
	states := tr.snapshotStates()
	s := &Snapshot{Primary: primary, PrimaryUp: up, Timeline: tr.timeline, ApplyFeedback: applyFeedback, At: at, Seq: old.Seq, Standbys: states}
	same := old.Primary == primary && old.PrimaryUp == up && old.Timeline == s.Timeline && len(old.Standbys) == len(states)
	for k, v := range states {
		if !same {
			break
		}
		same = v.same(old.Standbys[k])
	}
	if same {
		s.changed = old.changed
		w.cur.Store(s)
		return
	}
	s.Seq++
	s.changed = make(chan struct{})
	w.cur.Store(s)
	close(old.changed)
	w.m.nPublishes.Add(1)
}

// record counts and logs a tick's events.
func (w *Watcher) record(ev events) {
	name := w.cfg.Name
	if ev.TimelineSwitch {
		w.m.nTimelineSwitches.Add(1)
		w.m.timelineSwitches.WithLabelValues(name).Inc()
		w.cfg.Logger.Info("walwatch: the primary's timeline changed; every walsender session dropped", "watcher", name, "from", ev.OldTimeline)
	}
	for _, s := range ev.Reconnects {
		w.m.nReconnects.Add(1)
		w.m.reconnects.WithLabelValues(name, s).Inc()
	}
	for _, r := range ev.Regressions {
		w.m.nRegressions.Add(1)
		w.m.regressions.WithLabelValues(name, r.Standby, r.Cause).Inc()
		w.cfg.Logger.Warn("walwatch: replay_lsn went back; the lower value is published", "watcher", name, "standby", r.Standby,
			"cause", r.Cause, "from", r.From.String(), "to", r.To.String())
	}
	for s, h := range ev.Health {
		w.m.health.WithLabelValues(name, s).Set(float64(h[1]))
		w.cfg.Logger.Info("walwatch: standby health", "watcher", name, "standby", s, "from", h[0].String(), "to", h[1].String())
	}
}

// Run reads pg_stat_replication every Interval until ctx ends; it returns
// ctx's error. It owns the tracker and the connection.
func (w *Watcher) Run(ctx context.Context) error {
	tr := newTracker(w.cfg.Standbys, w.cfg.StaleAfter)
	primary := *w.target.Load()
	var conn *pgx.Conn
	closeConn := func() {
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.QueryTimeout)
			_ = conn.Close(cctx) // the connection is discarded either way
			cancel()
			conn = nil
		}
	}
	defer closeConn()
	timer := time.NewTimer(0)
	defer timer.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.retarget:
			addr := *w.target.Load()
			if addr == primary {
				continue
			}
			closeConn()
			w.cfg.Logger.Info("walwatch: retarget", "watcher", w.cfg.Name, "from", primary, "to", addr)
			primary = addr
			w.record(tr.retarget())
			w.publish(tr, primary, false, false, time.Time{})
			failing = false
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(0)
			continue
		case <-timer.C:
		}
		var o observation
		var err error
		if conn == nil {
			conn, err = w.dial(ctx, primary)
		}
		if err == nil {
			o, err = w.tick(ctx, conn)
			if err != nil {
				closeConn()
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		next := w.cfg.Interval
		if err != nil {
			w.m.nTickErrors.Add(1)
			w.m.tickErrors.WithLabelValues(w.cfg.Name).Inc()
			if !failing {
				w.cfg.Logger.Warn("walwatch: reading pg_stat_replication failed", "watcher", w.cfg.Name, "primary", primary, "err", err)
			}
			failing = true
			w.record(tr.fail())
			w.publish(tr, primary, false, false, w.cur.Load().At)
			next = w.cfg.RetryInterval
		} else {
			if failing {
				w.cfg.Logger.Info("walwatch: the primary answers again", "watcher", w.cfg.Name, "primary", primary)
			}
			failing = false
			w.m.nTicks.Add(1)
			w.m.ticks.WithLabelValues(w.cfg.Name).Inc()
			now := w.cfg.Now()
			w.record(tr.observe(o, now))
			w.publish(tr, primary, true, o.SyncCommit == "remote_apply", now)
		}
		timer.Reset(next)
	}
}

// dial opens the connection to the primary within DialTimeout.
func (w *Watcher) dial(ctx context.Context, addr string) (*pgx.Conn, error) {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(w.cfg.User, w.cfg.Password), Host: addr, Path: "/" + w.cfg.Database,
		RawQuery: "sslmode=disable&application_name=walwatch"}
	cc, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("walwatch: primary address %q: %w", addr, err)
	}
	cc.ConnectTimeout = w.cfg.DialTimeout
	cc.DialFunc = (&net.Dialer{Timeout: w.cfg.DialTimeout}).DialContext
	dctx, cancel := context.WithTimeout(ctx, w.cfg.DialTimeout)
	defer cancel()
	c, err := pgx.ConnectConfig(dctx, cc)
	if err != nil {
		return nil, fmt.Errorf("walwatch: connect %s: %w", addr, err)
	}
	return c, nil
}

// tick runs tickQuery once within QueryTimeout.
func (w *Watcher) tick(ctx context.Context, c *pgx.Conn) (observation, error) {
	qctx, cancel := context.WithTimeout(ctx, w.cfg.QueryTimeout)
	defer cancel()
	rs, err := c.Query(qctx, tickQuery, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return observation{}, fmt.Errorf("walwatch: query pg_stat_replication: %w", err)
	}
	var rows [][]string
	for rs.Next() {
		r := make([]string, tickColumns)
		dst := make([]any, tickColumns)
		for i := range r {
			dst[i] = &r[i]
		}
		if err := rs.Scan(dst...); err != nil {
			rs.Close()
			return observation{}, fmt.Errorf("walwatch: scan pg_stat_replication: %w", err)
		}
		rows = append(rows, r)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return observation{}, fmt.Errorf("walwatch: read pg_stat_replication: %w", err)
	}
	return parseTick(rows)
}
