package proxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
)

// A pool is the shared set of backend connections to one node that client
// sessions borrow a connection from while their state does not pin one
// (multiplexing, issue 19). It holds at most Config.PoolSize connections
// (idle, lent or being dialled); a session that finds none free waits in
// line, for at most Config.PoolWait and its own context, and then fails
// with a *PoolError, counted in
// causallab_proxy_pool_acquire_failures_total{backend,reason}. The line
// is bounded: with Config.PoolMaxWaiters client acquisitions already
// waiting, one more fails at once (PoolQueueFull). A KILL QUERY's own
// acquisition (useKill: of an overrun wait, of a connection the watchdog
// cut) is neither refused by that bound nor counted with the clients': its
// failures are causallab_proxy_pool_kill_acquire_failures_total.
//
// One goroutine (run) owns the pool's state: the idle connections, the
// number open and the line of waiters. Every I/O (dialling, the reset of a
// returned connection, closing) happens outside it, in the borrower's
// goroutine or one started for a dial, so the owner never blocks.
//
// A connection comes back through release: one the borrower broke is
// discarded; one whose session state may have changed is reset
// (COM_RESET_CONNECTION, then the proxy's own session set-up again) and
// discarded if that fails; only one the borrower vouches for as unchanged
// (poolClean) goes back as it is. Every discard is counted in
// causallab_proxy_pool_discards_total{backend,reason}.
//
// The pool is health-aware: with a health function (a replica's, from the
// position source), an acquisition while the node is unhealthy fails at
// once (reason unhealthy) and the idle connections are closed, as they are
// by a sweep every poolSweep while it stays unhealthy; a connection idle
// for idleCheckAfter is peeked at before it is lent (the server may have
// closed it: a killed node, wait_timeout) and discarded, the acquisition
// going on, if so.
type pool struct {
	poolConfig

	reqs    chan *poolReq
	cancels chan *poolReq
	puts    chan *backendConn // nil: a lent connection was discarded
	dialed  chan poolGrant
	done    chan struct{} // closed when run returns
	// life is newPool's ctx: the pool's own background work (cutKill)
	// ends with it.
	life context.Context
	// pinned counts the lent connections whose sessions' state pins them
	// (pin), at most maxPinned.
	pinned atomic.Int64
}

// PoolFailure is why an acquisition failed (the metric's reason label).
type PoolFailure string

const (
	// PoolWaitTimeout: no connection came free within Config.PoolWait.
	PoolWaitTimeout PoolFailure = "wait-timeout"
	// PoolCanceled: the borrower's context ended first.
	PoolCanceled PoolFailure = "canceled"
	// PoolUnhealthy: the node's position source reports it unhealthy.
	PoolUnhealthy PoolFailure = "unhealthy"
	// PoolDialFailed: the pool had room but opening a connection failed.
	PoolDialFailed PoolFailure = "dial-failed"
	// PoolClosed: the proxy is shutting down.
	PoolClosed PoolFailure = "closed"
	// PoolQueueFull: Config.PoolMaxWaiters acquisitions were already
	// waiting in line; this one failed at once.
	PoolQueueFull PoolFailure = "queue-full"
)

// PoolError is a failed acquisition of a pooled backend connection.
type PoolError struct {
	// Backend is the node's configured name.
	Backend string
	// Reason is why.
	Reason PoolFailure
	// Err is the cause of a dial failure or the context's error.
	Err error
	// Size and Wait are the pool's pool_size and pool_wait (set for
	// PoolWaitTimeout: the message names them); MaxWaiters is its
	// pool_max_waiters (set for PoolQueueFull, with Size).
	Size       int
	Wait       time.Duration
	MaxWaiters int
}

