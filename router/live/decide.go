package live

import (
	"fmt"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// LiveState is the live router's topology state that a decision reads. The
// Router keeps one under its lock; DecideLive reads it without I/O.
type LiveState[P gtid.Position[P]] struct {
	// Flavor measures how far a replica is behind the primary.
	Flavor Flavor[P]
	// Primary is the current primary.
	Primary Node
	// Replicas are the configured replicas, in hashing order.
	Replicas []Node
	// Epoch is the current topology epoch.
	Epoch uint64
	// PrimaryPos is a lower bound of the primary's executed position: read
	// at New/Failover, raised by every write the primary acknowledges to a
	// session and by the PositionSource's view of the primary.
	PrimaryPos P
	// Acked is every write the primary acknowledged to a session in the
	// current epoch (Exec, RecordAck), each source widened to its prefix
	// (Flavor.Compact), so it stays small while other clients write in
	// between; AckedAt is the clock time of the last one. A new session
	// may start with it as its token (LiveSession.StartAfterAcked). Empty
	// again after a failover: the new epoch's writes only.
	Acked   P
	AckedAt time.Duration
	// Bases are the promoted primaries' positions at each failover
	// (router.View.Bases), oldest first.
	Bases []router.EpochBase[P]
	// Table is the hashroute table over Replicas (nil without replicas).
	Table *hashroute.Table
	// DownUntil holds the nodes skipped after an error, until the time given.
	DownUntil map[string]time.Time
	// InFlight counts the reads in flight per node name (affinity's
	// rebalance-override mode reads it).
	InFlight map[string]int
	// Commits records when the primary's position grew (nil: deferrals
	// carry router.MinRetryAfter).
	Commits *CommitLog[P]
}

// LiveRequest is one decision's per-read inputs.
type LiveRequest[P gtid.Position[P]] struct {
	// Session is the session's causal state (not modified).
	Session *router.Session[P]
	// Policy and Cap are the read's policy and the router's cap (nil: none).
	Policy *router.Policy
	Cap    *router.Cap
	// Wall is the wall-clock time, compared with LiveState.DownUntil.
	Wall time.Time
	// Now is the router's monotonic clock for Decide.
	Now time.Duration
	// Rand is the random draw handed to Decide.
	Rand uint64
	// Waited is how long this read has already waited.
	Waited time.Duration
	// Known holds positions proven during this read (a successful
	// server-side wait): merged into the source's view.
	Known map[string]P
	// Global and GlobalKnown are PolicyGlobal's target for this read
	// (router.Input.Global), captured once before its first decision.
	Global      P
	GlobalKnown bool
	// PendingWait is router.Input.PendingWait (WatermarkLazy: how much
	// longer the session's pending seen may take to be bounded).
	PendingWait time.Duration
}

// DecideLive is the live router's whole decision path: it builds Decide's
// View from st and src, then calls Decide. It does no I/O: src.Position
// must not block (the PositionSource contract), and nothing else is
// consulted. Router.decide calls it under the router's lock; tests replay
// recorded inputs through it (the simulator equivalence test).
//
// View building: a replica's Applied is src's position for it, raised by
// req.Known; it is Up when src says healthy and it is not held down
// (DownUntil); Behind is st.Flavor.Behind (for MySQL, the primary's
// transaction count minus the replica's, 0 when ahead); InFlight from st. The primary's position is
// st.PrimaryPos raised by src's view of the primary (PrimaryKnown is always
// true); the raised position is returned for the caller to store.
//
// Under Policy.SkipFutile a budget wait (ActWait,
// router.ReasonNoReplicaQualifies) is tested for futility before it is
// returned (router.Decide's rule 4): the waited replica's Lag
// (CommitLog.Lag at req.Wall) and the read's need age
// (router.Input.NeedAge: the youngest CommitLog.Age of the parts it lacks
// of the token, the watermark and, for PolicyGlobal, req.Global) are
// filled in and Decide is asked again; it answers the wait, or a fallback
// with router.ReasonWaitFutile. Without a log, no wait is judged futile.
// Reads that need no wait do none of this.
//
// A deferral (ActDefer) gets its retry estimate from st.Commits: each up
// replica's Lag is filled in (CommitLog.Lag at req.Wall) and RetryAfter is
// router.RetryAfter of that view; without a log, router.MinRetryAfter.
//
// It returns the decision and the view it was made on.
func DecideLive[P gtid.Position[P]](st *LiveState[P], src PositionSource[P], req *LiveRequest[P], b *router.Bucket) (router.Decision, *router.View[P], P) {
	return decideLiveIn(st, src, req, b, &router.View[P]{})
}

// decideLiveIn is DecideLive building the view in v (its Replicas' array
// reused): a caller deciding every read keeps one.
func decideLiveIn[P gtid.Position[P]](st *LiveState[P], src PositionSource[P], req *LiveRequest[P], b *router.Bucket, v *router.View[P]) (router.Decision, *router.View[P], P) {
	prim := st.PrimaryPos
	if p, ok := src.Position(st.Primary.Name); ok && !prim.Contains(p) {
		prim = prim.Union(p)
	}
	reps := v.Replicas
	if cap(reps) < len(st.Replicas) {
		reps = make([]router.Replica[P], len(st.Replicas))
	}
	*v = router.View[P]{Replicas: reps[:len(st.Replicas)], Primary: prim,
		PrimaryKnown: true, Epoch: st.Epoch, Bases: st.Bases, Hash: st.Table}
	for i, n := range st.Replicas {
		set, healthy := src.Position(n.Name)
		if k, ok := req.Known[n.Name]; ok && !set.Contains(k) {
			set = set.Union(k)
		}
		up := healthy && !req.Wall.Before(st.DownUntil[n.Name])
		v.Replicas[i] = router.Replica[P]{Applied: set, Up: up, Behind: st.Flavor.Behind(prim, set), InFlight: st.InFlight[n.Name]}
	}
	in := router.Input[P]{Policy: req.Policy, Cap: req.Cap, Session: req.Session, View: v,
		Now: req.Now, Rand: req.Rand, Waited: req.Waited, Global: req.Global, GlobalKnown: req.GlobalKnown,
		PendingWait: req.PendingWait}
	d := router.Decide(&in, b)
	if d.Action == router.ActWait && d.Reason == router.ReasonNoReplicaQualifies && req.Policy.SkipFutile && d.Replica >= 0 && st.Commits != nil {
		// A budget wait is about to start: the futile-wait test's inputs
		// (rule 4), measured only now, off the zero-wait path: the waited
		// replica's Lag and the read's need age, from the commit log.
		// Decide left the bucket alone (it returned before rule 7), so
		// asking again is the same decision with the test made.
		if age, ok := needAge(st.Commits, req, v.Replicas[d.Replica].Applied); ok {
			rep := &v.Replicas[d.Replica]
			rep.Lag = st.Commits.Lag(rep.Applied, req.Wall)
			in.NeedAge, in.NeedAgeKnown = age, true
			d = router.Decide(&in, b)
		}
	}
	if d.Action == router.ActDefer && st.Commits != nil {
		for i := range v.Replicas {
			if rep := &v.Replicas[i]; rep.Up {
				rep.Lag = st.Commits.Lag(rep.Applied, req.Wall)
			}
		}
		d.RetryAfter = router.RetryAfter(v)
	}
	return d, v, prim
}

// checkLivePolicy rejects what the live router cannot honour:
// Policy.FutileTrend needs each replica's router.Replica.Progress, which
// only the simulator measures; the live router would judge every wait
// with the steady estimate, +skip-futile's, without saying so.
func checkLivePolicy(p router.Policy) error {
	if p.FutileTrend {
		return fmt.Errorf("router: policy %v: futile-trend is measured in the simulator only (the live router does not estimate a replica's Progress); use +skip-futile", p)
	}
	return nil
}

// needAge is router.Input.NeedAge for a read the replica at applied
// cannot serve: the smallest Age of the parts of the read's need that
// applied lacks (the session's token; its watermark, for the MR policies
// the waits belong to; PolicyGlobal's target). False when the log is
// empty or applied lacks none (then nothing is measured).
func needAge[P gtid.Position[P]](l *CommitLog[P], req *LiveRequest[P], applied P) (time.Duration, bool) {
	s := req.Session
	age, known := time.Duration(0), false
	part := func(p P) {
		if applied.Contains(p) {
			return
		}
		if a, ok := l.Age(p, req.Wall); ok && (!known || a < age) {
			age, known = a, true
		}
	}
	if s.HasToken {
		part(s.Token)
	}
	if s.HasSeen && req.Policy.Kind != router.PolicyTokenRYW {
		part(s.Seen)
	}
	if req.GlobalKnown && req.Policy.Kind == router.PolicyGlobal {
		part(req.Global)
	}
	return age, known
}
