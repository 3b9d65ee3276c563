package sim

import "github.com/causallab/causallab/router"

const binWidth = 100 * usPerMs

// trialMetrics are one router's counts in one trial. Arrays are fixed or
// reused, so counting never allocates.
type trialMetrics struct {
	reads       int64 // reads completed (served or failed): fixed by the seed
	served      int64 // reads that reached a node
	ryw         int64 // served reads that missed the session's last acked write
	mr          int64 // served reads below the session's highest shown position
	allWrites   int64 // served reads missing a write acknowledged to anyone before issue
	primary     int64 // served by the primary
	fallbacks   int64 // primary reads for freshness (Decision.Fallback)
	waited      int64 // reads that waited at least once
	timeouts    int64 // waits that spent their budget, or reads failed as timed out
	failed      int64 // reads the router failed (ActFail)
	staleServed int64 // reads served labelled stale (cap behaviour)
	capFailed   int64 // reads failed because the cap was spent (ReasonCapExceeded)
	capWaited   int64 // reads that waited at least once because the cap was spent
	deferred    int64 // reads deferred (ActDefer) at least once
	deferrals   int64 // ActDefer decisions (each one is followed by a retry)
	hashMoved   int64 // affinity decisions hashroute moved off the first choice
	events      int64
	waitTotal   usec // time reads spent in ActWait, every attempt
	// futileMissed counts futile-wait skips (router.ReasonWaitFutile)
	// after which a replica would have qualified within the budget left.
	futileMissed int64
	reasons      [router.NumReasons]int64

	readLat, writeLat, lag hist
	// spread is each record's time from the first to the last replica
	// applying it: how far apart the replicas are.
	spread   hist
	deferLat hist // issue to answer of the reads that were deferred

	binEnd   usec    // bins cover [0, binEnd): the offered period
	binReads []int32 // reads reaching a node per 100 ms bin
	binPrim  []int32 // of which on the primary
}

func (m *trialMetrics) reset(cfg *Config, _ int) {
	binReads, binPrim := m.binReads, m.binPrim
	*m = trialMetrics{}
	m.readLat.reset()
	m.deferLat.reset()
	m.binEnd = dur(cfg.Duration)
	nb := int((m.binEnd + binWidth - 1) / binWidth)
	m.binReads, m.binPrim = grow(binReads, nb), grow(binPrim, nb)
	clear(m.binReads)
	clear(m.binPrim)
}

func (m *trialMetrics) bin(t usec, primary bool) {
	if t >= m.binEnd {
		return
	}
	b := t / binWidth
	m.binReads[b]++
	if primary {
		m.binPrim[b]++
	}
}

// Result is one router's outcome in one trial: the numbers tables average.
type Result struct {
	Reads, Served, RYW, MR, Primary, Fallbacks, Waited, Timeouts, Failed, Stale int64
	// CapFailed counts reads failed because the fallback cap was spent (at
	// once under fail-fast, after the extra wait under wait-longer);
	// CapWaited counts reads that waited at least once because of the cap.
	// Stale counts reads served labelled stale (serve-stale).
	CapFailed, CapWaited int64
	// HashMoved counts affinity reads hashroute sent off their first choice
	// (reselected, remapped or rebalanced).
	HashMoved int64
	// AllWrites counts served reads that missed a write acknowledged, to
	// any session, before the read was issued (the read-all-writes
	// guarantee of PolicyGlobal).
	AllWrites int64
	// Deferred counts reads deferred at least once (ActDefer); Deferrals
	// the ActDefer decisions (each is followed by a retry).
	Deferred, Deferrals int64
	// Events is the number of simulator events processed.
	Events int64
	// WaitPerRead is the time reads spent waiting (ActWait, every wait of
	// every attempt) divided by the reads, in milliseconds: what the waits
	// add to the mean read latency.
	WaitPerRead float64
	// FutileMissed counts reads whose wait Decide judged futile
	// (router.ReasonWaitFutile) although a replica would have qualified
	// within the budget left (the simulator's ground truth): primary reads
	// the estimate added.
	FutileMissed int64
	// Percentages of reads.
	RYWPct, MRPct, PrimaryPct, AllWritesPct float64
	// WorstBinPct is the highest share of reads on the primary in any 100 ms
	// bin of the offered period.
	WorstBinPct float64
	// PeakPrimaryPerSec is the highest primary read rate over 1 s windows
	// (ten consecutive 100 ms bins) of the offered period.
	PeakPrimaryPerSec float64
	// Latencies in milliseconds.
	ReadMean, ReadP50, ReadP99, WriteMean, WriteP99, LagMean, LagP99 float64
	// SpreadMean and SpreadP99 (ms): per record, from the first to the
	// last replica applying it (0 with one replica).
	SpreadMean, SpreadP99 float64
	// DeferredMean and DeferredP99 are the issue-to-answer latency (ms) of
	// the deferred reads, retries included (0 when none).
	DeferredMean, DeferredP99 float64
	// Reasons counts router decisions by router.Reason.
	Reasons [router.NumReasons]int64
	// Hash attributes an affinity router's moves and MR violations to
	// their causes (zero under other policies).
	Hash HashCauses
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func (m *trialMetrics) result() Result {
	r := Result{
		Reads: m.reads, Served: m.served, RYW: m.ryw, MR: m.mr, Primary: m.primary,
		Fallbacks: m.fallbacks, Waited: m.waited, Timeouts: m.timeouts, Failed: m.failed,
		Stale: m.staleServed, CapFailed: m.capFailed, CapWaited: m.capWaited, HashMoved: m.hashMoved, Events: m.events, Reasons: m.reasons,
		AllWrites: m.allWrites, Deferred: m.deferred, Deferrals: m.deferrals,
		RYWPct: pct(m.ryw, m.reads), MRPct: pct(m.mr, m.reads), PrimaryPct: pct(m.primary, m.reads), AllWritesPct: pct(m.allWrites, m.reads),
		ReadMean: m.readLat.mean() / 1000, ReadP50: m.readLat.quantile(0.5) / 1000, ReadP99: m.readLat.quantile(0.99) / 1000,
		WriteMean: m.writeLat.mean() / 1000, WriteP99: m.writeLat.quantile(0.99) / 1000,
		LagMean: m.lag.mean() / 1000, LagP99: m.lag.quantile(0.99) / 1000,
		SpreadMean: m.spread.mean() / 1000, SpreadP99: m.spread.quantile(0.99) / 1000,
		DeferredMean: m.deferLat.mean() / 1000, DeferredP99: m.deferLat.quantile(0.99) / 1000,
	}
	r.FutileMissed = m.futileMissed
	if m.reads > 0 {
		r.WaitPerRead = float64(m.waitTotal) / 1000 / float64(m.reads)
	}
	for b := range m.binReads {
		if m.binReads[b] > 0 {
			r.WorstBinPct = max(r.WorstBinPct, pct(int64(m.binPrim[b]), int64(m.binReads[b])))
		}
	}
	const win = int(usPerSec / binWidth)
	var sum int64
	for b := range m.binPrim {
		sum += int64(m.binPrim[b])
		if b >= win {
			sum -= int64(m.binPrim[b-win])
		}
		r.PeakPrimaryPerSec = max(r.PeakPrimaryPerSec, float64(sum))
	}
	return r
}

// ReasonCount returns how many decisions gave reason.
func (r *Result) ReasonCount(reason router.Reason) int64 { return r.Reasons[reason] }
