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
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// Via names the path reads and writes take.
type Via string

const (
	// ViaRouter (the default): package router's live layer (live.Router,
	// one LiveSession per lab session, positions from binlogwatch streams
	// behind live.WatchSource): the code an application embeds.
	ViaRouter Via = "router"
	// ViaProxy: the lab's sessions talk MySQL to `causallab proxy`
	// (package proxy, started in-process on a loopback port, one proxy per
	// router), carrying their tokens in /* causal_token:... */ comments.
	ViaProxy Via = "proxy"
)

// The one path that bypasses both: a scalar-token (TokenLSN) router runs
// through the LSN adapter (lsnadapter.go), because package router's live
// layer carries GTID-set tokens only. The result says so in a note.

// viaRouter runs one RouterSpec through live.Router.
type viaRouter struct {
	sp   RouterSpec
	e    *engine
	rt   *live.Router
	mu   []sync.Mutex // per session: a LiveSession is used by one goroutine at a time
	sess []*live.LiveSession
	// noGTID counts writes the router refused to token (ErrMissingGTID).
	noGTID atomic.Int64

	// ctx bounds the drift readers; table is the hashing table over the
	// configured replicas (to pick read ids that hash to a node).
	ctx   context.Context
	table *hashroute.Table
	// driftMu guards drifts: per node, the cancel funcs of running drift
	// readers. driftWG tracks them; driftErrs counts their failed reads.
	driftMu   sync.Mutex
	drifts    map[string][]context.CancelFunc
	driftWG   sync.WaitGroup
	driftErrs atomic.Int64
}

var (
	_ routerRuntime = (*viaRouter)(nil)
	_ routerRuntime = (*liveRouter[lsnPos])(nil)
)

func routerNode(n compose.Node) live.Node { return live.Node{Name: n.Name, Addr: n.Addr()} }

// newViaRouter builds the live router for sp over positions src.
func newViaRouter(ctx context.Context, sp RouterSpec, e *engine, src live.PositionSource) (*viaRouter, error) {
	if sp.Token != TokenGTID {
		return nil, fmt.Errorf("lab: router %s: --via router supports GTID tokens only (got %s)", sp.Name, sp.Token)
	}
	p := e.nodes.Primary()
	reps := make([]live.Node, 0, len(e.nodes.Replicas()))
	for _, r := range e.nodes.Replicas() {
		reps = append(reps, routerNode(r))
	}
	rt, err := live.New(ctx, live.Config{Primary: routerNode(p), Replicas: reps, User: p.User, Password: p.Password,
		Policy: sp.Policy, Cap: sp.Cap, Positions: src, Epoch: uint64(e.nodes.Epoch()), MaxIdle: e.cfg.Workers, PrimaryPool: e.cfg.Workers,
		Logger: e.cfg.Logger, Seed: e.cfg.Seed})
	if err != nil {
		return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
	}
	srv := make([]hashroute.Server, len(reps))
	for i, r := range reps {
		srv[i] = hashroute.Server{Name: r.Name, Weight: 1}
	}
	var table *hashroute.Table
	if len(srv) > 0 {
		if table, err = hashroute.New(hashroute.Config{Servers: srv}); err != nil {
			rt.Close()
			return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
		}
	}
	return &viaRouter{sp: sp, e: e, rt: rt, mu: make([]sync.Mutex, e.cfg.Sessions), sess: make([]*live.LiveSession, e.cfg.Sessions),
		ctx: ctx, table: table, drifts: map[string][]context.CancelFunc{}}, nil
}

