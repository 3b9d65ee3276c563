package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/walwatch"
)

// PGConfig configures a PGRouter: the live router over PostgreSQL commit
// LSNs (the Postgres flavor), with its connections through pgx.
type PGConfig struct {
	// Primary is the current primary.
	Primary Node
	// Replicas are the streaming standbys in configured order.
	Replicas []Node
	// User, Password and Database are used on every connection (Database
	// default "postgres").
	User, Password, Database string
	// Policy is the default policy of new sessions.
	Policy router.Policy
	// Cap limits freshness fallbacks (zero value: no cap).
	Cap router.Cap
	// Positions supplies the nodes' replay positions and health. Required:
	// NewPGPositions builds the configured kind (polling, the primary's
	// walsender feedback, or that with polling as a counted fallback);
	// NewPGPoller is the polling source alone. A source that follows the
	// primary (a *PGPositionSource) is retargeted by Failover and
	// FailoverAt.
	Positions PositionSource[gtid.PGLSN]
	// Epoch is the topology epoch at start (Failover raises it).
	Epoch uint64
	// DownHold is how long a failed node is skipped. Default 1s.
	DownHold time.Duration
	// DialTimeout bounds one connection attempt. Default 2s.
	DialTimeout time.Duration
	// StatementTimeout bounds each statement the router runs for a session
	// (its network reads and writes end when it passes). Default 5s.
	StatementTimeout time.Duration
	// MaxConns bounds each node's connection pool. Default 8.
	MaxConns int32
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger receives state changes. Default slog.Default().
	Logger *slog.Logger
	// Seed seeds the router's random draws (0: random).
	Seed uint64
	// Trace records each read's decisions (PGRead.Trace,
	// ReadError.Trace), as Config.Trace.
	Trace bool
}

func (c *PGConfig) validate() error {
	if c.Database == "" {
		c.Database = "postgres"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = 5 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = 8
	}
	if c.DialTimeout < 0 || c.StatementTimeout < 0 || c.MaxConns < 0 {
		return errors.New("router: pg config: negative DialTimeout, StatementTimeout or MaxConns")
	}
	return nil
}

// PGRouter is the live causal read router for PostgreSQL. Its decisions
// are a Router[gtid.PGLSN]'s (DecideLive, waits on the PositionSource, the
// cap, epochs, metrics): only the connections differ, because PostgreSQL
// does not speak MySQL's protocol. Writes run on the primary's pool and
// their token is pg_current_wal_lsn() read on the same connection right
// after the commit (Postgres.WritePosition); reads run through
// LiveSession.QueryFunc on the chosen node's pool, the watermark read on
// the same connection after the statement. Safe for concurrent use; each
// PGSession by one goroutine at a time.
type PGRouter struct {
	rt  *Router[gtid.PGLSN]
	cfg PGConfig

	mu    sync.Mutex
	pools map[string]*pgxpool.Pool // per node address
}

