package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
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
	// Positions supplies the nodes' replay positions and health. Required
	// (NewPGPoller is the polling source).
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
		Registerer: cfg.Registerer, Logger: cfg.Logger, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	r := &PGRouter{rt: rt, cfg: cfg, pools: map[string]*pgxpool.Pool{}}
	pos, err := r.primaryPosition(ctx, cfg.Primary)
	if err != nil {
		r.Close()
		return nil, err
	}
	rt.mu.Lock()
	rt.st.PrimaryPos = pos
	rt.mu.Unlock()
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

// Failover switches the router to a new primary and epoch, as
// Router.Failover does, reading the new primary's position over pgx.
func (r *PGRouter) Failover(ctx context.Context, primary Node, replicas []Node, epoch uint64) error {
	pos, err := r.primaryPosition(ctx, primary)
	if err != nil {
		return fmt.Errorf("router: failover: %w", err)
	}
	return r.rt.failoverTo(primary, replicas, epoch, pos)
}

// FailoverAt is Failover when the caller knows where the new timeline
// forked off the old one (the timeline history's switch point, compose's
// FailoverResult.SwitchPoint): WAL up to it is shared, so a token at or
// below it survived and one above it was lost. It is the exact base for
// Policy.CheckEpoch; the position Failover reads after the promotion also
// covers the promotion's own WAL records, past the fork.
func (r *PGRouter) FailoverAt(primary Node, replicas []Node, epoch uint64, switchPoint gtid.PGLSN) error {
	return r.rt.failoverTo(primary, replicas, epoch, switchPoint)
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
	rt := s.r.rt
	rt.mu.Lock()
	primary, epoch := rt.st.Primary, rt.st.Epoch
	rt.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, s.r.cfg.StatementTimeout)
	defer cancel()
	c, err := s.r.acquire(sctx, primary.Addr)
	if err != nil {
		return pgconn.CommandTag{}, 0, err
	}
	defer c.Release()
	tag, err := c.Exec(sctx, sql, args...)
	if err != nil {
		return tag, 0, err
	}
	if c.Conn().PgConn().TxStatus() != 'I' {
		_, rerr := c.Exec(sctx, "ROLLBACK")
		return tag, 0, errors.Join(ErrPGTransaction, rerr)
	}
	pos, _, err := Postgres{}.WritePosition(sctx, Ack{}, pgSessionConn{c.Conn()})
	if err != nil {
		return tag, 0, fmt.Errorf("%w: %v", ErrMissingGTID, err)
	}
	rt.recordWrite(&s.s.st, pos, epoch, rt.now())
	rt.mu.Lock()
	if rt.st.Epoch == epoch && !rt.st.PrimaryPos.Contains(pos) {
		rt.st.PrimaryPos = rt.st.PrimaryPos.Union(pos)
	}
	rt.mu.Unlock()
	rt.m.writes.Inc()
	return tag, pos, nil
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
			for rs.Next() {
				vals, verr := rs.Values()
				if verr != nil {
					err = verr
					break
				}
				rows = append(rows, vals)
			}
			rs.Close()
			if err == nil {
				err = rs.Err()
			}
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
// or nil; DialTimeout also bounds each poll.
func NewPGPoller(cfg PollerConfig[gtid.PGLSN], database string) (*Poller[gtid.PGLSN], error) {
	if cfg.Flavor == nil {
		cfg.Flavor = Postgres{}
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