func (e *PoolError) Error() string {
	msg := fmt.Sprintf("proxy: backend %s: no pooled connection: %s", e.Backend, e.Reason)
	if e.Reason == PoolWaitTimeout && e.Size > 0 {
		msg += fmt.Sprintf(" (none of pool_size %d came free within pool_wait %v)", e.Size, e.Wait)
	}
	if e.Reason == PoolQueueFull && e.MaxWaiters > 0 {
		msg += fmt.Sprintf(" (pool_max_waiters %d acquisitions already waiting for one of pool_size %d)", e.MaxWaiters, e.Size)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *PoolError) Unwrap() error { return e.Err }

// poolState is what a borrower knows of a connection it gives back.
type poolState int

const (
	// poolDirty: the session state may have changed (the default): the
	// connection is reset before it is lent again.
	poolDirty poolState = iota
	// poolClean: nothing ran that changes session state (the server
	// reported no state change): it goes back as it is.
	poolClean
)

// Discard reasons (the metric's label).
const (
	discardBroken      = "broken"
	discardResetFailed = "reset-failed"
	discardIdleClosed  = "closed-while-idle"
	discardUnhealthy   = "unhealthy"
	discardPoolClosed  = "pool-closed"
	// discardSurplus: more connections were open than client sessions
	// (poolConfig.sessions).
	discardSurplus = "surplus"
	// discardSession: the session closed a borrowed connection (a lost
	// or replaced connection, COM_RESET_CONNECTION, the session's end).
	discardSession = "closed-by-session"
	// discardSchema: the connection had a schema and the borrower none.
	discardSchema = "schema"
	// discardFlags: an idle connection dialled with other client flags
	// than a waiter's, closed to make room for one with them;
	// discardAccount: one of another account than a waiter's.
	discardFlags   = "flags"
	discardAccount = "account"
	// discardFresh: an idle connection closed to make room for the dial a
	// login of its own key needs (poolReq.fresh).
	discardFresh = "fresh"
)

// poolSweep is how often an unhealthy node's idle connections are closed.
const poolSweep = time.Second

type poolReq struct {
	reply chan poolGrant // buffered: the owner never blocks on it
	ack   chan struct{}  // closed when a cancel was handled
	// key is what the borrower's connection must have been dialled
	// with: the client capabilities (the session's passedFlags) and the
	// account.
	key poolKey
	// kill: a KILL QUERY's acquisition (useKill), not refused by the
	// bound on waiters nor counted in it.
	kill bool
	// fresh: only a connection dialled for the pool and never lent yet
	// will do (a passthrough login: the dial is what verifies the
	// account's password on the server).
	fresh bool
}

// poolKey is what a pooled connection is lent by: a connection is lent
// only to a borrower with its client flags and its account (issue 38: a
// session only ever borrows a connection of its own account).
type poolKey struct {
	flags uint32
	acct  account
}

// key is bc's pool key.
func (bc *backendConn) key() poolKey { return poolKey{flags: bc.pooledFlags, acct: bc.pooledAcct} }

type poolGrant struct {
	bc  *backendConn
	err error
	// key: what a dial was for (p.dialed).
	key poolKey
}

// poolMetrics are the pools' series (one set per Server, by backend).
type poolMetrics struct {
	failures *prometheus.CounterVec
	// killFailures are the failed acquisitions of KILL QUERY (useKill),
	// apart from the clients' (failures).
	killFailures *prometheus.CounterVec
	discards     *prometheus.CounterVec
	conns        *prometheus.GaugeVec
	// waiters is the line of acquisitions waiting for a connection;
	// waitersPeak the longest line of client acquisitions (those
	// pool_max_waiters bounds) since the pool started.
	waiters     *prometheus.GaugeVec
	waitersPeak *prometheus.GaugeVec
	// pinned counts commands after which a session kept the pooled
	// connections it held, by its first hold (Hold words).
	pinned *prometheus.CounterVec
	// acquired counts connections lent, by backend and what the borrower
	// needed one for (poolUse); hold is how long each was lent (from
	// the grant to its return: the borrower's commands, the client
	// flush, the reset) by the same labels; wait is how long acquisitions
	// waited (granted or failed); reset is the reset's round trip.
	acquired *prometheus.CounterVec
	hold     *prometheus.HistogramVec
	wait     *prometheus.HistogramVec
	reset    *prometheus.HistogramVec
	// resets counts resets sent; resetWait is how long a borrower waited
	// for the answers of the reset the previous borrower sent.
	resets    *prometheus.CounterVec
	resetWait *prometheus.HistogramVec
	// cutKills counts the KILL QUERY of connections the watchdog cut
	// mid-statement (discard), by result.
	cutKills *prometheus.CounterVec
	// pinnedOwn counts lent connections given to their sessions as their
	// own, pinned past max_pinned_share (pool.detach).
	pinnedOwn *prometheus.CounterVec
}

// What a borrower needs a pooled connection for (the use label).
const (
	useLogin = "login"
	useRead  = "read"
	useWait  = "wait"
	useOther = "other"
)

// poolBuckets are the pools' duration buckets: 100 µs to 4 s.
var poolBuckets = prometheus.ExponentialBuckets(0.0001, 2, 16)

func newPoolMetrics(reg prometheus.Registerer) *poolMetrics {
	m := &poolMetrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_pool_acquire_failures_total", Help: "Failed acquisitions of a pooled backend connection by client sessions, by backend and reason (wait-timeout, queue-full, canceled, unhealthy, dial-failed, closed)."}, []string{"backend", "reason"}),
		killFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_pool_kill_acquire_failures_total", Help: "Failed acquisitions of a pooled backend connection for a KILL QUERY (of an overrun wait, of a connection the watchdog cut), by backend and reason (the reasons of causallab_proxy_pool_acquire_failures_total; not counted there)."}, []string{"backend", "reason"}),
		discards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_pool_discards_total", Help: "Pooled backend connections closed instead of reused, by backend and reason (broken, reset-failed, closed-while-idle, unhealthy, pool-closed, closed-by-session, schema, flags, account, fresh)."}, []string{"backend", "reason"}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "causallab_proxy_pool_connections", Help: "Pooled backend connections by backend and state (idle; open: idle, lent or being dialled; pinned: lent to sessions their state pins, at most max_pinned_share of pool_size; own: given to sessions pinned past that, outside the pool)."}, []string{"backend", "state"}),
		waiters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "causallab_proxy_pool_waiters", Help: "Acquisitions of a pooled backend connection waiting in line (each for at most pool_wait), by backend."}, []string{"backend"}),
		waitersPeak: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "causallab_proxy_pool_waiters_peak", Help: "The longest line of client acquisitions of a pooled backend connection (those pool_max_waiters bounds; a KILL QUERY's not counted) since the proxy started, by backend."}, []string{"backend"}),
		pinned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "causallab_proxy_pool_pinned_total", Help: "Commands after which a session kept its pooled backend connections, by what pinned them (the session's first hold: in-transaction, autocommit-off, temp-table-session, locked-tables, named-lock, user-variables, session-state, replay-overflow, prepared-statements, session-state-changed, stored-procedure, set-pending; or, for one command, what the previous statement left to ask about: next-statement-warnings, next-statement-found-rows, next-transaction)."}, []string{"reason"}),
	}
	m.acquired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_pool_acquisitions_total", Help: "Pooled backend connections lent, by backend and what the session needed one for (login; read; wait: a router wait on a replica; the statement kind otherwise: primary for a write, session, begin, ...; other: a command that is not a statement)."}, []string{"backend", "use"})
	m.hold = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "causallab_proxy_pool_hold_seconds", Help: "How long a pooled backend connection was lent (grant to return: the reset is written, not waited for), by backend and use.", Buckets: poolBuckets}, []string{"backend", "use"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "causallab_proxy_pool_wait_seconds", Help: "How long acquisitions of a pooled backend connection waited (granted or failed), by backend.", Buckets: poolBuckets}, []string{"backend"})
	m.reset = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "causallab_proxy_pool_reset_seconds", Help: "The reset of a returned pooled connection (COM_RESET_CONNECTION and the proxy's set-up, one round trip), from its write by the returning borrower to its answers read by the next one, by backend.", Buckets: poolBuckets}, []string{"backend"})
	m.resets = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_pool_resets_total", Help: "Resets of returned pooled connections sent (COM_RESET_CONNECTION and the proxy's set-up), by backend."}, []string{"backend"})
	m.resetWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "causallab_proxy_pool_reset_wait_seconds", Help: "How long a borrower waited for the answers of the reset the previous borrower of its pooled connection sent (the reset's cost on the critical path), by backend.", Buckets: poolBuckets}, []string{"backend"})
	m.cutKills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_pool_cut_kills_total", Help: "KILL QUERY of pooled connections the watchdog cut mid-statement (their place kept until it ran), by backend and result (killed, failed, gave-up: the node stayed unhealthy past 30 s)."}, []string{"backend", "result"})
	m.pinnedOwn = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "causallab_proxy_pool_pinned_own_total", Help: "Pooled backend connections given to their sessions as their own (the pool's place freed) because the sessions' state pinned them with max_pinned_share of the pool pinned already, by backend."}, []string{"backend"})
	reg.MustRegister(m.failures, m.killFailures, m.discards, m.conns, m.waiters, m.waitersPeak, m.pinned, m.acquired, m.hold, m.wait, m.reset, m.resets, m.resetWait, m.cutKills, m.pinnedOwn)
	return m
}

