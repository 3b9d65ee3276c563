package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// interval is a half-open time span [from, to).
type interval struct{ from, to usec }

// chainState is the read in flight of one write's chain of reads (indexed by
// write). A chain has at most one read in flight; under WorkloadChains many
// chains of one session may be in flight at once.
type chainState struct {
	k          int32            // reads of the chain already completed
	node       int32            // serving node of the read in flight; -1 is the primary
	issue      usec             // when the read in flight was issued
	waitStart  usec             // when it started waiting (if waited)
	token      LogPos           // the session's last acknowledged write at issue time
	shownAt    LogPos           // highest position shown to the session before issue (truth)
	floor      LogPos           // writes acknowledged (to any session) before issue (truth)
	global     LogPos           // PolicyGlobal's target: the primary's position when this attempt began
	obs        LogPos           // the position the read observed at its node
	seen       LogPos           // what the router records as observed (Observe at the answer)
	failed     bool             // the read in flight was failed by the router
	waited     bool             // the current attempt has waited (waitStart is set)
	everWaited bool             // the read waited at least once, in any attempt
	capWaited  bool             // it waited at least once because the cap was spent
	deferred   bool             // it was deferred at least once (ActDefer) and retried
	hashWhy    hashroute.Reason // affinity: why the read in flight went to its node
}

// sessState is the simulator's side of a session: what it has been shown
// and, under WorkloadQueue, where it is in its queue of chains.
type sessState struct {
	head  int32  // WorkloadQueue: write whose chain is current; -1: none left
	busy  bool   // WorkloadQueue: a chain of the session is under way
	shown LogPos // highest position any answered read showed the session (truth)
}

// engine runs trials. It is owned by one goroutine and reused across trials:
// every array is sized once and reset, so the event loop never allocates.
type engine struct {
	cfg   *Config
	model ReplicaModel
	wl    *workload

	heavyCost usec // a heavy record's replay time at this trial's load
	pol       router.Policy
	table     *hashroute.Table // affinity hashing over the configured replicas
	tableW    []int            // the weights table was built with

	h   eventHeap
	rr  *rand.Rand // router draws
	wr  *rand.Rand // world draws (ship jitter, stalls)
	pcr *rand.PCG
	pcw *rand.PCG

	nw, nr int
	rtt2   usec // half an RTT
	svcR   usec // read service time
	svcP   usec // primary FIFO service time (1/capacity)

	commit  []usec
	ends    []usec // ends[r*nw+w]: when replica r applied write w
	shipArr []usec
	lastEnd []usec
	cur     []int // true applied cursor per replica
	pollCur []int // polled-view cursor per replica
	stalls  [][]interval
	sp      []int
	down    [][]interval
	inMove  []int // reads in flight per replica
	freeAt  usec  // primary FIFO
	primCur int
	ackCur  int // writes acknowledged so far (ackedPos's cursor)

	sess  []router.Session[LogPos]
	ss    []sessState
	cs    []chainState // per write: its chain's read in flight
	queue bool         // WorkloadQueue: one chain at a time per session
	keys  []uint64     // affinity keys per session (computed once per engine)

	view   router.View[LogPos]
	in     router.Input[LogPos]
	bucket router.Bucket

	m     *trialMetrics
	hash  hashTrack // affinity: moves and violations by cause
	trace *Trace
	rec   *decisionRecorder // RecordDecisions' hook in route; nil in normal runs
}

