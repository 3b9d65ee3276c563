package lab

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// The LSN adapter: the one routing path that does not go through package
// router's live layer, because that layer carries GTID-set tokens only and
// the failover comparison needs a scalar position token (an LSN's
// semantics: compared by value whatever the timeline). It builds
// router.Input from the lab poller's snapshot and the session's state,
// calls router.Decide (the same pure core the simulator and live.Router
// call), and carries the Decision out on the worker's own connections. It
// adds no routing rule of its own. Every TokenLSN router runs here, and
// the result says so in a note; every other router runs through
// package router (or the proxy).

// worker is one executing goroutine's private state: a connection per
// node and a random source.
type worker struct {
	conns map[string]*nodeConn
	rng   rng
}

func (w *worker) conn(ctx context.Context, n compose.Node) (*nodeConn, error) {
	key := n.Addr()
	if c, ok := w.conns[key]; ok {
		return c, nil
	}
	c, err := dialNode(ctx, key, n.User, n.Password)
	if err != nil {
		return nil, err
	}
	w.conns[key] = c
	return c, nil
}

func (w *worker) close() {
	for _, c := range w.conns {
		c.Close()
	}
}

// posKind converts the lab's GTID sets to a router position type.
type posKind[P router.Position[P]] interface {
	// executed converts a node's executed set.
	executed(s gtid.Set) P
	// written converts an acknowledged write: its GTID g and the primary's
	// last polled set.
	written(g gtid.GTID, primary gtid.Set) P
	// waitSet is the GTID set text WAIT_FOR_EXECUTED_GTID_SET needs to
	// satisfy p; false when the kind cannot wait on the server.
	waitSet(p P) (string, bool)
}

// lsnPos is a scalar position compared by value (lsnPos's semantics) with
// the Union the router core needs (lsnPos has Contains only).
type lsnPos uint64

// Contains reports l >= o, whatever the timeline.
func (l lsnPos) Contains(o lsnPos) bool { return l >= o }

// Union is the larger position.
func (l lsnPos) Union(o lsnPos) lsnPos { return max(l, o) }

var _ router.Position[lsnPos] = lsnPos(0)

// lsnKind: positions are scalar counts of transactions, compared by value
// on any timeline (an LSN's semantics). A write's LSN is the primary's count
// once the write's own source has reached its GNO.
type lsnKind struct{}

func (lsnKind) executed(s gtid.Set) lsnPos { return lsnPos(s.Count()) }
func (lsnKind) written(g gtid.GTID, primary gtid.Set) lsnPos {
	// every earlier GNO of the writing source committed before it
	upTo := gtid.MustParse(g.SID.String() + tagPart(g.Tag) + ":1-" + strconv.FormatInt(g.GNO, 10))
	return lsnPos(primary.Union(upTo).Count())
}
func (lsnKind) waitSet(lsnPos) (string, bool) { return "", false }

func tagPart(t string) string {
	if t == "" {
		return ""
	}
	return ":" + t
}

var _ posKind[lsnPos] = lsnKind{}

// routerRuntime is one router under test, whatever its position type.
type routerRuntime interface {
	spec() *RouterSpec
	write(ctx context.Context, w *worker, sess int, seq int64, hot int) error
	read(ctx context.Context, w *worker, sess int, out *Read)
}

// viewCache holds the router.View built from one snapshot.
type viewCache[P router.Position[P]] struct {
	seq  uint64
	view *router.View[P]
}

// liveRouter runs one RouterSpec with position type P.
type liveRouter[P router.Position[P]] struct {
	sp    RouterSpec
	kind  posKind[P]
	e     *engine
	state []router.Session[P] // guarded by e.sess[i].mu

	bmu    sync.Mutex
	bucket router.Bucket

	vc atomic.Pointer[viewCache[P]]

	// observeErrors counts reads whose watermark could not be raised
	// (the follow-up position query failed): the read is then reported as
	// an error outcome, never silently unprotected.
	observeErrors atomic.Int64
	// noGTID counts acknowledged writes whose OK packet carried no GTID.
	noGTID atomic.Int64
}

// newLSNAdapter runs a TokenLSN router through the adapter.
func newLSNAdapter(sp RouterSpec, e *engine) routerRuntime {
	return &liveRouter[lsnPos]{sp: sp, kind: lsnKind{}, e: e, state: make([]router.Session[lsnPos], e.cfg.Sessions)}
}