// NewPG validates cfg, builds the router and reads the primary's position
// (checking it is not in recovery).
func NewPG(ctx context.Context, cfg PGConfig) (*PGRouter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rt, err := build(Config[gtid.PGLSN]{Flavor: Postgres{}, Primary: cfg.Primary, Replicas: cfg.Replicas, User: cfg.User,
		Password: cfg.Password, Database: cfg.Database, Policy: cfg.Policy, Cap: cfg.Cap, Positions: cfg.Positions,
		Wait: WaitWatcher, Epoch: cfg.Epoch, DownHold: cfg.DownHold, DialTimeout: cfg.DialTimeout,
		Registerer: cfg.Registerer, Logger: cfg.Logger, Seed: cfg.Seed, Trace: cfg.Trace})
	if err != nil {
		return nil, err
	}
	r := &PGRouter{rt: rt, cfg: cfg, pools: map[string]*pgxpool.Pool{}}
	rt.primaryReader = r.primaryPosition // a refusal's re-read, over pgx
	pos, err := r.primaryPosition(ctx, cfg.Primary)
	var tli uint32
	if err == nil {
		tli, err = r.primaryTimeline(ctx, cfg.Primary)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	rt.mu.Lock()
	rt.st.PrimaryPos = pos
	rt.mu.Unlock()
	setPollTimeline(cfg.Positions, tli)
	return r, nil
}

// Router is the decision side (epoch, failures, metrics).
func (r *PGRouter) Router() *Router[gtid.PGLSN] { return r.rt }

// Close closes every pool.
func (r *PGRouter) Close() {
	r.mu.Lock()
	pools := r.pools
	r.pools = map[string]*pgxpool.Pool{}
	r.mu.Unlock()
	for _, p := range pools {
		p.Close()
	}
	r.rt.Close()
}

// pgConnString is pgx's connection string for addr.
func pgConnString(addr, user, password, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: addr, Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// pool returns addr's pool (created on first use, under ctx's values
// but not its cancellation: the pool outlives the read; it dials lazily).
func (r *PGRouter) pool(ctx context.Context, addr string) (*pgxpool.Pool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pools[addr]; ok {
		return p, nil
	}
	pc, err := pgxpool.ParseConfig(pgConnString(addr, r.cfg.User, r.cfg.Password, r.cfg.Database))
	if err != nil {
		return nil, fmt.Errorf("router: pg pool for %s: %w", addr, err)
	}
	pc.MaxConns = r.cfg.MaxConns
	pc.ConnConfig.ConnectTimeout = r.cfg.DialTimeout
	p, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), pc)
	if err != nil {
		return nil, fmt.Errorf("router: pg pool for %s: %w", addr, err)
	}
	r.pools[addr] = p
	return p, nil
}

// acquire borrows a connection to addr, bounded by the dial timeout.
func (r *PGRouter) acquire(ctx context.Context, addr string) (*pgxpool.Conn, error) {
	p, err := r.pool(ctx, addr)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
	defer cancel()
	c, err := p.Acquire(actx)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	return c, nil
}

// Warm dials up to n connections (at most MaxConns) to every node ahead
// of the first statements: a pool dials lazily, and a burst's first
// statements would otherwise wait for the dials.
func (r *PGRouter) Warm(ctx context.Context, n int) error {
	n = min(n, int(r.cfg.MaxConns))
	r.rt.mu.Lock()
	nodes := append([]Node{r.rt.st.Primary}, r.rt.st.Replicas...)
	r.rt.mu.Unlock()
	var errs []error
	for _, nd := range nodes {
		conns := make([]*pgxpool.Conn, 0, n)
		for range n {
			c, err := r.acquire(ctx, nd.Addr)
			if err != nil {
				errs = append(errs, err)
				break
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Release()
		}
	}
	return errors.Join(errs...)
}

// primaryPosition checks that n is a primary and reads its position.
func (r *PGRouter) primaryPosition(ctx context.Context, n Node) (gtid.PGLSN, error) {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	c, err := r.acquire(sctx, n.Addr)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	sc := pgSessionConn{c.Conn()}
	if err := (Postgres{}).TrackSession(sctx, sc); err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrNoSessionTracking, n.Addr, err)
	}
	text, err := sc.ReadValue(sctx, pgExecutedQuery)
	if err != nil {
		return 0, fmt.Errorf("router: read the primary's position: %w", err)
	}
	return Postgres{}.ParseExecuted(text)
}

// primaryTimeline reads primary n's timeline.
func (r *PGRouter) primaryTimeline(ctx context.Context, n Node) (uint32, error) {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
	defer cancel()
	c, err := r.acquire(sctx, n.Addr)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	text, err := pgSessionConn{c.Conn()}.ReadValue(sctx, pgTimelineQuery)
	if err != nil {
		return 0, fmt.Errorf("router: read %s's timeline: %w", n.Addr, err)
	}
	return parsePGTimeline(text)
}

// Failover switches the router to a new primary and epoch, as
// Router.Failover does, reading the new primary's position and timeline
// over pgx. The router switches first, then its position source is told
// (retargetPositions): until then the source's poller still answers no
// position for a node that knows of the new timeline, which makes a read
// wait or go to the primary, never pass a lost write's token.
func (r *PGRouter) Failover(ctx context.Context, primary Node, replicas []Node, epoch uint64) error {
	pos, err := r.primaryPosition(ctx, primary)
	if err != nil {
		return fmt.Errorf("router: failover: %w", err)
	}
	tli, err := r.primaryTimeline(ctx, primary)
	if err != nil {
		return fmt.Errorf("router: failover: %w", err)
	}
	if err := r.rt.failoverTo(primary, replicas, epoch, pos); err != nil {
		return err
	}
	return r.retargetPositions(primary, tli)
}

