package binlogwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// Config configures one Watcher.
type Config struct {
	// Name labels the replica in snapshots, metrics and logs. Default: Host:Port.
	Name string
	// Host and Port address the replica's MySQL server. Host is required;
	// Port defaults to 3306.
	Host string
	Port uint16
	// User and Password authenticate; the account needs REPLICATION SLAVE
	// (to stream the binlog) and may read @@gtid_executed. User is required.
	User     string
	Password string
	// ServerID is the replication server id the watcher registers with. It
	// must differ from every server id of the topology and of other
	// watchers of the same server (MySQL drops a dump connection whose
	// server id registers again). Default: random in [2^31, 2^32).
	ServerID uint32
	// HeartbeatPeriod asks the server for a heartbeat after this much idle
	// time, so that an idle replica does not look dead. Default 1 s.
	HeartbeatPeriod time.Duration
	// ReadTimeout ends a stream that has been silent this long (no event,
	// no heartbeat). Must exceed HeartbeatPeriod. Default 3 x HeartbeatPeriod.
	ReadTimeout time.Duration
	// ConnectTimeout bounds connecting and the snapshot query. Default 5 s.
	ConnectTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait between reconnects, which
	// doubles from BackoffMin up to BackoffMax (with jitter) while failures
	// last. Defaults 50 ms and 2 s.
	BackoffMin time.Duration
	BackoffMax time.Duration
	// ConfirmWait bounds one server-side wait for a streamed set to appear in
	// @@gtid_executed before the watcher reports it and tries again.
	// Default 1 s.
	ConfirmWait time.Duration
	// DisableAhead turns off the ahead waiter: a second SQL connection per
	// replica that keeps a WAIT_FOR_EXECUTED_GTID_SET parked on the GTID
	// predicted to commit next, so the common case is published without a
	// confirmation round trip after the stream delivers it. Default: on.
	DisableAhead bool
	// DownAfter turns Reconnecting into Down when reconnecting has failed
	// for this long. Default 5 s.
	DownAfter time.Duration
	// Logger receives the watcher's logs (go-mysql's own logs are lowered to
	// Debug). Default: slog.Default().
	Logger *slog.Logger
	// Metrics, if not nil, receives the watcher's counters.
	Metrics *Metrics
	// Dialer, if not nil, opens the TCP connections (tests put a fault
	// proxy here). Default: net.Dialer.
	Dialer client.Dialer
}

