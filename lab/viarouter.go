package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/binlogwatch"
	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// Via names the path reads and writes take.
type Via string

const (
	// ViaRouter (the default): package router's live layer (live.Router[gtid.Set],
	// one LiveSession per lab session, positions from binlogwatch streams
	// behind live.WatchSource): the code an application embeds.
	ViaRouter Via = "router"
	// ViaProxy: the lab's sessions talk MySQL to `causallab proxy`
	// (package proxy, started in-process on a loopback port, one proxy per
	// router), carrying their tokens in /* causal_token:... */ comments.
	ViaProxy Via = "proxy"
)

// A scalar-token (TokenLSN) router runs through package router/live like
// any other, as a live.Router[gtid.LSN] with the live.Scalar flavor and
// polled positions (live.Poller[gtid.LSN]), whatever Via says: the proxy
// carries GTID-set tokens only (a note says so under ViaProxy).

// routerRuntime is one router under test, whatever its path and position
// type.
type routerRuntime interface {
	spec() *RouterSpec
	// write runs session sess's write seq to hot row hot; its ack (the
	// version the hot row got, the GTID) is valid where ack.Hot > 0, even
	// with an error after the write committed.
	write(ctx context.Context, sess int, seq int64, hot int) (WriteAck, error)
	read(ctx context.Context, sess int, out *Read)
}

// liveRuntime is a router run through package router/live, whatever its
// position type: what the driver does with it besides reads and writes.
type liveRuntime interface {
	routerRuntime
	// drift starts (d > 0) or stops (d < 0) d outside readers on a replica.
	drift(name string, d int)
	// failover tells the router about a new primary.
	failover(ctx context.Context, fr compose.FailoverResult) error
	// driftErrors counts the drift readers' failed reads.
	driftErrors() int64
	close()
}

// viaRouter runs one RouterSpec through live.Router[P].
type viaRouter[P gtid.Position[P]] struct {
	sp   RouterSpec
	e    *driver
	rt   *live.Router[P]
	mu   []sync.Mutex // per session: a LiveSession is used by one goroutine at a time
	sess []*live.LiveSession[P]
	// noGTID counts writes the router refused to token (ErrMissingGTID).
	noGTID atomic.Int64
	// drifts is the drift events' outside load through rt.
	drifts *drifter[P]
	// base is the new primary's position prepareFailover read before any
	// router was told of the failover (hasBase: read, not yet used).
	base    P
	hasBase bool
}

var (
	_ liveRuntime = (*viaRouter[gtid.Set])(nil)
	_ liveRuntime = (*viaRouter[gtid.LSN])(nil)
)

func routerNode(n compose.Node) live.Node { return live.Node{Name: n.Name, Addr: n.Addr()} }

// replicaNodes are the topology's replicas as the live router's nodes,
// with the run's hashing weights, and their names.
func replicaNodes(e *driver) ([]live.Node, []string) {
	var reps []live.Node
	var names []string
	for i, r := range e.nodes.Replicas() {
		n := routerNode(r)
		n.Weight = weightOf(e.cfg.Weights, i)
		reps, names = append(reps, n), append(names, r.Name)
	}
	return reps, names
}

// newViaRouter builds the live router for sp with flavor f over positions
// src, raising monotonic-reads watermarks the wm way.
func newViaRouter[P gtid.Position[P]](ctx context.Context, sp RouterSpec, e *driver, f live.Flavor[P], src live.PositionSource[P], wm live.WatermarkMode) (*viaRouter[P], error) {
	p := e.nodes.Primary()
	reps, names := replicaNodes(e)
	rt, err := live.New(ctx, live.Config[P]{Flavor: f, Primary: routerNode(p), Replicas: reps, User: p.User, Password: p.Password,
		Policy: sp.Policy, Cap: sp.Cap, Global: e.cfg.GlobalSource, Positions: src, Epoch: e.nodes.Epoch(), MaxIdle: e.cfg.Workers, PrimaryPool: e.cfg.Workers,
		Watermark: wm, Logger: e.cfg.Logger, Seed: e.cfg.Seed})
	if err != nil {
		return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
	}
	table, err := hashTable(names, e.cfg.Weights)
	if err != nil {
		rt.Close()
		return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
	}
	return &viaRouter[P]{sp: sp, e: e, rt: rt, mu: make([]sync.Mutex, e.cfg.Sessions), sess: make([]*live.LiveSession[P], e.cfg.Sessions),
		drifts: newDrifter(ctx, rt, table, names)}, nil
}