// setPollTimeline binds the PostgreSQL pollers of src (a Poller from
// NewPGPoller, or a PGPositionSource's) to timeline tli (pgPollFlavor).
func setPollTimeline(src PositionSource[gtid.PGLSN], tli uint32) {
	var pl *Poller[gtid.PGLSN]
	switch s := src.(type) {
	case *Poller[gtid.PGLSN]:
		pl = s
	case *PGPositionSource:
		pl = s.poller
	}
	if pl == nil {
		return
	}
	if f, ok := pl.cfg.Flavor.(*pgPollFlavor); ok {
		f.setTimeline(tli)
	}
}

// retargetPositions points a source that follows the primary at the new
// one, on timeline tli.
func (r *PGRouter) retargetPositions(primary Node, tli uint32) error {
	setPollTimeline(r.cfg.Positions, tli)
	if ps, ok := r.cfg.Positions.(primarySetter); ok {
		if err := ps.SetPrimary(primary.Name); err != nil {
			return fmt.Errorf("router: failover: tell the position source the primary: %w", err)
		}
	}
	if rs, ok := r.cfg.Positions.(pgRetargeter); ok {
		if err := rs.RetargetPrimary(primary.Addr); err != nil {
			return fmt.Errorf("router: failover: retarget the position source: %w", err)
		}
	}
	return nil
}

// FailoverAt is Failover when the caller knows where the new timeline
// forked off the old one (the timeline history's switch point, compose's
// FailoverResult.SwitchPoint): WAL up to it is shared, so a token at or
// below it survived and one above it was lost. It is the exact base for
// Policy.CheckEpoch; the position Failover reads after the promotion also
// covers the promotion's own WAL records, past the fork. It reads the new
// primary's timeline (for the position source, as Failover).
func (r *PGRouter) FailoverAt(ctx context.Context, primary Node, replicas []Node, epoch uint64, switchPoint gtid.PGLSN) error {
	tli, err := r.primaryTimeline(ctx, primary)
	if err != nil {
		return fmt.Errorf("router: failover: %w", err)
	}
	if err := r.rt.failoverTo(primary, replicas, epoch, switchPoint); err != nil {
		return err
	}
	return r.retargetPositions(primary, tli)
}

// PGSession is one client's causal state on a PGRouter.
type PGSession struct {
	r *PGRouter
	s *LiveSession[gtid.PGLSN]
}

// NewSession starts a session with the router's default policy.
func (r *PGRouter) NewSession() *PGSession { return &PGSession{r: r, s: r.rt.NewSession()} }

// Live is the session's decision state (token, watermark, policy).
func (s *PGSession) Live() *LiveSession[gtid.PGLSN] { return s.s }

// ErrPGTransaction is returned by PGSession.Exec for a statement that left
// its connection inside a transaction: the router runs autocommit
// statements only (it rolled the transaction back).
var ErrPGTransaction = errors.New("router: pg: a statement left a transaction open; PGSession.Exec runs autocommit statements only (rolled back)")

// Exec runs one autocommit statement on the primary; its token
// (pg_current_wal_lsn() read on the same connection right after the
// commit) joins the session's and the router's view of the primary, as
// LiveSession.ExecWrite does, and is returned. Every statement is tokened,
// DDL and statements that changed no rows included: PostgreSQL's command
// tags do not say whether WAL was written (CREATE TABLE reports 0 rows),
// and a token past a statement that wrote nothing is still sound, only
// asks a standby for a little more.
func (s *PGSession) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, gtid.PGLSN, error) {
	var tag pgconn.CommandTag
	pos, err := s.write(ctx, func(ctx context.Context, c *pgx.Conn) error {
		var err error
		tag, err = c.Exec(ctx, sql, args...)
		return err
	})
	return tag, pos, err
}

