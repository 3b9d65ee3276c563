package lab

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// sessionSync is the part of a session's state that workers share: guarded
// by mu. The router states live in each router runtime, indexed the same
// way.
type sessionSync struct {
	mu sync.Mutex
	// acked is the Seq of the session's last acknowledged write.
	acked int64
}

// hotAcks is, per hot row, the highest version a write was acknowledged
// with (any session, any router of the run): the all-writes check's floor.
type hotAcks struct {
	mu sync.Mutex
	v  []int64
}

// ack raises hot row h's floor to ver (0: unknown, ignored).
func (a *hotAcks) ack(h int, ver int64) {
	a.mu.Lock()
	if h >= 0 && h < len(a.v) && ver > a.v[h] {
		a.v[h] = ver
	}
	a.mu.Unlock()
}

// issue fills out's floors (AckedSeq from ss, AckedHot from a) as a read is
// issued.
func (a *hotAcks) issue(ss *sessionSync, out *Read) {
	ss.mu.Lock()
	out.AckedSeq = ss.acked
	ss.mu.Unlock()
	a.mu.Lock()
	if len(out.AckedHot) != len(a.v) {
		out.AckedHot = make([]int64, len(a.v))
	}
	copy(out.AckedHot, a.v)
	a.mu.Unlock()
}

// sessionSched is the scheduler goroutine's own state of one session.
type sessionSched struct {
	router       int              // index into driver.routers
	nextSeq      int64            // last Seq handed out
	pendingReads int              // reads still owed
	readBusy     bool             // a read is scheduled or in flight
	writeBusy    bool             // a write is in flight
	queued       []scheduledWrite // writes due while one was in flight
	gaps         rng              // the session's own gap draws
	// gap, when fixed, is the scripted gap before each read of the
	// session's last write (scheduledWrite.Gap).
	gap      time.Duration
	fixedGap bool
	// follows are the reads its writes still owe, oldest write first
	// (pendingReads' others are a script's own reads); headStarted: the
	// oldest one's first read is scheduled (routerAcc.firstReads).
	follows     []int
	headStarted bool
}

// nextFollow takes the next read the session's writes owe, if any: ok,
// and whether it is the first its write owed.
func (s *sessionSched) nextFollow() (first, ok bool) {
	if len(s.follows) == 0 {
		return false, false
	}
	first = !s.headStarted
	s.headStarted = true
	if s.follows[0]--; s.follows[0] == 0 {
		s.follows, s.headStarted = s.follows[1:], false
	}
	return first, true
}

// driver runs one measurement: a write schedule, sessions, routers.
type driver struct {
	cfg     *Config
	nodes   Nodes
	poll    *poller
	lag     *lagTracker
	start   time.Time
	routers []routerRuntime
	sess    []sessionSync
	hot     *hotAcks      // acknowledged hot versions (all-writes truth)
	vias    []liveRuntime // the routers run through package router/live
	proxies []*viaProxy   // the routers run through the in-process proxy
	down    *downLog      // when nodes were down (the events'), for hashing's came-back rule
	// history is every completed operation (Config.RecordHistory), in
	// completion order; only the driver's loop appends to it.
	history []HistoryOp
	// timelines are the run's failovers (the hidden-loss pass).
	timelines timelineLog
	// events is the run's event log (when the primary was killed).
	events *eventLog
	// loss counts, per router, what the run's failovers lost of the
	// sessions' acknowledged writes (countLost); nil when not counted.
	lossMu sync.Mutex
	loss   []FailoverLoss
}

// routerOf is the router that session sess runs through.
func (e *driver) routerOf(sess int) int { return sess % len(e.routers) }

func (e *driver) since() time.Duration { return time.Since(e.start) }

// drift adds (d > 0) or removes (d < 0) d outside reads in flight on the
// named replica: real slow reads through each router/live router.
func (e *driver) drift(name string, d int) {
	for _, v := range e.vias {
		v.drift(name, d)
	}
	for _, p := range e.proxies {
		p.drift(name, d)
	}
}

// op is one operation handed to a worker.
type op struct {
	write bool
	sess  int
	seq   int64 // write
	hot   int   // write
	// reads are the reads a write is followed by, each gap after the one
	// before when fixedGap (scheduledWrite).
	reads    int
	gap      time.Duration
	fixedGap bool
	// first: a read that is the first its session's write owed.
	first   bool
	due     time.Duration
	started time.Duration
	read    Read
	ack     WriteAck // write
	err     error
}

