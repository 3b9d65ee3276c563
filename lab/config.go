package lab

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// Mode says how several routers share a run.
type Mode string

const (
	// Concurrent: every router runs at once on one live workload, sessions
	// split evenly among them, so all face the same lag at the same moment.
	Concurrent Mode = "concurrent"
	// Sequential: each router alone, one after the other, on the same
	// seeded schedule over all sessions (clean cost figures).
	Sequential Mode = "sequential"
)

// TokenKind is the position type a token router compares.
type TokenKind string

const (
	// TokenGTID: GTID-set tokens (gtid.Set), compared by subset.
	TokenGTID TokenKind = "gtid"
	// TokenLSN: a scalar position (gtid.LSN, the count of transactions
	// executed), compared by value whatever the timeline, like an LSN.
	TokenLSN TokenKind = "lsn"
)

// Positions is where the GTID-set routers under test learn what each node
// has executed: the words of the proxy's `positions` setting.
type Positions string

const (
	// PositionsBinlog (the default): a binlogwatch stream per node behind
	// live.WatchSource (router/live), or the proxy's `positions: binlog`
	// over the same streams. The watermark is the pipelined query.
	PositionsBinlog Positions = "binlog"
	// PositionsPoll: a live.Poller per node every PollInterval, as the
	// proxy runs by default (`positions: poll`). The watermark is then
	// lazy unless WatermarkSource says query.
	PositionsPoll Positions = "poll"
)

// WatermarkSource is how the GTID-set routers' monotonic-reads policies
// learn what a replica read saw: the words of the proxy's
// `watermark_source` setting (docs/proxy.md, "Routing").
type WatermarkSource string

const (
	// WatermarkQuery: the replica's executed set read after the read on
	// the same connection (live.WatermarkAfterRead; the proxy's
	// `watermark_source: query`). The default with PositionsBinlog.
	WatermarkQuery WatermarkSource = "query"
	// WatermarkLazy: no statement after the read; the read is bounded
	// after the fact by a poll, only when the session moves
	// (live.WatermarkLazy; `watermark_source: lazy`). Needs PositionsPoll,
	// and is its default.
	WatermarkLazy WatermarkSource = "lazy"
)

// RouterSpec names and configures one router of a run.
type RouterSpec struct {
	// Name labels the router in tables; default Policy.String().
	Name string
	// Policy is the routing rule (router.ParsePolicy gives one from text).
	Policy router.Policy
	// Cap is the fallback cap (zero value: no cap).
	Cap router.Cap
	// Token is the position kind; default TokenGTID.
	Token TokenKind
}