// startWatchSource streams every node's binlog (package binlogwatch) and
// returns the router's recommended PositionSource over the streams
// (live.NewGroupSource), run on wg until ctx ends. It waits until every
// node's watcher is healthy (or limit passes: a node that is down stays
// unhealthy in the source, which the router handles).
func startWatchSource(ctx context.Context, topo Nodes, cfg *Config, wg *sync.WaitGroup, limit time.Duration) (live.PositionSource[gtid.Set], error) {
	var prim *binlogwatch.Watcher
	var reps []*binlogwatch.Watcher
	var names []string
	for i, n := range allNodes(topo) {
		w, err := binlogwatch.New(binlogwatch.Config{Name: n.Name, Host: n.Host, Port: uint16(n.Port), User: n.User,
			Password: n.Password, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("lab: binlog watcher for %s: %w", n.Name, err)
		}
		if i == 0 {
			prim = w
		} else {
			reps = append(reps, w)
		}
		names = append(names, n.Name)
	}
	g, err := binlogwatch.NewGroup(prim, reps...)
	if err != nil {
		return nil, err
	}
	src, err := live.NewGroupSource(g, 0, names...)
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = g.Run(ctx) // returns once ctx ends; health is in the snapshots
	}()
	if err := waitHealthy(ctx, src, names, limit); err != nil {
		return nil, err
	}
	return src, nil
}