// dueItem is a scheduled read; first: the first read a write owes.
type dueItem struct {
	at    time.Duration
	sess  int
	first bool
}

type dueHeap []dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// routerAcc accumulates one router's measurements (scheduler-owned).
type routerAcc struct {
	tally     Tally
	lastNode  map[int]string // session -> last serving replica
	moved     map[int]bool   // sessions whose replica changed
	switches  int64          // replica changes between consecutive reads
	reasons   map[string]int64
	lat       []time.Duration // served reads' latency
	bins      []binCount      // per 100ms of run time
	writes    int64
	writeErrs int64
	writeLat  []time.Duration
	behind    []time.Duration // dispatch delay (driver health)
	hash      *hashAcc        // affinity routers: moves and violations by cause
	// prefixJudged counts the served reads the prefix check judged,
	// nonPrefix those whose state is no prefix of the primary's history
	// (PrefixCheck); prefixWitnesses shows the first few.
	prefixJudged, nonPrefix int64
	prefixWitnesses         []string
	// hiddenLoss counts MR violations only the GTIDs show (in tally.MR).
	hiddenLoss int64
	// rywAfterKill counts the RYW violations answered once the run's
	// first failover had killed the primary (in tally.RYW).
	rywAfterKill int64
	// firstReads counts the first read each write owed (op.first),
	// firstRYW those of them RYW violations.
	firstReads, firstRYW int64
}

type binCount struct{ reads, primary int32 }