func (c *Config) validate() error {
	if c.Host == "" {
		return errors.New("binlogwatch: Config.Host is required")
	}
	if c.User == "" {
		return errors.New("binlogwatch: Config.User is required")
	}
	if c.Port == 0 {
		c.Port = 3306
	}
	if c.Name == "" {
		c.Name = net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
	}
	if c.ServerID == 0 {
		c.ServerID = 1<<31 | rand.Uint32()>>1
	}
	if c.HeartbeatPeriod == 0 {
		c.HeartbeatPeriod = time.Second
	}
	if c.HeartbeatPeriod < time.Millisecond {
		return fmt.Errorf("binlogwatch: HeartbeatPeriod %v is below 1ms", c.HeartbeatPeriod)
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 3 * c.HeartbeatPeriod
	}
	if c.ReadTimeout <= c.HeartbeatPeriod {
		return fmt.Errorf("binlogwatch: ReadTimeout %v must exceed HeartbeatPeriod %v, or an idle replica reconnects forever", c.ReadTimeout, c.HeartbeatPeriod)
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 50 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 2 * time.Second
	}
	if c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin {
		return fmt.Errorf("binlogwatch: backoff bounds [%v, %v] are not ordered", c.BackoffMin, c.BackoffMax)
	}
	if c.ConfirmWait == 0 {
		c.ConfirmWait = time.Second
	}
	if c.ConfirmWait < time.Millisecond {
		return fmt.Errorf("binlogwatch: ConfirmWait %v is below 1ms", c.ConfirmWait)
	}
	if c.DownAfter == 0 {
		c.DownAfter = 5 * time.Second
	}
	if c.DownAfter < 0 || c.ConnectTimeout < 0 {
		return errors.New("binlogwatch: negative DownAfter or ConnectTimeout")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Dialer == nil {
		d := &net.Dialer{}
		c.Dialer = d.DialContext
	}
	return nil
}

// Watcher keeps one replica's executed GTID set live. Create it with New,
// run it with Run; read it from any goroutine with Snapshot and WaitFor.
type Watcher struct {
	cfg     Config
	log     *slog.Logger
	met     *replicaMetrics
	pub     *publisher
	started atomic.Bool
	closers sync.WaitGroup // background syncer closes
}

// New validates cfg and returns a watcher that has not started.
func New(cfg Config) (*Watcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Watcher{
		cfg: cfg,
		log: cfg.Logger.With("replica", cfg.Name),
		met: cfg.Metrics.forReplica(cfg.Name),
	}
	w.pub = newPublisher(&Snapshot{Replica: cfg.Name, Health: HealthStarting, Reason: "not started"})
	return w, nil
}

// Name returns the replica's name.
func (w *Watcher) Name() string { return w.cfg.Name }

// Snapshot returns the current published state. It never blocks.
func (w *Watcher) Snapshot() *Snapshot { return w.pub.load() }

// WaitFor blocks until the replica is known to contain want, ctx ends (the
// error wraps ctx.Err()) or the watcher stops (ErrStopped).
func (w *Watcher) WaitFor(ctx context.Context, want gtid.Set) error { return w.pub.waitFor(ctx, want) }

// Resync reasons (the resyncs_total label).
const (
	resyncUUIDChanged = "server-uuid-changed"
	resyncSetShrunk   = "executed-set-shrunk"
	resyncUnavailable = "binlog-unavailable"
)

// runState is owned by Run's goroutine.
type runState struct {
	tr           *tracker
	serverUUID   string
	health       Health
	reason       string
	lastEvent    time.Time
	failingSince time.Time
	prevStats    trackerStats
	resyncNext   string // a resync reason to count at the next snapshot
}

// Run streams until ctx ends, reconnecting as needed, and returns nil after
// publishing a final Stopped snapshot. It may be called once.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("binlogwatch: Run called twice")
	}
	st := &runState{tr: newTracker(gtid.Set{}), health: HealthStarting}
	backoff := w.cfg.BackoffMin
	for {
		streamed, err := w.session(ctx, st)
		if ctx.Err() != nil {
			break
		}
		now := time.Now()
		if streamed || st.failingSince.IsZero() {
			st.failingSince = now
		}
		if streamed {
			backoff = w.cfg.BackoffMin
		}
		var me *mysql.MyError
		if errors.As(err, &me) && me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
			st.resyncNext = resyncUnavailable
		}
		health := HealthReconnecting
		if now.Sub(st.failingSince) >= w.cfg.DownAfter {
			health = HealthDown
		}
		if w.met != nil {
			w.met.reconnects.Inc()
		}
		w.log.Debug("binlogwatch: stream ended, reconnecting", "err", err, "backoff", backoff, "health", health)
		w.setHealth(st, health, err.Error())
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, w.cfg.BackoffMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	w.closers.Wait()
	st.health, st.reason = HealthDown, "stopped"
	w.publishStopped(st)
	return nil
}

func (w *Watcher) setHealth(st *runState, h Health, reason string) {
	if st.health == h && st.reason == reason {
		return
	}
	st.health, st.reason = h, reason
	if w.met != nil {
		w.met.health.Set(float64(h))
	}
	w.publish(st, time.Time{})
}

func (w *Watcher) publish(st *runState, commitTime time.Time) {
	now := time.Now()
	w.pub.publish(&Snapshot{
		Replica:    w.cfg.Name,
		ServerUUID: st.serverUUID,
		Executed:   st.tr.set.Clone(),
		Health:     st.health,
		Reason:     st.reason,
		LastEvent:  st.lastEvent,
		Published:  now,
	})
	if w.met != nil && !commitTime.IsZero() {
		w.met.notifyDelay.Observe(now.Sub(commitTime).Seconds())
	}
}

