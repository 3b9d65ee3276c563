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
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
	"github.com/causallab/causallab/sim"
)

// The engines failover experiment (`causallab lab failover --engines`):
// the same seeded session workload and fault schedule on each engine's
// real topology (a primary and two replicas), every token the engine
// offers, each a token-wait router of package router/live, counted from
// ground truth (the rows the database returned). The schedule: the
// replicas are held back (MySQL and MariaDB: every replica's applier
// stopped; PostgreSQL: replica1's WAL receiver cut, since pg_promote
// replays everything a standby received), the primary is killed and
// replica1 promoted without draining, the others re-pointed, and every
// router told; the workload runs on against the new primary.

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
	// Backwards: served an older value than the session had already read
	// (a monotonic-reads violation; after a failover it includes values
	// the new timeline lost).
	Backwards int64 `json:"backwards"`
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
	// failover the new primary lacked; LostWrites: those writes, summed.
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
}

// EngineHistory is one engine's operations (EngineFailoverConfig.
// RecordHistory): token router i's session s is session i*Sessions+s, so
// every session of the engine has its own number and its own row; the
// sessions read only their own rows (no hot rows; a write's Hot is -1).
type EngineHistory struct {
	Engine compose.Engine
	// Sessions is the number of session numbers (tokens x sessions).
	Sessions int
	Ops      []HistoryOp
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
		rows, fr, hist, runErr := runEngine(ctx, &cfg, topo)
		progress(cfg, e, "topology down")
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		downErr := topo.Down(dctx)
		cancel()
		if err := errors.Join(runErr, downErr); err != nil {
			return nil, fmt.Errorf("lab: %s: %w", e, err)
		}
		res.Rows = append(res.Rows, rows...)
		if cfg.RecordHistory {
			res.Histories = append(res.Histories, EngineHistory{Engine: e, Sessions: len(EngineTokens(e)) * cfg.Sessions, Ops: hist})
		}
		res.Failovers = append(res.Failovers, EngineFailover{Engine: e, Result: fr, Seconds: time.Since(t0).Seconds()})
	}
	return res, nil
}

func progress(cfg EngineFailoverConfig, e compose.Engine, phase string) {
	if cfg.Progress != nil {
		cfg.Progress(e, phase)
	}
}

// efRouter is one token's router on one engine, as the workload uses it.
type efRouter interface {
	// writeRow sets row's v on the primary through session sess
	// (tokened); the failover's sessions each write their own row.
	writeRow(ctx context.Context, sess, row int, v int64) error
	// readRow reads row's v through session sess: v (-1 when no row), the
	// router's outcome and its decision's reason; a *live.ReadError when
	// refused.
	readRow(ctx context.Context, sess, row int) (v int64, out router.Outcome, why router.Reason, err error)
	// prepare reads what the router's failover needs from the new primary
	// before any router is told (its epoch base: once one router is told,
	// its sessions write there); failover then tells the router about the
	// new primary (fr: what compose did, its epoch and, on PostgreSQL, the
	// new timeline's switch point).
	prepare(ctx context.Context, primary compose.Node) error
	failover(ctx context.Context, primary compose.Node, replicas []compose.Node, fr compose.FailoverResult) error
	flavor() string
	close()
}

// efTable is the table of token router i: one row per session.
func efTable(e compose.Engine, i int) string {
	if e == compose.EnginePostgres {
		return fmt.Sprintf("public.ef%d", i)
	}
	return fmt.Sprintf("ef.t%d", i)
}

