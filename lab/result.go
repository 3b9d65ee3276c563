package lab

import (
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

// Result is one experiment's measurement. Its JSON form is documented in
// docs/lab.md.
type Result struct {
	// Experiment names the experiment (routers, gated, failover, hash, chaos).
	Experiment string `json:"experiment"`
	// Condition is the lag condition ("straggler+heavy").
	Condition string `json:"condition"`
	// Mode is concurrent or sequential.
	Mode string `json:"mode"`
	// Via is the routing path: router (package router/live, the default)
	// or proxy (causallab proxy in-process). Scalar-token routers run
	// through router/live whatever the path (a note says so).
	Via string `json:"via"`
	// Config echoes the workload parameters.
	Config ConfigSummary `json:"config"`
	// OfferedWrites is the number of writes in the seeded schedule.
	OfferedWrites int `json:"offered_writes"`
	// Lag is the replication lag achieved, measured from the lab's writes.
	Lag LagStats `json:"lag"`
	// Spread is how far apart the replicas are: per write seen applied on
	// every replica, the time from the first to the last replica's first
	// poll holding it.
	Spread SpreadStats `json:"spread"`
	// HeavyHoldsMs is, per heavy transaction and per replica, how long
	// after its commit on the primary the replica applied the first write
	// acknowledged after it (ms): whether heavy transactions hold the
	// replicas together or one after the other.
	HeavyHoldsMs [][]float64 `json:"heavy_holds_ms,omitempty"`
	// Routers holds one row per router.
	Routers []RouterResult `json:"routers"`
	// History is every operation of the run (Config.RecordHistory; nil
	// otherwise), for checkers outside the driver (CheckLinearizable).
	History []HistoryOp `json:"-"`
	// MeasureSeconds is the wall time of the measurement phases.
	MeasureSeconds float64 `json:"measure_seconds"`
	// ElapsedSeconds includes setup and catch-up waits.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// ReadsPerSec is reads (all routers) per measured second.
	ReadsPerSec float64 `json:"reads_per_sec"`
	// Polls and PollErrors count position polls.
	Polls      int64 `json:"polls"`
	PollErrors int64 `json:"poll_errors"`
	// Stalls, HeavyTxns and FaultErrors count what the condition did.
	Stalls    int64 `json:"stalls"`
	HeavyTxns int64 `json:"heavy_txns"`
	// RowLocks counts the row-lock condition's locks held on a replica.
	RowLocks    int64 `json:"row_locks"`
	FaultErrors int64 `json:"fault_errors"`
	// HeavyMeanMs is the mean primary time of the heavy transactions.
	HeavyMeanMs float64 `json:"heavy_mean_ms,omitempty"`
	// SimModel describes the replica model the prediction used.
	SimModel string `json:"sim_model,omitempty"`
	// SimTables are the simulator's own tables for the experiment (failover).
	SimTables []*sim.Table `json:"sim_tables,omitempty"`
	// Failovers are the failovers the run's events performed.
	Failovers []compose.FailoverResult `json:"failovers,omitempty"`
	// Faults are the windows nodes were down (kills until restarted,
	// pauses until resumed), in run time.
	Faults []FaultWindow `json:"faults,omitempty"`
	// ReplicaLag is the achieved lag per replica.
	ReplicaLag []ReplicaLag `json:"replica_lag,omitempty"`
	// Weights are the replicas' hashing weights (affinity routers).
	Weights []int `json:"weights,omitempty"`
	// Notes are experiment-specific remarks (e.g. the failover's lost GTIDs).
	Notes []string `json:"notes,omitempty"`

	// lagSamples and lagUnseen are what Lag was computed from (Merge
	// recomputes it); a Result read back from JSON has none.
	lagSamples []time.Duration
	lagUnseen  int
}

// Merge adds o, a later part of the same experiment (Run's sequential
// groups), to r. Routers, notes, failovers and simulator tables append;
// counts and measured and elapsed seconds add; ReadsPerSec is recomputed
// over the sum. The lag is recomputed over both parts' samples when both
// carry them (results of Run in this process); otherwise the mean is
// weighted by sample count and each quantile is the larger of the two (an
// upper bound). HeavyMeanMs is weighted by HeavyTxns. r keeps its identity
// (experiment, condition, mode, via, config, offered writes), taken from o
// where r has none.
func (r *Result) Merge(o *Result) {
	r.History = append(r.History, o.History...)
	if r.Experiment == "" {
		r.Experiment = o.Experiment
	}
	if r.Condition == "" {
		r.Condition = o.Condition
	}
	if r.Mode == "" {
		r.Mode = o.Mode
	}
	if r.Via == "" {
		r.Via = o.Via
	}
	if r.Config == (ConfigSummary{}) {
		r.Config = o.Config
	}
	if r.OfferedWrites == 0 {
		r.OfferedWrites = o.OfferedWrites
	}
	if r.SimModel == "" {
		r.SimModel = o.SimModel
	}
	exact := (r.Lag.Samples == 0 || len(r.lagSamples) == r.Lag.Samples) && (o.Lag.Samples == 0 || len(o.lagSamples) == o.Lag.Samples)
	if exact {
		r.lagSamples = append(r.lagSamples, o.lagSamples...)
		r.lagUnseen += o.lagUnseen
		r.Lag = lagStats(r.lagSamples, r.lagUnseen)
	} else {
		a, b := r.Lag, o.Lag
		n := a.Samples + b.Samples
		m := LagStats{Samples: n, Unseen: a.Unseen + b.Unseen, P10Ms: max(a.P10Ms, b.P10Ms), P50Ms: max(a.P50Ms, b.P50Ms),
			P99Ms: max(a.P99Ms, b.P99Ms), MaxMs: max(a.MaxMs, b.MaxMs)}
		if n > 0 {
			m.MeanMs = (a.MeanMs*float64(a.Samples) + b.MeanMs*float64(b.Samples)) / float64(n)
		}
		r.Lag, r.lagSamples, r.lagUnseen = m, nil, 0
	}
	r.Spread = mergeSpread(r.Spread, o.Spread)
	r.HeavyHoldsMs = append(r.HeavyHoldsMs, o.HeavyHoldsMs...)
	if h := r.HeavyTxns + o.HeavyTxns; h > 0 {
		r.HeavyMeanMs = (r.HeavyMeanMs*float64(r.HeavyTxns) + o.HeavyMeanMs*float64(o.HeavyTxns)) / float64(h)
	}
	r.Routers = append(r.Routers, o.Routers...)
	r.MeasureSeconds += o.MeasureSeconds
	r.ElapsedSeconds += o.ElapsedSeconds
	r.Polls += o.Polls
	r.PollErrors += o.PollErrors
	r.Stalls += o.Stalls
	r.RowLocks += o.RowLocks
	r.HeavyTxns += o.HeavyTxns
	r.FaultErrors += o.FaultErrors
	r.SimTables = append(r.SimTables, o.SimTables...)
	r.Failovers = append(r.Failovers, o.Failovers...)
	r.Faults = append(r.Faults, o.Faults...)
	if len(r.ReplicaLag) == 0 {
		r.ReplicaLag = o.ReplicaLag
	}
	if len(r.Weights) == 0 {
		r.Weights = o.Weights
	}
	r.Notes = append(r.Notes, o.Notes...)
	r.ReadsPerSec = 0
	if r.MeasureSeconds > 0 {
		var reads int64
		for _, rr := range r.Routers {
			reads += rr.Reads
		}
		r.ReadsPerSec = float64(reads) / r.MeasureSeconds
	}
}

// ConfigSummary is the part of Config a reader needs to reproduce a run.
type ConfigSummary struct {
	// Engine is the servers' engine (Config.Engine).
	Engine        string  `json:"engine"`
	Sessions      int     `json:"sessions"`
	HotRows       int     `json:"hot_rows"`
	WriteRate     float64 `json:"write_rate"`
	DurationSec   float64 `json:"duration_sec"`
	ReadsPerWrite int     `json:"reads_per_write"`
	GapMinMs      float64 `json:"gap_min_ms"`
	GapMaxMs      float64 `json:"gap_max_ms"`
	Seed          uint64  `json:"seed"`
	Workers       int     `json:"workers"`
	PollMs        float64 `json:"poll_ms"`
	// GlobalSource is the global routers' target source (live.GlobalSource
	// name); empty when no router is global.
	GlobalSource string `json:"global_source,omitempty"`
	// Positions and WatermarkSource are the GTID-set routers' position
	// source and monotonic-reads watermark (Config's; empty in a result
	// written before they existed: binlog and query).
	Positions       string `json:"positions,omitempty"`
	WatermarkSource string `json:"watermark_source,omitempty"`
}

func summarize(c *Config) ConfigSummary {
	s := ConfigSummary{Engine: string(c.Engine), Sessions: c.Sessions, HotRows: c.HotRows, WriteRate: c.WriteRate,
		DurationSec: c.Duration.Seconds(), ReadsPerWrite: c.ReadsPerWrite,
		GapMinMs: ms(c.GapMin), GapMaxMs: ms(c.GapMax), Seed: c.Seed, Workers: c.Workers, PollMs: ms(c.PollInterval),
		Positions: string(c.Positions), WatermarkSource: string(c.WatermarkSource)}
	for _, r := range c.Routers {
		if r.Policy.Kind == router.PolicyGlobal {
			s.GlobalSource = c.GlobalSource.String()
		}
	}
	return s
}

// LagStats is the achieved replication lag over every (write, replica).
type LagStats struct {
	MeanMs float64 `json:"mean_ms"`
	P10Ms  float64 `json:"p10_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	// Samples is the number of (write, replica) pairs measured.
	Samples int `json:"samples"`
	// Unseen is the number of (write, replica) pairs never seen applied.
	Unseen int `json:"unseen"`
}

func lagStats(l []time.Duration, unseen int) LagStats {
	s := LagStats{Samples: len(l), Unseen: unseen}
	if len(l) == 0 {
		return s
	}
	l = sortedDurations(l)
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	s.MeanMs = ms(sum) / float64(len(l))
	s.P10Ms = ms(quantile(l, 0.1))
	s.P50Ms = ms(quantile(l, 0.5))
	s.P99Ms = ms(quantile(l, 0.99))
	s.MaxMs = ms(l[len(l)-1])
	return s
}

// RouterResult is one router's row.
type RouterResult struct {
	Name   string `json:"name"`
	Policy string `json:"policy"`
	Token  string `json:"token"`
	// Reads is every read issued; Served those that returned rows.
	Reads  int64 `json:"reads"`
	Served int64 `json:"served"`
	// RYW and MR are violation counts (ground truth); the Pct fields are
	// per served read, in percent.
	RYW    int64   `json:"ryw"`
	MR     int64   `json:"mr"`
	RYWPct float64 `json:"ryw_pct"`
	MRPct  float64 `json:"mr_pct"`
	// AllWrites counts served reads that lacked a write acknowledged to
	// any session before they were issued (read-all-writes, the guarantee
	// of the global policy; includes the RYW violations); AllWritesPct is
	// per served read.
	AllWrites    int64   `json:"all_writes"`
	AllWritesPct float64 `json:"all_writes_pct"`
	// Outcomes counts reads by outcome (router.Outcome names: replica,
	// fallback, primary, stale, proxied, failed-fast, timed-out, error,
	// deferred); they sum to Reads.
	Outcomes map[string]int64 `json:"outcomes"`
	// PrimaryPct is the share of served reads served by the primary.
	PrimaryPct float64 `json:"primary_pct"`
	// Fallbacks counts freshness fallbacks to the primary.
	Fallbacks int64 `json:"fallbacks"`
	// Worst100msPct is the largest share of reads on the primary in any
	// 100 ms bin (bins with at least 5 reads).
	Worst100msPct float64 `json:"worst_100ms_pct"`
	// PeakPrimaryPerSec is the largest primary read rate over a 100 ms bin.
	PeakPrimaryPerSec float64 `json:"peak_primary_per_sec"`
	// Latency of served reads (issue to answer, waits included).
	LatMeanMs float64 `json:"lat_mean_ms"`
	LatP50Ms  float64 `json:"lat_p50_ms"`
	LatP99Ms  float64 `json:"lat_p99_ms"`
	// Waited counts reads that waited for a replica.
	Waited int64 `json:"waited"`
	// StaleServed counts reads served labelled stale by the cap.
	StaleServed int64 `json:"stale_served"`
	// Writes, WriteErrors and write latency.
	Writes        int64   `json:"writes"`
	WriteErrors   int64   `json:"write_errors"`
	WriteLatMeanM float64 `json:"write_lat_mean_ms"`
	WriteLatP99M  float64 `json:"write_lat_p99_ms"`
	// WritesNoGTID counts writes acknowledged without a tracked GTID (a
	// misconfiguration; the token could not protect them).
	WritesNoGTID int64 `json:"writes_no_gtid"`
	// ObserveErrors counts reads whose watermark query failed (reported as
	// error outcomes).
	ObserveErrors int64 `json:"observe_errors"`
	// DeclaredLosses counts reads failed because what the session had seen
	// was lost in a failover (the checker restarts its watermark).
	DeclaredLosses int64 `json:"declared_losses"`
	// Reconnects counts served reads on another connection than their
	// session's previous served read: under --via proxy, after the lab's
	// connection to the proxy broke (a statement past Config.ReadTimeout).
	// The proxy keeps monotonic reads per connection, so each starts the
	// session's guarantee afresh; MRAcrossReconnect counts those that
	// showed a hot row older than the session's earlier connection had
	// (the session's user saw the world go back; not in MR).
	Reconnects        int64 `json:"reconnects"`
	MRAcrossReconnect int64 `json:"mr_across_reconnect"`
	// NonPrefix counts served reads whose state is no prefix of the
	// primary's history, judged from the writes' GTIDs (PrefixCheck);
	// NonPrefixJudged the served reads judged (0: no write had a GTID,
	// nothing was checked). NonPrefixExamples shows the first few.
	// MRHiddenLoss counts the MR violations (in MR) only the writes'
	// GTIDs show: a version lost in a failover, then a state of the new
	// timeline whose numbers are not lower (lab-checks.md).
	MRHiddenLoss      int64    `json:"mr_hidden_loss"`
	NonPrefix         int64    `json:"non_prefix"`
	NonPrefixJudged   int64    `json:"non_prefix_judged"`
	NonPrefixExamples []string `json:"non_prefix_examples,omitempty"`
	// OwnBackwards counts served reads whose session's own row was older
	// than in an earlier read on the same connection (not in MR, which
	// judges the hot rows).
	OwnBackwards int64 `json:"own_backwards"`
	// RYWAfterFailover: of RYW, the reads answered once the run's first
	// failover had killed the primary (whenever issued).
	RYWAfterFailover int64 `json:"ryw_after_failover"`
	// FirstReads are the first read each write owed (ReadsPerWrite, or a
	// script's: the reads right after the write); FirstReadRYW of them
	// lacked the session's write.
	FirstReads   int64 `json:"first_reads"`
	FirstReadRYW int64 `json:"first_read_ryw"`
	// FailoverLoss is what the run's failovers lost of this router's
	// sessions' acknowledged writes (nil: no failover, or a Workload
	// whose session rows the lab does not know).
	FailoverLoss *FailoverLoss `json:"failover_loss,omitempty"`
	// Promotion is how a router via the proxy followed the run's
	// failovers (nil: no failover, or not via the proxy).
	Promotion *PromotionResult `json:"promotion,omitempty"`
	// SessionsMoved counts sessions whose serving replica changed between
	// two consecutive replica reads; ReplicaSwitches counts the changes.
	SessionsMoved   int64 `json:"sessions_moved"`
	ReplicaSwitches int64 `json:"replica_switches"`
	// Reasons counts the router's final decision reasons.
	Reasons map[string]int64 `json:"reasons"`
	// DispatchP99Ms is the driver's own delay between an operation's due
	// time and its start (p99): large values mean the driver, not MySQL,
	// was the bottleneck.
	DispatchP99Ms float64 `json:"dispatch_p99_ms"`
	// Prediction is the simulator's figure for the same conditions.
	Prediction *Prediction `json:"prediction,omitempty"`
	// Hash attributes an affinity router's moves and MR violations to
	// their causes (with the simulator's prediction when one was made).
	Hash *HashResult `json:"hash,omitempty"`
}

// Prediction is the simulator's row for a router.
type Prediction struct {
	RYWPct     float64 `json:"ryw_pct"`
	MRPct      float64 `json:"mr_pct"`
	PrimaryPct float64 `json:"primary_pct"`
	// AllWritesPct is the share of reads that missed a write acknowledged
	// to anyone before they began (the simulator's all-writes count).
	AllWritesPct float64 `json:"all_writes_pct"`
	LatP99Ms     float64 `json:"lat_p99_ms"`
	// LagMeanMs and LagP99Ms are the simulator's own achieved lag.
	LagMeanMs float64 `json:"lag_mean_ms"`
	LagP99Ms  float64 `json:"lag_p99_ms"`
	// SpreadMeanMs and SpreadP99Ms are the simulator's replica spread
	// (Result.Spread; means of its trials').
	SpreadMeanMs float64 `json:"spread_mean_ms"`
	SpreadP99Ms  float64 `json:"spread_p99_ms"`
	// RYWSD, MRSD and PrimarySD are the sample standard deviations of the
	// percentages over the simulator's trials (0 with one trial): the
	// trial spread Agreement judges the lab's figures against.
	RYWSD     float64 `json:"ryw_pct_sd"`
	MRSD      float64 `json:"mr_pct_sd"`
	PrimarySD float64 `json:"primary_pct_sd"`
	// Trials is the number of the simulator's trials the figures are
	// means over (0 in a result written before it was recorded).
	Trials int `json:"trials,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// PromotionResult is how a proxy followed the run's failovers: the lab
// tells it of each (Server.Promote, as an orchestrator would).
type PromotionResult struct {
	// Promotions is how many promotions the proxy followed.
	Promotions int `json:"promotions"`
	// ResumeMs is the time from telling the proxy of the last promotion
	// to the first write the new primary acknowledged; nil when none was.
	ResumeMs *float64 `json:"resume_ms"`
	// FailedWrites counts writes that failed after the promotion.
	FailedWrites int64 `json:"failed_writes"`
	// OldPrimaryWrites counts writes acknowledged after the promotion
	// whose GTID a server other than the new primary wrote (the fencing
	// failed): the target is 0.
	OldPrimaryWrites int64 `json:"old_primary_writes"`
}

func pct(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

func summarizeRouter(rt routerRuntime, a *routerAcc) RouterResult {
	sp := rt.spec()
	t := &a.tally
	r := RouterResult{Name: sp.Name, Policy: sp.Policy.String(), Token: string(sp.Token),
		Reads: t.Reads, Served: t.Served(), RYW: t.RYW, MR: t.MR, AllWrites: t.AllWrites,
		Fallbacks: t.Fallbacks, Waited: t.Waited, StaleServed: t.ByOutcome[router.OutStale],
		Writes: a.writes, WriteErrors: a.writeErrs, Outcomes: map[string]int64{},
		DeclaredLosses: t.DeclaredLosses, Reconnects: t.Reconnects, MRAcrossReconnect: t.MRAcrossReconnect, SessionsMoved: int64(len(a.moved)), ReplicaSwitches: a.switches, Reasons: a.reasons,
		NonPrefix: a.nonPrefix, NonPrefixJudged: a.prefixJudged, NonPrefixExamples: a.prefixWitnesses, MRHiddenLoss: a.hiddenLoss,
		OwnBackwards: t.OwnBackwards, RYWAfterFailover: a.rywAfterKill, FirstReads: a.firstReads, FirstReadRYW: a.firstRYW}
	for _, o := range router.Outcomes() {
		r.Outcomes[o.String()] = t.ByOutcome[o]
	}
	if v, ok := rt.(*viaProxy); ok {
		r.Promotion = v.fo.result()
	}
	r.RYWPct = pct(t.RYW, r.Served)
	r.MRPct = pct(t.MR, r.Served)
	r.AllWritesPct = pct(t.AllWrites, r.Served)
	r.PrimaryPct = pct(t.ByOutcome[router.OutPrimary]+t.ByOutcome[router.OutFallback], r.Served)
	for _, b := range a.bins {
		if b.reads >= 5 {
			r.Worst100msPct = max(r.Worst100msPct, pct(int64(b.primary), int64(b.reads)))
		}
		r.PeakPrimaryPerSec = max(r.PeakPrimaryPerSec, float64(b.primary)*10)
	}
	if len(a.lat) > 0 {
		l := sortedDurations(a.lat)
		var sum time.Duration
		for _, d := range l {
			sum += d
		}
		r.LatMeanMs = ms(sum) / float64(len(l))
		r.LatP50Ms = ms(quantile(l, 0.5))
		r.LatP99Ms = ms(quantile(l, 0.99))
	}
	if len(a.writeLat) > 0 {
		l := sortedDurations(a.writeLat)
		var sum time.Duration
		for _, d := range l {
			sum += d
		}
		r.WriteLatMeanM = ms(sum) / float64(len(l))
		r.WriteLatP99M = ms(quantile(l, 0.99))
	}
	if len(a.behind) > 0 {
		r.DispatchP99Ms = ms(quantile(sortedDurations(a.behind), 0.99))
	}
	switch lr := rt.(type) {
	case interface{ counters() (int64, int64) }:
		r.WritesNoGTID, r.ObserveErrors = lr.counters()
	}
	return r
}

// SpreadStats is the distribution of a run's replica spread (Result.Spread).
type SpreadStats struct {
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	// Writes is how many writes it was measured on (seen applied on every
	// replica).
	Writes int `json:"writes"`
}

// mergeSpread combines two runs' spreads: the mean weighted by writes,
// each quantile the larger (an upper bound).
func mergeSpread(a, b SpreadStats) SpreadStats {
	n := a.Writes + b.Writes
	if n == 0 {
		return SpreadStats{}
	}
	return SpreadStats{Writes: n, MeanMs: (a.MeanMs*float64(a.Writes) + b.MeanMs*float64(b.Writes)) / float64(n),
		P50Ms: max(a.P50Ms, b.P50Ms), P99Ms: max(a.P99Ms, b.P99Ms)}
}