// Config describes one run of the workload driver.
type Config struct {
	// Sessions is S, the number of sessions; default 2000.
	Sessions int
	// HotRows is the number of shared hot rows; default 8.
	HotRows int
	// WriteRate is the offered write rate (writes/s, Poisson); default 200.
	WriteRate float64
	// Duration is how long writes are offered; reads that follow are
	// completed and counted. Default 20s.
	Duration time.Duration
	// ReadsPerWrite is the number of reads each write is followed by;
	// default 3.
	ReadsPerWrite int
	// GapMin and GapMax bound the log-uniform gap before each read;
	// defaults 15ms and 4s (the simulator's).
	GapMin, GapMax time.Duration
	// Seed fixes the offered workload (writes and gaps); default 1.
	Seed uint64
	// Routers are the routers under test (at least one).
	Routers []RouterSpec
	// Weights are the replicas' hashing weights in configured order (the
	// affinity routers' share of ids per replica, as ProxySQL's hostgroup
	// weights); empty: every replica 1. When set, one per replica.
	Weights []int
	// Mode is Concurrent (default) or Sequential.
	Mode Mode
	// Condition is the lag-producing condition (default identical).
	Condition ConditionSpec
	// Workers is the number of goroutines executing operations, each with
	// its own connection per node; default 24.
	Workers int
	// PollInterval is how often the lab's measurement poller reads each
	// node's executed set (replication lag), and the scalar-token routers'
	// positions are polled (they cannot use the binlog streams, which carry
	// GTID sets); default 5ms. GTID-token routing uses binlog streams
	// unless Positions is PositionsPoll, which polls at this interval too.
	PollInterval time.Duration
	// Positions is the GTID-set routers' position source: PositionsBinlog
	// (default) or PositionsPoll. Scalar-token routers always poll.
	Positions Positions
	// WatermarkSource is the GTID-set routers' monotonic-reads watermark:
	// WatermarkQuery (the default with PositionsBinlog) or WatermarkLazy
	// (the default with PositionsPoll, and only with it: a binlog stream
	// cannot bound a read after the fact).
	WatermarkSource WatermarkSource
	// ReadTimeout bounds one read (a paused or dead node); default 2s. A read
	// that hits it is counted as an error outcome.
	ReadTimeout time.Duration
	// Via is the routing path: ViaRouter (default) or ViaProxy. Scalar
	// (TokenLSN) routers always run through package router/live.
	Via Via
	// Engine is the servers' engine: compose.EngineMySQL (default),
	// compose.EngineMariaDB (router/live's MariaDB flavor or the proxy,
	// positions polled) or compose.EnginePostgres (live.PGRouter, the
	// lab's own workload in PostgreSQL's SQL): checkEngine.
	Engine compose.Engine
	// RecordHistory keeps every operation of the run in Result.History
	// (memory grows with the run: about 200 bytes per operation).
	RecordHistory bool
	// Proxies is the fleet's size under ViaProxy: each router runs on
	// that many proxies, a session's statements dealt across them in turn
	// (fleet_members the same). Default 1.
	Proxies int
	// ReconnectEvery > 0 redials each lab connection to a proxy after that
	// many statements (ViaProxy): the guarantees then have to outlive the
	// connection. 0: never.
	ReconnectEvery int
	// TokenScope is what a session's token carries under ViaProxy:
	// TokenScopeConnection (default: its writes, in each read's comment;
	// monotonic reads hold per connection) or TokenScopeSession (the
	// proxies' signed session token, set on the connection before each
	// statement and read after it: writes and what the session was shown,
	// across connections and proxies).
	TokenScope TokenScope
	// GlobalSource is where the global routers' live routers take a read's
	// target (live.GlobalSource: the zero value reads the primary's
	// executed set per read; GlobalView uses the router's view of it).
	GlobalSource live.GlobalSource
	// Workload is the schema and read/write paths; default DefaultWorkload.
	Workload Workload
	// SkipSetup keeps the existing schema (the caller set it up).
	SkipSetup bool
	// Progress, when set, is called at the start of each phase and about
	// every 250ms of the workload and drain with the counts so far.
	Progress func(Progress)
	// Logger receives debug detail; default slog.Default().
	Logger *slog.Logger

	// script, when set, replaces the drawn write schedule: the
	// experiments package lab builds on the driver (gated) give each
	// write, and each read not tied to one, its own time (scheduledWrite).
	script []scheduledWrite
}

// Phase is one phase of a lab run, as Progress reports it.
type Phase string

const (
	// PhaseSetUp: schema, the replicas catching up, the condition.
	PhaseSetUp Phase = "set-up"
	// PhaseWorkload: writes are offered (Progress.Elapsed of Total).
	PhaseWorkload Phase = "workload"
	// PhaseDrain: the writes are in; the reads that follow them finish.
	PhaseDrain Phase = "drain"
	// PhaseFit: the simulator's replica model is fitted to the measured lag.
	PhaseFit Phase = "fit"
	// PhaseSimulation: the simulator predicts the routers (and a
	// scenario's own simulator tables).
	PhaseSimulation Phase = "simulation"
)

// Progress is a snapshot of a running experiment.
type Progress struct {
	// Phase is the phase running.
	Phase Phase
	// Elapsed is the wall time since the measurement began.
	Elapsed time.Duration
	// Total is the offered run length (all phases).
	Total time.Duration
	// Reads, RYW and MR are counts so far over every router.
	Reads, RYW, MR int64
}