// runOnce runs the measurement with cfg.Routers all at once (sessions split
// evenly) and returns the raw accumulators.
func (e *driver) runOnce(ctx context.Context, sched []scheduledWrite, progress func(Progress)) ([]*routerAcc, *Checker, error) {
	cfg := e.cfg
	chk, err := NewChecker(cfg.Sessions, cfg.HotRows)
	if err != nil {
		return nil, nil, err
	}
	ss := make([]sessionSched, cfg.Sessions)
	for i := range ss {
		ss[i].router = e.routerOf(i)
		ss[i].gaps = newRNG(cfg.Seed*0x9e3779b97f4a7c15 ^ uint64(i+1)*0xbf58476d1ce4e5b9)
	}
	accs := make([]*routerAcc, len(e.routers))
	var names []string
	for _, r := range e.nodes.Replicas() {
		names = append(names, r.Name)
	}
	for i := range accs {
		accs[i] = &routerAcc{lastNode: map[int]string{}, moved: map[int]bool{}, reasons: map[string]int64{},
			hash: newHashAcc(e.routers[i].spec(), names, cfg.Sessions, e.down)}
	}

	pfx := newPrefixRun(cfg.Sessions, cfg.HotRows, flavorOf(cfg.Engine))
	jobs := make(chan *op)
	done := make(chan *op, cfg.Workers)
	var wg sync.WaitGroup
	wctx, cancelWorkers := context.WithCancel(ctx)
	defer func() { cancelWorkers(); wg.Wait() }()
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range jobs {
				o.started = e.since()
				rt := e.routers[ss[o.sess].router]
				if o.write {
					o.ack, o.err = rt.write(wctx, o.sess, o.seq, o.hot)
				} else {
					o.read.Issued = o.started
					rt.read(wctx, o.sess, &o.read)
					if o.read.Done == 0 {
						o.read.Done = e.since()
					}
				}
				done <- o
			}
		}()
	}
	defer close(jobs)

	var reads dueHeap
	var ready []*op
	wi, inflight := 0, 0
	var lastProgress time.Duration
	var lastPhase Phase
	var total Tally
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()

	newRead := func(it dueItem) *op {
		sess, at := it.sess, it.at
		return &op{sess: sess, due: at, first: it.first, read: Read{Session: sess, Hot: make([]int64, cfg.HotRows), AckedHot: make([]int64, cfg.HotRows)}}
	}
	scheduleRead := func(sess int, now time.Duration) {
		s := &ss[sess]
		gap := s.gap
		if !s.fixedGap {
			gap = gapDraw(&s.gaps, cfg.GapMin, cfg.GapMax)
		}
		it := dueItem{at: now + gap, sess: sess}
		it.first, _ = s.nextFollow()
		heap.Push(&reads, it)
		s.readBusy = true
	}
	startWrite := func(w scheduledWrite) {
		s := &ss[w.Session]
		s.nextSeq++
		s.writeBusy = true
		ready = append(ready, &op{write: true, sess: w.Session, seq: s.nextSeq, hot: w.Hot, due: w.At, reads: w.readsAfter(cfg.ReadsPerWrite), gap: w.Gap, fixedGap: w.Scripted})
	}
	// scriptedRead owes session w.Session one read at w.At.
	scriptedRead := func(w scheduledWrite) {
		s := &ss[w.Session]
		s.pendingReads++
		if !s.readBusy {
			heap.Push(&reads, dueItem{at: w.At, sess: w.Session})
			s.readBusy = true
		}
	}
	complete := func(o *op) error {
		inflight--
		now := e.since()
		s := &ss[o.sess]
		a := accs[s.router]
		if cfg.RecordHistory {
			e.recordOp(o, e.routers[s.router].spec().Name, now)
		}
		pfx.completed(o, s.router)
		a.behind = append(a.behind, o.started-o.due)
		if o.write {
			s.writeBusy = false
			a.writes++
			if o.err != nil {
				a.writeErrs++
				cfg.Logger.Debug("lab: write failed", "session", o.sess, "err", o.err)
			} else {
				a.writeLat = append(a.writeLat, now-o.started)
			}
			s.pendingReads += o.reads
			if o.reads > 0 {
				s.follows = append(s.follows, o.reads)
			}
			s.gap, s.fixedGap = o.gap, o.fixedGap
			if !s.readBusy && s.pendingReads > 0 {
				scheduleRead(o.sess, now)
			}
			if len(s.queued) > 0 {
				w := s.queued[0]
				s.queued = s.queued[1:]
				startWrite(w)
			}
			return nil
		}
		v, err := chk.Check(&o.read)
		if err != nil {
			return err
		}
		a.tally.Add(&o.read, v)
		if at, ok := e.events.killed(); ok && v.RYW && o.read.Done >= at {
			a.rywAfterKill++
		}
		if o.first {
			a.firstReads++
			if v.RYW {
				a.firstRYW++
			}
		}
		total.Add(&o.read, v)
		if a.hash != nil {
			a.hash.observe(o.sess, &o.read, v)
		}
		if o.read.Reason != "" {
			a.reasons[o.read.Reason]++
		}
		if o.read.Outcome == router.OutReplica || o.read.Outcome == router.OutStale {
			if last, ok := a.lastNode[o.sess]; ok && last != o.read.Node {
				a.switches++
				a.moved[o.sess] = true
			}
			a.lastNode[o.sess] = o.read.Node
		}
		if o.read.Outcome.Served() {
			a.lat = append(a.lat, o.read.Done-o.read.Issued)
			b := int(o.read.Done / (100 * time.Millisecond))
			for len(a.bins) <= b {
				a.bins = append(a.bins, binCount{})
			}
			a.bins[b].reads++
			if o.read.Outcome == router.OutPrimary || o.read.Outcome == router.OutFallback {
				a.bins[b].primary++
			}
		}
		s.pendingReads--
		if s.pendingReads > 0 {
			scheduleRead(o.sess, now)
		} else {
			s.readBusy = false
		}
		return nil
	}

	for {
		now := e.since()
		phase := PhaseWorkload
		if wi >= len(sched) {
			phase = PhaseDrain
		}
		if progress != nil && (now-lastProgress >= 250*time.Millisecond || phase != lastPhase) {
			lastProgress, lastPhase = now, phase
			progress(Progress{Phase: phase, Elapsed: now, Reads: total.Reads, RYW: total.RYW, MR: total.MR})
		}
		for wi < len(sched) && sched[wi].At <= now {
			w := sched[wi]
			wi++
			if w.Read {
				scriptedRead(w)
				continue
			}
			if ss[w.Session].writeBusy {
				ss[w.Session].queued = append(ss[w.Session].queued, w)
			} else {
				startWrite(w)
			}
		}
		for reads.Len() > 0 && reads[0].at <= now {
			it := heap.Pop(&reads).(dueItem)
			ready = append(ready, newRead(it))
		}
		if len(ready) == 0 && inflight == 0 && wi >= len(sched) && reads.Len() == 0 {
			break
		}
		var next time.Duration = -1
		if wi < len(sched) {
			next = sched[wi].At
		}
		if reads.Len() > 0 && (next < 0 || reads[0].at < next) {
			next = reads[0].at
		}
		var jobc chan *op
		var head *op
		if len(ready) > 0 {
			jobc, head = jobs, ready[0]
		} else if next >= 0 {
			timer.Reset(max(next-now, 0))
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case jobc <- head:
			ready[0] = nil
			ready = ready[1:]
			inflight++
		case o := <-done:
			if err := complete(o); err != nil {
				return nil, nil, err
			}
		case <-timer.C:
		}
		if len(ready) > 0 || !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
	if progress != nil {
		progress(Progress{Phase: PhaseDrain, Elapsed: e.since(), Reads: total.Reads, RYW: total.RYW, MR: total.MR})
	}
	pfx.judge(accs, e.timelines.list())
	return accs, chk, nil
}