// startWatchSource streams every node's binlog (package binlogwatch) and
// returns the router's recommended PositionSource over the streams
// (live.NewGroupSource), run on wg until ctx ends. It waits until every
// node's watcher is healthy (or limit passes: a node that is down stays
// unhealthy in the source, which the router handles).
func startWatchSource(ctx context.Context, topo Nodes, cfg *Config, wg *sync.WaitGroup, limit time.Duration) (live.PositionSource, error) {
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
	deadline := time.Now().Add(limit)
	for {
		ok := true
		for _, n := range names {
			if _, up := src.Position(n); !up {
				ok = false
			}
		}
		if ok || time.Now().After(deadline) {
			return src, nil
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// drift starts (d > 0) or stops (d < 0) d outside readers on the named
// replica: real reads through this router (SELECT SLEEP(0.2) in a loop,
// with read ids that hash to the node under full-list), so the router's
// own in-flight count for the node rises as a load balancer would see it.
// This is what rebalance-override reacts to.
func (v *viaRouter) drift(name string, d int) {
	v.driftMu.Lock()
	defer v.driftMu.Unlock()
	if d < 0 {
		for _, c := range v.drifts[name] {
			c()
		}
		delete(v.drifts, name)
		return
	}
	idx := -1
	for i, r := range v.e.nodes.Replicas() {
		if r.Name == name {
			idx = i
		}
	}
	if idx < 0 || v.table == nil {
		v.driftErrs.Add(1)
		return
	}
	ids := make([]string, 0, d)
	for k := 0; len(ids) < d && k < 1_000_000; k++ {
		id := "drift-" + strconv.Itoa(k)
		if v.table.First(hashroute.Hash(id)) == idx {
			ids = append(ids, id)
		}
	}
	ctx, cancel := context.WithCancel(v.ctx)
	v.drifts[name] = append(v.drifts[name], cancel)
	pol := router.Policy{Kind: router.PolicyAffinity, HashMode: hashroute.FullList}
	for _, id := range ids {
		v.driftWG.Add(1)
		go func() {
			defer v.driftWG.Done()
			s := v.rt.NewSession()
			s.SetConsistentReadID(id)
			defer s.Close()
			for ctx.Err() == nil {
				if _, err := s.QueryWith(ctx, pol, "SELECT SLEEP(0.2)"); err != nil && ctx.Err() == nil {
					v.driftErrs.Add(1)
					sleepCtx(ctx, 50*time.Millisecond)
				}
			}
		}()
	}
}

func (v *viaRouter) spec() *RouterSpec { return &v.sp }

func (v *viaRouter) counters() (int64, int64) { return v.noGTID.Load(), 0 }

// session returns the session's LiveSession; v.mu[i] must be held.
func (v *viaRouter) session(i int) *live.LiveSession {
	if v.sess[i] == nil {
		s := v.rt.NewSession()
		s.SetConsistentReadID("session-" + strconv.Itoa(i))
		v.sess[i] = s
	}
	return v.sess[i]
}

// primaryExec adapts LiveSession.Exec (writes on the primary, token
// captured by the router) to Execer.
type primaryExec struct{ s *live.LiveSession }

var (
	_ Execer = primaryExec{}
	_ Execer = (*routedQuery)(nil)
)

func (p primaryExec) Execute(ctx context.Context, q string) (*mysql.Result, error) {
	return p.s.Exec(ctx, q)
}

// ExecuteWrite implements Execer. LiveSession.ExecGTID parses the write's
// GTID from the router's own copy of the OK packet (never
// Result.SessionTracking, which aliases a buffer go-mysql has already
// returned to its pool), adds it to the session's token and returns it.
// Its errors (ErrMissingGTID with its result) pass through.
func (p primaryExec) ExecuteWrite(ctx context.Context, q string) (*mysql.Result, string, error) {
	r, set, err := p.s.ExecGTID(ctx, q)
	if set.IsEmpty() {
		return r, "", err
	}
	return r, set.CompactString(), err
}

// routedQuery adapts LiveSession.Query (routed read) to Execer and keeps
// the router's answer.
type routedQuery struct {
	s    *live.LiveSession
	read *live.Read
}

// errRoutedWrite: a routed read path was asked to run a write.
var errRoutedWrite = errors.New("lab: a routed read cannot run a write (Workload.Read must not write)")

// ExecuteWrite implements Execer; reads are routed, writes refused.
func (r *routedQuery) ExecuteWrite(context.Context, string) (*mysql.Result, string, error) {
	return nil, "", errRoutedWrite
}

func (r *routedQuery) Execute(ctx context.Context, q string) (*mysql.Result, error) {
	rd, err := r.s.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	r.read = rd
	return rd.Result, nil
}

func (v *viaRouter) write(ctx context.Context, _ *worker, sess int, seq int64, hot int) error {
	v.mu[sess].Lock()
	defer v.mu[sess].Unlock()
	s := v.session(sess)
	wctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	// Exec borrows a connection of the router's shared, bounded primary
	// pool (Config.PrimaryPool) for the autocommit write and gives it back.
	g, err := v.e.cfg.Workload.Write(wctx, primaryExec{s}, sess, seq, hot)
	if errors.Is(err, live.ErrMissingGTID) {
		// The write committed but the router could not token it: the ground
		// truth still judges later reads against it.
		v.noGTID.Add(1)
		err = nil
	}
	if err != nil {
		return err
	}
	ss := &v.e.sess[sess]
	ss.mu.Lock()
	ss.acked = seq
	ss.mu.Unlock()
	if gt, perr := gtid.ParseGTID(g); g != "" && perr == nil {
		v.e.lag.ack(gt, time.Now()) // lag measurement only
	}
	return nil
}

func (v *viaRouter) read(ctx context.Context, _ *worker, sess int, out *Read) {
	v.mu[sess].Lock()
	defer v.mu[sess].Unlock()
	ss := &v.e.sess[sess]
	ss.mu.Lock()
	out.AckedSeq = ss.acked
	ss.mu.Unlock()
	s := v.session(sess)
	rctx, cancel := context.WithTimeout(ctx, v.e.cfg.ReadTimeout)
	defer cancel()
	q := &routedQuery{s: s}
	own, err := v.e.cfg.Workload.Read(rctx, q, sess, out.Hot)
	out.Done = v.e.since()
	var re *live.ReadError
	switch {
	case errors.As(err, &re):
		out.Reason = re.Reason.String()
		out.Waited = re.Waited > 0
		if re.Reason == router.ReasonTimedOut {
			out.Outcome = OutTimedOut
		} else {
			out.Outcome = OutFailed
		}
		out.ResetSeen = re.Reason == router.ReasonSeenLost
		return
	case err != nil || q.read == nil:
		out.Outcome = OutError
		return
	}
	out.Own = own
	rd := q.read
	out.Node, out.Reason, out.Waited = rd.Node, rd.Reason.String(), rd.Waited > 0
	switch rd.Outcome {
	case live.OutReplica:
		out.Outcome = OutReplica
	case live.OutFallback:
		out.Outcome, out.Fallback = OutPrimary, true
	case live.OutPrimary:
		out.Outcome = OutPrimary
	case live.OutStale:
		out.Outcome = OutStale
	default:
		out.Outcome = OutError
	}
}

// failover tells the live router about a new primary.
func (v *viaRouter) failover(ctx context.Context, fr compose.FailoverResult) error {
	reps := make([]live.Node, 0)
	for _, r := range v.e.nodes.Replicas() {
		reps = append(reps, routerNode(r))
	}
	return v.rt.Failover(ctx, routerNode(v.e.nodes.Primary()), reps, uint64(fr.Epoch))
}

func (v *viaRouter) close() {
	v.driftMu.Lock()
	for _, cs := range v.drifts {
		for _, c := range cs {
			c()
		}
	}
	v.drifts = map[string][]context.CancelFunc{}
	v.driftMu.Unlock()
	v.driftWG.Wait()
	v.rt.Close()
}