// poolConfig is what newPool needs (and the pool keeps).
type poolConfig struct {
	// node names the backend (metric label, errors).
	node string
	// size bounds the open connections; wait bounds an acquisition;
	// maxWaiters bounds the client acquisitions waiting in line (0: no
	// bound).
	size       int
	wait       time.Duration
	maxWaiters int
	// maxPinned bounds the lent connections pinned sessions hold
	// (max_pinned_share of size; 0: size).
	maxPinned int
	// dial opens a new connection with the key's client capabilities as
	// its account (dialBackend, bounded by connect_timeout); healthy,
	// when not nil, is the node's health.
	dial    func(ctx context.Context, key poolKey) (*backendConn, error)
	healthy func() bool
	// sessions, when set, is the number of client sessions open: the
	// pool keeps no more connections than that open (a returned one
	// beyond it is closed, idle ones at each sweep), so multiplexing
	// never holds more of the server's connections than one per client
	// would, and a server's Threads_connected falls back as clients
	// leave (discards{reason="surplus"}).
	sessions func() int
	// setup is re-run on a connection after COM_RESET_CONNECTION (the
	// session_track_gtids the proxy's relay relies on); resetBound bounds
	// the reset and it.
	setup      string
	resetBound time.Duration
	m          *poolMetrics
}

// newPool starts a pool; it closes when ctx ends (the connections it
// holds idle closed, waiters failed with PoolClosed).
func newPool(ctx context.Context, pc poolConfig) (*pool, error) {
	if pc.size < 1 || pc.wait <= 0 || pc.maxWaiters < 0 || pc.dial == nil || pc.m == nil || pc.resetBound <= 0 {
		return nil, fmt.Errorf("proxy: pool %s: bad configuration (size %d, wait %v, max waiters %d, reset bound %v)", pc.node, pc.size, pc.wait, pc.maxWaiters, pc.resetBound)
	}
	if pc.maxPinned <= 0 || pc.maxPinned > pc.size {
		pc.maxPinned = pc.size
	}
	p := &pool{poolConfig: pc,
		reqs: make(chan *poolReq), cancels: make(chan *poolReq), puts: make(chan *backendConn),
		dialed: make(chan poolGrant), done: make(chan struct{}), life: ctx}
	go p.run(ctx)
	return p, nil
}

// newBackendPool is the pool of b's connections under cfg: dialled as a
// session's own are, without a default database, with the client
// capabilities the borrower asks for (passedFlags: a connection is lent
// only to a session with the flags it was dialled with), at most
// cfg.PoolSize of them whatever their flags.
func newBackendPool(ctx context.Context, b *Backend, cfg *Config, healthy func() bool, allGTIDs bool, m *poolMetrics, sessions func() int) (*pool, error) {
	setup := cfg.trackSetup(allGTIDs)
	var p *pool
	p, err := newPool(ctx, poolConfig{node: b.Name, size: cfg.PoolSize, wait: cfg.PoolWait, maxWaiters: cfg.PoolMaxWaiters, healthy: healthy, sessions: sessions,
		maxPinned: cfg.maxPinned(),
		setup:     setup, resetBound: cfg.ConnectTimeout, m: m,
		dial: func(ctx context.Context, key poolKey) (*backendConn, error) {
			bc, err := dialBackend(ctx, b, key.acct, "", poolCollation, key.flags, cfg, healthy, allGTIDs)
			if err == nil {
				bc.home, bc.pooledCollation, bc.pooledFlags, bc.pooledAcct = p, poolCollation, key.flags, key.acct
				bc.fresh = true
			}
			return bc, err
		}})
	return p, err
}

