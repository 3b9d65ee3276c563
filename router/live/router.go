package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// WaitMethod is how the live router waits for a replica to catch up.
type WaitMethod uint8

const (
	// WaitAuto (the zero value) picks from the position source, by the
	// measurements in docs/benchmarks-router.md ("Waiting for a replica"):
	// WaitWatcher when Positions is a *WatchSource (binlogwatch: the
	// shortest waits there, and no statement or connection held on the
	// replica per waiting read) or the flavor has no server-side wait
	// (Flavor.WaitQuery ""), WaitGTIDFunction otherwise (a poller's
	// notification trails by about its interval).
	WaitAuto WaitMethod = iota
	// WaitGTIDFunction runs the flavor's server-side wait (for MySQL SELECT
	// WAIT_FOR_EXECUTED_GTID_SET(token, s)) on a connection to the replica:
	// one blocked server thread per waiting read, with a long tail under
	// load (docs/benchmarks-router.md).
	WaitGTIDFunction
	// WaitWatcher waits for the PositionSource's notification (binlogwatch
	// stream or poller): no statement runs on the replica.
	WaitWatcher
)

func (w WaitMethod) String() string {
	switch w {
	case WaitAuto:
		return "auto"
	case WaitGTIDFunction:
		return "wait-for-executed-gtid-set"
	case WaitWatcher:
		return "watcher"
	}
	return fmt.Sprintf("WaitMethod(%d)", uint8(w))
}

// WatermarkMode is how a read raises the session's monotonic-reads
// watermark.
type WatermarkMode uint8

const (
	// WatermarkAfterRead (sound, the default): read the node's executed
	// position (Flavor.ExecutedQuery, for MySQL @@GLOBAL.gtid_executed) on
	// the serving connection right after the statement. Everything the read
	// could have observed was committed before that, so it is contained.
	WatermarkAfterRead WatermarkMode = iota
	// WatermarkViewAtDecision (UNSOUND, for comparison only): raise the
	// watermark to the PositionSource's view of the serving node at decision
	// time, a lower bound that can miss what the read saw. Kept so tests and
	// the lab can show the monotonic-reads violations it allows.
	WatermarkViewAtDecision
	// WatermarkLazy (sound): no statement after the read. The read is
	// recorded as the session's pending seen (router.ObservePending: its
	// node, when it ended, the node's poll generation when it began), and
	// bounded only when a later read needs another node: by the upper
	// bound of a poll of that node that started after the read ended, on
	// a poll connection open since before it began (SeenBounder; for
	// MySQL gtid_executed joined with the received set). While the
	// session keeps reading on the same replica it needs no bound at all
	// (visibility on one server only grows); a read that must move waits
	// for the poll (router.ReasonSeenPending; the wait asks for a poll at
	// once), or, when none can come (the node restarted or stopped
	// answering), falls back to the primary (router.ReasonSeenUnknown).
	// A read served by the primary (a fallback) reads its watermark after
	// it as WatermarkAfterRead does, and that watermark also bounds a
	// replica's pending seen (within an epoch the primary holds
	// everything a replica showed), so a session never waits for a poll
	// of the primary.
	// Positions must be a SeenBounder with bounds (a *Poller with
	// PollerConfig.Bounds).
	WatermarkLazy
)

func (m WatermarkMode) String() string {
	switch m {
	case WatermarkAfterRead:
		return "after-read"
	case WatermarkViewAtDecision:
		return "view-at-decision"
	case WatermarkLazy:
		return "lazy"
	}
	return fmt.Sprintf("WatermarkMode(%d)", uint8(m))
}

