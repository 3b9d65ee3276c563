package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// The seed harness, reproduced (`causallab lab gated --engine E`): a
// primary and one replica whose applier holds every change back by a
// fixed apply delay (PostgreSQL: recovery_min_apply_delay, milliseconds;
// MySQL and MariaDB: SOURCE_DELAY / MASTER_DELAY, whole seconds), a
// seeded stream of writes and reads over a few hundred users, some users
// reading their own row right after writing it, run through two routers
// of package router/live at once, each on its own table: naive (policy
// any: every read on the replica) and gated (token-ryw: the replica only
// when its replayed position holds the session's last write token, else
// the primary). A read is stale when it lacked the value the user's last
// acknowledged write set (ground truth, not the token). Then the window
// itself: write a row, wait D, read it off the replica, for D from 0 to
// twice the apply delay, many trials each, interleaved.

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
	// stream's pace). Default 2ms; negative: no pause.
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
	// SweepSessions bounds the sweep's statements in flight (router
	// sessions; a trial holds one only while its write or read runs).
	// Default 32.
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
	// History, with RecordHistory: router i's (naive 0, gated 1) user u
	// is session i*Users+u, sweep trial t session 2*Users+t, each with its
	// own row; no hot rows (a write's Hot is -1). HistorySessions is the
	// number of session numbers.
	History         []HistoryOp `json:"-"`
	HistorySessions int         `json:"-"`
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

// gatedTable names one of the experiment's tables on engine e.
func gatedTable(e compose.Engine, name string) string {
	if e == compose.EnginePostgres {
		return "public.gated_" + name
	}
	return "gated." + name
}

// gatedSetup creates table with rows rows (id 0..rows-1, v 0).
func gatedSetup(ctx context.Context, topo *compose.Topology, table string, rows int) error {
	db, err := topo.DB(topo.Primary().Name)
	if err != nil {
		return err
	}
	if topo.Engine() != compose.EnginePostgres {
		if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS gated"); err != nil {
			return err
		}
	}
	var vals strings.Builder
	for i := range rows {
		if i > 0 {
			vals.WriteByte(',')
		}
		fmt.Fprintf(&vals, "(%d, 0)", i)
	}
	for _, q := range []string{"DROP TABLE IF EXISTS " + table, "CREATE TABLE " + table + " (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)",
		"INSERT INTO " + table + " VALUES " + vals.String()} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%.80s: %w", q, err)
		}
	}
	return nil
}

