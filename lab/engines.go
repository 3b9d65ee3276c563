package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
	"github.com/causallab/causallab/sim"
)

// The engines failover experiment (`causallab lab failover --engines`):
// the lab's driver (Run) on each engine's real topology (a primary and
// two replicas) with every token the engine offers, each a token-wait
// router of package router/live, counted from ground truth (the rows the
// database returned) by the checks every lab run has. The schedule is
// two events: the replicas held back (EvHoldBack: MySQL and MariaDB every
// replica's applier stopped; PostgreSQL replica1's WAL receiver cut,
// since pg_promote replays everything a standby received), then the
// primary killed and replica1 promoted without draining, the others
// repointed and every router told (EvFailover); the workload runs on
// against the new primary.

// EngineToken is one token an engine offers.
type EngineToken string

const (
	// TokMySQLGTID: a MySQL GTID set (live.MySQL).
	TokMySQLGTID EngineToken = "gtid-set"
	// TokMySQLGTIDEpoch: a GTID set with the topology epoch (CheckEpoch).
	TokMySQLGTIDEpoch EngineToken = "gtid-set+epoch"
	// TokMySQLScalar: MySQL's transaction count compared by value
	// (live.Scalar), the LSN-like token on MySQL.
	TokMySQLScalar EngineToken = "scalar"
	// TokMariaDBGTID: a MariaDB GTID position (live.MariaDB).
	TokMariaDBGTID EngineToken = "gtid-position"
	// TokMariaDBGTIDEpoch: a MariaDB GTID position with the epoch.
	TokMariaDBGTIDEpoch EngineToken = "gtid-position+epoch"
	// TokPGLSN: a PostgreSQL commit LSN (live.Postgres).
	TokPGLSN EngineToken = "lsn"
	// TokPGLSNEpoch: a commit LSN with the epoch.
	TokPGLSNEpoch EngineToken = "lsn+epoch"
)

// EngineTokens are the tokens each engine offers, in table order.
func EngineTokens(e compose.Engine) []EngineToken {
	switch e {
	case compose.EngineMySQL:
		return []EngineToken{TokMySQLGTID, TokMySQLGTIDEpoch, TokMySQLScalar}
	case compose.EngineMariaDB:
		return []EngineToken{TokMariaDBGTID, TokMariaDBGTIDEpoch}
	case compose.EnginePostgres:
		return []EngineToken{TokPGLSN, TokPGLSNEpoch}
	}
	return nil
}

// SimKind is the simulator's failover-table token kind that models tok
// (sim.Failover's rows): a GTID set never contains a write of a source
// the new timeline lacks; everything compared by number is "scalar".
func (tok EngineToken) SimKind() string {
	switch tok {
	case TokMySQLGTID:
		return "GTID set"
	case TokMySQLGTIDEpoch:
		return "GTID set + epoch"
	}
	return "scalar position (LSN-like)"
}

// EngineFailoverConfig configures RunEngineFailover.
type EngineFailoverConfig struct {
	// Engines to run, one topology each, in order. Required.
	Engines []compose.Engine
	// Backend starts the topologies (local or docker). Required.
	Backend compose.Backend
	// Sessions per token router; default 16.
	Sessions int
	// Duration of the workload on each engine; default 12s.
	Duration time.Duration
	// FailoverAt is when the primary is killed; default Duration/2.
	FailoverAt time.Duration
	// HoldBack is how long before FailoverAt the replicas are held back;
	// default 2s.
	HoldBack time.Duration
	// WaitBudget is the token-wait routers' budget; default 400ms.
	WaitBudget time.Duration
	// ReadTimeout bounds one read or write; default 3s.
	ReadTimeout time.Duration
	// ReadsPerWrite is how many reads of its row a session makes after
	// each write; default 3.
	ReadsPerWrite int
	// GapMin and GapMax bound each session's log-uniform pause before each
	// read and write (as the lab's workload); defaults 15ms and 2s.
	GapMin, GapMax time.Duration
	// PollInterval is the position pollers' interval; default 5ms.
	PollInterval time.Duration
	// HotRows is the number of shared hot rows each write also increments
	// (the driver's monotonic-reads check); default 8.
	HotRows int
	// Seed fixes every session's gaps; default 1.
	Seed uint64
	// RecordHistory keeps every operation (EngineFailoverResult.
	// Histories), for WriteHistoryFiles.
	RecordHistory bool
	// Progress, when set, is told each phase.
	Progress func(engine compose.Engine, phase string)
	// Logger receives detail; default slog.Default().
	Logger *slog.Logger
}