// run is the owner of the pool's state.
//
// Connections are lent by their client flags and account (poolReq.key):
// a request takes the most recently returned idle connection with its
// key (a fresh one, a dial); with none, a dial is started for it while
// the pool has room; with the pool full of idle connections of other
// keys, the oldest of them is closed (discards{reason="flags"|"account"})
// to make that room. A returned or dialled connection goes to the first
// waiter with its key (a fresh waiter: a dialled one only), else it
// stays idle, or, when waiters of other keys cannot get a dial for want
// of room, it is closed to make it.
func (p *pool) run(ctx context.Context) {
	defer close(p.done)
	o := &poolOwner{p: p, ctx: ctx, dialling: map[poolKey]int{}}
	sweep := time.NewTicker(poolSweep)
	defer sweep.Stop()
	for {
		o.gauge()
		select {
		case <-ctx.Done():
			o.handleClose()
			// Dials in flight and lent connections are closed by their
			// goroutines (p.done).
			return
		case r := <-p.reqs:
			o.handleReq(r)
		case r := <-p.cancels:
			o.handleCancel(r)
		case bc := <-p.puts:
			o.handlePut(bc)
		case g := <-p.dialed:
			o.handleDial(g)
		case <-sweep.C:
			if o.unhealthy() {
				o.dropIdle(discardUnhealthy)
			}
			o.trimSurplus()
		}
	}
}

// poolOwner is the pool's state, which run owns: only its goroutine
// reads or changes it.
type poolOwner struct {
	p *pool
	// ctx is run's: the dials' context.
	ctx     context.Context
	idle    []*backendConn // most recently returned last
	open    int            // idle + lent + dialling
	waiters []*poolReq
	// queued counts the waiters that are not kills (the line
	// maxWaiters bounds).
	queued, peak int
	// dialling counts the dials in flight by key.
	dialling map[poolKey]int
}

// gauge sets the pool's gauges.
func (o *poolOwner) gauge() {
	p := o.p
	p.m.conns.WithLabelValues(p.node, "idle").Set(float64(len(o.idle)))
	p.m.conns.WithLabelValues(p.node, "open").Set(float64(o.open))
	p.m.waiters.WithLabelValues(p.node).Set(float64(len(o.waiters)))
	if o.queued > o.peak {
		o.peak = o.queued
		p.m.waitersPeak.WithLabelValues(p.node).Set(float64(o.peak))
	}
}

// unhealthy: the node has a health function and is not healthy.
func (o *poolOwner) unhealthy() bool {
	return o.p.healthy != nil && !o.p.healthy()
}

// handleClose fails the waiters and closes the idle connections: the pool
// is closing.
func (o *poolOwner) handleClose() {
	for _, w := range o.waiters {
		w.reply <- poolGrant{err: &PoolError{Backend: o.p.node, Reason: PoolClosed}}
	}
	o.dropIdle(discardPoolClosed)
}

// handleReq serves an acquisition: at once with an idle connection of its
// flags, or a failure (the node unhealthy, the line full); else it waits
// in line, a dial started for it if there is room.
func (o *poolOwner) handleReq(r *poolReq) {
	p := o.p
	if o.unhealthy() {
		o.dropIdle(discardUnhealthy)
		r.reply <- poolGrant{err: &PoolError{Backend: p.node, Reason: PoolUnhealthy}}
		return
	}
	if bc := o.takeIdle(r); bc != nil {
		r.reply <- poolGrant{bc: bc}
		return
	}
	if !r.kill && p.maxWaiters > 0 && o.queued >= p.maxWaiters {
		r.reply <- poolGrant{err: &PoolError{Backend: p.node, Reason: PoolQueueFull, Size: p.size, MaxWaiters: p.maxWaiters}}
		return
	}
	o.waiters = append(o.waiters, r)
	if !r.kill {
		o.queued++
	}
	o.more()
}

// takeIdle takes the most recently returned idle connection for r (its
// key; never lent, when r is fresh), nil: none.
func (o *poolOwner) takeIdle(r *poolReq) *backendConn {
	for i := len(o.idle) - 1; i >= 0; i-- {
		if bc := o.idle[i]; bc.key() == r.key && (bc.fresh || !r.fresh) {
			o.idle = append(o.idle[:i], o.idle[i+1:]...)
			return bc
		}
	}
	return nil
}

// handleCancel takes a waiter that gave up out of the line.
func (o *poolOwner) handleCancel(r *poolReq) {
	for i, w := range o.waiters {
		if w == r {
			o.unqueue(i)
			break
		}
	}
	close(r.ack)
}

// handlePut takes back a lent connection (nil: it was discarded, its
// place is free).
func (o *poolOwner) handlePut(bc *backendConn) {
	if bc == nil {
		o.open--
		o.more()
		return
	}
	o.supply(bc)
}