// ExecRows is Exec for a statement that returns rows (a write with
// RETURNING, or a data-modifying WITH): the rows (pgx's decoded values),
// then the token. When the statement ran but its token could not be read,
// the rows come back with an error wrapping ErrMissingGTID: the write
// committed, untokened.
func (s *PGSession) ExecRows(ctx context.Context, sql string, args ...any) ([][]any, gtid.PGLSN, error) {
	var rows [][]any
	pos, err := s.write(ctx, func(ctx context.Context, c *pgx.Conn) error {
		rs, err := c.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		rows, err = collectRows(rs)
		return err
	})
	return rows, pos, err
}

// write runs run on a primary connection as one autocommit statement and
// tokens it (Exec).
func (s *PGSession) write(ctx context.Context, run func(context.Context, *pgx.Conn) error) (gtid.PGLSN, error) {
	rt := s.r.rt
	rt.mu.Lock()
	primary, epoch := rt.st.Primary, rt.st.Epoch
	rt.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, s.r.cfg.StatementTimeout)
	defer cancel()
	c, err := s.r.acquire(sctx, primary.Addr)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	if err := run(sctx, c.Conn()); err != nil {
		return 0, err
	}
	if c.Conn().PgConn().TxStatus() != 'I' {
		_, rerr := c.Exec(sctx, "ROLLBACK")
		return 0, errors.Join(ErrPGTransaction, rerr)
	}
	pos, _, err := Postgres{}.WritePosition(sctx, Ack{}, pgSessionConn{c.Conn()})
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrMissingGTID, err)
	}
	rt.recordWrite(&s.s.st, pos, epoch, rt.now())
	rt.mu.Lock()
	if rt.st.Epoch == epoch && !rt.st.PrimaryPos.Contains(pos) {
		rt.st.PrimaryPos = rt.st.PrimaryPos.Union(pos)
	}
	rt.mu.Unlock()
	rt.m.writes.Inc()
	return pos, nil
}

// collectRows reads every row of rs and closes it.
func collectRows(rs pgx.Rows) ([][]any, error) {
	defer rs.Close()
	var rows [][]any
	for rs.Next() {
		vals, err := rs.Values()
		if err != nil {
			return nil, err
		}
		rows = append(rows, vals)
	}
	rs.Close()
	return rows, rs.Err()
}

// PGRead is a routed read's answer: the router's account and the rows.
type PGRead struct {
	*Read[gtid.PGLSN]
	// Rows are the result's rows (pgx's decoded values).
	Rows [][]any
}

// Query routes one read with the session's policy (LiveSession.QueryFunc)
// and runs it on the chosen node's pool. A statement error (SQLSTATE
// outside connection and operator-intervention classes) is the caller's:
// returned, the node not held down; any other error holds the node down
// and the router decides again.
func (s *PGSession) Query(ctx context.Context, sql string, args ...any) (*PGRead, error) {
	var rows [][]any
	rd, err := s.s.QueryFunc(ctx, s.s.policy, ReadOptions[gtid.PGLSN]{}, func(ctx context.Context, t Target) (gtid.PGLSN, error) {
		rows = nil
		sctx, cancel := context.WithTimeout(ctx, s.r.cfg.StatementTimeout)
		defer cancel()
		c, err := s.r.acquire(sctx, t.Node.Addr)
		if err != nil {
			return 0, err
		}
		defer c.Release()
		rs, err := c.Query(sctx, sql, args...)
		if err == nil {
			rows, err = collectRows(rs)
		}
		if err != nil {
			return 0, pgRunError(err)
		}
		if !t.Watermark {
			return 0, nil
		}
		text, err := pgSessionConn{c.Conn()}.ReadValue(sctx, pgExecutedQuery)
		if err != nil {
			return 0, pgRunError(err)
		}
		return Postgres{}.ParseExecuted(text)
	})
	if err != nil {
		return nil, err
	}
	return &PGRead{Read: rd, Rows: rows}, nil
}

// pgRunError classifies a pgx error for QueryFunc: a server's statement
// error is the caller's (a *RunError without NodeFailed); connection
// exceptions (SQLSTATE class 08), operator intervention (57: shutdown,
// cancel) and recovery conflicts on a standby (40001) are the node's, as
// is every error without a SQLSTATE (returned as is: the router holds the
// node down and decides again).
func pgRunError(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch {
	case len(pe.Code) >= 2 && (pe.Code[:2] == "08" || pe.Code[:2] == "57"), pe.Code == "40001":
		return &RunError{Err: err, NodeFailed: true, Retry: true}
	}
	return &RunError{Err: err}
}