// waitHealthy waits until src reports every named node healthy, or limit
// passes (a node that is down stays unhealthy in the source, which the
// router handles); only ctx ending is an error.
func waitHealthy[P gtid.Position[P]](ctx context.Context, src live.PositionSource[P], names []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ok := true
		for _, n := range names {
			if _, up := src.Position(n); !up {
				ok = false
			}
		}
		if ok || time.Now().After(deadline) {
			return nil
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// startPollSource polls every node's executed position with flavor f
// (live.Poller, every cfg.PollInterval; with bounds, each poll also reads
// the node's upper bound, which the lazy watermark needs), run on wg until
// ctx ends: the scalar-token routers' source (binlogwatch's streams carry
// GTID sets), and the GTID-set routers' under PositionsPoll. It waits
// until every node has answered once (or limit passes).
func startPollSource[P gtid.Position[P]](ctx context.Context, topo Nodes, cfg *Config, wg *sync.WaitGroup, limit time.Duration, f live.Flavor[P], bounds bool) (*live.Poller[P], error) {
	var nodes []live.Node
	var names []string
	for _, n := range allNodes(topo) {
		nodes, names = append(nodes, routerNode(n)), append(names, n.Name)
	}
	p := topo.Primary()
	pl, err := live.NewPoller(live.PollerConfig[P]{Flavor: f, Nodes: nodes, User: p.User, Password: p.Password,
		Interval: cfg.PollInterval, Bounds: bounds, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("lab: position poller: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = pl.Run(ctx) // returns once ctx ends; health is in the positions
	}()
	if err := waitHealthy(ctx, pl, names, limit); err != nil {
		return nil, err
	}
	return pl, nil
}

// drift starts (d > 0) or stops (d < 0) d outside readers on the named
// replica, through this router (drifter).
func (v *viaRouter[P]) drift(name string, d int) { v.drifts.drift(name, d) }

func (v *viaRouter[P]) spec() *RouterSpec { return &v.sp }

func (v *viaRouter[P]) counters() (int64, int64) { return v.noGTID.Load(), 0 }

func (v *viaRouter[P]) driftErrors() int64 { return v.drifts.errs.Load() }

// session returns the session's LiveSession; v.mu[i] must be held.
func (v *viaRouter[P]) session(i int) *live.LiveSession[P] {
	if v.sess[i] == nil {
		s := v.rt.NewSession()
		s.SetConsistentReadID("session-" + strconv.Itoa(i))
		v.sess[i] = s
	}
	return v.sess[i]
}

// primaryExec adapts LiveSession.Exec (writes on the primary, token
// captured by the router) to Execer.
type primaryExec[P gtid.Position[P]] struct{ s *live.LiveSession[P] }

var (
	_ Execer = primaryExec[gtid.Set]{}
	_ Execer = (*routedQuery[gtid.Set])(nil)
)

func (p primaryExec[P]) Execute(ctx context.Context, q string) (*mysql.Result, error) {
	return p.s.Exec(ctx, q)
}

// ExecuteWrite implements Execer. LiveSession.ExecWrite parses the write's
// GTID from the router's own copy of the OK packet (never
// Result.SessionTracking, which aliases a buffer go-mysql has already
// returned to its pool), adds the write's position to the session's token
// and returns the GTID. Its errors (ErrMissingGTID with its result) pass
// through.
func (p primaryExec[P]) ExecuteWrite(ctx context.Context, q string) (*mysql.Result, string, error) {
	r, w, err := p.s.ExecWrite(ctx, q)
	if !w.OK {
		return r, "", err
	}
	if w.GTID == "" {
		// MariaDB tracks its GTID as the variable last_gtid, not in the
		// GTID tracker: the flavor's write position is that GTID.
		return r, fmt.Sprint(w.Pos), err
	}
	return r, w.GTID, err
}

// routedQuery adapts LiveSession.Query (routed read) to Execer and keeps
// the router's answer.
type routedQuery[P gtid.Position[P]] struct {
	s    *live.LiveSession[P]
	read *live.Read[P]
}

// errRoutedWrite: a routed read path was asked to run a write.
var errRoutedWrite = errors.New("lab: a routed read cannot run a write (Workload.Read must not write)")

// ExecuteWrite implements Execer; reads are routed, writes refused.
func (r *routedQuery[P]) ExecuteWrite(context.Context, string) (*mysql.Result, string, error) {
	return nil, "", errRoutedWrite
}

func (r *routedQuery[P]) Execute(ctx context.Context, q string) (*mysql.Result, error) {
	rd, err := r.s.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	r.read = rd
	return rd.Result, nil
}

func (v *viaRouter[P]) write(ctx context.Context, sess int, seq int64, hot int) (ack WriteAck, err error) {
	v.mu[sess].Lock()
	defer v.mu[sess].Unlock()
	s := v.session(sess)
	wctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	// Exec borrows a connection of the router's shared, bounded primary
	// pool (Config.PrimaryPool) for the autocommit write and gives it back.
	ack, err = v.e.cfg.Workload.Write(wctx, primaryExec[P]{s}, sess, seq, hot)
	g := ack.GTID
	if errors.Is(err, live.ErrMissingGTID) {
		// The write committed but the router could not token it: the ground
		// truth still judges later reads against it.
		v.noGTID.Add(1)
		err = nil
	}
	if err != nil {
		return ack, err
	}
	ss := &v.e.sess[sess]
	ss.mu.Lock()
	ss.acked = seq
	ss.mu.Unlock()
	v.e.hot.ack(hot, ack.Hot)
	if gt, perr := flavorOf(v.e.cfg.Engine).parseWrite(g); g != "" && perr == nil {
		v.e.lag.ack(gt, time.Now()) // lag measurement only
	}
	return ack, nil
}

func (v *viaRouter[P]) read(ctx context.Context, sess int, out *Read) {
	v.mu[sess].Lock()
	defer v.mu[sess].Unlock()
	v.e.hot.issue(&v.e.sess[sess], out)
	s := v.session(sess)
	rctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	q := &routedQuery[P]{s: s}
	own, err := v.e.cfg.Workload.Read(rctx, q, sess, out.Hot)
	out.Done = v.e.since()
	if failedRead(out, err) {
		return
	}
	if q.read == nil {
		out.Outcome = router.OutError
		return
	}
	out.Own = own
	servedRead(out, q.read)
}

// failedRead records a read that failed (err not nil) in out: refused,
// typed, as the router counted it (failed-fast or timed-out), or an
// error. It reports whether the read failed.
func failedRead(out *Read, err error) bool {
	var re *live.ReadError
	switch {
	case errors.As(err, &re):
		out.Reason = re.Reason.String()
		out.Waited = re.Waited > 0
		out.Outcome = re.Outcome
		out.ResetSeen = re.Reason == router.ReasonSeenLost
		return true
	case err != nil:
		out.Outcome = router.OutError
		return true
	}
	return false
}

// servedRead records the router's account of a served read in out.
func servedRead[P gtid.Position[P]](out *Read, rd *live.Read[P]) {
	out.Node, out.Reason, out.Waited = rd.Node, rd.Reason.String(), rd.Waited > 0
	out.HashReason = rd.HashReason
	out.Outcome = rd.Outcome // replica, fallback, primary or stale
}

// prepareFailover reads the new primary's position, the epoch's base,
// before any router is told of the failover: once one is told, its
// sessions write there, and a base read later would hold their writes
// (under a position compared by number, past a lost write's).
func (v *viaRouter[P]) prepareFailover(ctx context.Context) error {
	base, err := v.rt.ReadPosition(ctx, routerNode(v.e.nodes.Primary()))
	if err != nil {
		return fmt.Errorf("lab: router %s: the new primary's position: %w", v.sp.Name, err)
	}
	v.base, v.hasBase = base, true
	return nil
}

// failover tells the live router about a new primary, at the base
// prepareFailover read (else at the position the router reads now).
func (v *viaRouter[P]) failover(ctx context.Context, fr compose.FailoverResult) error {
	reps, _ := replicaNodes(v.e)
	p := routerNode(v.e.nodes.Primary())
	if v.hasBase {
		v.hasBase = false
		return v.rt.FailoverAt(p, reps, fr.Epoch, v.base)
	}
	return v.rt.Failover(ctx, p, reps, fr.Epoch)
}

func (v *viaRouter[P]) close() {
	v.drifts.close()
	v.rt.Close()
}