// validate fills defaults and rejects nonsense.
func (c *Config) validate() error {
	if c.Sessions == 0 {
		c.Sessions = 2000
	}
	if c.HotRows == 0 {
		c.HotRows = 8
	}
	if c.WriteRate == 0 {
		c.WriteRate = 200
	}
	if c.Duration == 0 {
		c.Duration = 20 * time.Second
	}
	if c.ReadsPerWrite == 0 {
		c.ReadsPerWrite = 3
	}
	if c.GapMin == 0 {
		c.GapMin = 15 * time.Millisecond
	}
	if c.GapMax == 0 {
		c.GapMax = 4 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Mode == "" {
		c.Mode = Concurrent
	}
	if c.Workers == 0 {
		c.Workers = 24
	}
	if c.PollInterval == 0 {
		c.PollInterval = 5 * time.Millisecond
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 2 * time.Second
	}
	if c.Via == "" {
		c.Via = ViaRouter
	}
	if c.Proxies == 0 {
		c.Proxies = 1
	}
	if c.TokenScope == "" {
		c.TokenScope = TokenScopeConnection
	}
	if c.Engine == "" {
		c.Engine = compose.EngineMySQL
	}
	if c.Positions == "" {
		c.Positions = PositionsBinlog
		if c.Engine == compose.EngineMariaDB || c.Engine == compose.EnginePostgres {
			c.Positions = PositionsPoll // binlogwatch reads MySQL's GTID events
		}
	}
	if c.WatermarkSource == "" {
		c.WatermarkSource = WatermarkQuery
		if c.Positions == PositionsPoll && c.Engine == compose.EngineMySQL {
			c.WatermarkSource = WatermarkLazy
		}
	}
	if c.Workload == nil {
		c.Workload = &DefaultWorkload{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var errs []error
	if c.Sessions < 1 || c.Sessions > 10_000_000 {
		errs = append(errs, fmt.Errorf("sessions %d out of range 1..10000000", c.Sessions))
	}
	if c.HotRows < 1 || c.HotRows > 1000 {
		errs = append(errs, fmt.Errorf("hot rows %d out of range 1..1000", c.HotRows))
	}
	if c.WriteRate < 0 || math.IsNaN(c.WriteRate) || math.IsInf(c.WriteRate, 0) || c.WriteRate > 100_000 {
		errs = append(errs, fmt.Errorf("write rate %v out of range (0, 100000]", c.WriteRate))
	}
	if c.Duration < 0 || c.Duration > 24*time.Hour {
		errs = append(errs, fmt.Errorf("duration %v out of range (0, 24h]", c.Duration))
	}
	if c.ReadsPerWrite < 0 || c.ReadsPerWrite > 1000 {
		errs = append(errs, fmt.Errorf("reads per write %d out of range 0..1000", c.ReadsPerWrite))
	}
	if c.GapMin < 0 || c.GapMax < c.GapMin {
		errs = append(errs, fmt.Errorf("gap bounds [%v, %v] make no sense", c.GapMin, c.GapMax))
	}
	if c.Mode != Concurrent && c.Mode != Sequential {
		errs = append(errs, fmt.Errorf("unknown mode %q (want concurrent or sequential)", c.Mode))
	}
	if c.Workers < 1 || c.Workers > 256 {
		errs = append(errs, fmt.Errorf("workers %d out of range 1..256", c.Workers))
	}
	if c.PollInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("poll interval %v below 1ms", c.PollInterval))
	}
	if c.ReadTimeout < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("read timeout %v below 10ms", c.ReadTimeout))
	}
	if c.GlobalSource > live.GlobalView {
		errs = append(errs, fmt.Errorf("unknown global source %d", c.GlobalSource))
	}
	if c.Via != ViaRouter && c.Via != ViaProxy {
		errs = append(errs, fmt.Errorf("unknown path %q (want router or proxy)", c.Via))
	}
	errs = append(errs, c.checkFleet()...)
	errs = append(errs, c.checkEngine()...)
	if c.Condition.has(CondRowLock) && lockQuery(c.Workload) == "" {
		errs = append(errs, fmt.Errorf("condition %s needs a workload that can lock a hot row (LockQuery, as DefaultWorkload has)", CondRowLock))
	}
	if c.Positions != PositionsBinlog && c.Positions != PositionsPoll {
		errs = append(errs, fmt.Errorf("unknown positions %q (want binlog or poll)", c.Positions))
	}
	switch {
	case c.WatermarkSource != WatermarkQuery && c.WatermarkSource != WatermarkLazy:
		errs = append(errs, fmt.Errorf("unknown watermark source %q (want query or lazy)", c.WatermarkSource))
	case c.WatermarkSource == WatermarkLazy && c.Positions != PositionsPoll:
		errs = append(errs, errors.New("watermark source lazy needs positions poll (a binlog stream cannot bound a read after the fact)"))
	}
	if len(c.Routers) == 0 {
		errs = append(errs, errors.New("no routers"))
	}
	for i, w := range c.Weights {
		if w < 1 || w > hashroute.MaxWeight {
			errs = append(errs, fmt.Errorf("weight %d of replica %d out of range 1..%d", w, i+1, hashroute.MaxWeight))
		}
	}
	if c.Mode == Concurrent && len(c.Routers) > c.Sessions {
		errs = append(errs, fmt.Errorf("%d routers for %d sessions", len(c.Routers), c.Sessions))
	}
	names := map[string]bool{}
	for i := range c.Routers {
		r := &c.Routers[i]
		if r.Name == "" {
			r.Name = r.Policy.String()
		}
		if r.Token == "" {
			r.Token = TokenGTID
		}
		if r.Token != TokenGTID && r.Token != TokenLSN {
			errs = append(errs, fmt.Errorf("router %s: unknown token kind %q", r.Name, r.Token))
		}
		if names[r.Name] {
			errs = append(errs, fmt.Errorf("two routers named %q", r.Name))
		}
		names[r.Name] = true
		if err := r.Policy.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("router %s: %w", r.Name, err))
		}
		if err := r.Cap.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("router %s: %w", r.Name, err))
		}
	}
	if err := c.Condition.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("lab: bad config: %w", errors.Join(errs...))
	}
	return nil
}