// pgSessionConn is the SessionConn of a pgx connection.
type pgSessionConn struct{ c *pgx.Conn }

var _ SessionConn = pgSessionConn{}

// Exec implements SessionConn (PostgreSQL reports no session tracking).
func (p pgSessionConn) Exec(ctx context.Context, q string) (Ack, error) {
	_, err := p.c.Exec(ctx, q)
	return Ack{}, err
}

// ReadValue implements SessionConn: NULL reads as "".
func (p pgSessionConn) ReadValue(ctx context.Context, q string) (string, error) {
	var v *string
	if err := p.c.QueryRow(ctx, q).Scan(&v); err != nil {
		return "", err
	}
	if v == nil {
		return "", nil
	}
	return *v, nil
}

// NewPGPoller is the polling PositionSource for PostgreSQL: each node's
// pg_last_wal_replay_lsn() (standby) or pg_current_wal_lsn() (primary)
// every cfg.Interval over a pgx connection. cfg.Flavor must be Postgres{}
// or nil; DialTimeout also bounds each poll. A PGRouter over it binds its
// queries to the primary's timeline (NewPG, Failover, FailoverAt): a node
// that knows of a later timeline answers no position (pgPollFlavor), so
// the poll user needs EXECUTE on pg_stat_file.
func NewPGPoller(cfg PollerConfig[gtid.PGLSN], database string) (*Poller[gtid.PGLSN], error) {
	switch cfg.Flavor.(type) {
	case nil, Postgres:
		cfg.Flavor = &pgPollFlavor{}
	default:
		return nil, fmt.Errorf("router: pg poller: flavor %s, want Postgres", cfg.Flavor.Name())
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if database == "" {
		database = "postgres"
	}
	user, password, timeout := cfg.User, cfg.Password, cfg.DialTimeout
	return newPoller(cfg, func(ctx context.Context, addr string) (valueConn, error) {
		cc, err := pgx.ParseConfig(pgConnString(addr, user, password, database))
		if err != nil {
			return nil, err
		}
		cc.ConnectTimeout = timeout
		cc.DialFunc = (&net.Dialer{Timeout: timeout}).DialContext
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return nil, err
		}
		return pgValueConn{c: c, timeout: timeout, ctx: context.WithoutCancel(ctx)}, nil
	}), nil
}

// pgValueConn is a pgx poll connection; each query and the close are
// bounded by timeout (the close under ctx, the dial's context without its
// cancellation: the poller closes after its context ended).
type pgValueConn struct {
	c       *pgx.Conn
	timeout time.Duration
	ctx     context.Context
}

func (p pgValueConn) ReadValue(ctx context.Context, q string) (string, error) {
	qctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	return pgSessionConn{p.c}.ReadValue(qctx, q)
}

func (p pgValueConn) Close() error {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	return p.c.Close(ctx)
}

// PGPositions names how a PGRouter learns its standbys' replay positions:
// the explicit choice of PGPositionsConfig.Kind.
type PGPositions string

const (
	// PGPositionsPoll polls each standby's pg_last_wal_replay_lsn() (and
	// the primary's pg_current_wal_lsn()) every interval: one query per
	// node per tick (NewPGPoller).
	PGPositionsPoll PGPositions = "poll"
	// PGPositionsWalsender reads the primary's pg_stat_replication every
	// interval (package walwatch): one query per tick for every standby,
	// none on the standbys. A standby the watcher does not vouch for
	// (missing from pg_stat_replication, no or stale reply, primary
	// down) is unhealthy.
	PGPositionsWalsender PGPositions = "walsender"
	// PGPositionsWalsenderPoll is PGPositionsWalsender with polling as
	// its fallback: for a standby the watcher does not vouch for, the
	// standby's own polled pg_last_wal_replay_lsn() is used when the poll
	// is healthy (a standby cut from the primary still serves reads up to
	// what it replayed). Every such answer is counted by the watcher's
	// health (causallab_router_pg_position_fallbacks_total).
	PGPositionsWalsenderPoll PGPositions = "walsender+poll"
)