func (w *Watcher) publishStopped(st *runState) {
	if w.met != nil {
		w.met.health.Set(float64(HealthDown))
	}
	w.pub.publish(&Snapshot{
		Replica: w.cfg.Name, ServerUUID: st.serverUUID, Executed: st.tr.set.Clone(),
		Health: HealthDown, Reason: "stopped", LastEvent: st.lastEvent, Published: time.Now(), Stopped: true,
	})
}

func (w *Watcher) addr() string { return net.JoinHostPort(w.cfg.Host, strconv.Itoa(int(w.cfg.Port))) }

// connect opens the watcher's SQL connection (snapshot and confirmations).
func (w *Watcher) connect(ctx context.Context) (*client.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, w.cfg.ConnectTimeout)
	defer cancel()
	conn, err := client.ConnectWithDialer(cctx, "tcp", w.addr(), w.cfg.User, w.cfg.Password, "", w.cfg.Dialer,
		func(c *client.Conn) error {
			// A confirmation waits up to ConfirmWait on the server.
			c.ReadTimeout = w.cfg.ConnectTimeout + w.cfg.ConfirmWait
			c.WriteTimeout = w.cfg.ConnectTimeout
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// readExecuted reads @@server_uuid and @@gtid_executed.
func (w *Watcher) readExecuted(conn *client.Conn) (string, gtid.Set, error) {
	r, err := conn.Execute("SELECT @@server_uuid, @@gtid_executed")
	if err != nil {
		return "", gtid.Set{}, fmt.Errorf("read @@gtid_executed: %w", err)
	}
	defer r.Close()
	uuid, err := r.GetString(0, 0)
	if err != nil {
		return "", gtid.Set{}, fmt.Errorf("read @@server_uuid: %w", err)
	}
	text, err := r.GetString(0, 1)
	if err != nil {
		return "", gtid.Set{}, fmt.Errorf("read @@gtid_executed: %w", err)
	}
	set, err := gtid.Parse(text)
	if err != nil {
		return "", gtid.Set{}, fmt.Errorf("parse @@gtid_executed: %w", err)
	}
	return strings.Clone(uuid), set, nil
}

// adopt takes a fresh snapshot of the replica as the executed set. It is
// always a valid lower bound (it was read from the replica). When it is not
// a superset of what was published, or the server changed, the published set
// goes down: that is a counted resync.
func (w *Watcher) adopt(st *runState, uuid string, fresh gtid.Set) {
	reason := st.resyncNext
	st.resyncNext = ""
	switch {
	case st.serverUUID != "" && uuid != st.serverUUID:
		reason = resyncUUIDChanged
	case !fresh.Contains(st.tr.set):
		reason = resyncSetShrunk
	}
	if reason != "" {
		if w.met != nil {
			w.met.resyncs.WithLabelValues(w.cfg.Name, reason).Inc()
		}
		w.log.Info("binlogwatch: fresh snapshot of the replica", "reason", reason, "server_uuid", uuid)
	}
	st.serverUUID = uuid
	st.tr.reset(fresh)
}

// candidate is what the stream goroutine has seen, handed to the
// confirmer: immutable once stored.
type candidate struct {
	set        gtid.Set
	commitTime time.Time
	lastEvent  time.Time
	health     Health
	reason     string
	last       gtid.GTID // the last transaction the stream added (GNO 0: none yet)
}

// session takes a snapshot and streams until an error. streamed reports
// whether at least one event arrived (the backoff then restarts).
//
// Three goroutines share the work: this one owns the tracker and turns
// events into candidate sets; the confirmer publishes a candidate only once
// the replica's @@gtid_executed contains it (WAIT_FOR_EXECUTED_GTID_SET on
// the session's SQL connection). The binlog reaches the dump thread after
// the binlog sync stage but before the commit stage updates
// @@gtid_executed and makes the rows visible: the confirmation closes that
// window (measured in docs/binlogwatch.md), at the cost of one round trip.
// The ahead waiter (unless Config.DisableAhead) keeps a
// WAIT_FOR_EXECUTED_GTID_SET parked on a second connection for the GTID
// that should come next (the last streamed one's GNO + 1), so the common
// case is published when the server wakes its waiters at commit, without
// the round trip. Both publish through publishConfirmed, which only ever
// publishes the union of the published set and a set the server confirmed.
func (w *Watcher) session(ctx context.Context, st *runState) (streamed bool, err error) {
	conn, err := w.connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	uuid, fresh, err := w.readExecuted(conn)
	if err != nil {
		return false, err
	}
	w.adopt(st, uuid, fresh)
	st.health, st.reason = HealthCatchingUp, "opening the binlog stream"
	if w.met != nil {
		w.met.health.Set(float64(st.health))
	}
	w.publish(st, time.Time{})

	var aheadConn *client.Conn
	if !w.cfg.DisableAhead {
		if aheadConn, err = w.connect(ctx); err != nil {
			// Explicit, not a silent fallback: the session fails with a
			// reason that says how to run without this connection.
			return false, fmt.Errorf("ahead connection (Config.DisableAhead, watch --no-ahead, runs without it): %w", err)
		}
		defer aheadConn.Close()
	}

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cs := &confirmState{uuid: st.serverUUID, kick: make(chan struct{}, 1), kickAhead: make(chan struct{}, 1)}
	var workers sync.WaitGroup
	workers.Add(1)
	go func() {
		defer workers.Done()
		if err := w.confirmLoop(sctx, conn, cs); err != nil {
			cancel(err)
		}
	}()
	stop := context.AfterFunc(sctx, func() { closeRaw(conn) }) // unblock a confirmation in flight
	defer stop()
	if aheadConn != nil {
		workers.Add(1)
		go func() {
			defer workers.Done()
			if err := w.aheadLoop(sctx, aheadConn, cs); err != nil {
				cancel(err)
			}
		}()
		stopAhead := context.AfterFunc(sctx, func() { closeRaw(aheadConn) })
		defer stopAhead()
	}
	defer func() {
		cancel(nil)
		workers.Wait()
		// The confirmer and the ahead waiter have stopped and Run's
		// goroutine publishes again: continue from what was published
		// (unconfirmed transactions are dropped; the next session's
		// snapshot brings them back).
		p := w.pub.load()
		if !p.Executed.Equal(st.tr.set) {
			st.tr.reset(p.Executed.Clone())
		}
		st.health, st.reason, st.lastEvent = p.Health, p.Reason, p.LastEvent
	}()

	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:            w.cfg.ServerID,
		Flavor:              mysql.MySQLFlavor,
		Host:                w.cfg.Host,
		Port:                w.cfg.Port,
		User:                w.cfg.User,
		Password:            w.cfg.Password,
		HeartbeatPeriod:     w.cfg.HeartbeatPeriod,
		ReadTimeout:         w.cfg.ReadTimeout,
		DisableRetrySync:    true, // we reconnect ourselves, from a fresh snapshot
		DiscardGTIDSet:      true, // its per-event set is not a commit marker
		Logger:              slog.New(debugHandler{w.log.Handler()}),
		Dialer:              w.cfg.Dialer,
		RowsEventDecodeFunc: skipRows,
		EventCacheCount:     4096,
	})
	defer func() {
		// Close kills the dump connection through a new connection, which
		// can take its own connect timeout when the server is unreachable:
		// do not hold the stream loop for it.
		w.closers.Add(1)
		go func() { defer w.closers.Done(); syncer.Close() }()
	}()
	streamer, err := syncer.StartSyncGTID(mysqlwire.GoMySQLSet(fresh))
	if err != nil {
		return false, fmt.Errorf("start binlog stream: %w", err)
	}
	health := HealthCatchingUp
	var last gtid.GTID
	for {
		ev, err := streamer.GetEvent(sctx)
		if err != nil {
			if cause := context.Cause(sctx); cause != nil && ctx.Err() == nil && !errors.Is(cause, context.Canceled) {
				return streamed, cause
			}
			return streamed, fmt.Errorf("binlog stream: %w", err)
		}
		streamed = true
		now := time.Now()
		r := st.tr.apply(ev)
		if w.met != nil {
			w.met.syncStats(&st.prevStats, st.tr.stats)
			w.met.lastEvent.Set(float64(now.UnixNano()) / 1e9)
		}
		_, heartbeat := ev.Event.(*replication.HeartbeatEvent)
		if r.added == 0 && !heartbeat && health == HealthStreaming {
			continue
		}
		health = HealthStreaming
		if r.added > 0 {
			last = r.last
		}
		cs.cand.Store(&candidate{set: st.tr.set.Clone(), commitTime: r.commitTime, lastEvent: now, health: HealthStreaming, last: last})
		cs.notify()
	}
}