// Config configures a live Router over positions of type P.
type Config[P gtid.Position[P]] struct {
	// Flavor says how the servers report, expose and wait for positions of
	// type P. Nil means MySQL{} for a Router[gtid.Set]; any other P needs
	// one (Scalar{} for gtid.LSN).
	Flavor Flavor[P]
	// Primary is the current primary.
	Primary Node
	// Replicas in configured order (the hashing list for PolicyAffinity).
	Replicas []Node
	// User, Password and Database are used on every connection.
	User, Password, Database string
	// Policy is the default policy of new sessions (per-statement overrides
	// go through Session.QueryWith).
	Policy router.Policy
	// Cap limits freshness fallbacks (zero value: no cap).
	Cap router.Cap
	// Positions supplies replica (and optionally primary) positions and
	// health. Required. Recommended: a *WatchSource over binlogwatch
	// watchers; a *Poller is the polling baseline.
	Positions PositionSource[P]
	// Global selects where a PolicyGlobal read's target comes from: the
	// zero value GlobalPrimaryQuery reads the primary's executed position
	// per read (sound); GlobalView uses the router's view of it (no round
	// trip). See GlobalSource.
	Global GlobalSource
	// Wait selects the wait method for PolicyTokenWait, PolicyGlobal and
	// CapWaitLonger;
	// the zero value WaitAuto picks from Positions (see WaitAuto).
	Wait WaitMethod
	// Watermark selects how reads raise the monotonic-reads watermark.
	Watermark WatermarkMode
	// Epoch is the topology epoch at start (Failover raises it).
	Epoch uint64
	// DownHold is how long a node that failed a connection or statement is
	// skipped before being tried again. Default 1s.
	DownHold time.Duration
	// DialTimeout bounds one connection attempt. Default 2s.
	DialTimeout time.Duration
	// MaxIdle is the number of idle read connections kept per node. Default 8.
	MaxIdle int
	// PrimaryPool bounds the shared pool of primary connections that
	// LiveSession.Exec borrows for writes (session tracking on; a session
	// keeps its connection only while a transaction is open, autocommit is
	// off or it changed session state). Default 16.
	PrimaryPool int
	// PlainSocketIO reads and writes MySQL connections with Go's ordinary
	// net.Conn calls. By default they are raw system calls
	// (internal/rawnet), which spare the Go runtime a monitor-thread
	// wake-up after every idle spell (the CPU it saves per read is
	// measured in docs/benchmarks-proxy.md).
	PlainSocketIO bool
	// CompactTokens widens a session's token after every write to each
	// source's prefix 1-max (gtid.Set.Prefixes). Without it the token is
	// the exact union of the session's writes, which gains one interval per
	// write while other sessions write in between, so a long-lived session
	// carries a growing token. The widened token is sound for
	// read-your-writes (a superset) and demands nothing more of replicas
	// that apply in commit order (replica_preserve_commit_order=ON); on one
	// that does not, reads may wait or go elsewhere. Off by default: the
	// simulator and the lab measure exact tokens.
	CompactTokens bool
	// Trace records, in every Read, the decisions that routed it.
	Trace bool
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger receives state changes. Default slog.Default().
	Logger *slog.Logger
	// Seed seeds the router's random draws (0: random).
	Seed uint64
}

// validate rejects nonsense in c and fills its defaults, concern by
// concern, in this order (the first error is returned).
func (c *Config[P]) validate() error {
	if err := c.validateNodes(); err != nil {
		return err
	}
	if err := c.validateSource(); err != nil {
		return err
	}
	if err := c.validatePolicy(); err != nil {
		return err
	}
	if err := c.validateWait(); err != nil {
		return err
	}
	if err := c.validateWatermark(); err != nil {
		return err
	}
	return c.fillDefaults()
}

// validateNodes rejects a primary or replica without a name or an
// address, too many replicas, a weight out of range and a node name
// used twice.
func (c *Config[P]) validateNodes() error {
	if c.Primary.Name == "" || c.Primary.Addr == "" {
		return errors.New("router: config: primary needs a name and an address")
	}
	if len(c.Replicas) > hashroute.MaxServers {
		return fmt.Errorf("router: config: %d replicas, at most %d", len(c.Replicas), hashroute.MaxServers)
	}
	seen := map[string]bool{c.Primary.Name: true}
	for _, r := range c.Replicas {
		if r.Name == "" || r.Addr == "" {
			return fmt.Errorf("router: config: replica %+v needs a name and an address", r)
		}
		if r.Weight < 0 || r.Weight > hashroute.MaxWeight {
			return fmt.Errorf("router: config: replica %s: weight %d out of range 0..%d", r.Name, r.Weight, hashroute.MaxWeight)
		}
		if seen[r.Name] {
			return fmt.Errorf("router: config: node name %q used twice", r.Name)
		}
		seen[r.Name] = true
	}
	return nil
}

// validateSource requires a PositionSource and fills the default Flavor
// (MySQL{} for gtid.Set; any other P needs one).
func (c *Config[P]) validateSource() error {
	if c.Positions == nil {
		return errors.New("router: config: no PositionSource")
	}
	if c.Flavor == nil {
		f, ok := any(MySQL{}).(Flavor[P])
		if !ok {
			return fmt.Errorf("router: config: no Flavor for positions of type %T", *new(P))
		}
		c.Flavor = f
	}
	return nil
}