func (c *EngineFailoverConfig) validate() error {
	if len(c.Engines) == 0 {
		return errors.New("lab: engines failover: no engine")
	}
	for _, e := range c.Engines {
		if !slices.Contains(compose.Engines(), e) {
			return fmt.Errorf("lab: engines failover: unknown engine %q (want one of %v)", e, compose.Engines())
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Sessions == 0 {
		c.Sessions = 24
	}
	if c.ReadsPerWrite == 0 {
		c.ReadsPerWrite = 3
	}
	def(&c.Duration, 12*time.Second)
	def(&c.FailoverAt, c.Duration/2)
	def(&c.HoldBack, time.Second)
	def(&c.WaitBudget, 400*time.Millisecond)
	def(&c.ReadTimeout, 3*time.Second)
	def(&c.GapMin, 15*time.Millisecond)
	def(&c.GapMax, 2*time.Second)
	def(&c.PollInterval, 5*time.Millisecond)
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.HotRows == 0 {
		c.HotRows = 8
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Sessions < 1 || c.Sessions > 1000:
		return fmt.Errorf("lab: engines failover: %d sessions per token (want 1..1000)", c.Sessions)
	case c.Duration < 2*time.Second || c.Duration > 10*time.Minute:
		return fmt.Errorf("lab: engines failover: duration %v (want 2s..10m)", c.Duration)
	case c.FailoverAt <= c.HoldBack || c.FailoverAt >= c.Duration:
		return fmt.Errorf("lab: engines failover: failover at %v must come after the hold-back (%v) and before the end (%v)", c.FailoverAt, c.HoldBack, c.Duration)
	case c.ReadsPerWrite < 1 || c.ReadsPerWrite > 100:
		return fmt.Errorf("lab: engines failover: %d reads per write (want 1..100)", c.ReadsPerWrite)
	case c.GapMin <= 0 || c.GapMax < c.GapMin:
		return fmt.Errorf("lab: engines failover: gaps %v..%v (want 0 < min <= max)", c.GapMin, c.GapMax)
	case c.WaitBudget <= 0 || c.ReadTimeout <= c.WaitBudget:
		return fmt.Errorf("lab: engines failover: wait budget %v must be positive and below the read timeout %v", c.WaitBudget, c.ReadTimeout)
	}
	return nil
}

// EngineTokenRow is one engine x token's counts.
type EngineTokenRow struct {
	Engine compose.Engine `json:"engine"`
	Token  EngineToken    `json:"token"`
	// Flavor is the live router flavor's name.
	Flavor string `json:"flavor"`
	// Writes acknowledged, and writes that failed (the primary's death).
	Writes      int64 `json:"writes"`
	WriteErrors int64 `json:"write_errors"`
	// Reads issued; Served of them answered with rows (replica, fallback
	// or primary).
	Reads  int64 `json:"reads"`
	Served int64 `json:"served"`
	// Stale: served without the session's last acknowledged write
	// (silently: the router said it qualified). StaleAfter: of them, those
	// answered once the failover began (the primary's kill); the others
	// were answered while the first primary lived.
	Stale      int64 `json:"stale"`
	StaleAfter int64 `json:"stale_after_failover"`
	// Backwards: served an older value of the session's own row than it
	// had already read (after a failover it includes values the new
	// timeline lost; RouterResult.OwnBackwards). MR is the driver's
	// monotonic-reads count over the hot rows, the hidden losses included.
	Backwards int64 `json:"backwards"`
	MR        int64 `json:"mr"`
	// TimedOut and FailedFast: refused by the router, typed.
	TimedOut   int64 `json:"timed_out"`
	FailedFast int64 `json:"failed_fast"`
	// Errors: reads that failed otherwise (a node error past the retries,
	// the read timeout).
	Errors int64 `json:"errors"`
	// OnReplica and Fallback split Served by where it ran.
	OnReplica int64 `json:"on_replica"`
	Fallback  int64 `json:"fallback"`
	// LostSessions: sessions whose last write acknowledged before the
	// failover the new primary lacked; LostWrites: those writes, summed
	// (RouterResult.FailoverLoss).
	LostSessions int64 `json:"lost_sessions"`
	LostWrites   int64 `json:"lost_writes"`
	// SimKind names the simulator's failover-table row that models it.
	SimKind string `json:"sim_kind"`
}

// EngineFailover is what one engine's failover did.
type EngineFailover struct {
	Engine compose.Engine `json:"engine"`
	// Result is compose's account (lost GTIDs or WAL, repointed, errant).
	Result compose.FailoverResult `json:"result"`
	// Seconds is the engine's whole run (start to teardown).
	Seconds float64 `json:"seconds"`
	// Notes are the driver's notes on the engine's run (its events, what
	// it did not judge).
	Notes []string `json:"notes"`
}

// EngineHistory is one engine's operations (EngineFailoverConfig.
// RecordHistory), as any lab run's (Result.History): the driver's
// sessions, dealt to the token routers in turn.
type EngineHistory struct {
	Engine compose.Engine
	// Sessions is the number of sessions (tokens x sessions per token);
	// HotRows the hot rows.
	Sessions, HotRows int
	Ops               []HistoryOp
}

// EngineFailoverResult is the experiment's answer.
type EngineFailoverResult struct {
	Rows      []EngineTokenRow `json:"rows"`
	Failovers []EngineFailover `json:"failovers"`
	// Histories, with RecordHistory, one per engine.
	Histories []EngineHistory `json:"-"`
	// Config is the configuration run (defaults filled in).
	Sessions               int           `json:"sessions_per_token"`
	ReadsPerWrite          int           `json:"reads_per_write"`
	GapMin                 time.Duration `json:"gap_min_ns"`
	GapMax                 time.Duration `json:"gap_max_ns"`
	DurationSeconds        float64       `json:"duration_seconds"`
	FailoverAtSeconds      float64       `json:"failover_at_seconds"`
	HoldBackSeconds        float64       `json:"hold_back_seconds"`
	WaitBudgetMilliseconds float64       `json:"wait_budget_ms"`
	Seed                   uint64        `json:"seed"`
}

// RunEngineFailover runs the experiment on each engine in turn, starting
// and removing one topology per engine.
func RunEngineFailover(ctx context.Context, cfg EngineFailoverConfig) (*EngineFailoverResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &EngineFailoverResult{Sessions: cfg.Sessions, ReadsPerWrite: cfg.ReadsPerWrite, GapMin: cfg.GapMin, GapMax: cfg.GapMax, DurationSeconds: cfg.Duration.Seconds(), FailoverAtSeconds: cfg.FailoverAt.Seconds(),
		HoldBackSeconds: cfg.HoldBack.Seconds(), WaitBudgetMilliseconds: float64(cfg.WaitBudget) / 1e6, Seed: cfg.Seed}
	for _, e := range cfg.Engines {
		t0 := time.Now()
		progress(cfg, e, "topology start")
		topo, err := compose.Start(ctx, compose.Config{Engine: e, Replicas: 2, Backend: cfg.Backend, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("lab: %s topology: %w", e, err)
		}
		run, runErr := Run(ctx, topo, cfg.engineRun(e))
		progress(cfg, e, "topology down")
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		downErr := topo.Down(dctx)
		cancel()
		if err := errors.Join(runErr, downErr); err != nil {
			return nil, fmt.Errorf("lab: %s: %w", e, err)
		}
		if len(run.Failovers) != 1 {
			return nil, fmt.Errorf("lab: %s: the failover did not happen (%d failovers): %s", e, len(run.Failovers), strings.Join(run.Notes, " "))
		}
		res.Rows = append(res.Rows, engineRows(e, run)...)
		if cfg.RecordHistory {
			res.Histories = append(res.Histories, EngineHistory{Engine: e, Sessions: run.Config.Sessions, HotRows: run.Config.HotRows, Ops: run.History})
		}
		res.Failovers = append(res.Failovers, EngineFailover{Engine: e, Result: run.Failovers[0], Seconds: time.Since(t0).Seconds(), Notes: run.Notes})
	}
	return res, nil
}

func progress(cfg EngineFailoverConfig, e compose.Engine, phase string) {
	if cfg.Progress != nil {
		cfg.Progress(e, phase)
	}
}

// engineRun is the driver's configuration of engine e's run: a
// token-wait router per token, the sessions dealt to them in turn, writes
// offered at the rate the sessions' own pauses allow (each write is
// followed by ReadsPerWrite reads, each after a log-uniform pause in
// GapMin..GapMax), and the two events.
func (c *EngineFailoverConfig) engineRun(e compose.Engine) Config {
	toks := EngineTokens(e)
	routers := make([]RouterSpec, len(toks))
	for i, tok := range toks {
		routers[i] = tok.routerSpec(c.WaitBudget)
	}
	sessions := c.Sessions * len(toks)
	// The mean of a log-uniform pause; a session's cycle is a write and
	// its reads, each after one.
	lo, hi := float64(c.GapMin), float64(c.GapMax)
	meanGap := lo
	if hi > lo {
		meanGap = (hi - lo) / math.Log(hi/lo)
	}
	rate := float64(sessions) / (float64(c.ReadsPerWrite+1) * meanGap / float64(time.Second))
	held := c.FailoverAt - c.HoldBack
	cond := ConditionSpec{Events: []Event{
		// Held until the run ends (a failover repoints the replicas
		// anyway: release then restarts nothing that runs).
		{At: held, Kind: EvHoldBack, For: c.Duration - held},
		{At: c.FailoverAt, Kind: EvFailover, Node: "replica1"},
	}}
	cfg := Config{Engine: e, Sessions: sessions, HotRows: c.HotRows, WriteRate: rate, Duration: c.Duration, ReadsPerWrite: c.ReadsPerWrite,
		GapMin: c.GapMin, GapMax: c.GapMax, Seed: c.Seed, Routers: routers, Condition: cond, PollInterval: c.PollInterval,
		Positions: PositionsPoll, WatermarkSource: WatermarkQuery, ReadTimeout: c.ReadTimeout, RecordHistory: c.RecordHistory, Logger: c.Logger}
	if c.Progress != nil {
		var last Phase
		cfg.Progress = func(p Progress) {
			if p.Phase != last {
				last = p.Phase
				c.Progress(e, string(p.Phase))
			}
		}
	}
	return cfg
}

// routerSpec is tok's token-wait router, named tok.
func (tok EngineToken) routerSpec(budget time.Duration) RouterSpec {
	sp := RouterSpec{Name: string(tok), Policy: router.Policy{Kind: router.PolicyTokenWait, WaitBudget: budget}}
	switch tok {
	case TokMySQLGTIDEpoch, TokMariaDBGTIDEpoch, TokPGLSNEpoch:
		sp.Policy.CheckEpoch = true
	case TokMySQLScalar:
		sp.Token = TokenLSN
	}
	return sp
}

// flavor is the live router flavor tok runs through.
func (tok EngineToken) flavor() string {
	switch tok {
	case TokMySQLScalar:
		return live.Scalar{}.Name()
	case TokMariaDBGTID, TokMariaDBGTIDEpoch:
		return live.MariaDB{}.Name()
	case TokPGLSN, TokPGLSNEpoch:
		return live.Postgres{}.Name()
	}
	return live.MySQL{}.Name()
}

// engineRows are the table's rows of engine e's run, one per token, in
// EngineTokens' order (the driver builds scalar-token routers first).
func engineRows(e compose.Engine, run *Result) []EngineTokenRow {
	var rows []EngineTokenRow
	byName := map[string]RouterResult{}
	for _, r := range run.Routers {
		byName[r.Name] = r
	}
	for _, tok := range EngineTokens(e) {
		r, ok := byName[string(tok)]
		if !ok {
			continue
		}
		o := r.Outcomes
		row := EngineTokenRow{Engine: e, Token: tok, Flavor: tok.flavor(), Writes: r.Writes - r.WriteErrors, WriteErrors: r.WriteErrors,
			Reads: r.Reads, Served: r.Served, Stale: r.RYW, StaleAfter: r.RYWAfterFailover, Backwards: r.OwnBackwards, MR: r.MR,
			TimedOut: o["timed-out"], FailedFast: o["failed-fast"], Errors: o["error"], OnReplica: o["replica"] + o["stale"],
			Fallback: r.Served - o["replica"] - o["stale"], SimKind: tok.SimKind()}
		if l := r.FailoverLoss; l != nil {
			row.LostSessions, row.LostWrites = l.Sessions, l.Writes
		}
		rows = append(rows, row)
	}
	return rows
}

// EngineFailoverTable is the experiment's table, a row per engine x
// token, with what each failover lost in its notes.
func EngineFailoverTable(res *EngineFailoverResult) *sim.Table {
	t := &sim.Table{Name: "failover-engines", Title: "Failover on real engines: what each native token does with a write the new primary lost",
		Columns: []sim.Column{{Key: "engine", Header: "engine"}, {Key: "token", Header: "token"}, {Key: "reads", Header: "reads"},
			{Key: "stale", Header: "served without own write"}, {Key: "stale_after", Header: "of them answered after the kill"},
			{Key: "timed_out", Header: "timed out"}, {Key: "failed_fast", Header: "failed fast"}, {Key: "errors", Header: "errors"},
			{Key: "on_replica", Header: "on a replica"}, {Key: "fallback", Header: "on the primary"},
			{Key: "backwards", Header: "went backwards"}, {Key: "lost_sessions", Header: "sessions whose write was lost"},
			{Key: "sim_kind", Header: "simulator's model"}}}
	for _, r := range res.Rows {
		n := func(v int64) sim.Cell { return sim.N(float64(v)) }
		t.Rows = append(t.Rows, []sim.Cell{sim.L(string(r.Engine)), sim.L(string(r.Token)), n(r.Reads), n(r.Stale), n(r.StaleAfter),
			n(r.TimedOut), n(r.FailedFast), n(r.Errors), n(r.OnReplica), n(r.Fallback), n(r.Backwards), n(r.LostSessions), sim.L(r.SimKind)})
	}
	t.Notes = append(t.Notes, fmt.Sprintf("%d sessions per token, each write (the session's row and a hot row) followed by %d reads of them (pauses log-uniform %v–%v), %.0f s per engine; "+
		"the replicas are held back %.0f s before the primary is killed at %.0f s and replica1 promoted without draining; "+
		"every router token-wait(%gms) over polled positions; seed %d.",
		res.Sessions, res.ReadsPerWrite, res.GapMin, res.GapMax, res.DurationSeconds, res.HoldBackSeconds, res.FailoverAtSeconds, res.WaitBudgetMilliseconds, res.Seed))
	for _, f := range res.Failovers {
		lost := f.Result.LostGTIDs
		if f.Result.LostWAL != "" {
			lost = fmt.Sprintf("WAL %s (%d bytes; new timeline %d from %s)", f.Result.LostWAL, f.Result.LostWALBytes, f.Result.NewTimeline, f.Result.SwitchPoint)
		}
		if lost == "" {
			lost = "nothing"
		}
		t.Notes = append(t.Notes, fmt.Sprintf("%s: new primary %s (epoch %d) lost %s; the engine's run took %.0f s.", f.Engine, f.Result.NewPrimary, f.Result.Epoch, lost, f.Seconds))
	}
	// The compact view (what a terminal shows by default) fits 80
	// columns: the reads served without their own write and the reads
	// refused, per token.
	t.Brief = []sim.BriefColumn{{Key: "engine"}, {Key: "token"}, {Key: "reads"}, {Key: "stale", Header: "stale"},
		{Key: "timed_out"}, {Key: "failed_fast"}, {Key: "errors"}, {Key: "lost_sessions", Header: "lost"}}
	t.BriefNotes = append(slices.Clone(t.Notes), "stale: reads served without the session's own write; lost: sessions whose write "+
		"the failover lost. Left out here (--wide shows them): of them answered after the kill, on a replica, on the primary, "+
		"went backwards, simulator's model.")
	return t
}