func (r *liveRouter[P]) spec() *RouterSpec { return &r.sp }

// viewOf converts a snapshot (cached per snapshot).
func (r *liveRouter[P]) viewOf(s *snapshot) *router.View[P] {
	if c := r.vc.Load(); c != nil && c.seq == s.seq {
		return c.view
	}
	v := &router.View[P]{
		Replicas:     make([]router.Replica[P], len(s.replicas)),
		PrimaryKnown: s.primaryKnown,
		Epoch:        s.epoch,
		Hash:         s.hash,
	}
	if s.primaryKnown {
		v.Primary = r.kind.executed(s.primaryPos)
	}
	for i := range s.replicas {
		v.Replicas[i] = router.Replica[P]{Up: s.up[i], Behind: s.behind[i]}
		if s.up[i] {
			v.Replicas[i].Applied = r.kind.executed(s.applied[i])
		}
	}
	r.vc.Store(&viewCache[P]{seq: s.seq, view: v})
	return v
}

func (r *liveRouter[P]) write(ctx context.Context, w *worker, sess int, seq int64, hot int) error {
	snap := r.e.poll.view()
	c, err := w.conn(ctx, snap.primary)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, r.e.cfg.ReadTimeout)
	g, err := r.e.cfg.Workload.Write(wctx, c, sess, seq, hot)
	cancel()
	if err != nil {
		return err
	}
	now := r.e.since()
	var p P
	var gt gtid.GTID
	if g != "" {
		if gt, err = gtid.ParseGTID(g); err != nil {
			return fmt.Errorf("lab: write of session %d: the primary tracked GTID %q: %w", sess, g, err)
		}
		p = r.kind.written(gt, snap.primaryPos)
	}
	s := &r.e.sess[sess]
	s.mu.Lock()
	s.acked = seq
	if g != "" {
		router.RecordWrite(&r.state[sess], p, snap.epoch, now)
	}
	s.mu.Unlock()
	if g == "" {
		// The write stands (the ground truth will judge reads against it)
		// but no token protects it: counted, and reported.
		r.noGTID.Add(1)
		return nil
	}
	r.e.lag.ack(gt, time.Now())
	r.e.poll.noteWrite(gt, snap.epoch)
	return nil
}

// needsWatermark reports whether reads must raise the MR watermark.
func (r *liveRouter[P]) needsWatermark() bool {
	k := r.sp.Policy.Kind
	return k == router.PolicyTokenRYWMR || k == router.PolicyTokenWait
}