// confirmState is what the session's goroutines share.
type confirmState struct {
	uuid      string
	cand      atomic.Pointer[candidate] // the latest streamed candidate
	kick      chan struct{}             // wakes the confirmer (capacity 1)
	kickAhead chan struct{}             // wakes the ahead waiter (capacity 1)
	mu        sync.Mutex                // serializes publishConfirmed
}

func (cs *confirmState) notify() {
	for _, k := range []chan struct{}{cs.kick, cs.kickAhead} {
		select {
		case k <- struct{}{}:
		default:
		}
	}
}

// publishConfirmed publishes the union of the published set and set, which
// the server has confirmed to be within @@gtid_executed: both are lower
// bounds of the replica's executed set, so their union is one. meta, when
// not nil, also updates health and the last event time.
func (w *Watcher) publishConfirmed(cs *confirmState, set gtid.Set, meta *candidate, stages stageTimes) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cur := w.pub.load()
	exec := set
	switch {
	case set.Contains(cur.Executed):
	case cur.Executed.Contains(set):
		exec = cur.Executed
	default:
		exec = set.Union(cur.Executed)
	}
	health, reason, lastEvent := cur.Health, cur.Reason, cur.LastEvent
	var commitTime time.Time
	if meta != nil {
		health, reason, lastEvent, commitTime = meta.health, meta.reason, meta.lastEvent, meta.commitTime
	}
	if meta == nil && exec.Equal(cur.Executed) {
		return // nothing new
	}
	now := time.Now()
	w.pub.publish(&Snapshot{Replica: w.cfg.Name, ServerUUID: cs.uuid, Executed: exec, Health: health, Reason: reason,
		LastEvent: lastEvent, Published: now, stages: stages})
	if w.met != nil {
		w.met.health.Set(float64(health))
		if !commitTime.IsZero() {
			w.met.notifyDelay.Observe(now.Sub(commitTime).Seconds())
		}
	}
}

