package router

import (
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
)

// lsn is a scalar log position (LSN-like): compared by value, so a later
// position of ANY timeline contains an earlier one.
type lsn int64

func (a lsn) Contains(b lsn) bool { return a >= b }
func (a lsn) Union(b lsn) lsn     { return max(a, b) }

var _ gtid.Position[lsn] = lsn(0)

// bset is a tiny GTID-set stand-in: bit i is transaction i. Transactions of
// two timelines are distinct bits, so a lost write is never contained.
type bset uint64

func (a bset) Contains(b bset) bool { return a&b == b }
func (a bset) Union(b bset) bset    { return a | b }

var _ gtid.Position[bset] = bset(0)

func up(p lsn) Replica[lsn] { return Replica[lsn]{Applied: p, Up: true} }
func upL(p lsn, lag time.Duration) Replica[lsn] {
	return Replica[lsn]{Applied: p, Up: true, Lag: lag}
}
func upB(p lsn, b int64) Replica[lsn] { return Replica[lsn]{Applied: p, Up: true, Behind: b} }
func down(p lsn) Replica[lsn]         { return Replica[lsn]{Applied: p} }

func TestDecideTable(t *testing.T) {
	ms := time.Millisecond
	tok := func(p lsn) Session[lsn] { return Session[lsn]{Token: p, HasToken: true} }
	tokSeen := func(p, s lsn) Session[lsn] {
		return Session[lsn]{Token: p, HasToken: true, Seen: s, HasSeen: true}
	}
	seen := func(s lsn) Session[lsn] { return Session[lsn]{Seen: s, HasSeen: true} }
	capFail := &Cap{PerSecond: 1, Burst: 1, Behavior: CapFailFast}
	capStale := &Cap{PerSecond: 1, Burst: 1, Behavior: CapServeStale}
	capWait := &Cap{PerSecond: 1, Burst: 1, Behavior: CapWaitLonger, ExtraWait: 300 * ms}
	capDefer := &Cap{PerSecond: 1, Burst: 1, Behavior: CapDefer}
	glob := Policy{Kind: PolicyGlobal, WaitBudget: 400 * ms}
	globDefer := Policy{Kind: PolicyGlobal, WaitBudget: 400 * ms, Defer: true}

	type tc struct {
		name    string
		pol     Policy
		cap     *Cap
		emptyB  bool // bucket already spent at Now
		sess    Session[lsn]
		reps    []Replica[lsn]
		primary lsn
		pKnown  bool
		epoch   uint64
		now     time.Duration
		rnd     uint64
		waited  time.Duration
		global  lsn           // Input.Global
		gKnown  bool          // Input.GlobalKnown
		pwait   time.Duration // Input.PendingWait
		needAge time.Duration // Input.NeedAge, known when > 0
		want    Decision
	}
	// pend: a session whose last reads ran on replica i (-1: primary), not
	// bounded yet, with a token p and a resolved watermark s (0: none).
	pend := func(i int, p, s lsn) Session[lsn] {
		x := Session[lsn]{Token: p, HasToken: p != 0, Seen: s, HasSeen: s != 0, HasPending: true, PendingReplica: i, PendingEpoch: 0}
		return x
	}
	mrP := Policy{Kind: PolicyTokenRYWMR}
	waitP := Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}
	waitF := Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms, SkipFutile: true}
	lagB := func(p lsn, behind int64, lag time.Duration) Replica[lsn] {
		return Replica[lsn]{Applied: p, Up: true, Behind: behind, Lag: lag}
	}
	waitT := Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms, SkipFutile: true, FutileTrend: true}
	// lagP is lagB with the replica's Progress (Policy.FutileTrend).
	lagP := func(p lsn, behind int64, lag time.Duration, progress float64) Replica[lsn] {
		r := lagB(p, behind, lag)
		r.Progress = progress
		return r
	}
	cases := []tc{
		// the lazy watermark (pending seen)
		{name: "pending/sticky-whatever-rand", pol: mrP, sess: pend(1, 0, 0), reps: []Replica[lsn]{up(9), up(1), up(9)}, rnd: 2, pwait: 10 * ms,
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "pending/sticky-needs-token", pol: mrP, sess: pend(1, 5, 0), reps: []Replica[lsn]{up(9), up(5)}, pwait: 10 * ms,
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "pending/sticky-needs-seen", pol: mrP, sess: pend(1, 0, 6), reps: []Replica[lsn]{up(9), up(5)}, pwait: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonSeenPending, Replica: -1, WaitFor: 10 * ms}},
		{name: "pending/sticky-lacks-token-wait", pol: mrP, sess: pend(1, 7, 0), reps: []Replica[lsn]{up(9), up(5)}, pwait: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonSeenPending, Replica: -1, WaitFor: 10 * ms}},
		{name: "pending/sticky-lacks-token-unknown", pol: mrP, sess: pend(1, 7, 0), reps: []Replica[lsn]{up(9), up(5)},
			want: Decision{Action: ActPrimary, Reason: ReasonSeenUnknown, Replica: -1, Fallback: true}},
		{name: "pending/sticky-down-others-not", pol: waitP, sess: pend(1, 0, 0), reps: []Replica[lsn]{up(9), down(9)}, pwait: 3 * ms,
			want: Decision{Action: ActWait, Reason: ReasonSeenPending, Replica: -1, WaitFor: 3 * ms}},
		{name: "pending/sticky-down-unknown", pol: waitP, sess: pend(1, 0, 0), reps: []Replica[lsn]{up(9), down(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonSeenUnknown, Replica: -1, Fallback: true}},
		{name: "pending/unbounded-not-sticky", pol: mrP, sess: pend(1, 0, 0), reps: []Replica[lsn]{up(9), up(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonSeenUnknown, Replica: -1, Fallback: true}},
		{name: "pending/on-primary", pol: mrP, sess: pend(-1, 0, 0), reps: []Replica[lsn]{up(9), up(9)}, pwait: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonSeenPending, Replica: -1, WaitFor: 10 * ms}},
		{name: "pending/out-of-range", pol: mrP, sess: pend(5, 0, 0), reps: []Replica[lsn]{up(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonSeenUnknown, Replica: -1, Fallback: true}},
		{name: "pending/none-up", pol: mrP, sess: pend(0, 0, 0), reps: []Replica[lsn]{down(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}},
		{name: "pending/global-needs-target", pol: glob, sess: pend(0, 0, 0), reps: []Replica[lsn]{up(3), up(9)}, global: 5, gKnown: true, pwait: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonSeenPending, Replica: -1, WaitFor: 10 * ms}},
		{name: "pending/token-ryw-ignores", pol: Policy{Kind: PolicyTokenRYW}, sess: pend(0, 0, 0), reps: []Replica[lsn]{up(3), up(9)}, rnd: 1,
			want: Decision{Action: ActReplica, Reason: ReasonNoToken, Replica: 1}},
		{name: "pending/unknown-deferred", pol: Policy{Kind: PolicyTokenRYWMR, Defer: true}, sess: pend(-1, 0, 0), reps: []Replica[lsn]{up(9)},
			want: Decision{Action: ActDefer, Reason: ReasonSeenUnknown, Replica: -1, RetryAfter: MinRetryAfter}},
		{name: "pending/unknown-cap-no-stale", pol: mrP, cap: capStale, emptyB: true, sess: pend(1, 7, 0), reps: []Replica[lsn]{up(9), up(5)},
			want: Decision{Action: ActFail, Reason: ReasonCapExceeded, Replica: -1}},
		{name: "pending/unknown-cap-stale-primary", pol: mrP, cap: capStale, emptyB: true, sess: pend(-1, 0, 0), reps: []Replica[lsn]{up(9)},
			want: Decision{Action: ActFail, Reason: ReasonCapExceeded, Replica: -1}},
		{name: "pending/older-epoch-waits", pol: Policy{Kind: PolicyTokenRYWMR, CheckEpoch: true}, sess: pend(0, 0, 0), reps: []Replica[lsn]{up(9)},
			epoch: 1, pKnown: true, primary: 9, pwait: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonSeenPending, Replica: -1, WaitFor: 10 * ms}},
		{name: "pending/older-epoch-unbounded-lost", pol: Policy{Kind: PolicyTokenRYWMR, CheckEpoch: true}, sess: pend(0, 0, 0), reps: []Replica[lsn]{up(9)},
			epoch: 1, pKnown: true, primary: 9,
			want: Decision{Action: ActFail, Reason: ReasonSeenLost, Replica: -1}},
		// any
		{name: "any/first-up", pol: Policy{Kind: PolicyAny}, reps: []Replica[lsn]{down(0), up(0), up(0)}, rnd: 0,
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "any/second-up", pol: Policy{Kind: PolicyAny}, reps: []Replica[lsn]{down(0), up(0), up(0)}, rnd: 3,
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 2}},
		{name: "any/ignores-token", pol: Policy{Kind: PolicyAny}, sess: tok(9), reps: []Replica[lsn]{up(1)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		{name: "any/none-up", pol: Policy{Kind: PolicyAny}, reps: []Replica[lsn]{down(0)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}},
		{name: "any/empty-fleet", pol: Policy{Kind: PolicyAny},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}},
		// window
		{name: "window/inside", pol: Policy{Kind: PolicyWindow, Window: 500 * ms}, sess: Session[lsn]{Token: 1, HasToken: true, LastWriteAt: 1000 * ms},
			now: 1499 * ms, reps: []Replica[lsn]{up(5)},
			want: Decision{Action: ActPrimary, Reason: ReasonWindow, Replica: -1}},
		{name: "window/after", pol: Policy{Kind: PolicyWindow, Window: 500 * ms}, sess: Session[lsn]{Token: 1, HasToken: true, LastWriteAt: 1000 * ms},
			now: 1500 * ms, reps: []Replica[lsn]{up(0)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		{name: "window/no-write", pol: Policy{Kind: PolicyWindow, Window: 500 * ms}, now: 0, reps: []Replica[lsn]{up(0)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		{name: "window/zero-window", pol: Policy{Kind: PolicyWindow}, sess: Session[lsn]{Token: 1, HasToken: true, LastWriteAt: 10 * ms},
			now: 10 * ms, reps: []Replica[lsn]{up(0)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		{name: "window/inside-not-capped", pol: Policy{Kind: PolicyWindow, Window: time.Second}, cap: capFail, emptyB: true,
			sess: Session[lsn]{Token: 1, HasToken: true}, reps: []Replica[lsn]{up(0)},
			want: Decision{Action: ActPrimary, Reason: ReasonWindow, Replica: -1}},
		// token-ryw
		{name: "ryw/no-token", pol: Policy{Kind: PolicyTokenRYW}, reps: []Replica[lsn]{up(0), up(0)}, rnd: 1,
			want: Decision{Action: ActReplica, Reason: ReasonNoToken, Replica: 1}},
		{name: "ryw/ignores-seen", pol: Policy{Kind: PolicyTokenRYW}, sess: seen(9), reps: []Replica[lsn]{up(0)},
			want: Decision{Action: ActReplica, Reason: ReasonNoToken, Replica: 0}},
		{name: "ryw/only-qualifier", pol: Policy{Kind: PolicyTokenRYW}, sess: tok(5), reps: []Replica[lsn]{up(4), up(5), down(9)}, rnd: 7,
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "ryw/random-among-qualifiers", pol: Policy{Kind: PolicyTokenRYW}, sess: tok(5), reps: []Replica[lsn]{up(6), up(4), up(5)}, rnd: 1,
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 2}},
		{name: "ryw/fallback", pol: Policy{Kind: PolicyTokenRYW}, sess: tok(5), reps: []Replica[lsn]{up(4), down(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaQualifies, Replica: -1, Fallback: true}},
		{name: "ryw/none-up", pol: Policy{Kind: PolicyTokenRYW}, sess: tok(5), reps: []Replica[lsn]{down(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}},
		{name: "ryw/none-up-uncapped", pol: Policy{Kind: PolicyTokenRYW}, cap: capFail, emptyB: true, sess: tok(5), reps: []Replica[lsn]{down(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}},
		{name: "ryw/primary-known-contains", pol: Policy{Kind: PolicyTokenRYW}, sess: tok(5), reps: []Replica[lsn]{up(4)},
			primary: 5, pKnown: true,
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaQualifies, Replica: -1, Fallback: true}},
		{name: "ryw/primary-known-lacks", pol: Policy{Kind: PolicyTokenRYW}, sess: tok(5), reps: []Replica[lsn]{up(4)},
			primary: 4, pKnown: true,
			want: Decision{Action: ActFail, Reason: ReasonTimedOut, Replica: -1}},
		{name: "ryw/primary-lacks-none-up", pol: Policy{Kind: PolicyTokenRYW}, sess: tok(5), reps: []Replica[lsn]{down(4)},
			primary: 4, pKnown: true,
			want: Decision{Action: ActFail, Reason: ReasonTimedOut, Replica: -1}},
		// token-ryw-mr
		{name: "mr/seen-only", pol: Policy{Kind: PolicyTokenRYWMR}, sess: seen(7), reps: []Replica[lsn]{up(6), up(7)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "mr/needs-both", pol: Policy{Kind: PolicyTokenRYWMR}, sess: tokSeen(3, 7), reps: []Replica[lsn]{up(5), up(8)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "mr/fallback", pol: Policy{Kind: PolicyTokenRYWMR}, sess: tokSeen(3, 7), reps: []Replica[lsn]{up(5), up(6)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaQualifies, Replica: -1, Fallback: true}},
		{name: "mr/nothing-to-honour", pol: Policy{Kind: PolicyTokenRYWMR}, reps: []Replica[lsn]{up(0)},
			want: Decision{Action: ActReplica, Reason: ReasonNoToken, Replica: 0}},
		// token-wait
		{name: "wait/qualifies", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}, sess: tok(5), reps: []Replica[lsn]{up(5)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		{name: "wait/waits-on-least-behind", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}, sess: tok(5),
			reps: []Replica[lsn]{upB(1, 40), upB(3, 20), {Applied: 4, Behind: 1}, upB(3, 20)}, waited: 100 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 1, WaitFor: 300 * ms}},
		// token-wait+skip-futile: the waited replica (least Behind) is
		// 2 s behind and the need 10 ms old: 1.99 s to go, past the budget.
		{name: "futile/skipped", pol: waitF, sess: tok(5), reps: []Replica[lsn]{lagB(1, 2, 3*time.Second), lagB(1, 1, 2*time.Second)}, needAge: 10 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		{name: "futile/after-a-wait", pol: waitF, sess: tok(5), reps: []Replica[lsn]{lagB(1, 1, 500*ms)}, needAge: 10 * ms, waited: 300 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		{name: "futile/within-budget-waits", pol: waitF, sess: tok(5), reps: []Replica[lsn]{lagB(1, 1, 410*ms)}, needAge: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "futile/old-need-waits", pol: waitF, sess: tok(5), reps: []Replica[lsn]{lagB(1, 1, 2*time.Second)}, needAge: 1700 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "futile/need-age-unknown-waits", pol: waitF, sess: tok(5), reps: []Replica[lsn]{lagB(1, 1, 2*time.Second)},
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "futile/off-waits", pol: waitP, sess: tok(5), reps: []Replica[lsn]{lagB(1, 1, 2*time.Second)}, needAge: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "futile/judges-the-waited-replica", pol: waitF, sess: tok(5), reps: []Replica[lsn]{lagB(1, 2, 0), lagB(1, 1, 2*time.Second)}, needAge: 10 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		{name: "futile/primary-lacks-times-out", pol: waitF, sess: tok(5), reps: []Replica[lsn]{lagB(1, 1, 2*time.Second)}, needAge: 10 * ms,
			primary: 4, pKnown: true,
			want: Decision{Action: ActFail, Reason: ReasonTimedOut, Replica: -1}},
		{name: "futile/deferred", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms, Defer: true, SkipFutile: true}, sess: tok(5),
			reps: []Replica[lsn]{lagB(1, 1, 2*time.Second)}, needAge: 10 * ms,
			want: Decision{Action: ActDefer, Reason: ReasonWaitFutile, Replica: -1, RetryAfter: 2 * time.Second}},
		{name: "futile/cap-fail-fast", pol: waitF, cap: capFail, emptyB: true, sess: tok(5), reps: []Replica[lsn]{lagB(1, 1, 2*time.Second)}, needAge: 10 * ms,
			want: Decision{Action: ActFail, Reason: ReasonCapExceeded, Replica: -1}},
		{name: "futile/cap-wait-longer-to-budget-plus-extra", pol: waitF, cap: capWait, emptyB: true, sess: tok(5), reps: []Replica[lsn]{lagB(1, 1, 2*time.Second)},
			needAge: 10 * ms, waited: 100 * ms,
			want: Decision{Action: ActWait, Reason: ReasonCapExceeded, Replica: 0, WaitFor: 600 * ms}},
		{name: "futile/global", pol: Policy{Kind: PolicyGlobal, WaitBudget: 50 * ms, SkipFutile: true}, reps: []Replica[lsn]{lagB(3, 1, 100*ms)},
			global: 5, gKnown: true, needAge: 40 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		// +futile-trend: 1 s to go at a steady lag; catching up 3× faster
		// than real time it is 333 ms, within the 400 ms budget: the wait
		// is made. 2.5× (400 ms) is the edge; 2× (500 ms) is still futile.
		{name: "futile-trend/catching-up-waits", pol: waitT, sess: tok(5), reps: []Replica[lsn]{lagP(1, 1, 1010*ms, 3)}, needAge: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "futile-trend/edge-waits", pol: waitT, sess: tok(5), reps: []Replica[lsn]{lagP(1, 1, 1010*ms, 2.5)}, needAge: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "futile-trend/too-slow-skipped", pol: waitT, sess: tok(5), reps: []Replica[lsn]{lagP(1, 1, 1010*ms, 2)}, needAge: 10 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		// Steady (1), falling behind (0.5) or unknown (0): the steady
		// estimate, never more skips than it.
		{name: "futile-trend/steady-skipped", pol: waitT, sess: tok(5), reps: []Replica[lsn]{lagP(1, 1, 1010*ms, 1)}, needAge: 10 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		{name: "futile-trend/falling-behind-within-budget-waits", pol: waitT, sess: tok(5), reps: []Replica[lsn]{lagP(1, 1, 410*ms, 0.5)}, needAge: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "futile-trend/unknown-skipped", pol: waitT, sess: tok(5), reps: []Replica[lsn]{lagP(1, 1, 1010*ms, 0)}, needAge: 10 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		// The budget left, not the budget: after 300 ms of waiting 100 ms
		// are left, and 3× makes the 1 s 333 ms: futile.
		{name: "futile-trend/budget-left", pol: waitT, sess: tok(5), reps: []Replica[lsn]{lagP(1, 1, 1010*ms, 3)}, needAge: 10 * ms, waited: 300 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		// The waited replica's Progress, not another's.
		{name: "futile-trend/judges-the-waited-replica", pol: waitT, sess: tok(5), reps: []Replica[lsn]{lagP(1, 2, 0, 10), lagP(1, 1, 1010*ms, 1)}, needAge: 10 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitFutile, Replica: -1, Fallback: true}},
		{name: "futile-trend/without-skip-futile-waits", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms, FutileTrend: true}, sess: tok(5),
			reps: []Replica[lsn]{lagP(1, 1, 2*time.Second, 1)}, needAge: 10 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "futile-trend/global", pol: Policy{Kind: PolicyGlobal, WaitBudget: 50 * ms, SkipFutile: true, FutileTrend: true}, reps: []Replica[lsn]{lagP(3, 1, 100*ms, 1.5)},
			global: 5, gKnown: true, needAge: 40 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 50 * ms}},
		{name: "wait/budget-spent", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}, sess: tok(5), reps: []Replica[lsn]{up(1)}, waited: 400 * ms,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitBudgetSpent, Replica: -1, Fallback: true}},
		{name: "wait/zero-budget", pol: Policy{Kind: PolicyTokenWait}, sess: tok(5), reps: []Replica[lsn]{up(1)},
			want: Decision{Action: ActPrimary, Reason: ReasonWaitBudgetSpent, Replica: -1, Fallback: true}},
		{name: "wait/none-up-no-wait", pol: Policy{Kind: PolicyTokenWait, WaitBudget: time.Second}, sess: tok(5), reps: []Replica[lsn]{down(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}},
		{name: "wait/primary-lacks-waits-first", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}, sess: tok(5), reps: []Replica[lsn]{up(1)},
			primary: 4, pKnown: true,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "wait/primary-lacks-times-out", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}, sess: tok(5), reps: []Replica[lsn]{up(1)},
			primary: 4, pKnown: true, waited: 401 * ms,
			want: Decision{Action: ActFail, Reason: ReasonTimedOut, Replica: -1}},
		// cap
		{name: "cap/has-token", pol: Policy{Kind: PolicyTokenRYW}, cap: capFail, sess: tok(5), reps: []Replica[lsn]{up(1)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaQualifies, Replica: -1, Fallback: true}},
		{name: "cap/fail-fast", pol: Policy{Kind: PolicyTokenRYW}, cap: capFail, emptyB: true, sess: tok(5), reps: []Replica[lsn]{up(1)},
			want: Decision{Action: ActFail, Reason: ReasonCapExceeded, Replica: -1}},
		{name: "cap/serve-stale-best", pol: Policy{Kind: PolicyTokenRYW}, cap: capStale, emptyB: true, sess: tok(5),
			reps: []Replica[lsn]{upB(1, 9), upB(4, 2), upB(3, 2)},
			want: Decision{Action: ActStale, Reason: ReasonCapExceeded, Replica: 1}},
		{name: "cap/wait-longer", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}, cap: capWait, emptyB: true, sess: tok(5),
			reps: []Replica[lsn]{upB(1, 9), upB(4, 2)}, waited: 450 * ms,
			want: Decision{Action: ActWait, Reason: ReasonCapExceeded, Replica: 1, WaitFor: 250 * ms}},
		{name: "cap/wait-longer-no-budget-policy", pol: Policy{Kind: PolicyTokenRYWMR}, cap: capWait, emptyB: true, sess: tok(5),
			reps: []Replica[lsn]{upB(1, 9)},
			want: Decision{Action: ActWait, Reason: ReasonCapExceeded, Replica: 0, WaitFor: 300 * ms}},
		{name: "cap/wait-longer-spent", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}, cap: capWait, emptyB: true, sess: tok(5),
			reps: []Replica[lsn]{upB(1, 9)}, waited: 700 * ms,
			want: Decision{Action: ActFail, Reason: ReasonCapExceeded, Replica: -1}},
		{name: "cap/refilled", pol: Policy{Kind: PolicyTokenRYW}, cap: capFail, emptyB: true, sess: tok(5), reps: []Replica[lsn]{up(1)},
			now:  time.Second,
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaQualifies, Replica: -1, Fallback: true}},
		{name: "cap/primary-lacks-beats-cap", pol: Policy{Kind: PolicyTokenRYW}, cap: capStale, emptyB: true, sess: tok(5), reps: []Replica[lsn]{up(1)},
			primary: 4, pKnown: true,
			want: Decision{Action: ActFail, Reason: ReasonTimedOut, Replica: -1}},
		// epochs
		{name: "epoch/same-epoch", pol: Policy{Kind: PolicyTokenRYW, CheckEpoch: true}, sess: Session[lsn]{Token: 5, HasToken: true, Epoch: 2},
			epoch: 2, reps: []Replica[lsn]{up(5)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		{name: "epoch/lost", pol: Policy{Kind: PolicyTokenRYW, CheckEpoch: true}, sess: Session[lsn]{Token: 5, HasToken: true, Epoch: 1},
			epoch: 2, primary: 4, pKnown: true, reps: []Replica[lsn]{up(9)},
			want: Decision{Action: ActFail, Reason: ReasonWriteLost, Replica: -1}},
		{name: "epoch/primary-unknown-is-lost", pol: Policy{Kind: PolicyTokenRYW, CheckEpoch: true}, sess: Session[lsn]{Token: 5, HasToken: true, Epoch: 1},
			epoch: 2, reps: []Replica[lsn]{up(9)},
			want: Decision{Action: ActFail, Reason: ReasonWriteLost, Replica: -1}},
		{name: "epoch/survived-reanchor", pol: Policy{Kind: PolicyTokenRYW, CheckEpoch: true}, sess: Session[lsn]{Token: 5, HasToken: true, Epoch: 1},
			epoch: 2, primary: 6, pKnown: true, reps: []Replica[lsn]{up(4), up(5)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1, Reanchor: true}},
		{name: "epoch/survived-fallback-reanchor", pol: Policy{Kind: PolicyTokenRYW, CheckEpoch: true}, sess: Session[lsn]{Token: 5, HasToken: true, Epoch: 1},
			epoch: 2, primary: 6, pKnown: true, reps: []Replica[lsn]{up(4)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaQualifies, Replica: -1, Fallback: true, Reanchor: true}},
		{name: "epoch/seen-lost", pol: Policy{Kind: PolicyTokenRYWMR, CheckEpoch: true},
			sess:  Session[lsn]{Token: 3, HasToken: true, Epoch: 2, Seen: 8, HasSeen: true, SeenEpoch: 1},
			epoch: 2, primary: 6, pKnown: true, reps: []Replica[lsn]{up(9)},
			want: Decision{Action: ActFail, Reason: ReasonSeenLost, Replica: -1}},
		{name: "epoch/seen-ignored-by-ryw", pol: Policy{Kind: PolicyTokenRYW, CheckEpoch: true},
			sess:  Session[lsn]{Token: 3, HasToken: true, Epoch: 2, Seen: 8, HasSeen: true, SeenEpoch: 1},
			epoch: 2, primary: 6, pKnown: true, reps: []Replica[lsn]{up(3)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		{name: "epoch/seen-only-survived", pol: Policy{Kind: PolicyTokenRYWMR, CheckEpoch: true},
			sess:  Session[lsn]{Seen: 5, HasSeen: true, SeenEpoch: 1},
			epoch: 2, primary: 6, pKnown: true, reps: []Replica[lsn]{up(5)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0, Reanchor: true}},
		{name: "epoch/unchecked-without-flag", pol: Policy{Kind: PolicyTokenRYW}, sess: Session[lsn]{Token: 5, HasToken: true, Epoch: 1},
			epoch: 2, primary: 9, pKnown: true, reps: []Replica[lsn]{up(7)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		// global: the read needs the primary's position at read start
		{name: "global/no-token-still-needs-primary", pol: glob, global: 7, gKnown: true, reps: []Replica[lsn]{up(6), up(7)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "global/contains-target", pol: glob, sess: tok(3), global: 7, gKnown: true, reps: []Replica[lsn]{up(9), up(5), up(7)}, rnd: 1,
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 2}},
		{name: "global/own-token-beyond-target", pol: glob, sess: tok(8), global: 7, gKnown: true, reps: []Replica[lsn]{up(7), up(8)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "global/watermark-beyond-target", pol: glob, sess: seen(9), global: 7, gKnown: true, reps: []Replica[lsn]{up(8), up(9)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 1}},
		{name: "global/waits-on-least-behind", pol: glob, global: 7, gKnown: true,
			reps: []Replica[lsn]{upB(5, 4), upB(6, 2), upB(4, 9)}, waited: 150 * ms,
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 1, WaitFor: 250 * ms}},
		{name: "global/budget-spent", pol: glob, global: 7, gKnown: true, reps: []Replica[lsn]{up(6)}, waited: 400 * ms,
			primary: 7, pKnown: true,
			want: Decision{Action: ActPrimary, Reason: ReasonWaitBudgetSpent, Replica: -1, Fallback: true}},
		{name: "global/budget-spent-capped", pol: glob, cap: capFail, emptyB: true, global: 7, gKnown: true, reps: []Replica[lsn]{up(6)},
			waited: 400 * ms,
			want:   Decision{Action: ActFail, Reason: ReasonCapExceeded, Replica: -1}},
		{name: "global/primary-unknown-falls-back", pol: glob, reps: []Replica[lsn]{up(99)},
			want: Decision{Action: ActPrimary, Reason: ReasonPrimaryUnknown, Replica: -1, Fallback: true}},
		{name: "global/primary-unknown-capped-stale", pol: glob, cap: capStale, emptyB: true, reps: []Replica[lsn]{upB(9, 3), upB(9, 1)},
			want: Decision{Action: ActStale, Reason: ReasonCapExceeded, Replica: 1}},
		{name: "global/none-up", pol: glob, global: 7, gKnown: true, reps: []Replica[lsn]{down(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}},
		{name: "global/epoch-lost", pol: Policy{Kind: PolicyGlobal, WaitBudget: 400 * ms, CheckEpoch: true},
			sess: Session[lsn]{Token: 5, HasToken: true, Epoch: 1}, epoch: 2, primary: 4, pKnown: true, global: 4, gKnown: true,
			reps: []Replica[lsn]{up(9)},
			want: Decision{Action: ActFail, Reason: ReasonWriteLost, Replica: -1}},
		// defer: never the primary for freshness
		{name: "defer/qualifies", pol: Policy{Kind: PolicyTokenRYW, Defer: true}, sess: tok(5), reps: []Replica[lsn]{up(5)},
			want: Decision{Action: ActReplica, Reason: ReasonRouted, Replica: 0}},
		{name: "defer/ryw-at-once", pol: Policy{Kind: PolicyTokenRYW, Defer: true}, sess: tok(5),
			reps: []Replica[lsn]{upL(4, 300*ms), upL(3, 120*ms), {Applied: 5, Lag: time.Millisecond}},
			want: Decision{Action: ActDefer, Reason: ReasonNoReplicaQualifies, Replica: -1, RetryAfter: 120 * ms}},
		{name: "defer/wait-first", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms, Defer: true}, sess: tok(5),
			reps: []Replica[lsn]{upL(4, 300*ms)},
			want: Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: 0, WaitFor: 400 * ms}},
		{name: "defer/after-budget", pol: Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms, Defer: true}, sess: tok(5),
			reps: []Replica[lsn]{upL(4, 300*ms)}, waited: 400 * ms,
			want: Decision{Action: ActDefer, Reason: ReasonWaitBudgetSpent, Replica: -1, RetryAfter: 300 * ms}},
		{name: "defer/floor", pol: Policy{Kind: PolicyTokenRYWMR, Defer: true}, sess: tok(5), reps: []Replica[lsn]{up(4)},
			want: Decision{Action: ActDefer, Reason: ReasonNoReplicaQualifies, Replica: -1, RetryAfter: MinRetryAfter}},
		{name: "defer/ignores-cap", pol: Policy{Kind: PolicyTokenRYW, Defer: true}, cap: capStale, emptyB: true, sess: tok(5),
			reps: []Replica[lsn]{upL(4, 50*ms)},
			want: Decision{Action: ActDefer, Reason: ReasonNoReplicaQualifies, Replica: -1, RetryAfter: 50 * ms}},
		{name: "defer/none-up-uses-primary", pol: Policy{Kind: PolicyTokenRYW, Defer: true}, sess: tok(5), reps: []Replica[lsn]{down(9)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}},
		{name: "defer/lost-token-times-out", pol: Policy{Kind: PolicyTokenRYW, Defer: true}, sess: tok(5), reps: []Replica[lsn]{up(4)},
			primary: 4, pKnown: true,
			want: Decision{Action: ActFail, Reason: ReasonTimedOut, Replica: -1}},
		{name: "defer/global", pol: globDefer, global: 7, gKnown: true, reps: []Replica[lsn]{upL(6, 40*ms), upL(5, 90*ms)}, waited: 400 * ms,
			want: Decision{Action: ActDefer, Reason: ReasonWaitBudgetSpent, Replica: -1, RetryAfter: 40 * ms}},
		{name: "defer/global-primary-unknown", pol: globDefer, reps: []Replica[lsn]{upL(6, 40*ms)},
			want: Decision{Action: ActDefer, Reason: ReasonPrimaryUnknown, Replica: -1, RetryAfter: 40 * ms}},
		{name: "defer/down-replica-lag-ignored", pol: Policy{Kind: PolicyTokenRYW, Defer: true}, sess: tok(5),
			reps: []Replica[lsn]{{Applied: 4, Lag: 20 * ms}, upL(4, 80*ms)},
			want: Decision{Action: ActDefer, Reason: ReasonNoReplicaQualifies, Replica: -1, RetryAfter: 80 * ms}},
		{name: "cap/defer", pol: Policy{Kind: PolicyTokenRYWMR}, cap: capDefer, emptyB: true, sess: tok(5), reps: []Replica[lsn]{upL(4, 70*ms)},
			want: Decision{Action: ActDefer, Reason: ReasonCapExceeded, Replica: -1, RetryAfter: 70 * ms}},
		{name: "cap/defer-below-cap", pol: Policy{Kind: PolicyTokenRYWMR}, cap: capDefer, sess: tok(5), reps: []Replica[lsn]{upL(4, 70*ms)},
			want: Decision{Action: ActPrimary, Reason: ReasonNoReplicaQualifies, Replica: -1, Fallback: true}},
		// misuse
		{name: "invalid-kind", pol: Policy{Kind: 99}, reps: []Replica[lsn]{up(0)},
			want: Decision{Action: ActFail, Reason: ReasonInvalidPolicy, Replica: -1}},
		{name: "affinity/no-table", pol: Policy{Kind: PolicyAffinity}, reps: []Replica[lsn]{up(0)},
			want: Decision{Action: ActFail, Reason: ReasonInvalidPolicy, Replica: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sess := c.sess
			reps := append([]Replica[lsn](nil), c.reps...)
			view := View[lsn]{Replicas: reps, Primary: c.primary, PrimaryKnown: c.pKnown, Epoch: c.epoch}
			in := Input[lsn]{Policy: &c.pol, Cap: c.cap, Session: &sess, View: &view, Now: c.now, Rand: c.rnd, Waited: c.waited,
				Global: c.global, GlobalKnown: c.gKnown, PendingWait: c.pwait, NeedAge: c.needAge, NeedAgeKnown: c.needAge > 0}
			var b Bucket
			if c.emptyB {
				if c.cap == nil || !b.take(c.cap, 0) || b.take(c.cap, 0) {
					t.Fatal("test setup: bucket should hold exactly one token at t=0")
				}
			}
			got := Decide(&in, &b)
			if got != c.want {
				t.Fatalf("Decide = %+v, want %+v", got, c.want)
			}
			if sess != c.sess {
				t.Fatalf("Decide modified the session: %+v -> %+v", c.sess, sess)
			}
			for i := range reps {
				if reps[i] != c.reps[i] {
					t.Fatalf("Decide modified replica %d", i)
				}
			}
		})
	}
}

// TestFailoverTokenKinds pins the comparison the failover experiment reports:
// after the primary dies with writes the promoted replica never got, a
// scalar token is silently satisfied by the new timeline, a GTID-set token
// (no epoch) waits and then times out, and an epoch token fails fast.
func TestFailoverTokenKinds(t *testing.T) {
	ms := time.Millisecond
	// Scalar: old primary wrote up to 10, the session's write is 10; the
	// promoted replica had 8 and has since written 9..12 on a new timeline.
	{
		sess := Session[lsn]{Token: 10, HasToken: true, Epoch: 1}
		view := View[lsn]{Replicas: []Replica[lsn]{up(11)}, Primary: 12, PrimaryKnown: true, Epoch: 2}
		pol := Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}
		d := Decide(&Input[lsn]{Policy: &pol, Session: &sess, View: &view}, &Bucket{})
		if d.Action != ActReplica {
			t.Fatalf("scalar token after failover: %+v, want a (silently wrong) replica read", d)
		}
	}
	// GTID-like set: old timeline bits 0..3 (session's write is bit 3),
	// promoted replica had bits 0..2, new timeline bits 8.. .
	const lost = bset(1 << 3)
	newPrimary := bset(0b111 | 1<<8 | 1<<9)
	pol := Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms}
	sess := Session[bset]{Token: lost, HasToken: true, Epoch: 1}
	view := View[bset]{Replicas: []Replica[bset]{{Applied: newPrimary, Up: true}}, Primary: newPrimary, PrimaryKnown: true, Epoch: 2}
	in := Input[bset]{Policy: &pol, Session: &sess, View: &view}
	var b Bucket
	if d := Decide(&in, &b); d.Action != ActWait || d.WaitFor != 400*ms {
		t.Fatalf("gtid token, first call: %+v, want a 400ms wait", d)
	}
	in.Waited = 400 * ms
	if d := Decide(&in, &b); d.Action != ActFail || d.Reason != ReasonTimedOut {
		t.Fatalf("gtid token, budget spent: %+v, want timed out", d)
	}
	pol.CheckEpoch = true
	in.Waited = 0
	if d := Decide(&in, &b); d.Action != ActFail || d.Reason != ReasonWriteLost {
		t.Fatalf("epoch token: %+v, want write lost at once", d)
	}
}

// TestEpochBasesNumberedPositions: with numbered positions the current
// primary's position soon passes a lost write's number, so "the primary
// contains it" stops telling lost from surviving writes (every +epoch read
// of a lost LSN or MariaDB sequence was served stale in lab failover
// --engines). Rule 1 checks the promoted primary's position at each later
// failover (View.Bases): a write above it is lost, one at or below it
// survived, across several failovers.
func TestEpochBasesNumberedPositions(t *testing.T) {
	ms := time.Millisecond
	pol := Policy{Kind: PolicyTokenWait, WaitBudget: 400 * ms, CheckEpoch: true}
	decide := func(tok lsn, epoch uint64, v View[lsn]) Decision {
		sess := Session[lsn]{Token: tok, HasToken: true, Epoch: epoch}
		return Decide(&Input[lsn]{Policy: &pol, Session: &sess, View: &v}, &Bucket{})
	}
	// Old primary wrote up to 10; replica1, promoted at 8 (epoch 2), has
	// written up to 12 since.
	v := View[lsn]{Replicas: []Replica[lsn]{up(12)}, Primary: 12, PrimaryKnown: true, Epoch: 2,
		Bases: []EpochBase[lsn]{{Epoch: 2, Pos: 8}}}
	if d := decide(10, 1, v); d.Action != ActFail || d.Reason != ReasonWriteLost {
		t.Fatalf("lost write 10 (promoted at 8): %+v, want write lost", d)
	}
	if d := decide(8, 1, v); d.Action != ActReplica || !d.Reanchor {
		t.Fatalf("surviving write 8 (promoted at 8): %+v, want a replica read, re-anchored", d)
	}
	if d := decide(11, 2, v); d.Action != ActReplica || d.Reanchor {
		t.Fatalf("current-epoch write 11: %+v, want a replica read", d)
	}
	// Without bases the lost write is (silently) served: today's rule.
	nb := v
	nb.Bases = nil
	if d := decide(10, 1, nb); d.Action != ActReplica {
		t.Fatalf("no bases: %+v, want the replica read rule 1 cannot catch", d)
	}
	// A second failover (epoch 3) promoted at 11: epoch 1's write 7
	// survived both; epoch 1's 9 was lost at the first (8 < 9) though the
	// second base passes it; epoch 2's 11 survived, 12 was lost.
	v3 := View[lsn]{Replicas: []Replica[lsn]{up(20)}, Primary: 20, PrimaryKnown: true, Epoch: 3,
		Bases: []EpochBase[lsn]{{Epoch: 2, Pos: 8}, {Epoch: 3, Pos: 11}}}
	for _, c := range []struct {
		tok   lsn
		epoch uint64
		lost  bool
	}{{7, 1, false}, {9, 1, true}, {11, 2, false}, {12, 2, true}} {
		d := decide(c.tok, c.epoch, v3)
		if got := d.Action == ActFail && d.Reason == ReasonWriteLost; got != c.lost {
			t.Errorf("epoch %d write %d after two failovers: %+v, want lost %v", c.epoch, c.tok, d, c.lost)
		}
	}
	// The watermark is held to the same rule (ReasonSeenLost).
	sess := Session[lsn]{Seen: 10, HasSeen: true, SeenEpoch: 1}
	if d := Decide(&Input[lsn]{Policy: &pol, Session: &sess, View: &v}, &Bucket{}); d.Action != ActFail || d.Reason != ReasonSeenLost {
		t.Fatalf("watermark 10 (promoted at 8): %+v, want seen lost", d)
	}
}

func TestBucketRate(t *testing.T) {
	c := &Cap{PerSecond: 10, Burst: 2, Behavior: CapFailFast}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var b Bucket
	granted := 0
	// 1000 attempts per second for 5 s: at most burst + 10/s * 5s.
	for ms := 0; ms < 5000; ms++ {
		if b.take(c, time.Duration(ms)*time.Millisecond) {
			granted++
		}
	}
	if granted > 2+50 || granted < 50 {
		t.Fatalf("granted %d fallbacks in 5s at 10/s burst 2, want 50..52", granted)
	}
	// A clock that goes backwards must not mint tokens.
	var b2 Bucket
	b2.take(c, 10*time.Second)
	b2.take(c, 10*time.Second)
	if b2.take(c, 9*time.Second) {
		t.Fatal("bucket refilled from a clock that went backwards")
	}
	// No cap.
	var b3 Bucket
	for range 100 {
		if !b3.take(&Cap{}, 0) || !b3.take(nil, 0) {
			t.Fatal("disabled cap refused a fallback")
		}
	}
}

// TestObservePending: the pending seen holds one node, keeps the oldest
// epoch, moves to the primary, and resolving it folds the bound into the
// watermark in the pending reads' epoch; DropSeen drops it.
func TestObservePending(t *testing.T) {
	var s Session[bset]
	ObservePending(&s, 1, 3)
	if !s.HasPending || s.PendingReplica != 1 || s.PendingEpoch != 3 || s.HasSeen {
		t.Fatalf("after ObservePending: %+v", s)
	}
	ObservePending(&s, -1, 4) // a read on the primary takes it over
	if s.PendingReplica != -1 || s.PendingEpoch != 3 {
		t.Fatalf("moved to the primary: %+v", s)
	}
	ResolvePending(&s, bset(0b101))
	if s.HasPending || !s.HasSeen || s.Seen != 0b101 || s.SeenEpoch != 3 {
		t.Fatalf("after ResolvePending: %+v", s)
	}
	ResolvePending(&s, bset(0b10)) // nothing pending: no change
	if s.Seen != 0b101 {
		t.Fatalf("resolved without a pending seen: %+v", s)
	}
	ObservePending(&s, 0, 5)
	ResolvePending(&s, bset(0b10))
	if s.Seen != 0b111 || s.SeenEpoch != 3 {
		t.Fatalf("second resolution: %+v", s)
	}
	ObservePending(&s, 0, 5)
	s.DropSeen()
	if s.HasPending || s.HasSeen {
		t.Fatalf("after DropSeen: %+v", s)
	}
}

func TestObserveAndRecordWrite(t *testing.T) {
	var s Session[bset]
	Observe(&s, 0b0011, 3)
	if !s.HasSeen || s.Seen != 0b0011 || s.SeenEpoch != 3 {
		t.Fatalf("first observe: %+v", s)
	}
	Observe(&s, 0b0100, 4)
	if s.Seen != 0b0111 || s.SeenEpoch != 3 {
		t.Fatalf("second observe must union and keep the oldest epoch: %+v", s)
	}
	RecordWrite(&s, 0b1000, 4, 7*time.Second)
	RecordWrite(&s, 0b10000, 5, 8*time.Second)
	if !s.HasToken || s.Token != 0b11000 || s.Epoch != 4 || s.LastWriteAt != 8*time.Second {
		t.Fatalf("record write: %+v", s)
	}
	s.Reanchor(5)
	if s.Epoch != 5 || s.SeenEpoch != 5 {
		t.Fatalf("reanchor: %+v", s)
	}
	s.DropSeen()
	if s.HasSeen || s.Seen != 0 || !s.HasToken {
		t.Fatalf("drop seen: %+v", s)
	}
}

func TestAffinity(t *testing.T) {
	servers := make([]hashroute.Server, 5)
	for i := range servers {
		servers[i] = hashroute.Server{Name: string(rune('a' + i)), Weight: 1}
	}
	tab, err := hashroute.NewTable(servers)
	if err != nil {
		t.Fatal(err)
	}
	reps := []Replica[lsn]{up(0), up(0), up(0), up(0), up(0)}
	view := View[lsn]{Replicas: reps, Hash: tab}
	for key := uint64(0); key < 200; key++ {
		sess := Session[lsn]{AffinityKey: key}
		for _, mode := range hashroute.Modes() {
			pol := Policy{Kind: PolicyAffinity, HashMode: mode}
			view.Replicas = reps
			d := Decide(&Input[lsn]{Policy: &pol, Session: &sess, View: &view}, &Bucket{})
			wantI, wantWhy := tab.Select(key, mode, tab.AllUp(), make([]int, 5))
			if d.Action != ActReplica || d.Replica != wantI || d.HashReason != wantWhy {
				t.Fatalf("key %d mode %v: %+v, want replica %d (%v)", key, mode, d, wantI, wantWhy)
			}
		}
		// First choice down: reselected per hashroute, back when it returns.
		first := tab.First(key)
		downReps := append([]Replica[lsn](nil), reps...)
		downReps[first].Up = false
		view.Replicas = downReps
		pol := Policy{Kind: PolicyAffinity}
		d := Decide(&Input[lsn]{Policy: &pol, Session: &sess, View: &view}, &Bucket{})
		if d.Replica == first || d.HashReason != hashroute.Reselected {
			t.Fatalf("key %d: first choice %d down, got %+v", key, first, d)
		}
	}
	// Rebalance override sees InFlight.
	loaded := []Replica[lsn]{up(0), up(0), up(0), up(0), up(0)}
	key := uint64(12345)
	first := tab.First(key)
	loaded[first].InFlight = 100
	view.Replicas = loaded
	pol := Policy{Kind: PolicyAffinity, HashMode: hashroute.RebalanceOverride}
	d := Decide(&Input[lsn]{Policy: &pol, Session: &Session[lsn]{AffinityKey: key}, View: &view}, &Bucket{})
	if d.Replica == first || d.HashReason != hashroute.Rebalanced {
		t.Fatalf("rebalance override ignored in-flight load: %+v", d)
	}
	// Nothing up.
	view.Replicas = []Replica[lsn]{down(0), down(0), down(0), down(0), down(0)}
	d = Decide(&Input[lsn]{Policy: &Policy{Kind: PolicyAffinity}, Session: &Session[lsn]{}, View: &view}, &Bucket{})
	if d.Action != ActPrimary || d.Reason != ReasonNoReplicaUp {
		t.Fatalf("affinity with nothing up: %+v", d)
	}
}

// TestManyReplicas covers the >64-replica path of the qualifying pick.
func TestManyReplicas(t *testing.T) {
	reps := make([]Replica[lsn], 100)
	for i := range reps {
		reps[i] = up(0)
	}
	reps[10] = up(5)
	reps[70] = up(5)
	reps[99] = up(5)
	view := View[lsn]{Replicas: reps}
	pol := Policy{Kind: PolicyTokenRYW}
	sess := Session[lsn]{Token: 5, HasToken: true}
	got := map[int]bool{}
	for r := uint64(0); r < 6; r++ {
		d := Decide(&Input[lsn]{Policy: &pol, Session: &sess, View: &view, Rand: r}, &Bucket{})
		got[d.Replica] = true
	}
	if len(got) != 3 || !got[10] || !got[70] || !got[99] {
		t.Fatalf("picks %v, want exactly {10, 70, 99}", got)
	}
}

// TestDecideLastReplica: a token policy stays on the session's last
// replica while it qualifies (or, with nothing to honour, is up) and no
// other candidate has fewer reads in flight, whatever Rand; elsewhere the
// pick is random as before, and a pending seen's replica still decides
// for the lazy watermark.
func TestDecideLastReplica(t *testing.T) {
	ryw := Policy{Kind: PolicyTokenRYW}
	mr := Policy{Kind: PolicyTokenRYWMR}
	decide := func(pol Policy, s Session[lsn], reps []Replica[lsn], rnd uint64) Decision {
		v := View[lsn]{Replicas: reps, Primary: 10, PrimaryKnown: true}
		in := Input[lsn]{Policy: &pol, Session: &s, View: &v, Rand: rnd, PendingWait: time.Millisecond}
		var b Bucket
		return Decide(&in, &b)
	}
	three := []Replica[lsn]{up(10), up(10), up(10)}
	cases := []struct {
		name string
		pol  Policy
		sess Session[lsn]
		reps []Replica[lsn]
		want map[int]bool // replicas some Rand picks
		why  Reason
	}{
		{"no token: the last replica", ryw, Session[lsn]{HasLast: true, LastReplica: 2}, three, map[int]bool{2: true}, ReasonNoToken},
		{"no token, last down: random among the rest", ryw, Session[lsn]{HasLast: true, LastReplica: 2},
			[]Replica[lsn]{up(10), up(10), down(10)}, map[int]bool{0: true, 1: true}, ReasonNoToken},
		{"token held by the last: it serves", ryw, Session[lsn]{Token: 5, HasToken: true, HasLast: true, LastReplica: 1}, three, map[int]bool{1: true}, ReasonRouted},
		{"token not held by the last: random qualifying", ryw, Session[lsn]{Token: 5, HasToken: true, HasLast: true, LastReplica: 1},
			[]Replica[lsn]{up(10), up(4), up(10)}, map[int]bool{0: true, 2: true}, ReasonRouted},
		{"no last: random", ryw, Session[lsn]{Token: 5, HasToken: true}, three, map[int]bool{0: true, 1: true, 2: true}, ReasonRouted},
		{"last out of range: random", ryw, Session[lsn]{HasLast: true, LastReplica: 3}, three, map[int]bool{0: true, 1: true, 2: true}, ReasonNoToken},
		{"pending seen decides, not the last", mr, Session[lsn]{HasPending: true, PendingReplica: 0, HasLast: true, LastReplica: 2}, three, map[int]bool{0: true}, ReasonRouted},
		{"mr watermark held by the last", mr, Session[lsn]{Seen: 8, HasSeen: true, HasLast: true, LastReplica: 0},
			[]Replica[lsn]{up(10), up(10), up(7)}, map[int]bool{0: true}, ReasonRouted},
		{"last busier than another qualifying: random", ryw, Session[lsn]{Token: 5, HasToken: true, HasLast: true, LastReplica: 1},
			[]Replica[lsn]{up(10), {Applied: 10, Up: true, InFlight: 2}, {Applied: 10, Up: true, InFlight: 1}}, map[int]bool{0: true, 1: true, 2: true}, ReasonRouted},
		{"last busy, the less busy one lacks the token: the last", ryw, Session[lsn]{Token: 5, HasToken: true, HasLast: true, LastReplica: 1},
			[]Replica[lsn]{up(4), {Applied: 10, Up: true, InFlight: 2}, {Applied: 10, Up: true, InFlight: 2}}, map[int]bool{1: true}, ReasonRouted},
		{"no token, last busier: random", ryw, Session[lsn]{HasLast: true, LastReplica: 0},
			[]Replica[lsn]{{Applied: 10, Up: true, InFlight: 1}, up(10), down(10)}, map[int]bool{0: true, 1: true}, ReasonNoToken},
	}
	for _, c := range cases {
		got := map[int]bool{}
		for rnd := uint64(0); rnd < 12; rnd++ {
			d := decide(c.pol, c.sess, c.reps, rnd)
			if d.Action != ActReplica || d.Reason != c.why {
				t.Fatalf("%s: rand %d: %+v, want a replica (%v)", c.name, rnd, d, c.why)
			}
			got[d.Replica] = true
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s: picked %v, want %v", c.name, got, c.want)
		}
		for i := range got {
			if !c.want[i] {
				t.Fatalf("%s: picked %v, want %v", c.name, got, c.want)
			}
		}
	}
}