// handleDial takes a dial's result: a connection to supply, or a failure
// for the oldest waiter for its key.
func (o *poolOwner) handleDial(g poolGrant) {
	o.dialling[g.key]--
	if o.dialling[g.key] == 0 {
		delete(o.dialling, g.key) // keys carry accounts: not kept
	}
	if g.err == nil {
		o.supply(g.bc)
		return
	}
	o.open--
	for i, w := range o.waiters {
		if w.key == g.key {
			// The oldest waiter for it learns of the failure
			// now, not at its bound; the others get a dial
			// of their own.
			o.unqueue(i)
			w.reply <- poolGrant{err: &PoolError{Backend: o.p.node, Reason: PoolDialFailed, Err: g.err}}
			break
		}
	}
	o.more()
}

// unqueue takes waiters[i] out of the line.
func (o *poolOwner) unqueue(i int) *poolReq {
	w := o.waiters[i]
	o.waiters = append(o.waiters[:i], o.waiters[i+1:]...)
	if !w.kill {
		o.queued--
	}
	return w
}

// closeAll closes connections, away from the owner's goroutine.
func (o *poolOwner) closeAll(gone []*backendConn) {
	go func() {
		for _, bc := range gone {
			bc.home = nil
			bc.close()
		}
	}()
}

// dropIdle closes the idle connections, counted as discards for reason.
func (o *poolOwner) dropIdle(reason string) {
	if len(o.idle) == 0 {
		return
	}
	o.p.m.discards.WithLabelValues(o.p.node, reason).Add(float64(len(o.idle)))
	o.open -= len(o.idle)
	o.closeAll(o.idle)
	o.idle = nil
}

// startDial starts a dial for a connection with key.
func (o *poolOwner) startDial(key poolKey) {
	p, ctx := o.p, o.ctx
	o.open++
	o.dialling[key]++
	go func() {
		bc, err := p.dial(ctx, key)
		select {
		case p.dialed <- poolGrant{bc: bc, err: err, key: key}:
		case <-p.done:
			if bc != nil {
				bc.home = nil
				bc.close()
			}
		}
	}()
}

// unserved returns the key of the oldest waiter no dial in flight
// will serve (ok false: none).
func (o *poolOwner) unserved() (key poolKey, ok bool) {
	seen := map[poolKey]int{}
	for _, w := range o.waiters {
		seen[w.key]++
		if seen[w.key] > o.dialling[w.key] {
			return w.key, true
		}
	}
	return poolKey{}, false
}

// more starts dials for waiters no dial in flight will serve, closing
// idle connections (of other keys: a waiter that is not fresh never
// waits beside an idle connection of its own key) to make room.
func (o *poolOwner) more() {
	for {
		f, ok := o.unserved()
		if !ok {
			return
		}
		if o.open >= o.p.size {
			if len(o.idle) == 0 {
				return
			}
			reason := discardFlags
			switch {
			case o.idle[0].pooledAcct != f.acct:
				reason = discardAccount
			case o.idle[0].key() == f:
				reason = discardFresh // room for a login's own dial
			}
			o.p.m.discards.WithLabelValues(o.p.node, reason).Inc()
			o.open--
			o.closeAll(o.idle[:1:1])
			o.idle = o.idle[1:]
		}
		o.startDial(f)
	}
}

// supply hands bc to the first waiter with its key (a fresh waiter: bc
// never lent), or keeps it idle (more then closes it if other waiters
// need its room).
func (o *poolOwner) supply(bc *backendConn) {
	for i, w := range o.waiters {
		if w.key == bc.key() && (bc.fresh || !w.fresh) {
			o.unqueue(i)
			w.reply <- poolGrant{bc: bc}
			return
		}
	}
	// Beyond the sessions' count, the idle connections go first, oldest
	// first: bc's key was just in use, theirs may be no client's now.
	o.trimSurplus()
	if o.surplus() {
		o.p.m.discards.WithLabelValues(o.p.node, discardSurplus).Inc()
		o.open--
		o.closeAll([]*backendConn{bc})
		return
	}
	o.idle = append(o.idle, bc)
	o.more()
}

// surplus: more connections are open than client sessions
// (poolConfig.sessions).
func (o *poolOwner) surplus() bool {
	return o.p.sessions != nil && o.open > o.p.sessions()
}

// trimSurplus closes idle connections, oldest first, while more are open
// than client sessions.
func (o *poolOwner) trimSurplus() {
	for len(o.idle) > 0 && o.surplus() {
		o.p.m.discards.WithLabelValues(o.p.node, discardSurplus).Inc()
		o.open--
		o.closeAll(o.idle[:1:1])
		o.idle = o.idle[1:]
	}
}

// acquire borrows a connection dialled without client flags: an idle
// one, a new one while the pool has room, or the next one returned,
// within Config.PoolWait and ctx.
func (p *pool) acquire(ctx context.Context) (*backendConn, error) {
	return p.acquireFor(ctx, useOther, 0)
}

// acquireFor is acquire for a borrower that needs the connection for use
// (the metrics' label), dialled with client capabilities flags. A failure
// is counted by its reason: in acquire_failures_total, or, for a KILL
// QUERY (useKill), in kill_acquire_failures_total.
func (p *pool) acquireFor(ctx context.Context, use string, flags uint32) (*backendConn, error) {
	return p.acquireAs(ctx, use, poolKey{flags: flags}, false)
}