// runEngine runs the workload and the failover on one topology; the
// history is every operation, with cfg.RecordHistory.
func runEngine(ctx context.Context, cfg *EngineFailoverConfig, topo *compose.Topology) ([]EngineTokenRow, compose.FailoverResult, []HistoryOp, error) {
	e := topo.Engine()
	toks := EngineTokens(e)
	var fr compose.FailoverResult
	progress(*cfg, e, "set-up")
	if err := efSetup(ctx, topo, len(toks), cfg.Sessions); err != nil {
		return nil, fr, nil, err
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		return nil, fr, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	routers := make([]efRouter, len(toks))
	defer func() {
		for _, r := range routers {
			if r != nil {
				r.close()
			}
		}
	}()
	for i, tok := range toks {
		r, err := newEFRouter(rctx, cfg, topo, tok, efTable(e, i), &bg)
		if err != nil {
			return nil, fr, nil, fmt.Errorf("token %s: %w", tok, err)
		}
		routers[i] = r
	}
	rows := make([]EngineTokenRow, len(toks))
	acked := make([][]atomic.Int64, len(toks))
	for i := range acked {
		acked[i] = make([]atomic.Int64, cfg.Sessions)
	}
	var failedOver atomic.Bool
	start := time.Now()
	truth, err := newOwnRows(len(toks)*cfg.Sessions, start, cfg.RecordHistory)
	if err != nil {
		return nil, fr, nil, err
	}
	end := start.Add(cfg.Duration)
	progress(*cfg, e, "workload")
	var wg sync.WaitGroup
	var counters = make([]efCounters, len(toks))
	for i, tok := range toks {
		for s := range cfg.Sessions {
			es := efSession{r: routers[i], tok: tok, sess: s, id: i*cfg.Sessions + s, acked: &acked[i][s], c: &counters[i], truth: truth, failedOver: &failedOver}
			wg.Go(func() { es.run(rctx, cfg, end, uint64(i)<<32|uint64(s)) })
		}
	}
	faultErr := efFaults(rctx, cfg, topo, routers, acked, rows, start, &failedOver, &fr)
	wg.Wait()
	if faultErr != nil {
		return nil, fr, nil, faultErr
	}
	for i, tok := range toks {
		c := &counters[i]
		rows[i] = EngineTokenRow{Engine: e, Token: tok, Flavor: routers[i].flavor(), Writes: c.writes.Load(), WriteErrors: c.writeErrs.Load(),
			Reads: c.reads.Load(), Served: c.served.Load(), Stale: c.stale.Load(), StaleAfter: c.staleAfter.Load(), Backwards: c.backwards.Load(),
			TimedOut: c.timedOut.Load(), FailedFast: c.failedFast.Load(), Errors: c.errors.Load(), OnReplica: c.onReplica.Load(),
			Fallback: c.fallback.Load(), LostSessions: rows[i].LostSessions, LostWrites: rows[i].LostWrites, SimKind: tok.SimKind()}
	}
	return rows, fr, truth.history, nil
}

// efFaults plays the fault schedule: the hold-back, then the kill and
// promotion, every router told, the losses counted into rows (fr: what
// compose did).
func efFaults(ctx context.Context, cfg *EngineFailoverConfig, topo *compose.Topology, routers []efRouter, acked [][]atomic.Int64, rows []EngineTokenRow,
	start time.Time, failedOver *atomic.Bool, fr *compose.FailoverResult) error {
	e := topo.Engine()
	if !sleepUntil(ctx, start.Add(cfg.FailoverAt-cfg.HoldBack)) {
		return nil
	}
	progress(*cfg, e, "hold back")
	if err := holdBack(ctx, topo); err != nil {
		return err
	}
	if !sleepUntil(ctx, start.Add(cfg.FailoverAt)) {
		return nil
	}
	progress(*cfg, e, "failover")
	failedOver.Store(true) // the kill is the failover's first step
	err := topo.Kill(ctx, topo.Primary().Name)
	if err == nil {
		*fr, err = topo.Failover(ctx, "replica1")
	}
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	snap := make([][]int64, len(routers))
	for i := range routers {
		snap[i] = make([]int64, cfg.Sessions)
		for s := range cfg.Sessions {
			snap[i][s] = acked[i][s].Load()
		}
	}
	var errs []error
	for _, r := range routers {
		errs = append(errs, r.prepare(ctx, topo.Primary()))
	}
	for i, r := range routers {
		errs = append(errs, r.failover(ctx, topo.Primary(), topo.Replicas(), *fr))
		lostS, lostW, err := efLost(ctx, topo, efTable(e, i), snap[i])
		rows[i].LostSessions, rows[i].LostWrites = lostS, lostW
		errs = append(errs, err)
	}
	errs = append(errs, release(ctx, topo))
	return errors.Join(errs...)
}

// efCounters are one token router's running counts.
type efCounters struct {
	writes, writeErrs, reads, served, stale, staleAfter, backwards atomic.Int64
	timedOut, failedFast, errors, onReplica, fallback              atomic.Int64
}

// efSession is one session of one token router.
type efSession struct {
	r   efRouter
	tok EngineToken
	// sess is its index within the router (its row), id its number in
	// the engine's run (truth, EngineHistory).
	sess, id int
	// acked is the value of its last acknowledged write.
	acked *atomic.Int64
	c     *efCounters
	// truth judges and records its operations; failedOver is set at the
	// primary's kill.
	truth      *ownRows
	failedOver *atomic.Bool
}

// run is the session: pause, write v, then ReadsPerWrite times pause and
// read its row, until end.
func (es *efSession) run(ctx context.Context, cfg *EngineFailoverConfig, end time.Time, seed uint64) {
	rng := rand.New(rand.NewPCG(cfg.Seed, seed))
	lo, hi := math.Log(float64(cfg.GapMin)), math.Log(float64(cfg.GapMax))
	gap := func() time.Duration { return time.Duration(math.Exp(lo + rng.Float64()*(hi-lo))) }
	var v int64
	for ctx.Err() == nil {
		if !sleepCtx(ctx, gap()) || !time.Now().Before(end) {
			return
		}
		v++
		t0 := time.Now()
		wctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
		err := es.r.writeRow(wctx, es.sess, es.sess, v)
		cancel()
		if err != nil && ctx.Err() != nil {
			return
		}
		es.truth.write(string(es.tok), es.id, v, t0, err)
		if err != nil {
			es.c.writeErrs.Add(1)
		} else {
			es.c.writes.Add(1)
			es.acked.Store(v)
		}
		for range cfg.ReadsPerWrite {
			if !sleepCtx(ctx, gap()) {
				return
			}
			if err := es.read(ctx, cfg); err != nil {
				cfg.Logger.Error("lab: engines failover: a read the checker could not judge", "token", es.tok, "err", err)
				return
			}
		}
	}
}

// read is one read of the session's row, judged by the checker against
// the session's last acknowledged value (RYW: stale) and what it read
// before (OwnBackwards: went backwards). A stale read is counted "after"
// when it was answered once the failover had begun, whenever issued: a
// read issued before the kill may wait, retry and be served by the new
// timeline.
func (es *efSession) read(ctx context.Context, cfg *EngineFailoverConfig) error {
	want, t0 := es.acked.Load(), time.Now()
	rctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
	got, out, _, err := es.r.readRow(rctx, es.sess, es.sess)
	after := es.failedOver.Load()
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	c := es.c
	c.reads.Add(1)
	var re *live.ReadError
	switch {
	case errors.As(err, &re) && re.Outcome == router.OutTimedOut:
		c.timedOut.Add(1)
		out = router.OutTimedOut
	case errors.As(err, &re):
		c.failedFast.Add(1)
		out = re.Outcome
	case err != nil:
		c.errors.Add(1)
		out = router.OutError
	}
	v, cerr := es.truth.read(string(es.tok), &Read{Session: es.id, AckedSeq: want, Own: got, Outcome: out}, t0)
	if cerr != nil || err != nil {
		return cerr
	}
	c.served.Add(1)
	if out == router.OutReplica || out == router.OutStale {
		c.onReplica.Add(1)
	} else {
		c.fallback.Add(1)
	}
	if v.RYW {
		c.stale.Add(1)
		if after {
			c.staleAfter.Add(1)
		}
	}
	if v.OwnBackwards {
		c.backwards.Add(1)
	}
	return nil
}

func sleepUntil(ctx context.Context, at time.Time) bool { return sleepCtx(ctx, time.Until(at)) }

// holdBack keeps the replicas from applying what the primary writes next:
// MySQL and MariaDB stop every replica's applier (compose's failover
// does not drain a stopped applier); PostgreSQL stops replica1's WAL
// receiver (pg_promote replays all a standby received), on either backend
// (StopReceiver: the standby stays reachable, unlike a docker partition).
func holdBack(ctx context.Context, topo *compose.Topology) error {
	if topo.Engine() == compose.EnginePostgres {
		return topo.StopReceiver(ctx, "replica1")
	}
	for _, r := range topo.Replicas() {
		if err := topo.StopApplier(ctx, r.Name); err != nil {
			return err
		}
	}
	return nil
}

// release undoes holdBack on the nodes still replicas (a promoted
// replica1 receives from no one; the failover repointed the others).
func release(ctx context.Context, topo *compose.Topology) error {
	var errs []error
	for _, r := range topo.Replicas() {
		switch {
		case topo.Engine() != compose.EnginePostgres:
			errs = append(errs, topo.StartApplier(ctx, r.Name))
		case r.Name == "replica1":
			errs = append(errs, topo.StartReceiver(ctx, r.Name))
		}
	}
	return errors.Join(errs...)
}

// efSetup creates one table per token router with a row per session.
func efSetup(ctx context.Context, topo *compose.Topology, routers, sessions int) error {
	db, err := topo.DB(topo.Primary().Name)
	if err != nil {
		return err
	}
	pg := topo.Engine() == compose.EnginePostgres
	if !pg {
		if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS ef"); err != nil {
			return err
		}
	}
	for i := range routers {
		t := efTable(topo.Engine(), i)
		var vals []string
		for s := range sessions {
			vals = append(vals, fmt.Sprintf("(%d, 0)", s))
		}
		for _, q := range []string{"DROP TABLE IF EXISTS " + t, "CREATE TABLE " + t + " (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)",
			"INSERT INTO " + t + " VALUES " + strings.Join(vals, ",")} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
	}
	return nil
}