// DefaultRouters returns the six routers with the policies' default
// parameters (window 500ms, wait budget 400ms), no cap.
func DefaultRouters() []RouterSpec {
	out := make([]RouterSpec, 0, 6)
	for _, k := range router.PolicyKinds() {
		p, err := router.ParsePolicy(k.String())
		if err != nil {
			panic(fmt.Sprintf("lab: router.ParsePolicy(%q): %v", k, err)) // a router package bug
		}
		out = append(out, RouterSpec{Policy: p})
	}
	return out
}

// ParseRouters parses a comma-separated list of router.ParsePolicy texts.
func ParseRouters(s string) ([]RouterSpec, error) {
	var out []RouterSpec
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := router.ParsePolicy(f)
		if err != nil {
			return nil, err
		}
		out = append(out, RouterSpec{Name: f, Policy: p})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("lab: no routers in %q", s)
	}
	return out, nil
}

// ParseGlobalSource parses a global routers' target source name
// (primary-query or view) for Config.GlobalSource.
func ParseGlobalSource(s string) (live.GlobalSource, error) { return live.ParseGlobalSource(s) }

// TokenScope is what a lab session's token carries through the proxy
// (Config.TokenScope).
type TokenScope string

// The token scopes.
const (
	TokenScopeConnection TokenScope = "connection"
	TokenScopeSession    TokenScope = "session"
)