// Run runs one experiment on a live topology: it sets up the schema (unless
// SkipSetup), applies the condition, drives the workload through every
// router (concurrently or one after the other), and returns the measured
// result. f may be nil when the condition is identical.
func Run(ctx context.Context, topo Faults, cfg Config) (*Result, error) {
	if topo == nil {
		return nil, errors.New("lab: Run needs a topology")
	}
	if err := adoptEngine(topo, &cfg); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if fl, ok := topo.(interface {
		FaultLogger(*slog.Logger) *slog.Logger
	}); ok {
		cfg.Logger = fl.FaultLogger(cfg.Logger) // its injected faults' effects: INFO, in words
	}
	res := &Result{Condition: cfg.Condition.String(), Mode: string(cfg.Mode), Via: string(cfg.Via), Config: summarize(&cfg), Weights: cfg.Weights}
	began := time.Now()
	sched := cfg.script
	if sched == nil {
		sched = writeSchedule(cfg.Seed, cfg.WriteRate, cfg.Duration, cfg.Sessions, cfg.HotRows)
	}
	for _, w := range sched {
		if !w.Read {
			res.OfferedWrites++
		}
	}
	groups := [][]RouterSpec{cfg.Routers}
	if cfg.Mode == Sequential {
		groups = groups[:0]
		for _, r := range cfg.Routers {
			groups = append(groups, []RouterSpec{r})
		}
	}
	for gi, specs := range groups {
		gr, err := runGroup(ctx, topo, &cfg, specs, sched, func(p Progress) {
			if cfg.Progress != nil {
				p.Total = time.Duration(len(groups)) * cfg.Duration
				p.Elapsed += time.Duration(gi) * cfg.Duration
				cfg.Progress(p)
			}
		})
		if err != nil {
			return nil, err
		}
		for i := range gr.History {
			gr.History[i].Run = gi
		}
		res.Merge(gr)
	}
	res.ElapsedSeconds = time.Since(began).Seconds()
	return res, nil
}

// adoptEngine makes cfg's engine the topology's, when the topology
// knows it (a compose topology does); a Config that names another is
// refused.
func adoptEngine(topo Faults, cfg *Config) error {
	et, ok := topo.(interface{ Engine() compose.Engine })
	if !ok {
		return nil
	}
	switch e := et.Engine(); {
	case cfg.Engine == "":
		cfg.Engine = e
	case cfg.Engine != e:
		return fmt.Errorf("lab: engine %s, but the topology runs %s", cfg.Engine, e)
	}
	return nil
}

// group is one group of routers measured at once, through its phases:
// setUp (schema, poller, catch-up, condition), buildRouters, run (the
// workload with the condition and events), collect (the Result). close
// undoes what the phases did, in reverse.
type group struct {
	topo    Faults
	cfg     *Config
	cancel  context.CancelFunc // ends the background goroutines
	bg      sync.WaitGroup     // the poller and the position source
	undo    []func()           // what close runs, last first
	lag     *lagTracker
	poll    *poller
	e       *driver
	vias    []liveRuntime
	proxies []*viaProxy
	notes   []string // the routing path's notes
}

