package lab

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

// Hashed sessions' moves and monotonic-reads violations, attributed to
// their cause.
//
// Every affinity router row carries a HashResult: for each served replica
// read, hashroute.Tracker is told the serving replica and the router's own
// hash reason (live.Read.HashReason; through the proxy, its OnRead
// report), and whether that replica was down (killed or paused, from the
// run's own event log) since the session's previous read. The tracker
// names each move's cause and the charge of each MR violation the ground
// truth (the rows MySQL returned) finds: chosen-down (the id's first
// choice was down: unavoidable), needless (the first choice was up and the
// mode moved the session anyway: the edge cases), came-back (the session's
// server had been down since its previous read). docs/lab-checks.md gives the
// rules; hashroute's TestTrackerFullListNeverNeedless proves that
// full-list's needless counts are zero by construction.

// HashBin is the width of a HashResult's time bins.
const HashBin = sim.HashBin

// CauseCounts is one count per cause (hashroute.Cause); float64 so that
// the simulator's mean over trials fits too.
type CauseCounts struct {
	ChosenDown float64 `json:"chosen_down"`
	Needless   float64 `json:"needless"`
	CameBack   float64 `json:"came_back"`
	// None counts what no move and no outage explains (MR only: a replica
	// that went backwards by itself; zero in every run so far).
	None float64 `json:"none"`
}

// Get returns the count of cause c.
func (c *CauseCounts) Get(cause hashroute.Cause) float64 {
	switch cause {
	case hashroute.CauseChosenDown:
		return c.ChosenDown
	case hashroute.CauseNeedless:
		return c.Needless
	case hashroute.CauseCameBack:
		return c.CameBack
	}
	return c.None
}

// Total is the sum over causes.
func (c *CauseCounts) Total() float64 { return c.ChosenDown + c.Needless + c.CameBack + c.None }

func causeCounts[T int64 | int32 | float64](a [hashroute.NumCauses]T) CauseCounts {
	return CauseCounts{None: float64(a[hashroute.CauseNone]), ChosenDown: float64(a[hashroute.CauseChosenDown]),
		Needless: float64(a[hashroute.CauseNeedless]), CameBack: float64(a[hashroute.CauseCameBack])}
}

// HashResult is an affinity router's attribution.
type HashResult struct {
	// Mode is the hashing mode (hashroute.Mode's name).
	Mode string `json:"mode"`
	// SessionsMoved counts the sessions moved at least once for each
	// cause; Moves the moves (a session's replica changing between two
	// consecutive replica reads).
	SessionsMoved CauseCounts `json:"sessions_moved"`
	Moves         CauseCounts `json:"moves"`
	// MR counts the monotonic-reads violations by charge. Their total is
	// the row's MR (every violation is attributed).
	MR CauseCounts `json:"mr"`
	// Reads and RYW are the row's reads and read-your-writes violations
	// (hashing does not promise RYW; shown for scale).
	Reads float64 `json:"reads"`
	RYW   float64 `json:"ryw"`
	// MovesBin and MRBin are Moves and MR per HashBin of run time (by
	// the time the read was answered).
	MovesBin []CauseCounts `json:"moves_bin"`
	MRBin    []CauseCounts `json:"mr_bin"`
	// Sim is the simulator's prediction for the same world (mean over its
	// trials), nil without one.
	Sim *HashResult `json:"sim,omitempty"`
}

// FaultWindow is one scripted fault as it happened: for a kill, from the
// kill to the restarted server answering SQL; for a pause, to its resume;
// for a drift, the outside load's window (Load reads in flight).
type FaultWindow struct {
	Kind string `json:"kind"`
	Node string `json:"node"`
	Load int    `json:"load,omitempty"`
	// FromSec and ToSec are run time in seconds.
	FromSec float64 `json:"from_sec"`
	ToSec   float64 `json:"to_sec"`
}

