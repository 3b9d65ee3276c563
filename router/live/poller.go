package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// PositionSource tells the live router what each node has executed.
// WatchSource (binlogwatch: a binlog stream per node, the recommended
// source, GTID sets only) and Poller (the flavor's executed query every
// interval, the baseline, any flavor) implement it.
type PositionSource[P gtid.Position[P]] interface {
	// Position returns a lower bound of the named node's executed position
	// (never ahead of the node) and whether the source considers the node
	// healthy. An unknown node is (empty position, false). It must not
	// block.
	Position(node string) (P, bool)
	// WaitFor blocks until the node's executed position is known to
	// contain want, or ctx ends (returning ctx's error).
	WaitFor(ctx context.Context, node string, want P) error
}

var (
	_ PositionSource[gtid.Set] = (*Poller[gtid.Set])(nil)
	_ PositionSource[gtid.LSN] = (*Poller[gtid.LSN])(nil)
)

// PollerConfig configures a Poller.
type PollerConfig[P gtid.Position[P]] struct {
	// Flavor gives the query that reads a node's position and its parser.
	// Nil means MySQL{} for a Poller[gtid.Set].
	Flavor Flavor[P]
	// Nodes to poll (replicas, and the primary if the router should know its
	// position).
	Nodes []Node
	// User and Password authenticate the poll connections.
	User, Password string
	// Interval between polls of one node. Default 10ms; at least 1ms.
	// With IdleInterval, the fast interval: a node is polled this often
	// only while some client needs a fresher view of it.
	Interval time.Duration
	// IdleInterval, when set, makes polling demand-driven: a node is polled
	// every IdleInterval unless some client needs a fresher view of it,
	// and every Interval (fast) while one does. Demand is: a WaitFor
	// waiting for a position the node's view lacks (while it waits); a
	// Want whose position the view lacks (until the view holds it, or
	// DownAfter after the node's last Want); the node's first successful
	// poll not yet made. A new demand of an idle node, and every
	// WaitBound, asks for a poll at once (kicks). Sound: a view polled
	// less often is only older, and positions are lower bounds (Position
	// never runs ahead of the node), so routing on it is as safe, only
	// less often able to use a replica; a lazy-watermark bound still
	// comes from a poll that started after the read ended (WaitBound asks
	// for one); health is still the time since the last successful poll
	// (DownAfter's default leaves 5 idle intervals). 0 (the default), or
	// equal to Interval: every node is polled every Interval and no demand
	// is kept (Want is a no-op). Else in [Interval, 1m].
	IdleInterval time.Duration
	// DownAfter marks a node unhealthy after this long without a successful
	// poll. Default 5 × Interval (5 × IdleInterval with one), at least
	// 500ms (a loaded machine delays polls; a flapping health verdict
	// would send reads to the primary). At least Interval, and twice
	// IdleInterval (a node nobody needs must not look down between idle
	// polls).
	DownAfter time.Duration
	// DialTimeout bounds one connection attempt. Default 2s.
	DialTimeout time.Duration
	// PollTimeout bounds one poll (the query and its answer). A poll that
	// overruns closes its connection and the next tick dials again, so a
	// node behind a partition that drops packets is polled afresh once it
	// answers, not after TCP gives up. Default DownAfter (1m if longer);
	// at most 1m.
	PollTimeout time.Duration
	// Primary names the node the router writes to. With a flavor that has
	// a standby query (StandbyQuerier: PostgreSQL), every other node is
	// polled with it, so a standby promoted before the router is told
	// (Router/PGRouter Failover calls SetPrimary) keeps reporting what it
	// replayed, never the new timeline's position, which can pass a lost
	// write's LSN. Need not be one of Nodes (a poller of standbys only).
	// "": every node is polled with Flavor.ExecutedQuery.
	Primary string
	// Bounds makes every poll also read an upper bound of the node's
	// position, recording when each poll started, so the poller can
	// bound after the fact what a read on the node saw (SeenBounder: the
	// lazy watermark, WatermarkLazy). For MySQL a poll then reads
	// performance_schema.log_status (LogStatusFlavor): gtid_executed
	// copied while no commit is in flight, both the position and the
	// exact upper bound, where the node's first poll connection finds it
	// sound (mysqlwire.ProbeLogStatus: the account needs BACKUP_ADMIN,
	// the node its binary log); on a node where it is not, the
	// BoundsQuerier's statement (mysqlwire.BoundsQuery: gtid_executed and
	// the replica's received set, an upper bound that also holds what the
	// replica received but has not applied; the account needs SELECT on
	// performance_schema.replication_connection_status), each such poll
	// counted (LogStatusFallbacks) and the refusal logged once.
	// Ignored (no bounds) for a flavor without a BoundsQuerier.
	Bounds bool
	// Logger receives state changes. Default slog.Default().
	Logger *slog.Logger
}