// validatePolicy rejects a default policy, a cap or a global source that
// is not valid (or that the live router does not run).
func (c *Config[P]) validatePolicy() error {
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	if err := checkLivePolicy(c.Policy); err != nil {
		return err
	}
	if err := c.Cap.Validate(); err != nil {
		return err
	}
	if c.Global > GlobalView {
		return fmt.Errorf("router: config: unknown global source %d", c.Global)
	}
	return nil
}

// validateWait rejects an unknown wait method, resolves WaitAuto (see
// WaitAuto) and rejects WaitGTIDFunction for a flavor without a
// server-side wait.
func (c *Config[P]) validateWait() error {
	var zero P
	serverWait := c.Flavor.WaitQuery(zero, time.Second) != ""
	if c.Wait > WaitWatcher {
		return fmt.Errorf("router: config: unknown wait method %d", c.Wait)
	}
	if c.Wait == WaitAuto {
		c.Wait = WaitGTIDFunction
		if _, ok := any(c.Positions).(*WatchSource); ok || !serverWait {
			c.Wait = WaitWatcher
		}
	}
	if c.Wait == WaitGTIDFunction && !serverWait {
		return fmt.Errorf("router: config: flavor %s has no server-side wait: use WaitWatcher", c.Flavor.Name())
	}
	return nil
}

// validateWatermark rejects an unknown watermark mode, and WatermarkLazy
// over a position source that does not bound reads.
func (c *Config[P]) validateWatermark() error {
	if c.Watermark > WatermarkLazy {
		return fmt.Errorf("router: config: unknown watermark mode %d", c.Watermark)
	}
	if c.Watermark == WatermarkLazy {
		sb, ok := any(c.Positions).(SeenBounder[P])
		b, hasB := any(c.Positions).(interface{ Bounds() bool })
		if !ok || sb == nil || (hasB && !b.Bounds()) {
			return fmt.Errorf("router: config: WatermarkLazy needs a position source that bounds reads (a Poller with Bounds), not %T", c.Positions)
		}
	}
	return nil
}