// aheadLoop keeps a WAIT_FOR_EXECUTED_GTID_SET parked for the GTID
// predicted to commit next: the last streamed GTID with GNO + 1 (same
// source and tag). When the server confirms it, it is published at once
// (the stream delivers it before the commit, so the confirmer's own round
// trip would come later). A wrong prediction (another source, a gap) costs
// nothing but the confirmer's usual round trip; the target is re-predicted
// from the stream when the wait times out.
func (w *Watcher) aheadLoop(ctx context.Context, conn *client.Conn, cs *confirmState) error {
	var target gtid.GTID // GNO 0: no prediction yet
	for {
		if target.GNO == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-cs.kickAhead:
			}
			if c := cs.cand.Load(); c != nil && c.last.GNO > 0 && c.last.GNO < maxGNO {
				target = c.last
				target.GNO++
			}
			continue
		}
		if w.pub.load().Executed.ContainsGTID(target) {
			// Already published by the confirmer: follow the stream.
			target.GNO++
			if c := cs.cand.Load(); c != nil && c.last.SID == target.SID && c.last.Tag == target.Tag && c.last.GNO >= target.GNO {
				target.GNO = c.last.GNO + 1
			}
			if target.GNO > maxGNO {
				target.GNO = 0
			}
			continue
		}
		one, err := gtid.Set{}.Add(target)
		if err != nil {
			target.GNO = 0
			continue
		}
		var stages stageTimes
		stages.confirmSent = time.Now()
		ok, err := mysqlwire.WaitForExecuted(ctx, conn, one, w.cfg.ConfirmWait)
		stages.confirmed = time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wait ahead on @@gtid_executed: %w", err)
		}
		if ok {
			w.publishConfirmed(cs, one, nil, stages)
			if w.met != nil {
				w.met.aheadHits.Inc()
			}
			target.GNO++
			if target.GNO > maxGNO {
				target.GNO = 0
			}
			continue
		}
		// Timed out: the replica is idle or the prediction is wrong.
		// Re-predict from the stream.
		if c := cs.cand.Load(); c != nil && c.last.GNO > 0 && c.last.GNO < maxGNO {
			next := c.last
			next.GNO++
			target = next
		}
	}
}