func newEngine() *engine {
	e := &engine{pcr: rand.NewPCG(0, 0), pcw: rand.NewPCG(0, 0)}
	e.rr, e.wr = rand.New(e.pcr), rand.New(e.pcw)
	return e
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// reset prepares a run of spec on workload wl (trial trial of cfg).
func (e *engine) reset(cfg *Config, wl *workload, spec *RouterSpec, trial int, m *trialMetrics) {
	e.cfg, e.wl, e.pol, e.m = cfg, wl, spec.Policy, m
	e.model = cfg.model()
	e.heavyCost = e.model.heavyCost(cfg.WritesPerSec)
	e.h.reset()
	e.pcr.Seed(cfg.Seed, uint64(trial)<<8|streamRouter)
	e.pcw.Seed(cfg.Seed, uint64(trial)<<8|streamWorld)
	e.nw, e.nr = wl.writes(), cfg.Replicas
	e.rtt2 = dur(cfg.RTT) / 2
	e.svcR = dur(cfg.ReadService)
	e.svcP = usec(math.Round(1e6 / cfg.PrimaryCapacity))

	e.commit = grow(e.commit, e.nw)
	for i := range e.commit {
		e.commit[i] = math.MaxInt64
	}
	e.ends = grow(e.ends, e.nw*e.nr)
	for i := range e.ends {
		e.ends[i] = math.MaxInt64
	}
	e.shipArr, e.lastEnd = grow(e.shipArr, e.nr), grow(e.lastEnd, e.nr)
	e.cur, e.pollCur, e.sp, e.inMove = grow(e.cur, e.nr), grow(e.pollCur, e.nr), grow(e.sp, e.nr), grow(e.inMove, e.nr)
	clear(e.shipArr)
	clear(e.lastEnd)
	clear(e.cur)
	clear(e.pollCur)
	clear(e.sp)
	clear(e.inMove)
	e.freeAt, e.primCur, e.ackCur = 0, 0, 0
	e.drawStalls(cfg)

	ns := cfg.Sessions
	e.sess, e.ss = grow(e.sess, ns), grow(e.ss, ns)
	if len(e.keys) != ns {
		e.keys = make([]uint64, ns)
		for i := range e.keys {
			e.keys[i] = affinityKey(i)
		}
	}
	for i := range ns {
		e.sess[i] = router.Session[LogPos]{AffinityKey: e.keys[i]}
		e.ss[i] = sessState{head: wl.first[i]}
	}
	e.cs = grow(e.cs, e.nw)
	for i := range e.cs {
		e.cs[i] = chainState{node: -1}
	}
	e.queue = cfg.Workload == WorkloadQueue
	e.hash.reset(spec.Policy.Kind == router.PolicyAffinity, ns, cfg)
	e.view.Replicas = grow(e.view.Replicas, e.nr)
	if e.table == nil || e.table.Len() != e.nr || !slices.Equal(e.tableW, cfg.Weights) {
		e.table, e.tableW = newHashTable(e.nr, cfg.Weights), slices.Clone(cfg.Weights)
	}
	e.view.Hash = e.table
	e.view.Epoch = 0
	e.bucket = router.Bucket{}
	e.in = router.Input[LogPos]{Policy: &e.pol, Cap: &e.cfg.Cap, View: &e.view}
	m.reset(cfg, e.nr)
}

// drawStalls draws the straggler's stall schedule from the world stream and
// adds the configured outages; per replica the intervals are sorted and merged.
func (e *engine) drawStalls(cfg *Config) {
	if len(e.stalls) < e.nr {
		e.stalls = make([][]interval, e.nr)
		e.down = make([][]interval, e.nr)
	}
	for r := range e.nr {
		e.stalls[r] = e.stalls[r][:0]
		e.down[r] = e.down[r][:0]
	}
	m := e.model
	if m.Straggler && e.nr > 0 && m.StallEvery > 0 {
		horizon := dur(cfg.Duration) + 120*usPerSec
		t := 0.0
		for {
			t += e.wr.ExpFloat64() * float64(dur(m.StallEvery))
			if usec(t) > horizon {
				break
			}
			d := (0.5 + e.wr.Float64()) * float64(dur(m.StallMean))
			e.stalls[0] = append(e.stalls[0], interval{usec(t), usec(t + d)})
			t += d
		}
	}
	for _, sp := range cfg.Spikes {
		for r := range e.nr {
			e.stalls[r] = append(e.stalls[r], interval{dur(sp.From), dur(sp.To)})
		}
	}
	for _, f := range cfg.Faults {
		iv := interval{dur(f.From), dur(f.To)}
		e.stalls[f.Replica] = append(e.stalls[f.Replica], iv)
		e.down[f.Replica] = append(e.down[f.Replica], iv)
	}
	for r := range e.nr {
		s := e.stalls[r]
		slices.SortFunc(s, func(a, b interval) int { return int(a.from - b.from) })
		out := s[:0]
		for _, iv := range s {
			if n := len(out); n > 0 && iv.from <= out[n-1].to {
				out[n-1].to = max(out[n-1].to, iv.to)
				continue
			}
			out = append(out, iv)
		}
		e.stalls[r] = out
	}
}

// run executes one trial under one router until every read has completed.
func (e *engine) run(ctx context.Context) error {
	// Write arrivals are chained (each pushes the next), so the heap holds
	// only what is in flight, not the whole offered stream.
	if e.nw > 0 {
		e.h.push(e.wl.send[0]+e.rtt2, evWriteArrive, 0)
	}
	n := 0
	for e.h.len() > 0 {
		ev := e.h.pop()
		switch ev.kind {
		case evWriteArrive:
			e.writeArrive(ev.t, ev.id)
		case evWriteAck:
			e.writeAck(ev.t, ev.id)
		case evReadIssue:
			e.cs[ev.id].waited, e.cs[ev.id].capWaited = false, false
			e.route(ev.t, ev.id, 0)
		case evRetry:
			// A deferred read tries again: a new attempt with a fresh
			// budget; what it must see is still what it needed at issue.
			e.cs[ev.id].waited = false
			e.route(ev.t, ev.id, 0)
		case evWaitWake:
			e.route(ev.t, ev.id, ev.t-e.cs[ev.id].waitStart)
		case evReadReach:
			e.readReach(ev.t, ev.id)
		case evReadDone:
			e.readDone(ev.t, ev.id)
		}
		n++
		if n&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	e.m.events += int64(n)
	return nil
}

func (e *engine) writeArrive(t usec, w int32) {
	if int(w)+1 < e.nw {
		e.h.push(e.wl.send[w+1]+e.rtt2, evWriteArrive, w+1)
	}
	c := max(t, e.freeAt) + e.svcP
	e.freeAt = c
	e.commit[w] = c
	m := &e.model
	jit := float64(dur(m.ShipJitter))
	var first, last usec
	for r := range e.nr {
		ship := dur(m.ShipDelay)
		if jit > 0 {
			ship += usec((e.wr.Float64()*2 - 1) * jit)
		}
		if m.Straggler && r == 0 {
			ship += dur(m.StragglerDelay)
		}
		if r < len(m.ReplicaDelay) {
			ship += dur(m.ReplicaDelay[r])
		}
		arr := max(e.shipArr[r], c+ship)
		e.shipArr[r] = arr
		cost := float64(dur(m.ApplyCost))
		if m.Straggler && r == 0 {
			cost *= m.SlowFactor
		}
		if e.wl.heavy[w] && m.hasHeavy() {
			// A heavy record costs the same everywhere: the straggler's
			// trouble is its ordinary apply rate and its stalls.
			cost = float64(e.heavyCost)
			if m.HeavyJitter > 0 {
				cost *= 1 + m.HeavyJitter*(2*e.wr.Float64()-1)
			}
		}
		end := e.apply(r, max(arr, e.lastEnd[r]), usec(cost))
		e.lastEnd[r] = end
		e.ends[r*e.nw+int(w)] = end
		e.m.lag.add(end - c)
		if r == 0 || end < first {
			first = end
		}
		last = max(last, end)
		if e.trace != nil {
			e.trace.lag(c, r, end-c)
		}
	}
	if e.nr > 1 {
		e.m.spread.add(last - first)
	}
	e.h.push(c+e.rtt2, evWriteAck, w)
}

// apply returns when replica r finishes a record it may start at start and
// that takes cost, pausing through the replica's stalls.
func (e *engine) apply(r int, start, cost usec) usec {
	st := e.stalls[r]
	i := e.sp[r]
	for i < len(st) && st[i].to <= start {
		i++
	}
	e.sp[r] = i
	t := start
	for {
		if i < len(st) && st[i].from <= t {
			t = max(t, st[i].to)
			i++
			continue
		}
		if i >= len(st) || t+cost <= st[i].from {
			return t + cost
		}
		cost -= st[i].from - t
		t = st[i].to
		i++
	}
}

func (e *engine) writeAck(t usec, w int32) {
	e.m.writeLat.add(t - e.wl.send[w])
	s := e.wl.session[w]
	ses := &e.sess[s]
	router.RecordWrite(ses, LogPos(w+1), e.view.Epoch, time.Duration(t)*time.Microsecond)
	if e.wl.rpw == 0 {
		return
	}
	if e.queue {
		// The chain starts now only if it is the session's current one and
		// the session has no other chain under way.
		st := &e.ss[s]
		if st.busy || st.head != w {
			return
		}
		st.busy = true
	}
	e.h.push(t+e.wl.gaps[int(w)*e.wl.rpw], evReadIssue, w)
}

// primaryPos is the primary's committed position at t (t never decreases).
func (e *engine) primaryPos(t usec) LogPos {
	for e.primCur < e.nw && e.commit[e.primCur] <= t {
		e.primCur++
	}
	return LogPos(e.primCur)
}

// ackedPos is the number of writes whose acknowledgement reached their
// client by t (t never decreases): commit order is log order, so they are
// writes 1..n.
func (e *engine) ackedPos(t usec) LogPos {
	for e.ackCur < e.nw && e.commit[e.ackCur] != math.MaxInt64 && e.commit[e.ackCur]+e.rtt2 <= t {
		e.ackCur++
	}
	return LogPos(e.ackCur)
}

// lagAt is the router's time lag of a replica whose first unapplied record
// is c, seen at time t: how long ago the primary committed it (0 when the
// replica has every record committed by t).
func (e *engine) lagAt(c int, t usec) time.Duration {
	if c < e.nw && e.commit[c] <= t {
		return time.Duration(t-e.commit[c]) * time.Microsecond
	}
	return 0
}

// applied is replica r's true applied position at t (t never decreases).
func (e *engine) applied(r int, t usec) LogPos {
	c := e.cur[r]
	row := e.ends[r*e.nw : (r+1)*e.nw]
	for c < e.nw && row[c] <= t {
		c++
	}
	e.cur[r] = c
	return LogPos(c)
}

// polled is replica r's position as of the last poll at or before t.
func (e *engine) polled(r int, t usec) LogPos {
	p := dur(e.cfg.Poll)
	pt := t / p * p
	c := e.pollCur[r]
	row := e.ends[r*e.nw : (r+1)*e.nw]
	for c < e.nw && row[c] <= pt {
		c++
	}
	e.pollCur[r] = c
	return LogPos(c)
}

// trendWindow is how far back Replica.Progress looks (Policy.FutileTrend).
const trendWindow usec = 100_000

// viewPosAt is the router's view of replica r at any t (not only
// increasing t: a binary search, the replica's applies being in order).
func (e *engine) viewPosAt(r int, t usec) int {
	if p := dur(e.cfg.Poll); p > 0 {
		t = t / p * p
	}
	row := e.ends[r*e.nw : (r+1)*e.nw]
	lo, hi := 0, len(row)
	for lo < hi {
		if m := int(uint(lo+hi) >> 1); row[m] <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// shownTime is the primary time a view lacking records from c on shows
// at t: the commit of record c, or t when it was not committed by t.
func (e *engine) shownTime(c int, t usec) usec {
	if c < e.nw && e.commit[c] <= t {
		return e.commit[c]
	}
	return t
}

func (e *engine) isUp(r int, t usec) bool {
	for _, iv := range e.down[r] {
		if t >= iv.from && t < iv.to {
			return false
		}
	}
	return true
}

func (e *engine) fillView(t usec) {
	prim := e.primaryPos(t)
	for r := range e.nr {
		var a LogPos
		if e.cfg.Poll > 0 {
			a = e.polled(r, t)
		} else {
			a = e.applied(r, t)
		}
		// The view's position's lag now, as the live router measures it
		// (live.CommitLog.Lag at the decision): the age of the first
		// record the view lacks. Not as of the last poll: the live
		// router's positions carry no poll time (an earlier lag as of the
		// poll disagreed with the live router's futile-wait tests,
		// TestSimLiveEquivalence).
		lag := e.lagAt(int(a), t)
		inf := e.inMove[r]
		for _, d := range e.cfg.Drifts {
			if d.Replica == r && t >= dur(d.From) && t < dur(d.To) {
				inf += d.InFlight
			}
		}
		e.view.Replicas[r] = router.Replica[LogPos]{Applied: a, Up: e.isUp(r, t), Behind: int64(prim - a), InFlight: inf, Lag: lag}
		if e.pol.FutileTrend && t >= trendWindow {
			// How far the view's primary time (the commit of the first
			// record it lacks, or now when it lacks none) moved over the
			// last trendWindow, per second: what the router saw of the
			// replica's positions then and now.
			from := t - trendWindow
			e.view.Replicas[r].Progress = float64(e.shownTime(int(a), t)-e.shownTime(e.viewPosAt(r, from), from)) / float64(trendWindow)
		}
	}
	e.view.Primary, e.view.PrimaryKnown = prim, true
}

// route asks the decision core where chain c's next read goes and carries
// the decision out.
func (e *engine) route(t usec, c int32, waited usec) {
	st := &e.cs[c]
	s := e.wl.session[c]
	ses := &e.sess[s]
	first := waited == 0 && !st.waited // the first call of this attempt
	if first && !st.deferred {
		st.issue = t
		st.token = ses.Token
		st.shownAt = e.ss[s].shown
		st.floor = e.ackedPos(t)
	}
	e.fillView(t)
	if first {
		// PolicyGlobal's target, captured once per attempt (a retry is a
		// new read): the primary's position now.
		st.global = e.view.Primary
	}
	e.in.Session = ses
	e.in.Now = time.Duration(t) * time.Microsecond
	e.in.Rand = e.rr.Uint64()
	e.in.Waited = time.Duration(waited) * time.Microsecond
	e.in.Global, e.in.GlobalKnown = st.global, true
	// The futile-wait test's need age (token-wait, global): how long ago
	// the primary committed the newest record the read needs. The
	// simulator knows it exactly; Decide reads it only when about to wait.
	e.in.NeedAge, e.in.NeedAgeKnown = 0, false
	if e.pol.SkipFutile {
		if n := e.need(ses, st); n > 0 && e.commit[n-1] <= t {
			e.in.NeedAge, e.in.NeedAgeKnown = time.Duration(t-e.commit[n-1])*time.Microsecond, true
		}
	}
	if e.rec != nil {
		e.rec.before(e)
	}
	d := router.Decide(&e.in, &e.bucket)
	if d.Reanchor {
		ses.Reanchor(e.view.Epoch)
	}
	m := e.m
	m.reasons[d.Reason]++
	if d.Action != router.ActWait {
		m.waitTotal += waited // this attempt's waits, ended
	}
	if d.HashReason.Moved() {
		m.hashMoved++
	}
	switch d.Action {
	case router.ActReplica, router.ActStale:
		if d.Action == router.ActStale {
			m.staleServed++
		}
		st.node = int32(d.Replica)
		st.hashWhy = d.HashReason
		e.inMove[d.Replica]++
		e.h.push(t+e.rtt2, evReadReach, c)
	case router.ActPrimary:
		st.node = -1
		if d.Fallback {
			m.fallbacks++
		}
		if d.Reason == router.ReasonWaitFutile && e.servedWithin(t, t+dur(e.pol.WaitBudget)-waited, ses, st) {
			m.futileMissed++
		}
		if d.Reason == router.ReasonWaitBudgetSpent {
			m.timeouts++
		}
		e.h.push(t+e.rtt2, evReadReach, c)
	case router.ActWait:
		if !st.waited {
			st.waited = true
			st.waitStart = t
		}
		if !st.everWaited {
			st.everWaited = true
			m.waited++
		}
		if d.Reason == router.ReasonCapExceeded && !st.capWaited {
			st.capWaited = true
			m.capWaited++
		}
		wake := t + dur(d.WaitFor)
		if q := e.qualifyTime(d.Replica, ses, st); q < wake {
			wake = q
		}
		if wake <= t {
			wake = t + 1
		}
		e.h.push(wake, evWaitWake, c)
	case router.ActFail:
		m.failed++
		if d.Reason == router.ReasonCapExceeded {
			m.capFailed++
		}
		if d.Reason == router.ReasonTimedOut {
			m.timeouts++
		}
		st.failed = true
		st.node = -1
		e.h.push(t, evReadDone, c)
	case router.ActDefer:
		// The client is told to retry after RetryAfter; the primary is not
		// touched. The read's latency keeps running from its issue.
		m.deferrals++
		if !st.deferred {
			st.deferred = true
			m.deferred++
		}
		if d.Reason == router.ReasonWaitBudgetSpent {
			m.timeouts++
		}
		e.h.push(t+max(dur(d.RetryAfter), 1), evRetry, c)
	}
	if e.rec != nil {
		e.rec.after(e, t, c, d)
	}
}

// servedWithin reports whether a wait from t would have ended with a
// replica qualifying by end (ground truth for a futile-wait skip: the
// view's first up replica to show the read's need).
func (e *engine) servedWithin(t, end usec, ses *router.Session[LogPos], st *chainState) bool {
	for r := range e.nr {
		if e.view.Replicas[r].Up && e.qualifyTime(r, ses, st) <= end && e.isUp(r, end) {
			return true
		}
	}
	return false
}

// need is what chain st's read of session ses needs of a replica: its
// token and, if any, its watermark; under PolicyGlobal also the attempt's
// target (0: nothing).
func (e *engine) need(ses *router.Session[LogPos], st *chainState) LogPos {
	need := ses.Token
	if ses.HasSeen {
		need = need.Union(ses.Seen)
	}
	if e.pol.Kind == router.PolicyGlobal {
		need = need.Union(st.global)
	}
	return need
}

// qualifyTime is when the router's view will first show replica r holding
// what chain st's read of session ses needs (its token and, if any, its
// watermark; under PolicyGlobal also the attempt's target).
func (e *engine) qualifyTime(r int, ses *router.Session[LogPos], st *chainState) usec {
	need := e.need(ses, st)
	if need == 0 {
		return 0
	}
	tq := e.ends[r*e.nw+int(need)-1]
	if tq == math.MaxInt64 {
		return tq
	}
	if p := dur(e.cfg.Poll); p > 0 {
		tq = (tq + p - 1) / p * p
	}
	return tq
}

func (e *engine) readReach(t usec, c int32) {
	st := &e.cs[c]
	m := e.m
	var obs LogPos
	done := t + e.svcR
	if st.node >= 0 {
		obs = e.applied(int(st.node), t)
	} else {
		obs = e.primaryPos(t)
		m.primary++
		if e.cfg.Contention {
			done = max(t, e.freeAt) + e.svcP
			e.freeAt = done
		}
	}
	m.served++
	if obs < st.token {
		m.ryw++
	}
	if obs < st.shownAt {
		m.mr++
	}
	e.hashObserve(e.wl.session[c], st.node, st.hashWhy, t, obs < st.shownAt)
	if obs < st.floor {
		m.allWrites++
	}
	st.obs = obs
	// The router raises the session's watermark (when the answer lands) to
	// an upper bound of what the read saw: the node's exact position with a
	// perfect view, the primary's position with a polled one (it never
	// learns more).
	st.seen = obs
	if e.cfg.Poll > 0 {
		st.seen = e.primaryPos(t)
	}
	m.bin(t, st.node < 0)
	if e.trace != nil {
		e.trace.read(t, st.node, obs, st.token)
	}
	e.h.push(done+e.rtt2, evReadDone, c)
}

func (e *engine) readDone(t usec, c int32) {
	st := &e.cs[c]
	s := e.wl.session[c]
	if st.node >= 0 {
		e.inMove[st.node]--
	}
	if !st.failed {
		e.m.readLat.add(t - st.issue)
		if st.deferred {
			e.m.deferLat.add(t - st.issue)
		}
		// The session has now been shown what the read observed.
		ss := &e.ss[s]
		ss.shown = max(ss.shown, st.obs)
		router.Observe(&e.sess[s], st.seen, e.view.Epoch)
	}
	e.m.reads++
	st.failed, st.waited, st.everWaited, st.capWaited, st.deferred, st.node = false, false, false, false, false, -1
	rpw := int32(e.wl.rpw)
	st.k++
	if st.k < rpw {
		e.h.push(t+e.wl.gaps[int(c)*int(rpw)+int(st.k)], evReadIssue, c)
		return
	}
	if !e.queue {
		return
	}
	// WorkloadQueue: the session's next chain starts a gap after this one
	// ends, or at its write's ack if that comes later.
	ss := &e.ss[s]
	ss.head = e.wl.next[c]
	if h := ss.head; h >= 0 && e.commit[h] != math.MaxInt64 && e.commit[h]+e.rtt2 <= t {
		e.h.push(t+e.wl.gaps[int(h)*int(rpw)], evReadIssue, h)
		return
	}
	ss.busy = false
}

// newHashTable is the affinity router's table over n replicas named
// r0..r(n-1), in configured order, weighted by weights (1 where none).
func newHashTable(n int, weights []int) *hashroute.Table {
	srv := make([]hashroute.Server, n)
	for i := range srv {
		w := 1
		if i < len(weights) {
			w = weights[i]
		}
		srv[i] = hashroute.Server{Name: "r" + strconv.Itoa(i), Weight: w}
	}
	t, err := hashroute.NewTable(srv)
	if err != nil {
		// n and the weights are validated by Config.validate.
		panic("sim: hashroute table: " + err.Error())
	}
	return t
}

// affinityKey is session i's consistent_read_id hash.
func affinityKey(i int) uint64 { return hashroute.Hash("session-" + strconv.Itoa(i)) }
