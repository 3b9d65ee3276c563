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

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// Via names the path reads and writes take.
type Via string

const (
	// ViaLab: the lab's thin adapter over router.Decide (lab/live.go), with
	// the lab's poller; it also supports scalar (LSN) tokens.
	ViaLab Via = "lab"
	// ViaRouter: package router's live layer (router.Router, one
	// LiveSession per lab session, router.Poller positions): the code an
	// application embeds. GTID tokens only: a scalar-token router still
	// runs through the lab adapter, and the result says so.
	ViaRouter Via = "router"
)

// viaRouter runs one RouterSpec through router.Router.
type viaRouter struct {
	sp   RouterSpec
	e    *engine
	rt   *router.Router
	mu   []sync.Mutex // per session: a LiveSession is used by one goroutine at a time
	sess []*router.LiveSession
	// noGTID counts writes the router refused to token (ErrMissingGTID).
	noGTID atomic.Int64
}

var (
	_ routerRuntime = (*viaRouter)(nil)
	_ routerRuntime = (*liveRouter[gtid.Set])(nil)
	_ routerRuntime = (*liveRouter[lsnPos])(nil)
)

func routerNode(n compose.Node) router.Node { return router.Node{Name: n.Name, Addr: n.Addr()} }

// newViaRouter builds the live router for sp over positions src.
func newViaRouter(ctx context.Context, sp RouterSpec, e *engine, src router.PositionSource) (*viaRouter, error) {
	if sp.Token != TokenGTID {
		return nil, fmt.Errorf("lab: router %s: --via router supports GTID tokens only (got %s)", sp.Name, sp.Token)
	}
	p := e.nodes.Primary()
	reps := make([]router.Node, 0, len(e.nodes.Replicas()))
	for _, r := range e.nodes.Replicas() {
		reps = append(reps, routerNode(r))
	}
	rt, err := router.New(ctx, router.Config{Primary: routerNode(p), Replicas: reps, User: p.User, Password: p.Password,
		Policy: sp.Policy, Cap: sp.Cap, Positions: src, Epoch: uint64(e.nodes.Epoch()), MaxIdle: e.cfg.Workers,
		Logger: e.cfg.Logger, Seed: e.cfg.Seed})
	if err != nil {
		return nil, fmt.Errorf("lab: router %s: %w", sp.Name, err)
	}
	return &viaRouter{sp: sp, e: e, rt: rt, mu: make([]sync.Mutex, e.cfg.Sessions), sess: make([]*router.LiveSession, e.cfg.Sessions)}, nil
}

func (v *viaRouter) spec() *RouterSpec { return &v.sp }

func (v *viaRouter) counters() (int64, int64) { return v.noGTID.Load(), 0 }

// session returns the session's LiveSession; v.mu[i] must be held.
func (v *viaRouter) session(i int) *router.LiveSession {
	if v.sess[i] == nil {
		s := v.rt.NewSession()
		s.SetConsistentReadID("session-" + strconv.Itoa(i))
		v.sess[i] = s
	}
	return v.sess[i]
}

// primaryExec adapts LiveSession.Exec (writes on the primary, token
// captured by the router) to Execer.
type primaryExec struct{ s *router.LiveSession }

func (p primaryExec) Execute(ctx context.Context, q string) (*mysql.Result, error) {
	return p.s.Exec(ctx, q)
}

// routedQuery adapts LiveSession.Query (routed read) to Execer and keeps
// the router's answer.
type routedQuery struct {
	s    *router.LiveSession
	read *router.Read
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
	g, err := v.e.cfg.Workload.Write(wctx, primaryExec{s}, sess, seq, hot)
	// A LiveSession keeps its own primary connection; S sessions would hold
	// S connections (max_connections is 300), so give it back after each
	// write: the next Exec dials again. The token stays in the session.
	s.Close()
	if errors.Is(err, router.ErrMissingGTID) {
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
	var re *router.ReadError
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
	case router.OutReplica:
		out.Outcome = OutReplica
	case router.OutFallback:
		out.Outcome, out.Fallback = OutPrimary, true
	case router.OutPrimary:
		out.Outcome = OutPrimary
	case router.OutStale:
		out.Outcome = OutStale
	default:
		out.Outcome = OutError
	}
}

// failover tells the live router about a new primary.
func (v *viaRouter) failover(ctx context.Context, fr compose.FailoverResult) error {
	reps := make([]router.Node, 0)
	for _, r := range v.e.nodes.Replicas() {
		reps = append(reps, routerNode(r))
	}
	return v.rt.Failover(ctx, routerNode(v.e.nodes.Primary()), reps, uint64(fr.Epoch))
}

func (v *viaRouter) close() { v.rt.Close() }