// maxGNO is the largest GNO MySQL accepts (2^63 - 2).
const maxGNO = 1<<63 - 2

// confirmLoop publishes candidates once the replica's @@gtid_executed
// contains them.
func (w *Watcher) confirmLoop(ctx context.Context, conn *client.Conn, cs *confirmState) error {
	var last *candidate
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-cs.kick:
		}
		c := cs.cand.Load()
		if c == nil || c == last {
			continue
		}
		var stages stageTimes
		stages.streamed = c.lastEvent
		if !w.pub.load().Executed.Contains(c.set) {
			stages.confirmSent = time.Now()
			ok, err := mysqlwire.WaitForExecuted(ctx, conn, c.set, w.cfg.ConfirmWait)
			stages.confirmed = time.Now()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("confirm against @@gtid_executed: %w", err)
			}
			if !ok {
				// Not committed within ConfirmWait: the binlog holds a
				// transaction the replica has not made visible. Keep the
				// previous set and say so; try again.
				if w.met != nil {
					w.met.confirmTimeouts.Inc()
				}
				cs.mu.Lock()
				cur := w.pub.load()
				w.pub.publish(&Snapshot{Replica: w.cfg.Name, ServerUUID: cs.uuid, Executed: cur.Executed, Health: HealthCatchingUp,
					Reason: "binlog ahead of @@gtid_executed for longer than ConfirmWait", LastEvent: c.lastEvent, Published: time.Now()})
				cs.mu.Unlock()
				select {
				case cs.kick <- struct{}{}: // kick is ours to refill: retry
				default:
				}
				continue
			}
		}
		last = c
		w.publishConfirmed(cs, c.set, c, stages)
	}
}

// closeRaw closes c's network connection, failing a query in flight on
// another goroutine. go-mysql's Conn.Close also resets the packet sequence,
// which races with that query: the owner calls it once the query's
// goroutine has returned.
func closeRaw(c *client.Conn) {
	if c.Conn != nil && c.Conn.Conn != nil {
		_ = c.Conn.Conn.Close()
	}
}

// skipRows leaves row images undecoded: the watcher needs only GTIDs and
// commit points.
func skipRows(*replication.RowsEvent, []byte) error { return nil }

// debugHandler lowers every record of go-mysql's logger to Debug: the
// watcher reports stream errors itself, through health and metrics.
type debugHandler struct{ h slog.Handler }

func (d debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}
func (d debugHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}
func (d debugHandler) WithAttrs(as []slog.Attr) slog.Handler { return debugHandler{d.h.WithAttrs(as)} }
func (d debugHandler) WithGroup(g string) slog.Handler       { return debugHandler{d.h.WithGroup(g)} }

var _ slog.Handler = debugHandler{}