// efLost compares the sessions' acknowledged values with the new
// primary's rows.
func efLost(ctx context.Context, topo *compose.Topology, table string, acked []int64) (sessions, writes int64, err error) {
	db, err := topo.DB(topo.Primary().Name)
	if err != nil {
		return 0, 0, err
	}
	rows, err := db.QueryContext(ctx, "SELECT id, v FROM "+table)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	has := make([]int64, len(acked))
	for rows.Next() {
		var id, v int64
		if err := rows.Scan(&id, &v); err != nil {
			return 0, 0, err
		}
		if id >= 0 && id < int64(len(has)) {
			has[id] = v
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	for s, a := range acked {
		if a > has[s] {
			sessions++
			writes += a - has[s]
		}
	}
	return sessions, writes, nil
}

// newEFRouter builds tok's token-wait router over its own position poller
// (run on bg until ctx ends).
func newEFRouter(ctx context.Context, cfg *EngineFailoverConfig, topo *compose.Topology, tok EngineToken, table string, bg *sync.WaitGroup) (efRouter, error) {
	pol := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: cfg.WaitBudget}
	switch tok {
	case TokMySQLGTIDEpoch, TokMariaDBGTIDEpoch, TokPGLSNEpoch:
		pol.CheckEpoch = true
	}
	return newTokenRouter(ctx, cfg, topo, tok, pol, table, bg)
}

// newTokenRouter builds a router of tok's flavor with policy pol (the
// sessions' default), cfg.Sessions sessions, over its own position poller
// (cfg.PollInterval; run on bg until ctx ends). lab gated --engine builds
// its naive and gated routers with it too.
func newTokenRouter(ctx context.Context, cfg *EngineFailoverConfig, topo *compose.Topology, tok EngineToken, pol router.Policy, table string, bg *sync.WaitGroup) (efRouter, error) {
	switch tok {
	case TokMySQLGTID, TokMySQLGTIDEpoch:
		return newEFMySQL[gtid.Set](ctx, cfg, topo, live.MySQL{}, pol, table, bg)
	case TokMySQLScalar:
		return newEFMySQL[gtid.LSN](ctx, cfg, topo, live.Scalar{}, pol, table, bg)
	case TokMariaDBGTID, TokMariaDBGTIDEpoch:
		return newEFMySQL[gtid.MariaDBPosition](ctx, cfg, topo, live.MariaDB{}, pol, table, bg)
	case TokPGLSN, TokPGLSNEpoch:
		return newEFPG(ctx, cfg, topo, pol, table, bg)
	}
	return nil, fmt.Errorf("unknown token %q", tok)
}

func efNodes(topo *compose.Topology) (live.Node, []live.Node, []live.Node) {
	p := routerNode(topo.Primary())
	var reps []live.Node
	for _, r := range topo.Replicas() {
		reps = append(reps, routerNode(r))
	}
	return p, reps, append([]live.Node{p}, reps...)
}

// runPoller runs pl on bg until ctx ends and waits until every node
// answered once (or 10 s passed).
func runPoller[P gtid.Position[P]](ctx context.Context, pl *live.Poller[P], names []string, bg *sync.WaitGroup) error {
	bg.Add(1)
	go func() {
		defer bg.Done()
		_ = pl.Run(ctx) // returns once ctx ends; health is in the positions
	}()
	return waitHealthy(ctx, pl, names, 10*time.Second)
}

func nodeNames(ns []live.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

// efMySQL is a token router on the MySQL protocol (MySQL, MariaDB).
type efMySQL[P gtid.Position[P]] struct {
	rt    *live.Router[P]
	fname string
	table string
	sess  []*live.LiveSession[P]
	// base is the new primary's position read by prepare, before any
	// router was told of the failover (the epoch's base).
	base    P
	hasBase bool
}

func newEFMySQL[P gtid.Position[P]](ctx context.Context, cfg *EngineFailoverConfig, topo *compose.Topology, f live.Flavor[P], pol router.Policy, table string, bg *sync.WaitGroup) (*efMySQL[P], error) {
	p, reps, all := efNodes(topo)
	u := topo.Primary()
	pl, err := live.NewPoller(live.PollerConfig[P]{Flavor: f, Nodes: all, User: u.User, Password: u.Password, Interval: cfg.PollInterval, Logger: topo.FaultLogger(cfg.Logger)})
	if err != nil {
		return nil, err
	}
	if err := runPoller(ctx, pl, nodeNames(all), bg); err != nil {
		return nil, err
	}
	rt, err := live.New(ctx, live.Config[P]{Flavor: f, Primary: p, Replicas: reps, User: u.User, Password: u.Password, Policy: pol,
		Positions: pl, Epoch: topo.Epoch(), PrimaryPool: cfg.Sessions, MaxIdle: cfg.Sessions, Logger: topo.FaultLogger(cfg.Logger), Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	m := &efMySQL[P]{rt: rt, fname: f.Name(), table: table, sess: make([]*live.LiveSession[P], cfg.Sessions)}
	for i := range m.sess {
		m.sess[i] = rt.NewSession()
	}
	return m, nil
}

func (m *efMySQL[P]) writeRow(ctx context.Context, sess, row int, v int64) error {
	_, err := m.sess[sess].Exec(ctx, "UPDATE "+m.table+" SET v = ? WHERE id = ?", v, row)
	return err
}

func (m *efMySQL[P]) readRow(ctx context.Context, sess, row int) (int64, router.Outcome, router.Reason, error) {
	rd, err := m.sess[sess].Query(ctx, "SELECT v FROM "+m.table+" WHERE id = ?", row)
	if err != nil {
		return 0, router.OutError, 0, err
	}
	if rd.Result == nil || rd.Result.RowNumber() == 0 {
		return -1, rd.Outcome, rd.Reason, nil
	}
	v, err := rd.Result.GetInt(0, 0)
	return v, rd.Outcome, rd.Reason, err
}

func (m *efMySQL[P]) prepare(ctx context.Context, primary compose.Node) error {
	base, err := m.rt.ReadPosition(ctx, routerNode(primary))
	if err != nil {
		return fmt.Errorf("lab: the new primary's position: %w", err)
	}
	m.base, m.hasBase = base, true
	return nil
}

func (m *efMySQL[P]) failover(ctx context.Context, primary compose.Node, replicas []compose.Node, fr compose.FailoverResult) error {
	var reps []live.Node
	for _, r := range replicas {
		reps = append(reps, routerNode(r))
	}
	if !m.hasBase {
		return errors.New("lab: failover before prepare")
	}
	return m.rt.FailoverAt(routerNode(primary), reps, fr.Epoch, m.base)
}

func (m *efMySQL[P]) flavor() string { return m.fname }

func (m *efMySQL[P]) close() {
	for _, s := range m.sess {
		s.Close()
	}
	m.rt.Close()
}

// efPG is a token router on PostgreSQL (live.PGRouter).
type efPG struct {
	rt    *live.PGRouter
	table string
	sess  []*live.PGSession
}

func newEFPG(ctx context.Context, cfg *EngineFailoverConfig, topo *compose.Topology, pol router.Policy, table string, bg *sync.WaitGroup) (*efPG, error) {
	p, reps, all := efNodes(topo)
	u := topo.Primary()
	pl, err := live.NewPGPoller(live.PollerConfig[gtid.PGLSN]{Nodes: all, User: u.User, Password: u.Password, Interval: cfg.PollInterval,
		Primary: p.Name, Logger: topo.FaultLogger(cfg.Logger)}, "")
	if err != nil {
		return nil, err
	}
	if err := runPoller(ctx, pl, nodeNames(all), bg); err != nil {
		return nil, err
	}
	rt, err := live.NewPG(ctx, live.PGConfig{Primary: p, Replicas: reps, User: u.User, Password: u.Password, Policy: pol, Positions: pl,
		Epoch: topo.Epoch(), StatementTimeout: cfg.ReadTimeout, MaxConns: int32(max(cfg.Sessions/2, 4)), Logger: topo.FaultLogger(cfg.Logger), Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	g := &efPG{rt: rt, table: table, sess: make([]*live.PGSession, cfg.Sessions)}
	for i := range g.sess {
		g.sess[i] = rt.NewSession()
	}
	return g, nil
}

func (g *efPG) writeRow(ctx context.Context, sess, row int, v int64) error {
	_, _, err := g.sess[sess].Exec(ctx, "UPDATE "+g.table+" SET v = $1 WHERE id = $2", v, row)
	return err
}

func (g *efPG) readRow(ctx context.Context, sess, row int) (int64, router.Outcome, router.Reason, error) {
	rd, err := g.sess[sess].Query(ctx, "SELECT v FROM "+g.table+" WHERE id = $1", row)
	if err != nil {
		return 0, router.OutError, 0, err
	}
	if len(rd.Rows) == 0 {
		return -1, rd.Outcome, rd.Reason, nil
	}
	v, ok := rd.Rows[0][0].(int64)
	if !ok {
		return 0, rd.Outcome, rd.Reason, fmt.Errorf("lab: %s: v is %T", g.table, rd.Rows[0][0])
	}
	return v, rd.Outcome, rd.Reason, nil
}

// prepare: the PostgreSQL routers' base is the switch point compose
// reports (or, without one, the position Failover reads).
func (g *efPG) prepare(context.Context, compose.Node) error { return nil }

func (g *efPG) failover(ctx context.Context, primary compose.Node, replicas []compose.Node, fr compose.FailoverResult) error {
	var reps []live.Node
	for _, r := range replicas {
		reps = append(reps, routerNode(r))
	}
	if fr.SwitchPoint == "" {
		// No fork point reported: the base is the new primary's position
		// read after the promotion, which includes the promotion's own
		// WAL (a lost LSN inside it would pass rule 1).
		return g.rt.Failover(ctx, routerNode(primary), reps, fr.Epoch)
	}
	sw, err := gtid.ParsePGLSN(fr.SwitchPoint)
	if err != nil {
		return fmt.Errorf("lab: the failover's switch point: %w", err)
	}
	return g.rt.FailoverAt(ctx, routerNode(primary), reps, fr.Epoch, sw)
}

func (g *efPG) flavor() string { return live.Postgres{}.Name() }

func (g *efPG) close() { g.rt.Close() }

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
	t.Notes = append(t.Notes, fmt.Sprintf("%d sessions per token, each writing its own row then reading it back %d times (pauses log-uniform %v–%v), %.0f s per engine; "+
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