// PGPositionsConfig configures NewPGPositions.
type PGPositionsConfig struct {
	// Kind chooses the source. Required.
	Kind PGPositions
	// Primary is the current primary; Replicas the standbys.
	Primary  Node
	Replicas []Node
	// User, Password and Database are used on every connection (Database
	// default "postgres").
	User, Password, Database string
	// Slots maps a standby's node name to the physical replication slot it
	// streams for, by which the walsender source finds its row of
	// pg_stat_replication (compose names each standby's slot after the
	// node); a standby not in Slots is found by application_name = its
	// node name. Unused by PGPositionsPoll.
	Slots map[string]string
	// Interval is the tick of the watcher and of the poller. Default 10ms.
	Interval time.Duration
	// StaleAfter is walwatch.Config.StaleAfter (default 15s).
	StaleAfter time.Duration
	// DialTimeout bounds each connection attempt and query. Default 2s.
	DialTimeout time.Duration
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger receives state changes. Default slog.Default().
	Logger *slog.Logger
}

func (c *PGPositionsConfig) validate() error {
	switch c.Kind {
	case PGPositionsPoll, PGPositionsWalsender, PGPositionsWalsenderPoll:
	default:
		return fmt.Errorf("router: pg positions: kind %q is not %q, %q or %q", c.Kind, PGPositionsPoll, PGPositionsWalsender, PGPositionsWalsenderPoll)
	}
	if c.Primary.Name == "" || c.Primary.Addr == "" {
		return errors.New("router: pg positions: the primary needs a name and an address")
	}
	if len(c.Replicas) == 0 {
		return errors.New("router: pg positions: no replicas")
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Millisecond
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// PGPositionSource is the PositionSource NewPGPositions builds: a
// poller, a walwatch watcher, or a watcher with the poller as its counted
// fallback. Run drives it.
type PGPositionSource struct {
	kind      PGPositions
	watcher   *walwatch.Watcher      // nil for PGPositionsPoll
	poller    *Poller[gtid.PGLSN]    // nil for PGPositionsWalsender
	fallbacks *prometheus.CounterVec // node, reason (walwatch health), op (position, wait)
	nFallback atomic.Uint64
}

var (
	_ PositionSource[gtid.PGLSN] = (*PGPositionSource)(nil)
	_ pgRetargeter               = (*PGPositionSource)(nil)
)

// primarySetter is a position source that polls the primary and the
// standbys differently (Poller with a StandbyQuerier flavor).
type primarySetter interface {
	SetPrimary(name string) error
}

var (
	_ primarySetter = (*Poller[gtid.PGLSN])(nil)
	_ primarySetter = (*PGPositionSource)(nil)
)

// SetPrimary tells the source's poller, if it has one, which node is the
// primary (PollerConfig.Primary).
func (s *PGPositionSource) SetPrimary(name string) error {
	if s.poller == nil {
		return nil
	}
	return s.poller.SetPrimary(name)
}

// pgRetargeter is a position source that must follow the primary across
// a failover (PGRouter.Failover and FailoverAt tell it).
type pgRetargeter interface {
	RetargetPrimary(addr string) error
}

// NewPGPositions validates cfg and builds the chosen source.
func NewPGPositions(cfg PGPositionsConfig) (*PGPositionSource, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &PGPositionSource{kind: cfg.Kind, fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "causallab", Subsystem: "router", Name: "pg_position_fallbacks_total",
		Help: "Standby positions the walsender source did not vouch for, taken from the polling fallback, by node, walwatch health and op (position, wait).",
	}, []string{"node", "reason", "op"})}
	if cfg.Kind != PGPositionsWalsender {
		nodes := append([]Node{cfg.Primary}, cfg.Replicas...)
		if cfg.Kind == PGPositionsWalsenderPoll {
			nodes = cfg.Replicas
		}
		pl, err := NewPGPoller(PollerConfig[gtid.PGLSN]{Nodes: nodes, User: cfg.User, Password: cfg.Password, Interval: cfg.Interval,
			DialTimeout: cfg.DialTimeout, Primary: cfg.Primary.Name, Logger: cfg.Logger}, cfg.Database)
		if err != nil {
			return nil, err
		}
		s.poller = pl
	}
	if cfg.Kind != PGPositionsPoll {
		wc := walwatch.Config{Name: "router", Primary: cfg.Primary.Addr, User: cfg.User, Password: cfg.Password, Database: cfg.Database,
			Interval: cfg.Interval, QueryTimeout: cfg.DialTimeout, DialTimeout: cfg.DialTimeout, StaleAfter: cfg.StaleAfter,
			Registerer: cfg.Registerer, Logger: cfg.Logger}
		for _, r := range cfg.Replicas {
			wc.Standbys = append(wc.Standbys, walwatch.Standby{Name: r.Name, Slot: cfg.Slots[r.Name]})
		}
		w, err := walwatch.New(wc)
		if err != nil {
			return nil, err
		}
		s.watcher = w
	}
	if cfg.Registerer != nil && s.poller != nil && s.watcher != nil {
		if err := cfg.Registerer.Register(s.fallbacks); err != nil {
			var are prometheus.AlreadyRegisteredError
			existing, ok := (*prometheus.CounterVec)(nil), false
			if errors.As(err, &are) {
				existing, ok = are.ExistingCollector.(*prometheus.CounterVec)
			}
			if !ok {
				return nil, fmt.Errorf("router: pg positions: metrics: %w", err)
			}
			s.fallbacks = existing // sources sharing a registry share the counter
		}
	}
	return s, nil
}