// measurement is what a group's run phase produced.
type measurement struct {
	accs     []*routerAcc
	measured time.Duration
	cst      *conditionStats
	events   *eventLog
}

// runGroup sets up, runs the routers of one group at once, collects the
// result, and tears down.
func runGroup(ctx context.Context, topo Faults, cfg *Config, specs []RouterSpec, sched []scheduledWrite, progress func(Progress)) (*Result, error) {
	rctx, cancel := context.WithCancel(ctx)
	g := &group{topo: topo, cfg: cfg, cancel: cancel}
	defer g.close()
	if progress != nil {
		progress(Progress{Phase: PhaseSetUp})
	}
	if err := g.setUp(rctx, ctx); err != nil {
		return nil, err
	}
	if err := g.buildRouters(rctx, specs); err != nil {
		return nil, err
	}
	m, err := g.run(rctx, sched, progress)
	if err != nil {
		return nil, err
	}
	return g.collect(rctx, m), nil
}

// later registers f for close.
func (g *group) later(f func()) { g.undo = append(g.undo, f) }

// close undoes the phases (last first), then ends and waits for the
// background goroutines.
func (g *group) close() {
	for i := len(g.undo) - 1; i >= 0; i-- {
		g.undo[i]()
	}
	g.cancel()
	g.bg.Wait()
}

// setUp creates the schema (unless SkipSetup), starts the measurement
// poller, waits until the replicas hold the fresh schema, and applies the
// standing condition (undone by close with a context that outlives
// parent's).
func (g *group) setUp(ctx, parent context.Context) error {
	cfg, topo := g.cfg, g.topo
	if !cfg.SkipSetup {
		if err := setUpSchema(ctx, cfg, topo.Primary()); err != nil {
			return err
		}
	}
	g.lag = newLagTracker(func() string { return topo.Primary().Name })
	g.poll = newPoller(topo, flavorOf(cfg.Engine), cfg.PollInterval, max(cfg.ReadTimeout/4, 50*time.Millisecond), g.lag, cfg.Logger)
	if err := g.poll.start(ctx, &g.bg); err != nil {
		return err
	}
	// Wait until the replicas hold the fresh schema (so no read fails on a
	// missing table and the lag measured is the workload's).
	if err := waitCaughtUp(ctx, g.poll, 30*time.Second); err != nil {
		return err
	}
	if err := cfg.Condition.setUp(ctx, topo); err != nil {
		return err
	}
	g.later(func() {
		tctx, tcancel := context.WithTimeout(context.WithoutCancel(parent), 30*time.Second)
		defer tcancel()
		if err := cfg.Condition.tearDown(tctx, topo); err != nil {
			cfg.Logger.Warn("lab: undoing the condition", "err", err)
		}
	})
	return nil
}

// setUpSchema creates the workload's schema on primary p.
func setUpSchema(ctx context.Context, cfg *Config, p compose.Node) error {
	if cfg.Engine == compose.EnginePostgres {
		wl, err := pgWorkloadOf(cfg.Workload)
		if err != nil {
			return err
		}
		return wl.setUp(ctx, p, cfg.Sessions, cfg.HotRows)
	}
	c, err := dialNodeAs(ctx, flavorOf(cfg.Engine), p.Addr(), p.User, p.Password)
	if err != nil {
		return err
	}
	defer c.Close()
	return cfg.Workload.Setup(ctx, c, cfg.Sessions, cfg.HotRows)
}