// fillDefaults fills the zero DownHold, DialTimeout, MaxIdle,
// PrimaryPool and Logger with their defaults, and rejects negative ones.
func (c *Config[P]) fillDefaults() error {
	if c.DownHold == 0 {
		c.DownHold = time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.MaxIdle == 0 {
		c.MaxIdle = 8
	}
	if c.PrimaryPool == 0 {
		c.PrimaryPool = 16
	}
	if c.DownHold < 0 || c.DialTimeout < 0 || c.MaxIdle < 0 || c.PrimaryPool < 0 {
		return errors.New("router: config: negative DownHold, DialTimeout, MaxIdle or PrimaryPool")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Router is the live causal read router over positions of type P (for
// MySQL GTID sets, Router[gtid.Set]). Its methods are safe for concurrent
// use; each LiveSession is used by one goroutine at a time.
type Router[P gtid.Position[P]] struct {
	cfg   Config[P]
	pool  *pool        // idle read connections per node
	prim  *primaryPool // the shared, bounded write pool
	dial  *mysqlwire.Dialer
	m     *liveMetrics
	start time.Time

	mu     sync.Mutex        // guards everything below
	st     LiveState[P]      // topology, primary position, held-down nodes, in-flight reads
	fails  map[string]uint64 // per node: failures counted by markDown (Failures)
	bucket router.Bucket
	rng    *rand.Rand

	// kills holds a token per KILL QUERY of an overrun wait in flight
	// (killQuery); killWG lets Close wait for them.
	kills  chan struct{}
	killWG sync.WaitGroup
	// bounder is Positions as a SeenBounder (WatermarkLazy; nil otherwise).
	bounder SeenBounder[P]
	// demander is Positions as a Demander (nil when it is not one): told
	// what clients need to find in the replicas' views (Router.want).
	demander Demander[P]
	// primaryReader, when set, reads the primary's position for a
	// refusal's re-read (readPrimary) instead of the primary pool, which
	// speaks MySQL's protocol: PGRouter sets it (nil: MySQL, MariaDB).
	primaryReader func(context.Context, Node) (P, error)
}

// New validates cfg and builds a Router. It dials the primary once to prove
// that write positions are reported (ErrNoSessionTracking otherwise); that
// connection becomes the first of the shared primary pool.
func New[P gtid.Position[P]](ctx context.Context, cfg Config[P]) (*Router[P], error) {
	r, err := build(cfg)
	if err != nil {
		return nil, err
	}
	pc, err := r.prim.get(ctx, r.cfg.Primary)
	if err != nil {
		return nil, err
	}
	if r.st.PrimaryPos, err = r.readPosition(ctx, pc.c); err != nil {
		r.prim.put(pc, false)
		return nil, fmt.Errorf("router: read the primary's position: %w", err)
	}
	r.prim.put(pc, true)
	return r, nil
}

// build validates cfg and assembles a Router without I/O.
func build[P gtid.Position[P]](cfg Config[P]) (*Router[P], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newLiveMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	d := &mysqlwire.Dialer{User: cfg.User, Password: cfg.Password, DB: cfg.Database, Timeout: cfg.DialTimeout, PlainIO: cfg.PlainSocketIO}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	r := &Router[P]{cfg: cfg, pool: newPool(d, cfg.MaxIdle), prim: newPrimaryPool(d, cfg.Flavor.TrackSession, m, cfg.PrimaryPool), dial: d, m: m, start: time.Now(),
		st: LiveState[P]{Flavor: cfg.Flavor, Primary: cfg.Primary, Replicas: append([]Node(nil), cfg.Replicas...), Epoch: cfg.Epoch,
			DownUntil: map[string]time.Time{}, InFlight: map[string]int{},
			Commits: NewCommitLog[P](defaultCommitLogSize, defaultCommitLogResolution)}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		kills: make(chan struct{}, maxKills)}
	if cfg.Watermark == WatermarkLazy {
		r.bounder = cfg.Positions.(SeenBounder[P]) // validated
	}
	r.demander, _ = cfg.Positions.(Demander[P])
	if len(cfg.Replicas) > 0 {
		if r.st.Table, err = hashroute.NewTable(hashServers(cfg.Replicas)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Close releases idle connections (read pool and primary pool).
func (r *Router[P]) Close() {
	r.killWG.Wait()
	r.pool.close()
	r.prim.close()
}

// Epoch returns the current topology epoch.
func (r *Router[P]) Epoch() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st.Epoch
}

// Failover switches the router to a new primary and epoch (e.g. from
// compose's FailoverResult). replicas is the new configured replica list.
// It reads the new primary's executed position (which, once promoted,
// holds every transaction of older epochs it will ever have). Sessions' tokens
// from older epochs are then checked against it (Policy.CheckEpoch) on
// their next read.
func (r *Router[P]) Failover(ctx context.Context, primary Node, replicas []Node, epoch uint64) error {
	pos, err := r.ReadPosition(ctx, primary)
	if err != nil {
		return fmt.Errorf("router: failover: read the new primary's position: %w", err)
	}
	return r.failoverTo(primary, replicas, epoch, pos)
}

// ReadPosition reads node's executed position on a connection of its own
// (the router's account and flavor).
func (r *Router[P]) ReadPosition(ctx context.Context, node Node) (P, error) {
	var zero P
	c, err := r.dial.Dial(ctx, node.Addr, false)
	if err != nil {
		return zero, err
	}
	defer c.Close()
	return r.readPosition(ctx, c)
}

// FailoverAt is Failover with the epoch's base given: base is the new
// primary's position read by the caller right after the promotion
// (ReadPosition), before any client wrote there. Several routers over one
// topology need it: told in turn, the first one's clients write to the new
// primary before the next one reads its position, and with a scalar
// position (or MariaDB's, compared by sequence number) those new writes
// can lift a base past a lost write's position, which rule 1 would then
// let through.
func (r *Router[P]) FailoverAt(primary Node, replicas []Node, epoch uint64, base P) error {
	return r.failoverTo(primary, replicas, epoch, base)
}

// failoverTo is Failover's state change (Router's and PGRouter's), once
// the new primary's position pos is known: pos is also kept as the epoch's
// base (router.View.Bases), what rule 1 checks older tokens against.
func (r *Router[P]) failoverTo(primary Node, replicas []Node, epoch uint64, pos P) error {
	var table *hashroute.Table
	if len(replicas) > 0 {
		var err error
		if table, err = hashroute.NewTable(hashServers(replicas)); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if epoch <= r.st.Epoch {
		return fmt.Errorf("router: failover to epoch %d, current is %d", epoch, r.st.Epoch)
	}
	r.st.Primary, r.st.Replicas, r.st.Epoch, r.st.PrimaryPos, r.st.Table = primary, append([]Node(nil), replicas...), epoch, pos, table
	r.st.Bases = append(r.st.Bases, router.EpochBase[P]{Epoch: epoch, Pos: pos})
	var zero P
	r.st.Acked, r.st.AckedAt = zero, 0
	r.st.Commits.Reset()
	r.cfg.Logger.Info("router: failover", "primary", primary.Name, "epoch", epoch)
	return nil
}

// hashServers is the hashroute server list of replicas, in order.
func hashServers(replicas []Node) []hashroute.Server {
	out := make([]hashroute.Server, len(replicas))
	for i, n := range replicas {
		out[i] = hashroute.Server{Name: n.Name, Weight: max(n.Weight, 1)}
	}
	return out
}

// Failures is how many failures of the named node the router has
// counted (each held it down). A caller that keeps its own connections to
// the node (the proxy's sessions) drops one opened before the latest
// failure instead of failing on it, which would hold the node down once
// more: after a restart every connection that predates it is dead.
func (r *Router[P]) Failures(node string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fails[node]
}

// now is the router's monotonic clock for Decide.
func (r *Router[P]) now() time.Duration { return time.Since(r.start) }

// markDown skips a node for DownHold after an error and closes the idle
// read connections to it (a restarted node has dropped them: each would
// fail once more and hold the node down for another DownHold). One WARN
// line when the node goes down; errors while it is already held down are
// DEBUG (every error is counted either way).
func (r *Router[P]) markDown(ctx context.Context, n Node, err error) {
	r.m.nodeDown.WithLabelValues(n.Name).Inc()
	now := time.Now()
	r.mu.Lock()
	wasDown := now.Before(r.st.DownUntil[n.Name])
	r.st.DownUntil[n.Name] = now.Add(r.cfg.DownHold)
	if r.fails == nil {
		r.fails = map[string]uint64{}
	}
	r.fails[n.Name]++
	r.mu.Unlock()
	r.pool.drop(n.Addr)
	lvl := slog.LevelWarn
	if wasDown {
		lvl = slog.LevelDebug
	}
	r.cfg.Logger.LogAttrs(ctx, lvl, "router: node marked down", slog.String("node", n.Name),
		slog.Duration("hold", r.cfg.DownHold), errAttr(err))
}

// readWatermark reads a node's monotonic-reads watermark on c with query
// (watermarkFor).
func (r *Router[P]) readWatermark(ctx context.Context, c *client.Conn, query string) (P, error) {
	text, err := mysqlwire.ReadValue(ctx, c, query)
	if err != nil {
		var zero P
		return zero, err
	}
	return r.cfg.Flavor.ParseExecuted(text)
}

// readPosition reads a node's executed position on c (Flavor.ExecutedQuery).
func (r *Router[P]) readPosition(ctx context.Context, c *client.Conn) (P, error) {
	text, err := mysqlwire.ReadValue(ctx, c, r.cfg.Flavor.ExecutedQuery())
	if err != nil {
		var zero P
		return zero, err
	}
	return r.cfg.Flavor.ParseExecuted(text)
}

// LiveSession is one client's causal state on a live Router. Use it from
// one goroutine at a time.
type LiveSession[P gtid.Position[P]] struct {
	r      *Router[P]
	policy router.Policy
	st     router.Session[P]
	// prim is the primary connection borrowed from the router's shared
	// pool while pinned (nil between autocommit writes).
	prim    *primConn
	inTx    bool // an explicit transaction is open on prim
	txDirty bool // it changed rows
	sticky  bool // prim carries session state (SET, temporary table, user variable, autocommit off)
	// The pending seen's node, when its last read ended and the node's
	// poll generation when its first read began (WatermarkLazy; 0: it
	// changed in between, the seen cannot be bounded).
	pendNode string
	pendAt   time.Time
	pendGen  uint64
	// lastNode names the replica that served the session's last replica
	// read (router.Session.LastReplica: the token policies stay there
	// while it qualifies).
	lastNode string
	// qst and qpol are QueryFunc's working copies of the read's state and
	// policy, qview the view its decisions are made on (QueryFunc is not
	// re-entered from its run).
	qst   router.Session[P]
	qpol  router.Policy
	qview router.View[P]
}

// hashAffinity hashes a consistent_read_id like hashroute (xxhash64).
func hashAffinity(id string) uint64 { return hashroute.Hash(id) }