// Kind is the configured kind.
func (s *PGPositionSource) Kind() PGPositions { return s.kind }

// Watcher is the walsender watcher (nil for PGPositionsPoll).
func (s *PGPositionSource) Watcher() *walwatch.Watcher { return s.watcher }

// Fallbacks counts answers taken from the polling fallback.
func (s *PGPositionSource) Fallbacks() uint64 { return s.nFallback.Load() }

// Run drives the watcher and the poller until ctx ends; it returns ctx's
// error.
func (s *PGPositionSource) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if s.watcher != nil {
		wg.Go(func() { _ = s.watcher.Run(ctx) }) // returns ctx's error
	}
	if s.poller != nil {
		wg.Go(func() { _ = s.poller.Run(ctx) }) // returns ctx's error
	}
	wg.Wait()
	return ctx.Err()
}

// RetargetPrimary makes the watcher read the new primary's
// pg_stat_replication (the poller polls every node by name already).
func (s *PGPositionSource) RetargetPrimary(addr string) error {
	if s.watcher == nil {
		return nil
	}
	return s.watcher.Retarget(addr)
}

func (s *PGPositionSource) fellBack(node string, h walwatch.Health, op string) {
	s.nFallback.Add(1)
	s.fallbacks.WithLabelValues(node, h.String(), op).Inc()
}

// Position implements PositionSource.
func (s *PGPositionSource) Position(node string) (gtid.PGLSN, bool) {
	if s.watcher == nil {
		return s.poller.Position(node)
	}
	lsn, h := s.watcher.Position(node)
	if h == walwatch.HealthStreaming {
		return lsn, true
	}
	if s.poller != nil {
		if p, ok := s.poller.Position(node); ok {
			s.fellBack(node, h, "position")
			return p, true
		}
	}
	return lsn, false
}

// WaitFor implements PositionSource: the watcher's notification; with
// the fallback, whichever of watcher and poller sees want first (both
// are lower bounds), the poller's win counted when the watcher did not
// vouch for the node then.
func (s *PGPositionSource) WaitFor(ctx context.Context, node string, want gtid.PGLSN) error {
	switch {
	case s.watcher == nil:
		return s.poller.WaitFor(ctx, node, want)
	case s.poller == nil:
		return s.watcher.WaitFor(ctx, node, want)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	polled := make(chan error, 1)
	go func() { polled <- s.poller.WaitFor(wctx, node, want) }()
	watched := make(chan error, 1)
	go func() { watched <- s.watcher.WaitFor(wctx, node, want) }()
	select {
	case err := <-watched:
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// An unknown node: the poller decides.
		err = <-polled
		return err
	case err := <-polled:
		if err != nil {
			return err
		}
		// Counted only when the watcher does not vouch for the node: a
		// poll that beats a streaming watcher is one lower bound arriving
		// before the other, not a fallback.
		if _, h := s.watcher.Position(node); h != walwatch.HealthStreaming {
			s.fellBack(node, h, "wait")
		}
		return nil
	}
}