// buildRouters builds the driver and one router runtime per spec, every
// one through package router/live (GTID-set tokens over one binlog
// position source, scalar tokens over polled scalar positions) or, for
// GTID-set tokens under ViaProxy, the in-process proxy.
func (g *group) buildRouters(ctx context.Context, specs []RouterSpec) error {
	cfg, topo := g.cfg, g.topo
	if n := len(cfg.Weights); n > 0 && n != len(topo.Replicas()) {
		return fmt.Errorf("lab: %d hashing weights for %d replicas (want one per replica)", n, len(topo.Replicas()))
	}
	e := &driver{cfg: cfg, nodes: topo, poll: g.poll, lag: g.lag, sess: make([]sessionSync, cfg.Sessions),
		hot: &hotAcks{v: make([]int64, cfg.HotRows)}}
	g.e = e
	g.later(func() {
		for _, pr := range g.proxies {
			pr.close()
		}
		for _, v := range g.vias {
			v.close()
		}
	})
	if cfg.Engine == compose.EnginePostgres {
		return g.buildPGRouters(ctx, specs)
	}
	var gtidSpecs, lsnSpecs []RouterSpec
	for _, sp := range specs {
		if sp.Token == TokenLSN {
			lsnSpecs = append(lsnSpecs, sp)
			continue
		}
		gtidSpecs = append(gtidSpecs, sp)
	}
	if len(lsnSpecs) > 0 {
		// The scalar token runs through router/live like every other, on
		// polled scalar positions (binlogwatch streams carry GTID sets).
		src, err := startPollSource(ctx, topo, cfg, &g.bg, 10*time.Second, live.Flavor[gtid.LSN](live.Scalar{}), false)
		if err != nil {
			return err
		}
		for _, sp := range lsnSpecs {
			v, err := newViaRouter(ctx, sp, e, live.Scalar{}, src, live.WatermarkAfterRead)
			if err != nil {
				return err
			}
			g.vias = append(g.vias, v)
			e.routers = append(e.routers, v)
			if cfg.Via == ViaProxy {
				g.notes = append(g.notes, fmt.Sprintf("%s ran via package router/live, not the proxy: the proxy carries GTID-set tokens only.", sp.Name))
			}
		}
	}
	if len(gtidSpecs) > 0 && cfg.Engine == compose.EngineMariaDB && cfg.Via == ViaRouter {
		// MariaDB GTID positions through router/live's MariaDB flavor, on
		// polled positions (checkEngine: no binlog streams). Via the
		// proxy, below: it keeps them as sets (engine mariadb).
		pl, err := startPollSource(ctx, topo, cfg, &g.bg, 10*time.Second, live.Flavor[gtid.MariaDBPosition](live.MariaDB{}), false)
		if err != nil {
			return err
		}
		for _, sp := range gtidSpecs {
			v, err := newViaRouter(ctx, sp, e, live.MariaDB{}, pl, live.WatermarkAfterRead)
			if err != nil {
				return err
			}
			g.vias = append(g.vias, v)
			e.routers = append(e.routers, v)
		}
		gtidSpecs = nil
	}
	if len(gtidSpecs) > 0 {
		var src live.PositionSource[gtid.Set]
		wm := live.WatermarkAfterRead
		if cfg.WatermarkSource == WatermarkLazy {
			wm = live.WatermarkLazy
		}
		switch {
		case cfg.Positions == PositionsBinlog:
			w, err := startWatchSource(ctx, topo, cfg, &g.bg, 10*time.Second)
			if err != nil {
				return err
			}
			src = w
		case cfg.Via == ViaRouter:
			// One poller for every router, as one binlog stream per node
			// serves them all.
			pl, err := startPollSource(ctx, topo, cfg, &g.bg, 10*time.Second, live.Flavor[gtid.Set](live.MySQL{}), wm == live.WatermarkLazy)
			if err != nil {
				return err
			}
			src = pl
		}
		// Via the proxy with PositionsPoll, src stays nil: each proxy
		// polls its backends itself, as `causallab proxy` does.
		for _, sp := range gtidSpecs {
			if cfg.Via == ViaProxy {
				pr, err := newViaProxy(ctx, sp, e, src)
				if err != nil {
					return err
				}
				g.proxies = append(g.proxies, pr)
				e.routers = append(e.routers, pr)
				continue
			}
			v, err := newViaRouter(ctx, sp, e, live.MySQL{}, src, wm)
			if err != nil {
				return err
			}
			g.vias = append(g.vias, v)
			e.routers = append(e.routers, v)
		}
	}
	e.vias, e.proxies = g.vias, g.proxies
	return nil
}

// buildPGRouters builds every router of specs through live.PGRouter
// (checkEngine: their token is the LSN whatever they name).
func (g *group) buildPGRouters(ctx context.Context, specs []RouterSpec) error {
	wl, err := pgWorkloadOf(g.cfg.Workload)
	if err != nil {
		return err
	}
	for _, sp := range specs {
		v, err := newViaPG(ctx, sp, g.e, wl, &g.bg)
		if err != nil {
			return err
		}
		g.vias = append(g.vias, v)
		g.e.routers = append(g.e.routers, v)
	}
	g.e.vias = g.vias
	return nil
}