// BoundsQuerier is a Flavor whose poll can read a node's lower and upper
// bounds in one statement (PollerConfig.Bounds): the answer is the lower
// bound's text, a semicolon, and the text of what the upper bound adds
// (both parsed with ParseExecuted; the upper bound is their union).
type BoundsQuerier interface {
	BoundsQuery() string
}

// BoundsQuery implements BoundsQuerier: mysqlwire.BoundsQuery.
func (MySQL) BoundsQuery() string { return mysqlwire.BoundsQuery }

var _ BoundsQuerier = MySQL{}

func (c *PollerConfig[P]) validate() error {
	if c.Flavor == nil {
		f, ok := any(MySQL{}).(Flavor[P])
		if !ok {
			return fmt.Errorf("router: poller: no Flavor for positions of type %T", *new(P))
		}
		c.Flavor = f
	}
	if len(c.Nodes) == 0 {
		return errors.New("router: poller: no nodes")
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if n.Name == "" || n.Addr == "" {
			return fmt.Errorf("router: poller: node %+v needs a name and an address", n)
		}
		if seen[n.Name] {
			return fmt.Errorf("router: poller: node %q listed twice", n.Name)
		}
		seen[n.Name] = true
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Millisecond
	}
	if c.Interval < time.Millisecond || c.Interval > time.Minute {
		return fmt.Errorf("router: poller: interval %v out of range [1ms, 1m]", c.Interval)
	}
	if c.IdleInterval == c.Interval {
		c.IdleInterval = 0 // always fast
	}
	if c.IdleInterval != 0 && (c.IdleInterval < c.Interval || c.IdleInterval > time.Minute) {
		return fmt.Errorf("router: poller: idle interval %v out of range [interval %v, 1m] (0: always the interval)", c.IdleInterval, c.Interval)
	}
	if c.DownAfter == 0 {
		c.DownAfter = max(5*c.Interval, 5*c.IdleInterval, 500*time.Millisecond)
	}
	if c.DownAfter < c.Interval {
		return fmt.Errorf("router: poller: down-after %v shorter than the interval %v", c.DownAfter, c.Interval)
	}
	if c.DownAfter < 2*c.IdleInterval {
		return fmt.Errorf("router: poller: down-after %v shorter than twice the idle interval %v (a node nobody needs would look down between its polls)", c.DownAfter, c.IdleInterval)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.PollTimeout == 0 {
		c.PollTimeout = min(c.DownAfter, time.Minute)
	}
	if c.PollTimeout < time.Millisecond || c.PollTimeout > time.Minute {
		return fmt.Errorf("router: poller: poll timeout %v out of range [1ms, 1m]", c.PollTimeout)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// pollState is one published answer of a node: immutable once
// published. A poll whose answer is the text the node's last one was, on
// the same connection, publishes no new state (nodeState's times move).
type pollState[P gtid.Position[P]] struct {
	pos     P
	changed chan struct{} // closed when replaced by a different position
	// With bounds (PollerConfig.Bounds): upper is the upper bound the
	// poll read, gen the generation of the connection it ran on.
	upper    P
	hasUpper bool
	gen      uint64
}

// nodeState is what the poller publishes of one node, for lock-free
// readers. Times are nanoseconds since the poller's epoch (monotonic;
// 0: no successful poll yet). A successful poll stores cur (when its
// answer changed), then lastOK, then start: a reader that loads start
// before cur sees the state of that poll or of a later one, whose upper
// bound (same generation) comes from a poll that started later still
// (SeenBound).
type nodeState[P gtid.Position[P]] struct {
	cur atomic.Pointer[pollState[P]]
	// lastOK is when the last successful poll ended, start when its
	// statement was about to be sent.
	lastOK, start atomic.Int64
	// polled, when a WaitBound installed it, is closed (and cleared)
	// after the next successful poll: no channel per poll when nobody
	// waits.
	polled atomic.Pointer[chan struct{}]
	// Demand (PollerConfig.IdleInterval; untouched without one): waiters
	// counts the WaitFor calls waiting for a position the view lacks;
	// under dmu, want is the union of the positions Want was asked for
	// and the view did not hold, wanted until wantUntil (poller epoch
	// nanoseconds; 0: no Want pending). fast is the poll loop's mode
	// (polling every Interval), which a new demand reads to decide
	// whether to kick the loop (see demanded).
	waiters   atomic.Int32
	fast      atomic.Bool
	dmu       sync.Mutex
	want      P
	wantUntil int64
}

// waiter returns the channel the next successful poll closes.
func (ns *nodeState[P]) waiter() chan struct{} {
	for {
		if c := ns.polled.Load(); c != nil {
			return *c
		}
		c := make(chan struct{})
		if ns.polled.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// Poller is the polling PositionSource: one goroutine per node runs the
// flavor's executed query (for MySQL SELECT @@GLOBAL.gtid_executed) every
// Interval and publishes the position. It is the baseline against
// binlogwatch's streams: its view trails a node by up to one interval plus
// a round trip.
type Poller[P gtid.Position[P]] struct {
	cfg    PollerConfig[P]
	dial   dialValue // opens a poll connection (MySQL protocol, or pgx for NewPGPoller)
	states map[string]*nodeState[P]
	// epoch is the origin of nodeState's times (monotonic clock).
	epoch time.Time
	polls atomic.Uint64
	errs  atomic.Uint64
	// fastPolls and idlePolls count the polls (successful or failed) by
	// the loop's mode: idle when an IdleInterval tick started it, fast
	// otherwise (a tick of Interval, a kick, a node's first poll).
	fastPolls, idlePolls atomic.Uint64
	// testHookIdle, when set (tests only), runs on a poll loop about to
	// publish its idle mode (nextFast).
	testHookIdle func()
	// overran counts polls cut by PollTimeout (also counted in errs).
	overran atomic.Uint64
	// primary is the node polled as the primary (PollerConfig.Primary,
	// SetPrimary).
	primary atomic.Pointer[string]
	// bounds: every poll reads the BoundsQuery (PollerConfig.Bounds with
	// a BoundsQuerier flavor); kicks asks a node's poll loop for a poll
	// now (SeenBounder.WaitBound); gens numbers poll connections.
	bounds bool
	kicks  map[string]chan struct{}
	gens   atomic.Uint64
	// logStatus holds each node's log_status verdict (bounds with a
	// LogStatusFlavor; nil otherwise), probed by the node's poll loop;
	// lsFallbacks counts the bounds polls that read the BoundsQuery
	// because the verdict was a refusal.
	logStatus   map[string]*mysqlwire.LogStatus
	lsFallbacks atomic.Uint64
}

// StandbyQuerier is a Flavor with a query for nodes the router treats as
// standbys: their replay position only, which stays where recovery ended
// once the node is promoted (PostgreSQL's pg_last_wal_replay_lsn()).
type StandbyQuerier interface {
	StandbyQuery() string
}

// SetPrimary makes name the node polled as the primary (see
// PollerConfig.Primary); the routers' Failover calls it.
func (p *Poller[P]) SetPrimary(name string) error {
	p.primary.Store(&name)
	return nil
}

// pollQuery is the poll query for node: log_status when exact (the
// node's verdict is sound), else query's.
func (p *Poller[P]) pollQuery(node string, exact bool) string {
	if exact {
		return any(p.cfg.Flavor).(LogStatusFlavor).LogStatusQuery()
	}
	return p.query(node)
}

// query is the poll query for node without log_status: with bounds the
// BoundsQuery; else the flavor's standby query for a node other than the
// primary, when the flavor has one and a primary is set.
func (p *Poller[P]) query(node string) string {
	if p.bounds {
		return any(p.cfg.Flavor).(BoundsQuerier).BoundsQuery()
	}
	if sq, ok := any(p.cfg.Flavor).(StandbyQuerier); ok {
		if prim := p.primary.Load(); prim != nil && *prim != "" && *prim != node {
			return sq.StandbyQuery()
		}
	}
	return p.cfg.Flavor.ExecutedQuery()
}

// NewPoller validates cfg. Call Run to start polling.
func NewPoller[P gtid.Position[P]](cfg PollerConfig[P]) (*Poller[P], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// Every read and write is bounded by PollTimeout (the rolling
	// deadline) as well as by each poll's own deadline.
	d := &mysqlwire.Dialer{User: cfg.User, Password: cfg.Password, Timeout: cfg.DialTimeout, IOTimeout: cfg.PollTimeout}
	return newPoller(cfg, func(ctx context.Context, addr string) (valueConn, error) {
		return d.DialPoll(ctx, addr)
	}), nil
}

// valueConn is one poll connection: it answers one-value queries.
type valueConn interface {
	ReadValue(ctx context.Context, query string) (string, error)
	Close() error
}

// bytesConn is a valueConn whose polls need no context of their own: it
// bounds an exchange by a deadline and is cut when the context it was
// dialled with ends (mysqlwire.PollConn). Its answer is in its own
// buffer, valid until its next exchange.
type bytesConn interface {
	valueConn
	Value(deadline time.Time, query string) ([]byte, error)
}

var _ bytesConn = (*mysqlwire.PollConn)(nil)

// dialValue opens a valueConn to addr.
type dialValue func(ctx context.Context, addr string) (valueConn, error)

// mysqlValueConn is a MySQL-protocol valueConn.
type mysqlValueConn struct{ c *client.Conn }

func (m mysqlValueConn) ReadValue(ctx context.Context, q string) (string, error) {
	return mysqlwire.ReadValue(ctx, m.c, q)
}

func (m mysqlValueConn) Close() error { return m.c.Close() }

// newPoller builds a Poller over validated cfg whose connections dial
// opens.
func newPoller[P gtid.Position[P]](cfg PollerConfig[P], dial dialValue) *Poller[P] {
	p := &Poller[P]{cfg: cfg, dial: dial, states: map[string]*nodeState[P]{}, epoch: time.Now(), kicks: map[string]chan struct{}{}}
	if _, ok := any(cfg.Flavor).(BoundsQuerier); ok && cfg.Bounds {
		p.bounds = true
		if _, ok := any(cfg.Flavor).(LogStatusFlavor); ok {
			p.logStatus = map[string]*mysqlwire.LogStatus{}
			for _, n := range cfg.Nodes {
				p.logStatus[n.Name] = &mysqlwire.LogStatus{}
			}
		}
	}
	prim := cfg.Primary
	p.primary.Store(&prim)
	for _, n := range cfg.Nodes {
		ns := &nodeState[P]{}
		ns.cur.Store(&pollState[P]{changed: make(chan struct{})})
		p.states[n.Name] = ns
		p.kicks[n.Name] = make(chan struct{}, 1)
	}
	return p
}

// parse reads a poll's answer: the position, and with bounds the upper
// bound (exact: log_status's set, both at once; else BoundsQuerier's
// format).
func (p *Poller[P]) parse(text string, exact bool) (pos, upper P, err error) {
	if exact {
		pos, err = p.cfg.Flavor.ParseExecuted(text)
		return pos, pos, err
	}
	if !p.bounds {
		pos, err = p.cfg.Flavor.ParseExecuted(text)
		return pos, upper, err
	}
	lo, add, ok := strings.Cut(text, ";")
	if !ok {
		return pos, upper, fmt.Errorf("router: poller: bounds answer without a separator: %q", mysqlwire.Excerpt(text))
	}
	if pos, err = p.cfg.Flavor.ParseExecuted(lo); err != nil {
		return pos, upper, err
	}
	upper = pos
	if strings.TrimSpace(add) != "" {
		extra, err := p.cfg.Flavor.ParseExecuted(add)
		if err != nil {
			return pos, upper, err
		}
		upper = pos.Union(extra)
	}
	return pos, upper, nil
}

// Run polls until ctx ends; it returns ctx's error.
func (p *Poller[P]) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, n := range p.cfg.Nodes {
		wg.Go(func() { p.pollNode(ctx, n) })
	}
	wg.Wait()
	return ctx.Err()
}

// rel is t as nanoseconds since the poller's epoch (monotonic when t
// has a monotonic reading, as time.Now's do).
func (p *Poller[P]) rel(t time.Time) int64 { return int64(t.Sub(p.epoch)) }

// nodePoll is one node's poll loop state.
type nodePoll[P gtid.Position[P]] struct {
	n       Node
	ns      *nodeState[P]
	c       valueConn
	gen     uint64
	failing bool
	// last is the text of the last published answer, lastQuery the
	// query that read it (valid: hasLast).
	last      []byte
	lastQuery string
	hasLast   bool
}

// pollNode is one node's poll loop: a poll at once, then one per tick
// of its ticker (Interval; with an IdleInterval, that while the node is
// in demand and IdleInterval otherwise, decided after each poll) or
// kick.
func (p *Poller[P]) pollNode(ctx context.Context, n Node) {
	np := &nodePoll[P]{n: n, ns: p.states[n.Name]}
	defer func() {
		if np.c != nil {
			np.c.Close()
		}
	}()
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	np.ns.fast.Store(true)
	idle, idleTick := false, false // the ticker's period is IdleInterval; this poll was started by its tick
	for {
		err := p.pollOnce(ctx, np)
		if ctx.Err() == nil {
			if idleTick {
				p.idlePolls.Add(1)
			} else {
				p.fastPolls.Add(1)
			}
		}
		if p.cfg.IdleInterval > 0 {
			if next := !p.nextFast(np.ns); next != idle {
				idle = next
				t.Reset(p.interval(idle))
			}
		}
		if err != nil && np.c != nil {
			np.c.Close()
			np.c = nil
		}
		if err != nil && ctx.Err() == nil {
			p.errs.Add(1)
			if errors.Is(err, context.DeadlineExceeded) {
				p.overran.Add(1)
			}
			if !np.failing {
				p.cfg.Logger.Warn("poller: poll failed", "node", n.Name, errAttr(err))
			}
			np.failing = true
		}
		idleTick = false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			idleTick = idle
		case <-p.kicks[n.Name]:
		}
	}
}

// interval is the poll loop's ticker period in a mode.
func (p *Poller[P]) interval(idle bool) time.Duration {
	if idle {
		return p.cfg.IdleInterval
	}
	return p.cfg.Interval
}

// nextFast decides, after a poll, whether ns's node is polled every
// Interval next (in demand) and publishes it in ns.fast. A demand and
// the loop meet as in Dekker's protocol: a demand is recorded first and
// ns.fast read after (kicking the loop when false); the loop stores
// false first and looks for demand after. Either the loop sees the new
// demand, or the demand sees false and kicks: a demand never waits for
// an idle tick.
func (p *Poller[P]) nextFast(ns *nodeState[P]) bool {
	if p.demanded(ns) {
		ns.fast.Store(true)
		return true
	}
	if p.testHookIdle != nil {
		p.testHookIdle() // a demand arriving here, before the store
	}
	ns.fast.Store(false)
	if p.demanded(ns) {
		ns.fast.Store(true)
		return true
	}
	return false
}

// demanded reports whether a client needs a fresher view of ns's node
// (PollerConfig.IdleInterval): no successful poll yet, a WaitFor
// waiting, or a Want the view does not hold yet that has not expired
// (dropped otherwise).
func (p *Poller[P]) demanded(ns *nodeState[P]) bool {
	if ns.lastOK.Load() == 0 || ns.waiters.Load() > 0 {
		return true
	}
	ns.dmu.Lock()
	defer ns.dmu.Unlock()
	if ns.wantUntil == 0 {
		return false
	}
	if p.rel(time.Now()) >= ns.wantUntil || ns.cur.Load().pos.Contains(ns.want) {
		var zero P
		ns.want, ns.wantUntil = zero, 0
		return false
	}
	return true
}

// wake kicks node's poll loop unless it polls every Interval already (a
// new demand: see nextFast). Kicks coalesce.
func (p *Poller[P]) wake(node string, ns *nodeState[P]) {
	if ns.fast.Load() {
		return
	}
	select {
	case p.kicks[node] <- struct{}{}:
	default:
	}
}

// Demander is a PositionSource whose view of a node can be refreshed on
// demand (a *Poller with PollerConfig.IdleInterval): the router tells it
// which positions its clients need to find in a replica's view (after a
// write it learns; when a read finds no replica whose view holds what it
// needs). Only a hint about freshness: nothing waits for it, and routing
// stays sound whatever the source does with it (positions are lower
// bounds).
type Demander[P gtid.Position[P]] interface {
	// Want says some client needs a view of node that contains want.
	// It must not block.
	Want(node string, want P)
}

var _ Demander[gtid.Set] = (*Poller[gtid.Set])(nil)

// Want implements Demander: node is polled every Interval (a poll at
// once if it was idle) until its view contains want, or DownAfter after
// the last Want of it (a want that never arrives, such as a write lost
// in a failover, is given up). Wants of one node join (their union is
// wanted). A no-op without IdleInterval, for an unknown node, or when
// the view holds want already (no lock, no allocation).
func (p *Poller[P]) Want(node string, want P) {
	if p.cfg.IdleInterval == 0 {
		return
	}
	ns, ok := p.states[node]
	if !ok || ns.cur.Load().pos.Contains(want) {
		return
	}
	until := p.rel(time.Now()) + int64(p.cfg.DownAfter)
	ns.dmu.Lock()
	switch {
	case ns.wantUntil == 0:
		var zero P
		ns.want = zero.Union(want) // shares no memory with the caller's
	case !ns.want.Contains(want):
		ns.want = ns.want.Union(want)
	}
	ns.wantUntil = until
	ns.dmu.Unlock()
	p.wake(node, ns)
}

// pollOnce polls np's node once (dialling first if it has no connection,
// probing log_status on it while the node's verdict is unknown) and
// publishes the answer. An error leaves np.c to be closed. A poll whose
// answer is the text of the node's last one on the same connection
// parses nothing and allocates nothing (on a bytesConn): only the
// node's times move.
func (p *Poller[P]) pollOnce(ctx context.Context, np *nodePoll[P]) error {
	if np.c == nil {
		if err := p.dialPoll(ctx, np); err != nil {
			return err
		}
	}
	exact, err := p.exactBound(ctx, np)
	if err != nil {
		return err
	}
	q := p.pollQuery(np.n.Name, exact)
	start := time.Now()
	a, err := p.ask(ctx, np, q, start)
	if err != nil {
		return err
	}
	old := np.ns.cur.Load()
	first := np.ns.lastOK.Load() == 0
	var woken chan struct{} // closed once the poll's times are stored
	if !np.sameAnswer(q, &a, old, first) {
		if woken, err = p.publish(np, q, &a, old, first, exact); err != nil {
			return err
		}
	}
	p.answered(np, start, woken)
	return nil
}

// dialPoll opens np's poll connection: a new generation, with no answer
// published on it yet.
func (p *Poller[P]) dialPoll(ctx context.Context, np *nodePoll[P]) error {
	c, err := p.dial(ctx, np.n.Addr)
	if err != nil {
		return err
	}
	np.c, np.gen, np.hasLast = c, p.gens.Add(1), false
	return nil
}

// exactBound reports whether np's poll reads log_status (the node's
// verdict is that it is sound), probing it on np.c while the verdict is
// unknown (a refusal is logged). A bounds poll refused it is counted
// (lsFallbacks); a node without a verdict (no bounds, or a flavor
// without log_status) is not exact.
func (p *Poller[P]) exactBound(ctx context.Context, np *nodePoll[P]) (bool, error) {
	ls := p.logStatus[np.n.Name]
	if ls == nil {
		return false, nil
	}
	if !ls.Known() {
		pctx, cancel := context.WithTimeout(ctx, p.cfg.PollTimeout)
		refusal, err := ls.Probe(pctx, np.c.ReadValue)
		cancel()
		if err != nil {
			return false, err
		}
		if refusal != nil {
			p.cfg.Logger.Warn("poller: performance_schema.log_status is not the node's bound; polls read gtid_executed and the received set, which over-estimates what a read there saw (grant BACKUP_ADMIN; docs/router.md, \"The lazy watermark\")",
				"node", np.n.Name, "reason", refusal.Error())
		}
	}
	exact := ls.Sound()
	if !exact {
		p.lsFallbacks.Add(1)
	}
	return exact, nil
}

// pollAnswer is a poll's answer: raw on a bytesConn (in the
// connection's buffer, valid until its next exchange), text otherwise.
type pollAnswer struct {
	raw     []byte
	text    string
	isBytes bool
}

// ask runs poll query q on np.c, begun at start, within PollTimeout.
func (p *Poller[P]) ask(ctx context.Context, np *nodePoll[P], q string, start time.Time) (a pollAnswer, err error) {
	if bc, ok := np.c.(bytesConn); ok {
		a.isBytes = true
		a.raw, err = bc.Value(start.Add(p.cfg.PollTimeout), q)
		return a, err
	}
	pctx, cancel := context.WithTimeout(ctx, p.cfg.PollTimeout)
	a.text, err = np.c.ReadValue(pctx, q)
	cancel()
	return a, err
}

// sameAnswer reports whether a is the text of np's last published
// answer to the same query q on the same connection, with the node's
// state old still of that connection: nothing to parse or publish. Never
// at the node's first poll (first) nor when it answers again after
// failing (np.failing): those publish.
func (np *nodePoll[P]) sameAnswer(q string, a *pollAnswer, old *pollState[P], first bool) bool {
	if first || np.failing || !np.hasLast || np.lastQuery != q || old.gen != np.gen {
		return false
	}
	if a.isBytes {
		return bytes.Equal(a.raw, np.last)
	}
	return string(np.last) == a.text
}

// publish parses a new answer a to q and stores it as the node's state,
// replacing old. When the position moved (or at the node's first poll,
// or when it answers again after failing) the state gets a new changed
// channel and publish returns old's (woken), for answered to close.
func (p *Poller[P]) publish(np *nodePoll[P], q string, a *pollAnswer, old *pollState[P], first, exact bool) (woken chan struct{}, err error) {
	text := a.text
	if a.isBytes {
		text = string(a.raw)
	}
	pos, upper, err := p.parse(text, exact)
	if err != nil {
		return nil, err
	}
	np.last, np.lastQuery, np.hasLast = append(np.last[:0], text...), q, true
	st := &pollState[P]{pos: pos, changed: old.changed, upper: upper, hasUpper: p.bounds, gen: np.gen}
	// Equal positions contain each other.
	if !first && !np.failing && old.pos.Contains(pos) && pos.Contains(old.pos) {
		// Same position: refresh liveness without waking
		// WaitFor's waiters.
		st.pos = old.pos
		np.ns.cur.Store(st)
		return nil, nil
	}
	st.changed = make(chan struct{})
	np.ns.cur.Store(st)
	return old.changed, nil
}

// answered records a successful poll of np's node begun at start: the
// poll counted, the node's times stored, then woken closed (publish),
// the node's polled waiters released, and a recovery logged.
func (p *Poller[P]) answered(np *nodePoll[P], start time.Time, woken chan struct{}) {
	ns := np.ns
	p.polls.Add(1)
	ns.lastOK.Store(max(p.rel(time.Now()), 1))
	ns.start.Store(max(p.rel(start), 1))
	if woken != nil {
		// After the times: a WaitFor woken by this poll finds the node
		// healthy (Position) and the poll's start (SeenBound), also at
		// its first poll, when lastOK was still 0 as cur was stored.
		close(woken)
	}
	if c := ns.polled.Swap(nil); c != nil {
		close(*c)
	}
	if np.failing {
		p.cfg.Logger.Info("poller: node answers again", "node", np.n.Name)
	}
	np.failing = false
}

// Position implements PositionSource.
func (p *Poller[P]) Position(node string) (P, bool) {
	ns, ok := p.states[node]
	if !ok {
		var zero P
		return zero, false
	}
	last := ns.lastOK.Load()
	return ns.cur.Load().pos, last != 0 && time.Duration(p.rel(time.Now())-last) < p.cfg.DownAfter
}

// WaitFor implements PositionSource.
func (p *Poller[P]) WaitFor(ctx context.Context, node string, want P) error {
	ns, ok := p.states[node]
	if !ok {
		return fmt.Errorf("router: poller: unknown node %q", node)
	}
	waiting := false
	for {
		s := ns.cur.Load()
		if s.pos.Contains(want) {
			return nil
		}
		if !waiting && p.cfg.IdleInterval > 0 {
			// Demand: the node is polled every Interval while this
			// waits (a poll at once if it was idle).
			waiting = true
			ns.waiters.Add(1)
			defer ns.waiters.Add(-1)
			p.wake(node, ns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.changed:
		}
	}
}

// SeenBounder is a PositionSource that can bound, after the fact, what a
// read on a node saw: the lazy watermark (WatermarkLazy). Visibility on
// one server only grows, so an upper bound of a node's position measured
// by a statement that started after a read there ended contains
// everything the read could observe, provided the server is the same one
// throughout: the bound must come from a poll connection that was open
// before the read began (a restart closes every connection). A *Poller
// with PollerConfig.Bounds implements it.
type SeenBounder[P gtid.Position[P]] interface {
	// Generation returns the generation of the node's poll connection as
	// of its last successful poll (every connection the poller opens gets
	// a new one; 0: none yet, or no bounds). Read it before a read
	// starts.
	Generation(node string) uint64
	// SeenBound returns an upper bound of everything a read on node that
	// ended at after could observe, from a poll that started after it on
	// the connection of generation gen (ok). Without one yet, wait is how
	// much longer one may come (the node still counts as healthy: the
	// time until DownAfter since its last successful poll); 0: none will
	// (the generation changed, or the node stopped answering).
	SeenBound(node string, after time.Time, gen uint64) (bound P, ok bool, wait time.Duration)
	// WaitBound asks for a poll of node now and waits until a poll that
	// started after after has been published (or the node's state
	// changed), or ctx ends (returning its error).
	WaitBound(ctx context.Context, node string, after time.Time) error
}

var _ SeenBounder[gtid.Set] = (*Poller[gtid.Set])(nil)

// Bounds reports whether the poller reads upper bounds (PollerConfig.Bounds
// with a flavor that has a BoundsQuerier): SeenBounder works only then.
func (p *Poller[P]) Bounds() bool { return p.bounds }

// Generation implements SeenBounder.
func (p *Poller[P]) Generation(node string) uint64 {
	ns, ok := p.states[node]
	if !ok || !p.bounds {
		return 0
	}
	return ns.cur.Load().gen
}

// SeenBound implements SeenBounder.
func (p *Poller[P]) SeenBound(node string, after time.Time, gen uint64) (P, bool, time.Duration) {
	var zero P
	ns, ok := p.states[node]
	if !ok || !p.bounds || gen == 0 {
		return zero, false, 0
	}
	// start before cur (nodeState): cur is then the state of the poll
	// that started at start or of a later one.
	start := ns.start.Load()
	s := ns.cur.Load()
	switch {
	case s.gen != gen:
		return zero, false, 0
	case s.hasUpper && start != 0 && start > p.rel(after):
		return s.upper, true, 0
	}
	last := ns.lastOK.Load()
	if last == 0 {
		return zero, false, 0
	}
	return zero, false, max(0, p.cfg.DownAfter-time.Duration(p.rel(time.Now())-last))
}

// WaitBound implements SeenBounder: it kicks the node's poll loop (kicks
// coalesce: at most one poll runs per node at a time, so a stream of
// waiting reads costs the node one poll statement in flight) and waits
// for each published poll until one started after after.
func (p *Poller[P]) WaitBound(ctx context.Context, node string, after time.Time) error {
	ns, ok := p.states[node]
	if !ok || !p.bounds {
		return fmt.Errorf("router: poller: no bounds for node %q", node)
	}
	a := p.rel(after)
	polledAfter := func() bool { st := ns.start.Load(); return st != 0 && st > a }
	for {
		if polledAfter() {
			return nil
		}
		// Install the channel, then look again: a poll that stored its
		// start before the install is seen here, one after it closes
		// the channel.
		polled := ns.waiter()
		if polledAfter() {
			return nil
		}
		select {
		case p.kicks[node] <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-polled:
		}
	}
}

// Stats returns the number of successful polls and of failed ones.
func (p *Poller[P]) Stats() (polls, errs uint64) { return p.polls.Load(), p.errs.Load() }

// Intervals returns the poll intervals: fast (PollerConfig.Interval)
// and idle (PollerConfig.IdleInterval; 0: every poll is fast).
func (p *Poller[P]) Intervals() (fast, idle time.Duration) { return p.cfg.Interval, p.cfg.IdleInterval }

// Modes returns the number of polls (successful or failed) by the poll
// loop's mode: idle (started by a tick of PollerConfig.IdleInterval: no
// client needed a fresher view) and fast (every other: a tick of
// Interval, a kick, a node's first poll). Without IdleInterval every
// poll is fast.
func (p *Poller[P]) Modes() (fast, idle uint64) { return p.fastPolls.Load(), p.idlePolls.Load() }

// Overran returns the number of polls cut by PollTimeout (counted in
// Stats' errs too).
func (p *Poller[P]) Overran() uint64 { return p.overran.Load() }

// LogStatusFallbacks returns the number of bounds polls that read the
// BoundsQuery (gtid_executed and the received set) because the node
// does not answer log_status soundly (PollerConfig.Bounds).
func (p *Poller[P]) LogStatusFallbacks() uint64 { return p.lsFallbacks.Load() }

// Exact reports whether node's bounds polls read log_status (its probe
// found it sound): the node's upper bound is then its position.
func (p *Poller[P]) Exact(node string) bool {
	ls := p.logStatus[node]
	return ls != nil && ls.Sound()
}