// acquireAs is acquireFor for a connection with key (its account: the
// zero account is the node's own); fresh asks for a connection dialled
// for this acquisition's sake, never lent before (poolReq.fresh).
func (p *pool) acquireAs(ctx context.Context, use string, key poolKey, fresh bool) (*backendConn, error) {
	start := time.Now()
	bc, err := p.take(ctx, key, fresh, use == useKill)
	now := time.Now()
	p.m.wait.WithLabelValues(p.node).Observe(now.Sub(start).Seconds())
	if err != nil {
		var pe *PoolError
		if errors.As(err, &pe) {
			failures := p.m.failures
			if use == useKill {
				failures = p.m.killFailures
			}
			failures.WithLabelValues(p.node, string(pe.Reason)).Inc()
		}
		return nil, err
	}
	p.m.acquired.WithLabelValues(p.node, use).Inc()
	bc.lent, bc.lentFor, bc.fresh = now, use, false
	return bc, nil
}

// returned observes how long bc was lent; it no longer counts as pinned.
func (p *pool) returned(bc *backendConn) {
	p.unpin(bc)
	if bc.lent.IsZero() {
		return
	}
	p.m.hold.WithLabelValues(p.node, bc.lentFor).Observe(time.Since(bc.lent).Seconds())
	bc.lent = time.Time{}
}

// take is acquireFor's acquisition (uncounted: acquireFor counts its
// failure); kill marks a KILL QUERY's (poolReq.kill).
func (p *pool) take(ctx context.Context, key poolKey, fresh, kill bool) (*backendConn, error) {
	wait := p.wait
	bound := time.NewTimer(wait)
	defer bound.Stop()
	for {
		r := &poolReq{reply: make(chan poolGrant, 1), ack: make(chan struct{}), key: key, kill: kill, fresh: fresh}
		select {
		case p.reqs <- r:
		case <-ctx.Done():
			return nil, p.fail(PoolCanceled, ctx.Err())
		case <-bound.C:
			return nil, p.waitTimeout(wait)
		case <-p.done:
			return nil, p.fail(PoolClosed, nil)
		}
		var g poolGrant
		select {
		case g = <-r.reply:
		case <-bound.C:
			p.withdraw(r)
			return nil, p.waitTimeout(wait)
		case <-ctx.Done():
			p.withdraw(r)
			return nil, p.fail(PoolCanceled, ctx.Err())
		case <-p.done:
			// run answered every waiter before it returned.
			g = <-r.reply
		}
		if g.err != nil {
			return nil, g.err
		}
		if g.bc.resetPending {
			// The previous borrower's reset: its answers were read by
			// nobody yet (release wrote it and went on).
			if err := p.finishReset(g.bc); err != nil {
				p.discard(g.bc, discardResetFailed)
				continue
			}
		}
		if g.bc.closedWhileIdle(time.Now()) {
			p.discard(g.bc, discardIdleClosed)
			continue
		}
		return g.bc, nil
	}
}

// pin counts bc, lent by p to a session whose state now pins it, among
// p's pinned connections (true); or, with maxPinned of them pinned
// already, gives it to the session as its own (detach, false): the pool
// gets its place back, so that pinned sessions never hold more than
// max_pinned_share of the pool and every other session is still served.
func (p *pool) pin(bc *backendConn) bool {
	for {
		n := p.pinned.Load()
		if n >= int64(p.maxPinned) {
			p.detach(bc)
			return false
		}
		if p.pinned.CompareAndSwap(n, n+1) {
			bc.pinnedIn = p
			p.m.conns.WithLabelValues(p.node, "pinned").Inc()
			return true
		}
	}
}

// unpin takes bc out of p's pinned connections (if pin counted it).
func (p *pool) unpin(bc *backendConn) {
	if bc.pinnedIn == p {
		bc.pinnedIn = nil
		p.pinned.Add(-1)
		p.m.conns.WithLabelValues(p.node, "pinned").Dec()
	}
}

// detach makes bc, lent by p, its borrower's own connection: its place in
// the pool is freed (another is dialled when needed) and it is closed
// when its session's pin ends, never returned. Counted in
// pool_pinned_own_total and pool_connections{state="own"}.
func (p *pool) detach(bc *backendConn) {
	p.returned(bc)
	bc.home, bc.own = nil, p
	p.m.pinnedOwn.WithLabelValues(p.node).Inc()
	p.m.conns.WithLabelValues(p.node, "own").Inc()
	select {
	case p.puts <- nil:
	case <-p.done:
	}
}

// withdraw takes r out of the line; a connection granted meanwhile goes
// back unused.
func (p *pool) withdraw(r *poolReq) {
	select {
	case p.cancels <- r:
		<-r.ack
	case <-p.done:
	}
	select {
	case g := <-r.reply:
		if g.bc != nil {
			p.put(g.bc)
		}
	default:
	}
}

// waitTimeout is the failure of an acquisition past pool_wait.
func (p *pool) waitTimeout(wait time.Duration) error {
	return &PoolError{Backend: p.node, Reason: PoolWaitTimeout, Size: p.size, Wait: wait}
}

func (p *pool) fail(reason PoolFailure, err error) error {
	return &PoolError{Backend: p.node, Reason: reason, Err: err}
}