// reconnectCause says why a session's reads change connection under cfg.
func reconnectCause(cfg *Config) string {
	var why []string
	if cfg.Proxies > 1 {
		why = append(why, fmt.Sprintf("its statements dealt across %d proxies", cfg.Proxies))
	}
	if cfg.ReconnectEvery > 0 {
		why = append(why, fmt.Sprintf("a reconnect every %d statements", cfg.ReconnectEvery))
	}
	return strings.Join(append(why, "a statement past the read timeout breaks one"), "; ")
}

// onFailover tells every package-router router of a failover.
func (g *group) onFailover(ctx context.Context, fr compose.FailoverResult) error {
	var errs []error
	if err := g.countLost(ctx, fr); err != nil {
		errs = append(errs, err)
	}
	if c, err := g.timelineChange(ctx, fr); err != nil {
		errs = append(errs, err)
	} else {
		g.e.timelines.add(c)
	}
	for _, v := range g.vias {
		// Every base first, then every router told (prepareFailover).
		if p, ok := v.(interface{ prepareFailover(context.Context) error }); ok {
			errs = append(errs, p.prepareFailover(ctx))
		}
	}
	for _, v := range g.vias {
		errs = append(errs, v.failover(ctx, fr))
	}
	for _, p := range g.proxies {
		errs = append(errs, p.failover(ctx, fr))
	}
	return errors.Join(errs...)
}

// timelineChange is failover fr as the hidden-loss pass needs it: what
// it lost, and the new primary's writer source, both as the flavor's
// writeID names writes.
func (g *group) timelineChange(ctx context.Context, fr compose.FailoverResult) (timelineChange, error) {
	c := timelineChange{at: g.e.since()}
	f := flavorOf(g.e.cfg.Engine)
	lost, err := f.lostWrites(fr.LostGTIDs)
	if err != nil {
		return c, fmt.Errorf("lab: failover to %s: lost GTIDs %q: %w", fr.NewPrimary, fr.LostGTIDs, err)
	}
	c.lost = lost
	if f.postgres() {
		return c, nil // writeID names no PostgreSQL write: nothing to follow
	}
	for _, n := range append([]compose.Node{g.e.nodes.Primary()}, g.e.nodes.Replicas()...) {
		if n.Name != fr.NewPrimary {
			continue
		}
		if c.newSID, err = writerOf(ctx, f, n); err != nil {
			return c, fmt.Errorf("lab: failover to %s: reading its writer source: %w", n.Name, err)
		}
		return c, nil
	}
	return c, fmt.Errorf("lab: failover to %s: no such node", fr.NewPrimary)
}

// run drives the workload while the condition runs and the events play,
// and waits until every event is undone (restarts, resumes).
func (g *group) run(ctx context.Context, sched []scheduledWrite, progress func(Progress)) (*measurement, error) {
	cfg, topo, e := g.cfg, g.topo, g.e
	m := &measurement{cst: &conditionStats{}, events: &eventLog{}}
	e.down, e.events = &m.events.down, m.events
	cctx, ccancel := context.WithCancel(ctx)
	var evwg sync.WaitGroup // condition and events (not the poller)
	defer func() { ccancel(); evwg.Wait() }()
	evwg.Add(1)
	go func() {
		defer evwg.Done()
		cfg.Condition.run(cctx, topo, cfg.Seed, lockQuery(cfg.Workload), m.cst, cfg.Logger)
	}()
	e.start = time.Now()
	if len(cfg.Condition.Events) > 0 {
		d, ok := topo.(Disrupter)
		if !ok {
			return nil, fmt.Errorf("lab: scripted events need a topology that can kill, pause, partition and fail over")
		}
		evwg.Add(1)
		go func() {
			defer evwg.Done()
			runEvents(cctx, d, cfg.Condition.Events, e.start, m.events, e.drift, g.onFailover, cfg.Logger)
		}()
	}
	accs, _, err := e.runOnce(ctx, sched, progress)
	ccancel()
	m.measured = time.Since(e.start)
	if err != nil {
		return nil, err
	}
	evwg.Wait()
	m.accs = accs
	return m, nil
}