// checkFleet checks proxies, reconnect-every and token-scope: a fleet, a
// reconnect or session tokens need --via proxy.
func (c *Config) checkFleet() []error {
	var errs []error
	if c.Proxies < 1 || c.Proxies > 16 {
		errs = append(errs, fmt.Errorf("proxies %d out of range 1..16", c.Proxies))
	}
	if c.ReconnectEvery < 0 {
		errs = append(errs, fmt.Errorf("negative reconnect-every %d", c.ReconnectEvery))
	}
	if c.TokenScope != TokenScopeConnection && c.TokenScope != TokenScopeSession {
		errs = append(errs, fmt.Errorf("unknown token scope %q (want connection or session)", c.TokenScope))
	}
	if c.Via != ViaProxy && (c.Proxies > 1 || c.ReconnectEvery > 0 || c.TokenScope == TokenScopeSession) {
		errs = append(errs, errors.New("proxies, reconnect-every and token-scope session need --via proxy"))
	}
	return errs
}

// checkEngine refuses what the driver cannot run on c.Engine. On MariaDB
// it routes GTID positions through router/live (or the proxy, engine
// mariadb), polls positions (binlogwatch reads MySQL's GTID events) and
// has no scalar token. On PostgreSQL every router runs through
// live.PGRouter (checkPostgres).
func (c *Config) checkEngine() []error {
	if c.Engine != compose.EnginePostgres && c.Condition.ApplyDelay%time.Second != 0 {
		return []error{fmt.Errorf("apply delay %v: engine %s takes whole seconds (SOURCE_DELAY, MASTER_DELAY; PostgreSQL takes milliseconds)", c.Condition.ApplyDelay, c.Engine)}
	}
	switch c.Engine {
	case compose.EngineMySQL:
		return nil
	case compose.EngineMariaDB:
	case compose.EnginePostgres:
		return c.checkPostgres()
	default:
		return []error{fmt.Errorf("unknown engine %q (want one of %v)", c.Engine, compose.Engines())}
	}
	var errs []error
	if c.Positions != PositionsPoll {
		errs = append(errs, errors.New("engine mariadb needs positions poll: binlogwatch reads MySQL's GTID events"))
	}
	if c.WatermarkSource != WatermarkQuery {
		errs = append(errs, errors.New("engine mariadb needs watermark source query: the lazy one bounds reads with MySQL's performance_schema.log_status"))
	}
	if c.Condition.has(CondUnordered) {
		errs = append(errs, fmt.Errorf("condition %s sets MySQL's replica_preserve_commit_order", CondUnordered))
	}
	for _, r := range c.Routers {
		if r.Token == TokenLSN {
			errs = append(errs, fmt.Errorf("router %s: the scalar token is MySQL's transaction count", r.Name))
		}
	}
	return errs
}

// checkPostgres refuses what the driver cannot run on PostgreSQL: it
// routes through live.PGRouter only (not the proxy, which speaks MySQL's
// protocol), over polled standby positions, with the lab's own workload,
// its token a commit LSN (a router's token kind is not asked), and no
// global policy, drift events or MySQL-only conditions.
func (c *Config) checkPostgres() []error {
	var errs []error
	if c.Via != ViaRouter {
		errs = append(errs, errors.New("engine postgres runs via router: the proxy speaks MySQL's protocol"))
	}
	if c.Positions != PositionsPoll {
		errs = append(errs, errors.New("engine postgres needs positions poll: binlogwatch reads MySQL's binary log"))
	}
	if _, err := pgWorkloadOf(c.Workload); err != nil {
		errs = append(errs, err)
	}
	for _, n := range []string{CondUnordered, CondRowLock} {
		if c.Condition.has(n) {
			errs = append(errs, fmt.Errorf("condition %s is MySQL's (engine postgres)", n))
		}
	}
	for _, ev := range c.Condition.Events {
		if ev.Kind == EvDrift {
			errs = append(errs, errors.New("engine postgres: drift events' outside readers speak MySQL's protocol"))
			break
		}
	}
	for _, r := range c.Routers {
		if r.Policy.Kind == router.PolicyGlobal {
			errs = append(errs, fmt.Errorf("router %s: engine postgres has no global policy (live.PGRouter reads no per-read target)", r.Name))
		}
	}
	return errs
}