// release gives bc back: discarded when broken or when its reset cannot
// be sent, reset first unless state is poolClean. The reset is written
// here and its answers read by the next borrower (take, finishReset):
// the connection goes back without waiting for the round trip.
func (p *pool) release(bc *backendConn, state poolState) {
	if bc.broken {
		p.discard(bc, discardBroken)
		return
	}
	if state != poolClean {
		if err := p.startReset(bc); err != nil {
			p.discard(bc, discardResetFailed)
			return
		}
	}
	// Before put: from there bc is another borrower's.
	p.returned(bc)
	p.put(bc)
}

// put hands an unused or reset connection to the owner.
func (p *pool) put(bc *backendConn) {
	select {
	case p.puts <- bc:
	case <-p.done:
		p.m.discards.WithLabelValues(p.node, discardPoolClosed).Inc()
		bc.home = nil
		bc.close()
	}
}

// discard closes a lent connection and frees its place.
//
// A connection the watchdog cut mid-statement (the node's position source
// reported it unhealthy while the statement waited for its answer) may
// still run that statement on the server, which counts the connection
// until it ends: its place is kept until a KILL QUERY of it ran once the
// node is healthy again, for at most cutKillWithin (cutKill).
func (p *pool) discard(bc *backendConn, reason string) {
	if bc.unresponsive() && bc.conn != nil {
		id := bc.conn.GetConnectionID()
		free := p.holdPlace(bc)
		p.m.discards.WithLabelValues(p.node, reason).Inc()
		go p.cutKill(id, free)
		return
	}
	p.returned(bc)
	p.m.discards.WithLabelValues(p.node, reason).Inc()
	bc.home = nil
	bc.close()
	select {
	case p.puts <- nil:
	case <-p.done:
	}
}

// cutKillWithin bounds how long the place of a connection the watchdog
// cut is kept waiting for its node to answer the KILL QUERY (then it is
// freed: counted in cut_kills_total{result="gave-up"}).
const cutKillWithin = 30 * time.Second

// cutKill waits (polling every poolSweep/10) until p's node is healthy,
// runs KILL QUERY id there and frees the place free holds (a holdPlace
// of the cut connection), within cutKillWithin. The kill borrows from the
// pool; when no place comes free within pool_wait (every one lent or
// kept: a pool of one), its connection is dialled in the cut one's place
// and joins the pool after the kill (the server then counts both for the
// kill's round trip).
func (p *pool) cutKill(id uint32, free func()) {
	give := time.NewTimer(cutKillWithin)
	defer give.Stop()
	tick := time.NewTicker(poolSweep / 10)
	defer tick.Stop()
	for p.healthy != nil && !p.healthy() {
		select {
		case <-give.C:
			p.m.cutKills.WithLabelValues(p.node, "gave-up").Inc()
			free()
			return
		case <-p.done:
			free()
			return
		case <-tick.C:
		}
	}
	ctx, cancel := context.WithTimeout(p.life, p.resetBound+p.wait)
	defer cancel()
	err := p.kill(ctx, id)
	var pe *PoolError
	if errors.As(err, &pe) && pe.Reason == PoolWaitTimeout {
		if p.killInPlace(ctx, id) {
			p.m.cutKills.WithLabelValues(p.node, "killed").Inc()
			return // the place is the kill's connection's now
		}
	} else if err == nil {
		p.m.cutKills.WithLabelValues(p.node, "killed").Inc()
		free()
		return
	}
	p.m.cutKills.WithLabelValues(p.node, "failed").Inc()
	free()
}

// killInPlace dials a connection in a place the caller keeps, runs KILL
// QUERY id on it and gives it to the pool (true), or closes it (false:
// the place is still the caller's).
func (p *pool) killInPlace(ctx context.Context, id uint32) bool {
	bc, err := p.dial(ctx, poolKey{})
	if err != nil {
		return false
	}
	_, err = bc.exec(ctx, "KILL QUERY "+strconv.FormatUint(uint64(id), 10))
	var me *mysql.MyError
	if err != nil && !(errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_THREAD) {
		bc.home = nil
		bc.close()
		return false
	}
	p.put(bc)
	return true
}

// reset runs COM_RESET_CONNECTION on bc and the proxy's session set-up
// again and reads their answers (startReset, then finishReset).
func (p *pool) reset(bc *backendConn) error {
	if err := p.startReset(bc); err != nil {
		return err
	}
	return p.finishReset(bc)
}

// startReset writes COM_RESET_CONNECTION and the proxy's session set-up
// to bc, pipelined (both commands in one write, answered in one round
// trip), within resetBound, and marks bc resetPending: finishReset reads
// the answers. On failure bc is marked broken.
func (p *pool) startReset(bc *backendConn) (err error) {
	bc.dc.Limit(time.Now().Add(p.resetBound))
	defer bc.dc.Limit(time.Time{})
	defer func() {
		if err != nil {
			bc.broken = true
		}
	}()
	c := bc.conn
	bc.used = time.Now()
	bc.resetSent = bc.used
	bc.wasReset = true
	p.m.resets.WithLabelValues(p.node).Inc()
	c.ResetSequence()
	if err := c.WritePacket([]byte{0, 0, 0, 0, mysql.COM_RESET_CONNECTION}); err != nil {
		return err
	}
	if p.setup != "" {
		c.ResetSequence()
		if err := c.WritePacket(append([]byte{0, 0, 0, 0, mysql.COM_QUERY}, p.setup...)); err != nil {
			return err
		}
	}
	bc.resetPending = true
	return nil
}

