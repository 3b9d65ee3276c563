package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/router"
)

// The seed harness, reproduced (`causallab lab gated --engine E`) on the
// lab's driver (Run): a primary and one replica whose applier holds every
// change back by a fixed apply delay (the apply-delay condition;
// PostgreSQL: recovery_min_apply_delay, milliseconds; MySQL and MariaDB:
// SOURCE_DELAY / MASTER_DELAY, whole seconds), a seeded stream of writes
// and reads over a few hundred users, some users reading their own row
// right after writing it, run through two routers of package router/live
// at once: naive (policy any: every read on the replica) and gated
// (token-ryw: the replica only when its replayed position holds the
// session's last write token, else the primary). Each user is one
// session per router (the driver deals sessions to the routers in turn:
// user u is session 2u on naive, 2u+1 on gated), the stream a script
// of the driver's (Config.script). A read is stale when it lacked the
// user's last acknowledged write: the driver's RYW, ground truth, not
// the token. Then the window itself, a second run: trial i writes
// session i's row, waits D from the acknowledgement and reads it back
// through naive, for D from 0 to twice the apply delay, many trials
// each, interleaved; the sweep's table is read off that run's history.

// GatedEngineConfig configures RunGatedEngine. The defaults are the
// published harness's parameters (docs/results-gated.md).
type GatedEngineConfig struct {
	// Engine runs the topology (one primary, one replica). Required.
	Engine compose.Engine
	// Backend starts it (local or docker). Required.
	Backend compose.Backend
	// ApplyDelay is the replica's apply delay. Default 250ms on
	// PostgreSQL, 1s on MySQL and MariaDB (which take whole seconds).
	ApplyDelay time.Duration
	// Users is the number of users, one row and one router session each
	// per router. Default 300.
	Users int
	// Reads is the number of reads in the stream (each router serves all
	// of them). Default 3788.
	Reads int
	// WriteShare is the share of the stream's steps that are writes (a
	// random user's row set to its next value); the others read a random
	// user's row. Default 0.5.
	WriteShare float64
	// ReadOwnShare is the share of writes followed at once (no pause) by
	// the writer reading its own row back: the worst case. Default 0.6.
	ReadOwnShare float64
	// OpGap is the mean of the exponential pause before each step (the
	// stream's pace: the driver offers each step at the sum of the pauses
	// before it, open loop, as it offers every workload). Default 2ms;
	// negative: no pause.
	OpGap time.Duration
	// SweepMax and SweepStep are the D-sweep's delays: 0, SweepStep, ...,
	// SweepMax. Defaults: twice the apply delay on PostgreSQL, three times
	// on MySQL and MariaDB; 20 steps.
	SweepMax, SweepStep time.Duration
	// Trials is the number of write-wait-read trials at each D. Default
	// 300; negative: no sweep.
	Trials int
	// SweepEvery is the interval at which trials start (in a seeded
	// shuffled order of D, each on its own row). Default 2ms.
	SweepEvery time.Duration
	// SweepSessions bounds the sweep's statements in flight (the
	// driver's workers). Default 32.
	SweepSessions int
	// PollInterval is the position poller's interval. Default 5ms.
	PollInterval time.Duration
	// ReadTimeout bounds one read or write. Default 3s.
	ReadTimeout time.Duration
	// Seed fixes the stream and the sweep's order. Default 1.
	Seed uint64
	// RecordHistory keeps every operation of the stream and the sweep
	// (GatedEngineResult.History), for WriteHistoryFiles.
	RecordHistory bool
	// Progress, when set, is told each phase.
	Progress func(phase string)
	// Logger receives detail. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports what RunGatedEngine would refuse in c (c is not
// changed: the defaults are filled into a copy).
func (c GatedEngineConfig) Validate() error { return c.validate() }

func (c *GatedEngineConfig) validate() error {
	if !slices.Contains(compose.Engines(), c.Engine) {
		return fmt.Errorf("lab: gated: unknown engine %q (want one of %v)", c.Engine, compose.Engines())
	}
	if c.Backend != compose.BackendLocal && c.Backend != compose.BackendDocker {
		return fmt.Errorf("lab: gated: backend %q (want local or docker)", c.Backend)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Engine == compose.EnginePostgres {
		def(&c.ApplyDelay, 250*time.Millisecond)
	} else {
		def(&c.ApplyDelay, time.Second)
	}
	if c.Users == 0 {
		c.Users = 300
	}
	if c.Reads == 0 {
		c.Reads = 3788
	}
	if c.WriteShare == 0 {
		c.WriteShare = 0.5
	}
	if c.ReadOwnShare == 0 {
		c.ReadOwnShare = 0.6
	}
	if c.Trials == 0 {
		c.Trials = 300
	}
	if c.SweepSessions == 0 {
		c.SweepSessions = 32
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	def(&c.OpGap, 2*time.Millisecond)
	if c.Engine == compose.EnginePostgres {
		def(&c.SweepMax, 2*c.ApplyDelay)
	} else {
		// MySQL's and MariaDB's delayed replicas let a change through
		// between one and about two delays after its commit (measured:
		// docs/results-gated.md): the window ends near twice the delay.
		def(&c.SweepMax, 3*c.ApplyDelay)
	}
	def(&c.SweepStep, max(c.SweepMax/20, time.Millisecond))
	def(&c.SweepEvery, 2*time.Millisecond)
	def(&c.PollInterval, 5*time.Millisecond)
	def(&c.ReadTimeout, 3*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.ApplyDelay < 0 || c.ApplyDelay > time.Minute:
		return fmt.Errorf("lab: gated: apply delay %v (want 0..1m)", c.ApplyDelay)
	case c.Engine != compose.EnginePostgres && c.ApplyDelay%time.Second != 0:
		return fmt.Errorf("lab: gated: apply delay %v: %s takes whole seconds (PostgreSQL takes milliseconds)", c.ApplyDelay, c.Engine)
	case c.ApplyDelay%time.Millisecond != 0:
		return fmt.Errorf("lab: gated: apply delay %v is not a whole number of milliseconds", c.ApplyDelay)
	case c.Users < 1 || c.Users > 100000:
		return fmt.Errorf("lab: gated: %d users (want 1..100000)", c.Users)
	case c.Reads < 1 || c.Reads > 1000000:
		return fmt.Errorf("lab: gated: %d reads (want 1..1000000)", c.Reads)
	case !(c.WriteShare > 0 && c.WriteShare < 1) || !(c.ReadOwnShare >= 0 && c.ReadOwnShare <= 1):
		return fmt.Errorf("lab: gated: write share %v (want 0 < s < 1) or read-own share %v (want 0..1)", c.WriteShare, c.ReadOwnShare)
	case c.OpGap > time.Second:
		return fmt.Errorf("lab: gated: op gap %v (want 0..1s)", c.OpGap)
	case c.SweepStep <= 0 || c.SweepMax < 0 || c.SweepMax > 5*time.Minute || c.SweepMax/c.SweepStep > 1000:
		return fmt.Errorf("lab: gated: sweep 0..%v by %v (want a positive step, at most 1000 steps, up to 5m)", c.SweepMax, c.SweepStep)
	case c.Trials > 100000 || c.Trials*(int(c.SweepMax/c.SweepStep)+1) > 1000000:
		return fmt.Errorf("lab: gated: %d trials per delay (want 0..100000, at most 1000000 in all)", c.Trials)
	case c.SweepEvery <= 0 || c.SweepSessions < 1 || c.SweepSessions > 256:
		return fmt.Errorf("lab: gated: sweep every %v with %d sessions (want a positive interval, 1..256 sessions)", c.SweepEvery, c.SweepSessions)
	case c.PollInterval <= 0 || c.ReadTimeout <= 0:
		return fmt.Errorf("lab: gated: poll interval %v and read timeout %v must be positive", c.PollInterval, c.ReadTimeout)
	}
	return nil
}

// gatedToken is the engine's exact token, the gated router's.
func gatedToken(e compose.Engine) EngineToken {
	switch e {
	case compose.EnginePostgres:
		return TokPGLSN
	case compose.EngineMariaDB:
		return TokMariaDBGTID
	}
	return TokMySQLGTID
}

// gatedOpKind is what one step of the stream does.
type gatedOpKind uint8

const (
	// opWrite sets the user's row to its next value.
	opWrite gatedOpKind = iota
	// opReadOwn reads the row the user wrote in the step before, at once.
	opReadOwn
	// opRead reads a random user's row.
	opRead
)

// gatedOp is one step of the stream.
type gatedOp struct {
	kind gatedOpKind
	user int
	// gap is the pause before the step.
	gap time.Duration
}

// gatedStream is the seeded op stream: exactly cfg.Reads reads.
func gatedStream(cfg *GatedEngineConfig) []gatedOp {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	var ops []gatedOp
	reads := 0
	for reads < cfg.Reads {
		gap := time.Duration(rng.ExpFloat64() * float64(max(cfg.OpGap, 0)))
		u := rng.IntN(cfg.Users)
		if rng.Float64() < cfg.WriteShare {
			ops = append(ops, gatedOp{kind: opWrite, user: u, gap: gap})
			if rng.Float64() < cfg.ReadOwnShare {
				ops = append(ops, gatedOp{kind: opReadOwn, user: u})
				reads++
			}
			continue
		}
		ops = append(ops, gatedOp{kind: opRead, user: u, gap: gap})
		reads++
	}
	return ops
}

// GatedRouterRow is what one router did with the stream.
type GatedRouterRow struct {
	// Router is "naive" or "gated"; Policy its router policy.
	Router string `json:"router"`
	Policy string `json:"policy"`
	// Writes acknowledged and writes that failed.
	Writes      int64 `json:"writes"`
	WriteErrors int64 `json:"write_errors"`
	// Reads issued; Served answered with the row.
	Reads  int64 `json:"reads"`
	Served int64 `json:"served"`
	// Stale: served without the value of the user's last acknowledged
	// write.
	Stale int64 `json:"stale"`
	// OnReplica: served by the replica; OnPrimary: by the primary.
	OnReplica int64 `json:"on_replica"`
	OnPrimary int64 `json:"on_primary"`
	// PrimaryNoReplicaUp: of OnPrimary, the reads the router sent there
	// because its view had no replica up (router.ReasonNoReplicaUp: the
	// replica's position was not read within its health bound, as on a
	// machine too loaded to poll in time, or a failed read held it down).
	PrimaryNoReplicaUp int64 `json:"primary_no_replica_up"`
	// Errors: reads refused or failed.
	Errors int64 `json:"errors"`
	// ReadOwn and ReadOwnStale: the reads right after the user's own
	// write, and how many of them were stale.
	ReadOwn      int64 `json:"read_own"`
	ReadOwnStale int64 `json:"read_own_stale"`
	// P50Ms and P99Ms: read latency (the router's decision included).
	P50Ms float64 `json:"read_p50_ms"`
	P99Ms float64 `json:"read_p99_ms"`
}

// GatedSweepRow is one delay of the D-sweep.
type GatedSweepRow struct {
	// DelayMs is D, the nominal wait between the write's acknowledgement
	// and the read.
	DelayMs float64 `json:"delay_ms"`
	// Trials run; Stale of them read the row without the write.
	Trials int64 `json:"trials"`
	Stale  int64 `json:"stale"`
	// OffReplica: reads the replica did not serve (not counted stale or
	// fresh); Errors: trials whose write or read failed.
	OffReplica int64 `json:"off_replica"`
	Errors     int64 `json:"errors"`
	// MeasuredP50Ms and MeasuredP99Ms: the wait achieved, from the
	// write's acknowledgement to the read's start.
	MeasuredP50Ms float64 `json:"measured_p50_ms"`
	MeasuredP99Ms float64 `json:"measured_p99_ms"`
	// ByWaited and ByWaitedStale re-bin the trials the replica served by
	// the wait achieved: those whose wait fell in [D, D+step), and how
	// many of them were stale (a loaded machine delays some reads past
	// their nominal D).
	ByWaited      int64 `json:"by_waited_trials"`
	ByWaitedStale int64 `json:"by_waited_stale"`
	// EarlyFresh: fresh reads whose achieved wait was below the apply
	// delay; EarlyExplained: of them, those whose write and read took
	// long enough (write latency + wait + read latency >= the delay): the
	// commit can come that much before the acknowledgement (the router
	// reads the token after the commit, on the same connection) and the
	// read's snapshot that much after its start.
	EarlyFresh     int64 `json:"early_fresh"`
	EarlyExplained int64 `json:"early_explained"`
}

// GatedEngineResult is the experiment's answer.
type GatedEngineResult struct {
	Engine compose.Engine `json:"engine"`
	// Flavor is the routers' live flavor.
	Flavor       string  `json:"flavor"`
	ApplyDelayMs float64 `json:"apply_delay_ms"`
	Users        int     `json:"users"`
	WriteShare   float64 `json:"write_share"`
	ReadOwnShare float64 `json:"read_own_share"`
	OpGapMs      float64 `json:"op_gap_ms"`
	Seed         uint64  `json:"seed"`
	// Rows: naive, then gated.
	Rows []GatedRouterRow `json:"rows"`
	// StreamSeconds is the stream's wall time (both routers at once).
	StreamSeconds float64 `json:"stream_seconds"`
	// Sweep is the D-sweep, by D.
	Sweep        []GatedSweepRow `json:"sweep"`
	SweepSeconds float64         `json:"sweep_seconds"`
	// Seconds is the whole run, the topology's start and removal included.
	Seconds float64 `json:"seconds"`
	// Stream and SweepHistory are the two runs' histories (the stream's
	// with RecordHistory; the sweep's always, its table is read off it).
	History, SweepHistory EngineHistory `json:"-"`
	// Notes are the driver's notes on the stream's run.
	Notes []string `json:"notes"`
}

// RunGatedEngine starts a topology of cfg.Engine (a primary and one
// replica), runs the stream through the naive and the gated router and
// then the D-sweep, and removes the topology.
func RunGatedEngine(ctx context.Context, cfg GatedEngineConfig) (*GatedEngineResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	cfg.progress("topology start")
	topo, err := compose.Start(ctx, compose.Config{Engine: cfg.Engine, Replicas: 1, Backend: cfg.Backend, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("lab: gated: %s topology: %w", cfg.Engine, err)
	}
	res, runErr := runGated(ctx, &cfg, topo)
	cfg.progress("topology down")
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	downErr := topo.Down(dctx)
	cancel()
	if err := errors.Join(runErr, downErr); err != nil {
		return nil, fmt.Errorf("lab: gated: %s: %w", cfg.Engine, err)
	}
	res.Seconds = time.Since(t0).Seconds()
	return res, nil
}

func (c *GatedEngineConfig) progress(phase string) {
	if c.Progress != nil {
		c.Progress(phase)
	}
}

// gatedHotRows are the driver's hot rows in both runs: each write also
// increments one (user or trial modulo their number), so that writes do
// not queue on one row lock.
const gatedHotRows = 8

// gatedPolicies are the stream's routers, in table order.
var gatedPolicies = []RouterSpec{{Name: "naive", Policy: router.Policy{Kind: router.PolicyAny}}, {Name: "gated", Policy: router.Policy{Kind: router.PolicyTokenRYW}}}

// runGated runs the stream and the sweep on topo.
func runGated(ctx context.Context, cfg *GatedEngineConfig, topo *compose.Topology) (*GatedEngineResult, error) {
	e := topo.Engine()
	res := &GatedEngineResult{Engine: e, Flavor: gatedToken(e).flavor(), ApplyDelayMs: float64(cfg.ApplyDelay) / 1e6, Users: cfg.Users, WriteShare: cfg.WriteShare,
		ReadOwnShare: cfg.ReadOwnShare, OpGapMs: float64(max(cfg.OpGap, 0)) / 1e6, Seed: cfg.Seed}
	script := gatedScript(cfg, len(gatedPolicies))
	cfg.progress(fmt.Sprintf("stream: %d reads, through naive and gated at once", cfg.Reads))
	run, err := Run(ctx, topo, cfg.driverRun(script, gatedPolicies, len(gatedPolicies)*cfg.Users, 0, cfg.RecordHistory))
	if err != nil {
		return nil, err
	}
	res.StreamSeconds, res.Notes = run.MeasureSeconds, run.Notes
	res.History = EngineHistory{Engine: e, Sessions: run.Config.Sessions, HotRows: run.Config.HotRows, Ops: run.History}
	for _, r := range run.Routers {
		res.Rows = append(res.Rows, gatedRow(r))
	}
	if cfg.Trials <= 0 {
		return res, nil
	}
	steps := int(cfg.SweepMax/cfg.SweepStep) + 1
	order := sweepOrder(cfg, steps)
	cfg.progress(fmt.Sprintf("D-sweep: %d delays 0..%v, %d trials each", steps, cfg.SweepMax, cfg.Trials))
	sw, err := Run(ctx, topo, cfg.driverRun(sweepScript(cfg, order), gatedPolicies[:1], len(order), cfg.SweepSessions, true))
	if err != nil {
		return nil, err
	}
	res.SweepSeconds = sw.MeasureSeconds
	res.SweepHistory = EngineHistory{Engine: e, Sessions: sw.Config.Sessions, HotRows: sw.Config.HotRows, Ops: sw.History}
	res.Sweep = sweepRows(cfg, order, steps, sw.History)
	return res, nil
}

// driverRun is the driver's configuration of one of the experiment's
// runs: script through routers, sessions sessions, workers statements in
// flight (0: the driver's default), the apply delay on the replica.
func (c *GatedEngineConfig) driverRun(script []scheduledWrite, routers []RouterSpec, sessions, workers int, history bool) Config {
	cond := ConditionSpec{Names: []string{CondApplyDelay}, ApplyDelay: c.ApplyDelay}
	last := time.Millisecond
	if n := len(script); n > 0 {
		last = max(script[n-1].At, last)
	}
	cfg := Config{Engine: c.Engine, Sessions: sessions, HotRows: gatedHotRows, Duration: last, ReadsPerWrite: 1, Routers: routers, Condition: cond,
		Workers: workers, PollInterval: c.PollInterval, Positions: PositionsPoll, WatermarkSource: WatermarkQuery, ReadTimeout: c.ReadTimeout,
		Seed: c.Seed, RecordHistory: history, Logger: c.Logger, script: script}
	return cfg
}

// gatedScript is the stream as the driver's script: each step at the sum
// of the pauses before it, once per router (user u's session on router i
// is u*routers+i); a write that the writer reads back at once is
// followed by one read with no pause.
func gatedScript(cfg *GatedEngineConfig, routers int) []scheduledWrite {
	ops := gatedStream(cfg)
	var out []scheduledWrite
	var at time.Duration
	for i := 0; i < len(ops); i++ {
		op := ops[i]
		at += op.gap
		w := scheduledWrite{At: at, Hot: op.user % gatedHotRows, Scripted: true, Read: op.kind != opWrite}
		if op.kind == opWrite && i+1 < len(ops) && ops[i+1].kind == opReadOwn {
			w.Reads = 1
			i++
		}
		for r := range routers {
			w.Session = op.user*routers + r
			out = append(out, w)
		}
	}
	return out
}

// sweepOrder is the sweep's trials in their seeded shuffled order: trial
// i waits step order[i] (D = order[i]*SweepStep).
func sweepOrder(cfg *GatedEngineConfig, steps int) []int {
	order := make([]int, 0, steps*cfg.Trials)
	for s := range steps {
		for range cfg.Trials {
			order = append(order, s)
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xd5eed))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	return order
}

// sweepScript is the sweep as the driver's script: trial i writes
// session i's row at i*SweepEvery and reads it back D after the write's
// acknowledgement.
func sweepScript(cfg *GatedEngineConfig, order []int) []scheduledWrite {
	out := make([]scheduledWrite, len(order))
	for i, step := range order {
		out[i] = scheduledWrite{At: time.Duration(i) * cfg.SweepEvery, Session: i, Hot: i % gatedHotRows, Scripted: true, Reads: 1,
			Gap: time.Duration(step) * cfg.SweepStep}
	}
	return out
}

// gatedRow is a stream router's row of the table.
func gatedRow(r RouterResult) GatedRouterRow {
	o := r.Outcomes
	onReplica := o["replica"] + o["stale"]
	return GatedRouterRow{Router: r.Name, Policy: r.Policy, Writes: r.Writes - r.WriteErrors, WriteErrors: r.WriteErrors, Reads: r.Reads,
		Served: r.Served, Stale: r.RYW, OnReplica: onReplica, OnPrimary: r.Served - onReplica, PrimaryNoReplicaUp: r.Reasons[router.ReasonNoReplicaUp.String()],
		Errors: r.Reads - r.Served, ReadOwn: r.FirstReads, ReadOwnStale: r.FirstReadRYW, P50Ms: r.LatP50Ms, P99Ms: r.LatP99Ms}
}

// gatedTrial is one sweep trial's outcome, read off the sweep's history.
type gatedTrial struct {
	step       int
	stale, off bool
	err        bool
	waited     time.Duration
	// write and read are the write's and the read's latency.
	write, read time.Duration
}

// sweepTrials reads each trial's outcome off the sweep run's history h
// (trial i is session i: its write, then its read).
func sweepTrials(order []int, h []HistoryOp) []gatedTrial {
	trials := make([]gatedTrial, len(order))
	acked := make([]time.Duration, len(order))
	for i, step := range order {
		trials[i] = gatedTrial{step: step, err: true}
	}
	for _, op := range h {
		if op.Session < 0 || op.Session >= len(order) {
			continue
		}
		tr := &trials[op.Session]
		if op.Write {
			tr.write, acked[op.Session] = op.Complete-op.Invoke, op.Complete
			continue
		}
		served := op.Outcome.Served()
		tr.err = !served
		tr.waited, tr.read = op.Invoke-acked[op.Session], op.Complete-op.Invoke
		tr.off = served && op.Outcome != router.OutReplica && op.Outcome != router.OutStale
		tr.stale = served && !tr.off && op.Own < op.AckedSeq
	}
	return trials
}

// sweepRows are the sweep's table rows, by D, from its history h.
func sweepRows(cfg *GatedEngineConfig, order []int, steps int, h []HistoryOp) []GatedSweepRow {
	rows := make([]GatedSweepRow, steps)
	waited := make([][]time.Duration, steps)
	for s := range rows {
		rows[s].DelayMs = float64(time.Duration(s)*cfg.SweepStep) / 1e6
	}
	for _, tr := range sweepTrials(order, h) {
		row := &rows[tr.step]
		row.Trials++
		switch {
		case tr.err:
			row.Errors++
			continue
		case tr.off:
			row.OffReplica++
		case tr.stale:
			row.Stale++
		}
		waited[tr.step] = append(waited[tr.step], tr.waited)
		if !tr.off && !tr.stale && tr.waited < cfg.ApplyDelay {
			row.EarlyFresh++
			if tr.write+tr.waited+tr.read >= cfg.ApplyDelay {
				row.EarlyExplained++
			}
		}
		if b := int(tr.waited / cfg.SweepStep); !tr.off && b < len(rows) {
			rows[b].ByWaited++
			if tr.stale {
				rows[b].ByWaitedStale++
			}
		}
	}
	for s := range rows {
		rows[s].MeasuredP50Ms, rows[s].MeasuredP99Ms = quantileMs(waited[s], 0.5), quantileMs(waited[s], 0.99)
	}
	return rows
}

// quantileMs is d's q-quantile in milliseconds (0 when empty); d is sorted.
func quantileMs(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := min(int(math.Ceil(q*float64(len(d))))-1, len(d)-1)
	return float64(d[max(i, 0)]) / 1e6
}