// runGated runs the stream and the sweep on topo.
func runGated(ctx context.Context, cfg *GatedEngineConfig, topo *compose.Topology) (*GatedEngineResult, error) {
	e := topo.Engine()
	res := &GatedEngineResult{Engine: e, ApplyDelayMs: float64(cfg.ApplyDelay) / 1e6, Users: cfg.Users, WriteShare: cfg.WriteShare,
		ReadOwnShare: cfg.ReadOwnShare, OpGapMs: float64(max(cfg.OpGap, 0)) / 1e6, Seed: cfg.Seed}
	steps := int(cfg.SweepMax/cfg.SweepStep) + 1
	cfg.progress("set-up")
	for _, t := range []struct {
		name string
		rows int
	}{{"naive", cfg.Users}, {"gated", cfg.Users}, {"sweep", max(steps*cfg.Trials, 1)}} {
		if err := gatedSetup(ctx, topo, gatedTable(e, t.name), t.rows); err != nil {
			return nil, err
		}
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	rep := topo.Replicas()[0].Name
	if err := topo.SetApplyDelay(ctx, rep, cfg.ApplyDelay); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	tok := gatedToken(e)
	ef := &EngineFailoverConfig{Sessions: cfg.Users, PollInterval: cfg.PollInterval, ReadTimeout: cfg.ReadTimeout, Logger: cfg.Logger, Seed: cfg.Seed}
	pols := []struct {
		name string
		pol  router.Policy
	}{{"naive", router.Policy{Kind: router.PolicyAny}}, {"gated", router.Policy{Kind: router.PolicyTokenRYW}}}
	routers := make([]efRouter, 0, 3)
	defer func() {
		for _, r := range routers {
			r.close()
		}
	}()
	for _, p := range pols {
		r, err := newTokenRouter(rctx, ef, topo, tok, p.pol, gatedTable(e, p.name), &bg)
		if err != nil {
			return nil, fmt.Errorf("%s router: %w", p.name, err)
		}
		routers = append(routers, r)
	}
	res.Flavor = routers[0].flavor()
	ops := gatedStream(cfg)
	cfg.progress(fmt.Sprintf("stream: %d steps, %d reads, through naive and gated at once", len(ops), cfg.Reads))
	start := time.Now()
	rows := make([]GatedRouterRow, len(pols))
	res.HistorySessions = len(pols)*cfg.Users + steps*max(cfg.Trials, 0)
	truth, err := newOwnRows(res.HistorySessions, start, cfg.RecordHistory)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	for i, p := range pols {
		g := &gatedRun{r: routers[i], name: p.name, first: i * cfg.Users, truth: truth}
		wg.Go(func() {
			rows[i] = g.stream(rctx, cfg, ops)
			rows[i].Router, rows[i].Policy = p.name, p.pol.String()
		})
	}
	wg.Wait()
	res.StreamSeconds = time.Since(start).Seconds()
	if err := rctx.Err(); err != nil {
		return nil, err
	}
	res.Rows = rows
	if cfg.Trials > 0 {
		ef := *ef
		ef.Sessions = cfg.SweepSessions
		sw, err := newTokenRouter(rctx, &ef, topo, tok, router.Policy{Kind: router.PolicyAny}, gatedTable(e, "sweep"), &bg)
		if err != nil {
			return nil, fmt.Errorf("sweep router: %w", err)
		}
		routers = append(routers, sw)
		cfg.progress(fmt.Sprintf("D-sweep: %d delays 0..%v, %d trials each", steps, cfg.SweepMax, cfg.Trials))
		start = time.Now()
		g := &gatedRun{r: sw, name: "sweep", first: len(pols) * cfg.Users, truth: truth}
		res.Sweep = g.sweep(rctx, cfg, steps)
		res.SweepSeconds = time.Since(start).Seconds()
		if err := rctx.Err(); err != nil {
			return nil, err
		}
	}
	res.History = truth.history
	return res, nil
}

// gatedRun is one router's part of the experiment: its sessions are
// numbered from first in truth (the run's).
type gatedRun struct {
	r     efRouter
	name  string
	first int
	truth *ownRows
}

// write records user or trial sess's write of seq (invoked at t0).
func (g *gatedRun) write(sess int, seq int64, t0 time.Time, err error) {
	g.truth.write(g.name, g.first+sess, seq, t0, err)
}

// read judges r, user or trial sess's read invoked at t0.
func (g *gatedRun) read(sess int, r *Read, t0 time.Time) (Verdict, error) {
	r.Session = g.first + sess
	return g.truth.read(g.name, r, t0)
}

// readOutcome is a read's outcome for the checker: out when served, else
// the refusal's or router.OutError.
func readOutcome(out router.Outcome, err error) router.Outcome {
	var re *live.ReadError
	switch {
	case err == nil:
		return out
	case errors.As(err, &re):
		return re.Outcome
	}
	return router.OutError
}

// stream runs ops in order through g's router (session and row =
// user), the lab's Checker judging every read against the user's last
// acknowledged value.
func (g *gatedRun) stream(ctx context.Context, cfg *GatedEngineConfig, ops []gatedOp) GatedRouterRow {
	var row GatedRouterRow
	truth := make([]int64, cfg.Users)
	next := make([]int64, cfg.Users)
	var lat []time.Duration
	for _, op := range ops {
		if op.gap > 0 && !sleepCtx(ctx, op.gap) {
			break
		}
		if op.kind == opWrite {
			next[op.user]++
			wctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
			t0 := time.Now()
			err := g.r.writeRow(wctx, op.user, op.user, next[op.user])
			cancel()
			g.write(op.user, next[op.user], t0, err)
			if err != nil {
				row.WriteErrors++
				continue
			}
			row.Writes++
			truth[op.user] = next[op.user]
			continue
		}
		row.Reads++
		if op.kind == opReadOwn {
			row.ReadOwn++
		}
		rctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
		t := time.Now()
		got, out, why, err := g.r.readRow(rctx, op.user, op.user)
		lat = append(lat, time.Since(t))
		cancel()
		v, cerr := g.read(op.user, &Read{Session: op.user, AckedSeq: truth[op.user], Own: got, Outcome: readOutcome(out, err)}, t)
		if err != nil || cerr != nil {
			row.Errors++
			continue
		}
		row.Served++
		if out == router.OutReplica || out == router.OutStale {
			row.OnReplica++
		} else {
			row.OnPrimary++
			if why == router.ReasonNoReplicaUp {
				row.PrimaryNoReplicaUp++
			}
		}
		if v.RYW {
			row.Stale++
			if op.kind == opReadOwn {
				row.ReadOwnStale++
			}
		}
	}
	row.P50Ms, row.P99Ms = quantileMs(lat, 0.5), quantileMs(lat, 0.99)
	return row
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

// gatedTrial is one sweep trial's outcome.
type gatedTrial struct {
	step       int
	stale, off bool
	err        bool
	waited     time.Duration
	// write and read are the write's and the read's latency.
	write, read time.Duration
}

// sweep runs the D-sweep through g's router (the naive router: every
// read on the replica): trial i, on row i (session i), starts at
// i*SweepEvery in a seeded shuffled order of the delays, writes 1, waits
// D from the write's acknowledgement and reads the row back; the
// checker judges the read.
func (g *gatedRun) sweep(ctx context.Context, cfg *GatedEngineConfig, steps int) []GatedSweepRow {
	r := g.r
	order := make([]int, 0, steps*cfg.Trials)
	for s := range steps {
		for range cfg.Trials {
			order = append(order, s)
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xd5eed))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	free := make(chan int, cfg.SweepSessions)
	for s := range cfg.SweepSessions {
		free <- s
	}
	take := func() (int, bool) {
		select {
		case s := <-free:
			return s, true
		case <-ctx.Done():
			return 0, false
		}
	}
	results := make([]gatedTrial, len(order))
	var wg sync.WaitGroup
	start := time.Now()
	started := 0
	for i, step := range order {
		if !sleepCtx(ctx, time.Until(start.Add(time.Duration(i)*cfg.SweepEvery))) {
			break
		}
		started++
		wg.Go(func() {
			tr := gatedTrial{step: step, err: true}
			defer func() { results[i] = tr }()
			d := time.Duration(step) * cfg.SweepStep
			s, ok := take()
			if !ok {
				return
			}
			wctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
			ws := time.Now()
			err := r.writeRow(wctx, s, i, 1)
			cancel()
			acked := time.Now()
			g.write(i, 1, ws, err)
			tr.write = acked.Sub(ws)
			free <- s
			if err != nil || !sleepCtx(ctx, time.Until(acked.Add(d))) {
				return
			}
			if s, ok = take(); !ok {
				return
			}
			defer func() { free <- s }()
			tr.waited = time.Since(acked)
			rctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
			rs := time.Now()
			got, out, _, err := r.readRow(rctx, s, i)
			tr.read = time.Since(acked) - tr.waited
			cancel()
			v, cerr := g.read(i, &Read{Session: i, AckedSeq: 1, Own: got, Outcome: readOutcome(out, err)}, rs)
			if err != nil || cerr != nil {
				return
			}
			tr.err = false
			tr.off = out != router.OutReplica && out != router.OutStale
			tr.stale = !tr.off && v.RYW
		})
	}
	wg.Wait()
	rows := make([]GatedSweepRow, steps)
	waited := make([][]time.Duration, steps)
	for s := range rows {
		rows[s].DelayMs = float64(time.Duration(s)*cfg.SweepStep) / 1e6
	}
	for _, tr := range results[:started] {
		row := &rows[tr.step]
		row.Trials++
		switch {
		case tr.err:
			row.Errors++
		case tr.off:
			row.OffReplica++
		case tr.stale:
			row.Stale++
		}
		if !tr.err {
			waited[tr.step] = append(waited[tr.step], tr.waited)
		}
		if !tr.err && !tr.off && !tr.stale && tr.waited < cfg.ApplyDelay {
			row.EarlyFresh++
			if tr.write+tr.waited+tr.read >= cfg.ApplyDelay {
				row.EarlyExplained++
			}
		}
		if !tr.err && !tr.off {
			if b := int(tr.waited / cfg.SweepStep); b < len(rows) {
				rows[b].ByWaited++
				if tr.stale {
					rows[b].ByWaitedStale++
				}
			}
		}
	}
	for s := range rows {
		rows[s].MeasuredP50Ms, rows[s].MeasuredP99Ms = quantileMs(waited[s], 0.5), quantileMs(waited[s], 0.99)
	}
	return rows
}