// finishReset reads the answers of the reset startReset wrote, within
// resetBound; resetWait observes how long that made the borrower wait,
// reset the round trip from the write. On failure bc is marked broken.
func (p *pool) finishReset(bc *backendConn) (err error) {
	start := time.Now()
	bc.dc.Limit(start.Add(p.resetBound))
	defer bc.dc.Limit(time.Time{})
	defer func() {
		now := time.Now()
		p.m.resetWait.WithLabelValues(p.node).Observe(now.Sub(start).Seconds())
		p.m.reset.WithLabelValues(p.node).Observe(now.Sub(bc.resetSent).Seconds())
		// bc.used stays the reset's write: take's idle peek follows.
		if err != nil {
			bc.broken = true
		}
	}()
	bc.resetPending = false
	c := bc.conn
	c.Sequence = 1 // the reset's answer
	if err := readOK(bc, "COM_RESET_CONNECTION"); err != nil {
		return err
	}
	if p.setup != "" {
		c.Sequence = 1 // the set-up's answer follows the reset's
		if err := readOK(bc, "the session set-up"); err != nil {
			return err
		}
	}
	bc.status = mysql.SERVER_STATUS_AUTOCOMMIT
	bc.replayed, bc.changed = false, false
	// COM_RESET_CONNECTION restores the handshake's character set (and
	// keeps the schema).
	bc.pooledCollation = poolCollation
	return nil
}

// readOK reads one answer that must be an OK packet.
func readOK(bc *backendConn, what string) error {
	pkt, err := bc.conn.ReadPacket()
	if err != nil {
		return err
	}
	switch {
	case len(pkt) > 0 && pkt[0] == mysql.ERR_HEADER:
		return bc.conn.HandleErrorPacket(pkt)
	case len(pkt) == 0:
		return fmt.Errorf("%s: empty answer", what)
	case pkt[0] != mysql.OK_HEADER:
		return fmt.Errorf("%s: unexpected packet 0x%02x", what, pkt[0])
	}
	return nil
}

// useKill: a KILL QUERY of an overrun wait (the use label).
const useKill = "kill"

// discardKilledWait: a connection whose wait overran, closed by the
// session; its place was kept until the wait was killed (keepPlace).
const discardKilledWait = "killed-wait"

// keepPlace closes bc, a connection lent by p whose statement overran
// (the server still runs it), keeping its place in the pool until free is
// called (after KILL QUERY ended the statement): the server counts the
// connection until then. On a nil pool (bc is the session's own) it only
// closes bc.
func (p *pool) keepPlace(bc *backendConn) (free func()) {
	if p == nil {
		bc.close()
		return func() {}
	}
	hold := p.holdPlace(bc)
	return func() {
		p.m.discards.WithLabelValues(p.node, discardKilledWait).Inc()
		hold()
	}
}

// holdPlace closes bc, a connection lent by p, and returns the function
// that frees its place.
func (p *pool) holdPlace(bc *backendConn) (free func()) {
	p.returned(bc)
	bc.home = nil
	bc.close()
	return func() {
		select {
		case p.puts <- nil:
		case <-p.done:
		}
	}
}

// kill runs KILL QUERY id on a connection borrowed from p, within ctx.
func (p *pool) kill(ctx context.Context, id uint32) error {
	bc, err := p.acquireFor(ctx, useKill, 0)
	if err != nil {
		return err
	}
	_, err = bc.exec(ctx, "KILL QUERY "+strconv.FormatUint(uint64(id), 10))
	var me *mysql.MyError
	switch {
	case err == nil:
	case errors.As(err, &me):
		if me.Code == mysql.ER_NO_SUCH_THREAD {
			err = nil // the wait ended meanwhile
		}
	default:
		bc.broken = true
	}
	// KILL QUERY leaves nothing in the session (a replica's pool: the
	// borrower replayed nothing).
	p.release(bc, poolClean)
	return err
}

// Connections the proxy opens to a node besides its pool's (multiplex:
// the node's bound is pool_size plus these, BackendConnectionLimit).
const (
	// positionConns: the position source's connections to each node.
	// Polling: the poller's, and the one it dials after a poll overran
	// while the server still runs the old one's query. Binlog streams:
	// the stream's and its query connection.
	positionConns = 2
	// discoverConns: discovery's connection to each node (discover
	// roles: failover.go's prober).
	discoverConns = 1
	// routerPrimaryConns: the router's own primary connections
	// (live.Config.PrimaryPool: the session-tracking proof at start,
	// gtid_executed re-read before a read is refused).
	routerPrimaryConns = 4
)

// BackendConnectionLimit is the most connections the proxy opens to the
// backend named node at once under multiplexing: pool_size (every
// session's connections, logins and KILL QUERY of overrun waits included)
// plus positionConns, plus routerPrimaryConns on the primary; beyond it
// only the connections of sessions pinned past max_pinned_share, each
// its session's own (pool.detach, pool_connections{state="own"}: at most
// one per session, so max_connections). 0 when
// multiplexing is off (each session then owns its connections: the
// servers' max_connections bound them) or node is unknown.
func (s *Server) BackendConnectionLimit(node string) int {
	if !s.cfg.Multiplex {
		return 0
	}
	t := s.topo.Load()
	n := s.cfg.PoolSize + positionConns
	if s.cfg.Discover == "roles" {
		n += discoverConns
	}
	switch {
	case node == t.primary.Name:
		return n + routerPrimaryConns
	case t.replicaIndex(node) >= 0:
		return n
	}
	return 0
}