func (r *liveRouter[P]) read(ctx context.Context, w *worker, sess int, out *Read) {
	e := r.e
	rctx, cancel := context.WithTimeout(ctx, e.cfg.ReadTimeout)
	defer cancel()
	snap := e.poll.view()
	v := r.viewOf(snap)
	s := &e.sess[sess]
	s.mu.Lock()
	rs := r.state[sess]
	out.AckedSeq = s.acked
	s.mu.Unlock()

	in := router.Input[P]{Policy: &r.sp.Policy, Cap: &r.sp.Cap, Session: &rs, View: v, Now: e.since(), Rand: w.rng.next()}
	if r.sp.Policy.Kind == router.PolicyAffinity {
		rs.AffinityKey = hashroute.Hash("session-" + strconv.Itoa(sess))
		if r.sp.Policy.HashMode == hashroute.RebalanceOverride {
			v = withInFlight(e, v)
			in.View = v
		}
	}
	var d router.Decision
	for {
		r.bmu.Lock()
		d = router.Decide(&in, &r.bucket)
		r.bmu.Unlock()
		if d.Action != router.ActWait {
			break
		}
		out.Waited = true
		waitedOn := snap.replicas[d.Replica].Name
		waited, ok := r.wait(rctx, w, snap, d, &rs)
		if rctx.Err() != nil {
			out.Outcome = OutTimedOut
			return
		}
		in.Waited += waited
		in.Now = e.since()
		snap = e.poll.view()
		v = r.viewOf(snap)
		if ok && d.Replica < len(v.Replicas) && d.Replica < len(snap.replicas) && snap.replicas[d.Replica].Name == waitedOn {
			// The server said it holds the need: raise that replica's
			// position in a private copy of the view (a sound lower bound).
			nv := *v
			nv.Replicas = append([]router.Replica[P](nil), v.Replicas...)
			nv.Replicas[d.Replica].Applied = nv.Replicas[d.Replica].Applied.Union(r.need(&rs))
			v = &nv
		}
		in.View = v
	}
	var node compose.Node
	switch d.Action {
	case router.ActFail:
		out.Reason = d.Reason.String()
		if d.Reason == router.ReasonTimedOut {
			out.Outcome = OutTimedOut
		} else {
			out.Outcome = OutFailed
		}
		if d.Reason == router.ReasonSeenLost {
			out.ResetSeen = true
			s.mu.Lock()
			r.state[sess].DropSeen()
			s.mu.Unlock()
		}
		out.Done = e.since()
		return
	case router.ActPrimary:
		node = snap.primary
		out.Fallback = d.Fallback
	case router.ActReplica, router.ActStale:
		node = snap.replicas[d.Replica]
	}
	out.Node, out.Reason = node.Name, d.Reason.String()
	if node.Name == snap.primary.Name {
		out.Outcome = OutPrimary
	} else if d.Action == router.ActStale {
		out.Outcome = OutStale
	} else {
		out.Outcome = OutReplica
	}
	var idx = -1
	if d.Action != router.ActPrimary {
		idx = d.Replica
		e.inFlightAdd(idx, 1)
		defer e.inFlightAdd(idx, -1)
	}
	c, err := w.conn(rctx, node)
	if err == nil {
		out.Own, err = e.cfg.Workload.Read(rctx, c, sess, out.Hot)
	}
	if err != nil {
		out.Outcome = OutError
		out.Done = e.since()
		return
	}
	var pos P
	if r.needsWatermark() {
		// Everything the read could have shown is in the node's executed
		// set read after it on the same connection.
		pr, err := c.Execute(rctx, "SELECT @@GLOBAL.gtid_executed")
		var set gtid.Set
		if err == nil {
			set, err = executedFromResult(pr)
		}
		if err != nil {
			r.observeErrors.Add(1)
			out.Outcome = OutError
			out.Done = e.since()
			return
		}
		pos = r.kind.executed(set)
	}
	s.mu.Lock()
	if d.Reanchor {
		r.state[sess].Reanchor(snap.epoch)
	}
	if r.needsWatermark() {
		router.Observe(&r.state[sess], pos, snap.epoch)
	}
	s.mu.Unlock()
	out.Done = e.since()
}

// need is what a session requires of a replica: token and watermark.
func (r *liveRouter[P]) need(rs *router.Session[P]) P {
	switch {
	case rs.HasToken && rs.HasSeen && r.needsWatermark():
		return rs.Token.Union(rs.Seen)
	case rs.HasToken:
		return rs.Token
	default:
		return rs.Seen
	}
}

// wait carries out ActWait: WAIT_FOR_EXECUTED_GTID_SET on the replica for
// kinds that can wait on the server, a poll-interval sleep for the others
// (the scalar kind). It returns how long it waited and whether the server confirmed.
func (r *liveRouter[P]) wait(ctx context.Context, w *worker, snap *snapshot, d router.Decision, rs *router.Session[P]) (time.Duration, bool) {
	began := time.Now()
	set, can := r.kind.waitSet(r.need(rs))
	if !can || d.Replica >= len(snap.replicas) {
		sleepCtx(ctx, min(d.WaitFor, r.e.cfg.PollInterval))
		return time.Since(began), false
	}
	c, err := w.conn(ctx, snap.replicas[d.Replica])
	if err != nil {
		sleepCtx(ctx, min(d.WaitFor, r.e.cfg.PollInterval))
		return time.Since(began), false
	}
	secs := strconv.FormatFloat(max(d.WaitFor.Seconds(), 0.001), 'f', 3, 64)
	res, err := c.Execute(ctx, "SELECT WAIT_FOR_EXECUTED_GTID_SET('"+set+"', "+secs+")")
	if err != nil {
		return time.Since(began), false
	}
	v, err := res.GetInt(0, 0)
	return time.Since(began), err == nil && v == 0
}

// withInFlight returns a copy of v with each replica's reads in flight
// (what rebalance-override looks at).
func withInFlight[P router.Position[P]](e *engine, v *router.View[P]) *router.View[P] {
	nv := *v
	nv.Replicas = append([]router.Replica[P](nil), v.Replicas...)
	for i := range nv.Replicas {
		if i < len(e.inFlight) {
			nv.Replicas[i].InFlight = int(e.inFlight[i].Load())
		}
	}
	return &nv
}