// ReplicaLag is one replica's achieved lag (write ack to the first poll of
// the replica holding it).
type ReplicaLag struct {
	Node   string  `json:"node"`
	MeanMs float64 `json:"mean_ms"`
	P10Ms  float64 `json:"p10_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
}

// downLog records when nodes were down (killed until restarted, paused
// until resumed), in run time, for the came-back rule, and the drift
// windows. Safe for concurrent use: events write it, the scheduler reads
// it.
type downLog struct {
	mu   sync.Mutex
	wins []FaultWindow // ToSec < 0 while the node is still down
}

func (l *downLog) begin(kind EventKind, node string, load int, at time.Duration) {
	l.mu.Lock()
	l.wins = append(l.wins, FaultWindow{Kind: string(kind), Node: node, Load: load, FromSec: at.Seconds(), ToSec: -1})
	l.mu.Unlock()
}

func (l *downLog) end(kind EventKind, node string, at time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.wins) - 1; i >= 0; i-- {
		if w := &l.wins[i]; w.Node == node && w.Kind == string(kind) && w.ToSec < 0 {
			w.ToSec = at.Seconds()
			return
		}
	}
}

// downBetween reports whether node was down at some moment of (from, to].
func (l *downLog) downBetween(node string, from, to time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.wins {
		if w.Node != node || w.Kind == string(EvDrift) {
			continue
		}
		end := w.ToSec
		if end < 0 {
			end = to.Seconds() + 1
		}
		if w.FromSec < to.Seconds() && end > from.Seconds() {
			return true
		}
	}
	return false
}

// windows returns the recorded windows (an open one ends at now).
func (l *downLog) windows(now time.Duration) []FaultWindow {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.wins)
	for i := range out {
		if out[i].ToSec < 0 {
			out[i].ToSec = now.Seconds()
		}
	}
	return out
}

// hashAcc attributes one affinity router's reads (scheduler-owned).
type hashAcc struct {
	mode   hashroute.Mode
	index  map[string]int // replica name -> configured index
	down   *downLog
	trk    []hashroute.Tracker
	lastAt []time.Duration
	moved  []uint8
	moves  [hashroute.NumCauses]int64
	sess   [hashroute.NumCauses]int64
	mr     [hashroute.NumCauses]int64
	mbins  [][hashroute.NumCauses]int64
	rbins  [][hashroute.NumCauses]int64
	// unknown counts served replica reads whose node the router did not
	// name (they cannot be attributed; reported in a note).
	unknown int64
}

// newHashAcc returns the accumulator for sp's rows, or nil when sp is not
// an affinity router.
func newHashAcc(sp *RouterSpec, replicas []string, sessions int, down *downLog) *hashAcc {
	if sp.Policy.Kind != router.PolicyAffinity {
		return nil
	}
	a := &hashAcc{mode: sp.Policy.HashMode, index: map[string]int{}, down: down,
		trk: make([]hashroute.Tracker, sessions), lastAt: make([]time.Duration, sessions), moved: make([]uint8, sessions)}
	for i, n := range replicas {
		a.index[n] = i
	}
	for i := range a.trk {
		a.trk[i] = hashroute.NewTracker()
	}
	return a
}

// observe attributes one checked read of session sess.
func (a *hashAcc) observe(sess int, r *Read, v Verdict) {
	if !r.Outcome.Served() {
		return
	}
	i, ok := a.index[r.Node]
	if !ok {
		if r.Node == "" {
			a.unknown++
		}
		// the primary (no replica up): not a hashed read; MR impossible
		// there, but charge it if the ground truth says otherwise
		if v.MR {
			a.count(&a.mr, &a.rbins, a.trk[sess].Charge(), r.Done)
		}
		return
	}
	tr := &a.trk[sess]
	down := tr.Node() >= 0 && a.down.downBetween(r.Node, a.lastAt[sess], r.Done)
	moved, cause := tr.Observe(i, r.HashReason, down)
	a.lastAt[sess] = r.Done
	if moved {
		a.count(&a.moves, &a.mbins, cause, r.Done)
		if bit := uint8(1) << cause; a.moved[sess]&bit == 0 {
			a.moved[sess] |= bit
			a.sess[cause]++
		}
	}
	if v.MR {
		a.count(&a.mr, &a.rbins, tr.Charge(), r.Done)
	}
}

func (a *hashAcc) count(tot *[hashroute.NumCauses]int64, bins *[][hashroute.NumCauses]int64, c hashroute.Cause, at time.Duration) {
	tot[c]++
	b := int(at / HashBin)
	for len(*bins) <= b {
		*bins = append(*bins, [hashroute.NumCauses]int64{})
	}
	(*bins)[b][c]++
}

func (a *hashAcc) result() *HashResult {
	h := &HashResult{Mode: a.mode.String(), SessionsMoved: causeCounts(a.sess), Moves: causeCounts(a.moves), MR: causeCounts(a.mr)}
	n := max(len(a.mbins), len(a.rbins))
	for b := range n {
		var m, r [hashroute.NumCauses]int64
		if b < len(a.mbins) {
			m = a.mbins[b]
		}
		if b < len(a.rbins) {
			r = a.rbins[b]
		}
		h.MovesBin = append(h.MovesBin, causeCounts(m))
		h.MRBin = append(h.MRBin, causeCounts(r))
	}
	return h
}

// simHashResult averages the simulator's attribution over trials.
func simHashResult(mode hashroute.Mode, rs []sim.Result) *HashResult {
	h := &HashResult{Mode: mode.String()}
	if len(rs) == 0 {
		return h
	}
	var moves, sess, mr [hashroute.NumCauses]float64
	var reads, ryw float64
	var mb, rb [][hashroute.NumCauses]float64
	for _, r := range rs {
		reads += float64(r.Reads)
		ryw += float64(r.RYW)
		for c := range hashroute.NumCauses {
			moves[c] += float64(r.Hash.Moves[c])
			sess[c] += float64(r.Hash.Sessions[c])
			mr[c] += float64(r.Hash.MR[c])
		}
		for len(mb) < len(r.Hash.MovesBin) {
			mb, rb = append(mb, [hashroute.NumCauses]float64{}), append(rb, [hashroute.NumCauses]float64{})
		}
		for b := range r.Hash.MovesBin {
			for c := range hashroute.NumCauses {
				mb[b][c] += float64(r.Hash.MovesBin[b][c])
				rb[b][c] += float64(r.Hash.MRBin[b][c])
			}
		}
	}
	n := float64(len(rs))
	div := func(a [hashroute.NumCauses]float64) CauseCounts {
		for c := range a {
			a[c] /= n
		}
		return causeCounts(a)
	}
	h.Moves, h.SessionsMoved, h.MR = div(moves), div(sess), div(mr)
	h.Reads, h.RYW = reads/n, ryw/n
	// drop the empty tail bins the simulator keeps for late reads
	last := len(mb) - 1
	for last >= 0 && mb[last] == ([hashroute.NumCauses]float64{}) && rb[last] == ([hashroute.NumCauses]float64{}) {
		last--
	}
	for b := 0; b <= last; b++ {
		h.MovesBin, h.MRBin = append(h.MovesBin, div(mb[b])), append(h.MRBin, div(rb[b]))
	}
	return h
}

// hashNote is a router row's one-line attribution, for the notes.
func hashNote(name string, h *HashResult) string {
	return fmt.Sprintf("%s: sessions moved %g chosen-down, %g needless, %g came-back (%g, %g, %g moves); MR %g chosen-down, %g needless, %g came-back, %g unexplained.",
		name, h.SessionsMoved.ChosenDown, h.SessionsMoved.Needless, h.SessionsMoved.CameBack,
		h.Moves.ChosenDown, h.Moves.Needless, h.Moves.CameBack, h.MR.ChosenDown, h.MR.Needless, h.MR.CameBack, h.MR.None)
}

// perReplica is the achieved lag of each replica, in order.
func (l *lagTracker) perReplica(replicas []compose.Node) []ReplicaLag {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []ReplicaLag
	for _, r := range replicas {
		m := l.seen[r.Name]
		var lags []time.Duration
		for g, at := range l.acked {
			if s, ok := m[g]; ok {
				lags = append(lags, max(0, s.Sub(at)))
			}
		}
		st := lagStats(lags, 0)
		out = append(out, ReplicaLag{Node: r.Name, MeanMs: st.MeanMs, P10Ms: st.P10Ms, P50Ms: st.P50Ms, P99Ms: st.P99Ms})
	}
	return out
}

// connID is the connection id the server gave this connection (0 when
// not connected).
func (n *nodeConn) connID() uint32 {
	if n.c == nil {
		return 0
	}
	return n.c.GetConnectionID()
}

// hashMetric is one of the attribution's --fail-on metrics: a count of a
// row's HashResult (or of its simulator prediction).
type hashMetric struct {
	name string
	get  func(*HashResult) float64
}

// hashMetrics are the attribution's --fail-on and expect metrics:
// moved_<cause> (sessions moved at least once for that cause) and
// mr_<cause> (violations charged to it), for cause chosen_down, needless
// and came_back, mr_unexplained, and the same with a sim_ prefix for the
// simulator's prediction (a mean over trials).
func hashMetrics() []hashMetric {
	var out []hashMetric
	for _, c := range hashroute.Causes() {
		name := strings.ReplaceAll(c.String(), "-", "_")
		out = append(out,
			hashMetric{"moved_" + name, func(h *HashResult) float64 { return h.SessionsMoved.Get(c) }},
			hashMetric{"mr_" + name, func(h *HashResult) float64 { return h.MR.Get(c) }})
	}
	return append(out, hashMetric{"mr_unexplained", func(h *HashResult) float64 { return h.MR.None }})
}

// withHashMetrics adds the attribution metrics to m. A row without an
// attribution (not an affinity router), or without a simulator
// prediction for a sim_ metric, has no value (NaN): a --fail-on rule on it
// never holds, and an expectation on it fails, except a sim_ one when the
// simulator did not run, which is skipped.
func withHashMetrics(m map[string]func(*RouterResult) float64) map[string]func(*RouterResult) float64 {
	for _, hm := range hashMetrics() {
		m[hm.name] = func(r *RouterResult) float64 {
			if r.Hash == nil {
				return math.NaN()
			}
			return hm.get(r.Hash)
		}
		m["sim_"+hm.name] = func(r *RouterResult) float64 {
			if r.Hash == nil || r.Hash.Sim == nil {
				return math.NaN()
			}
			return hm.get(r.Hash.Sim)
		}
	}
	return m
}

func hashMetricNames() []string {
	var out, sims []string
	for _, hm := range hashMetrics() {
		out = append(out, hm.name)
		sims = append(sims, "sim_"+hm.name)
	}
	return append(out, sims...)
}