// collect builds the group's Result from the measurement and what the
// poller, the condition, the events and the routing path recorded.
func (g *group) collect(ctx context.Context, m *measurement) *Result {
	cst, evlog := m.cst, m.events
	res := &Result{MeasureSeconds: m.measured.Seconds(), Notes: append(g.notes, evlog.lines...), FaultErrors: int64(evlog.errs),
		Polls: g.poll.polls.Load(), PollErrors: g.poll.pollErrors.Load(), Stalls: cst.Stalls.Load(), HeavyTxns: cst.HeavyTxns.Load(), RowLocks: cst.RowLocks.Load()}
	res.FaultErrors += cst.FaultErrors.Load()
	res.Failovers = evlog.failovers
	res.History = g.e.history
	if n := cst.HeavyTxns.Load(); n > 0 {
		res.HeavyMeanMs = ms(time.Duration(cst.HeavyNanos.Load() / n))
	}
	for _, pr := range g.proxies {
		res.Notes = append(res.Notes, pr.note(ctx))
		if n := pr.failoverNote(); n != "" {
			res.Notes = append(res.Notes, n)
		}
		if n := pr.drifts.errs.Load(); n > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %d drift reads failed (the outside load was that much lighter).", pr.sp.Name, n))
		}
	}
	for _, v := range g.vias {
		if n := v.driftErrors(); n > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %d drift reads failed (the outside load was that much lighter).", v.spec().Name, n))
		}
	}
	for i, a := range m.accs {
		res.Routers = append(res.Routers, summarizeRouter(g.e.routers[i], a))
		res.Routers[len(res.Routers)-1].FailoverLoss = g.e.lossOf(i)
		if a.hash != nil {
			row := &res.Routers[len(res.Routers)-1]
			row.Hash = a.hash.result()
			row.Hash.Reads, row.Hash.RYW = float64(row.Reads), float64(row.RYW)
			if a.hash.unknown > 0 {
				res.Notes = append(res.Notes, fmt.Sprintf("%s: %d served reads named no node and could not be attributed.", row.Name, a.hash.unknown))
			}
		}
		if t := &a.tally; t.Reconnects > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %d reads were served on another connection than their session's previous read (%s); "+
				"monotonic reads hold per connection, so each started its session's guarantee afresh, and %d of them went back in time across it "+
				"(mr_across_reconnect, not counted in mr).", g.e.routers[i].spec().Name, t.Reconnects, reconnectCause(g.cfg), t.MRAcrossReconnect))
		}
	}
	if g.cfg.Engine == compose.EnginePostgres {
		res.Notes = append(res.Notes, "non_prefix and the hidden-loss pass: not judged on PostgreSQL (a write's token is the WAL position read after its commit, not its place in the commit order).")
	}
	if n := prefixNote(res.Routers); n != "" {
		res.Notes = append(res.Notes, n)
	}
	if n := hiddenLossNote(res.Routers); n != "" {
		res.Notes = append(res.Notes, n)
	}
	res.Faults = evlog.down.windows(m.measured)
	res.ReplicaLag = g.lag.perReplica(g.topo.Replicas())
	res.lagSamples, res.lagUnseen = g.lag.samples()
	res.Lag = lagStats(res.lagSamples, res.lagUnseen)
	var names []string
	for _, r := range g.topo.Replicas() {
		names = append(names, r.Name)
	}
	res.Spread = spreadStats(g.lag.spreads(names))
	for _, hs := range g.lag.heavyHolds(cst.heavyCommits(), names) {
		row := make([]float64, len(hs))
		for i, h := range hs {
			row[i] = ms(h)
		}
		res.HeavyHoldsMs = append(res.HeavyHoldsMs, row)
	}
	return res
}

// waitCaughtUp waits until every up replica's polled set contains the
// primary's.
func waitCaughtUp(ctx context.Context, p *poller, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		s := p.view()
		ok := s.primaryKnown
		for i := range s.replicas {
			if ok && s.up[i] && !s.applied[i].Contains(s.primaryPos) {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lab: replicas did not catch up with the primary within %v", limit)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func sortedDurations(d []time.Duration) []time.Duration {
	out := slices.Clone(d)
	slices.Sort(out)
	return out
}
