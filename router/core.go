package router

import (
	"fmt"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
)

// PolicyKind names a routing rule. Every kind is the same in the
// simulator, the live router, the proxy and the lab.
type PolicyKind uint8

const (
	// PolicyAny: a uniformly random up replica.
	PolicyAny PolicyKind = iota
	// PolicyAffinity: the session's affinity key hashed to one replica
	// (consistent_read_id hashing via package hashroute, in Policy.HashMode).
	PolicyAffinity
	// PolicyWindow: the primary for Policy.Window after the session's last
	// write, otherwise a random up replica.
	PolicyWindow
	// PolicyTokenRYW: a replica whose position contains the session's write
	// token; none qualifies: the primary.
	PolicyTokenRYW
	// PolicyTokenRYWMR: a replica whose position contains both the token and
	// the session's watermark (the highest state it was shown); none: primary.
	PolicyTokenRYWMR
	// PolicyTokenWait: as PolicyTokenRYWMR, but when no replica qualifies wait
	// up to Policy.WaitBudget on the replica likely to catch up first, then
	// fall back to the primary.
	PolicyTokenWait
	// PolicyGlobal: read-all-writes. The read's token is the primary's
	// executed position when the read began (Input.Global), so it sees every
	// write committed anywhere before it, by any session; the session's own
	// token and watermark are honoured too. Then the same wait, fallback and
	// cap rules as PolicyTokenWait, with Policy.WaitBudget.
	PolicyGlobal
)

// Action is what the caller must do with the read.
type Action uint8

const (
	// ActReplica: serve from View.Replicas[Decision.Replica].
	ActReplica Action = iota
	// ActPrimary: serve from the primary (see Decision.Fallback and Reason).
	ActPrimary
	// ActWait: wait up to Decision.WaitFor for View.Replicas[Decision.Replica]
	// to qualify, then call Decide again with Input.Waited increased.
	ActWait
	// ActFail: do not serve; return a typed error to the client
	// (Reason says which: cap exceeded, write lost in failover, timed out).
	ActFail
	// ActStale: serve from View.Replicas[Decision.Replica] although it does not
	// qualify, labelled stale (only under CapServeStale).
	ActStale
	// ActDefer: do not serve now and do not touch the primary: no replica
	// holds what the read needs within its budget, and the read may not fall
	// back to the primary (Policy.Defer, or CapDefer above the cap). Return
	// a typed deferral telling the client to retry after
	// Decision.RetryAfter. Reason says why: ReasonNoReplicaQualifies,
	// ReasonWaitBudgetSpent, ReasonWaitFutile, ReasonPrimaryUnknown or
	// ReasonCapExceeded.
	ActDefer
)

// Reason says why a Decision was made. Every Reason is counted by callers.
type Reason uint8

const (
	// ReasonRouted: the policy's ordinary choice (random, hashed, or a
	// qualifying replica).
	ReasonRouted Reason = iota
	// ReasonNoToken: a token policy with no token and no watermark to honour:
	// any up replica will do.
	ReasonNoToken
	// ReasonWindow: PolicyWindow inside the window: primary.
	ReasonWindow
	// ReasonNoReplicaQualifies: no up replica contains what the session needs.
	ReasonNoReplicaQualifies
	// ReasonWaitBudgetSpent: PolicyTokenWait (or PolicyGlobal) waited its
	// whole budget.
	ReasonWaitBudgetSpent
	// ReasonNoReplicaUp: every replica is down (an availability fallback, not
	// a freshness one: not limited by the cap).
	ReasonNoReplicaUp
	// ReasonCapExceeded: a freshness fallback was needed but the cap is spent.
	ReasonCapExceeded
	// ReasonWriteLost: the token's epoch is older than the topology's and the
	// new primary lacks some of the token's transactions.
	ReasonWriteLost
	// ReasonTimedOut: nobody, the primary included, can serve the token within
	// the budget (e.g. a token of a timeline that no longer exists).
	ReasonTimedOut
	// ReasonSeenLost: (CheckEpoch, PolicyTokenRYWMR/PolicyTokenWait) the
	// session's watermark was recorded in an older epoch and the new primary
	// lacks some of it: the session was shown transactions lost in the
	// failover, so monotonic reads cannot be kept. The caller returns a typed
	// error and calls Session.DropSeen so the next read starts afresh.
	ReasonSeenLost
	// ReasonInvalidPolicy: Policy.Kind is not a known kind (a caller bug;
	// Decide fails rather than guess).
	ReasonInvalidPolicy
	// ReasonPrimaryUnknown: PolicyGlobal without the primary's executed
	// position for this read (Input.GlobalKnown false): no replica can be
	// shown to hold every write, so the read is a freshness fallback to the
	// primary (capped), or deferred under Policy.Defer. Never a silent
	// replica read.
	ReasonPrimaryUnknown
	// ReasonSeenPending: (MR policies, Session.HasPending) the session's
	// last reads ran on a node it cannot be routed to now and what they
	// saw is not bounded yet: ActWait (Replica -1) up to Input.PendingWait
	// for the caller's position source to bound it (ResolvePending), then
	// decide again.
	ReasonSeenPending
	// ReasonSeenUnknown: (MR policies, Session.HasPending with
	// Input.PendingWait 0) what the session's last reads saw cannot be
	// bounded (their node restarted or went down since, with no poll of it
	// after them), and the node cannot serve this read: no replica can be
	// shown to hold it, so the read is a freshness fallback to the
	// primary, which holds everything a replica showed in its epoch
	// (capped, deferred under Policy.Defer).
	ReasonSeenUnknown
	// ReasonWaitFutile: (PolicyTokenWait, PolicyGlobal with
	// Policy.SkipFutile) no replica
	// qualifies and the budget wait was skipped because it cannot succeed:
	// the replica it would wait on needs longer than the budget left to
	// hold what the read needs, if its lag holds steady (its Lag minus
	// Input.NeedAge; Decide's rule 4). A freshness fallback like
	// ReasonWaitBudgetSpent (the primary must contain the token; capped;
	// deferred under Policy.Defer), taken at once instead of after the
	// budget.
	ReasonWaitFutile
	// NumReasons is the number of reasons (array sizes); keep it after
	// the last.
	NumReasons = int(ReasonWaitFutile) + 1
)

// Outcome is the typed result of one read, whoever served or refused it:
// the live router counts it (its metrics' outcome label), the lab judges
// it against ground truth, the simulator tallies it. Every read gets
// exactly one.
type Outcome uint8

const (
	// OutReplica: served by a replica that qualified.
	OutReplica Outcome = iota
	// OutFallback: served by the primary for freshness (no replica
	// qualified, the wait budget was spent or the wait was futile);
	// limited by the cap.
	OutFallback
	// OutPrimary: served by the primary for another reason (PolicyWindow,
	// no replica up, a session pinned to the primary): not a freshness
	// fallback, not capped.
	OutPrimary
	// OutStale: served by a replica that did not qualify, labelled stale
	// (CapServeStale above the cap).
	OutStale
	// OutProxied: served through causallab proxy, which does not tell its
	// client which node answered (the proxy's own metrics do).
	OutProxied
	// OutFailedFast: not served; refused at once with a typed error (cap
	// exceeded under CapFailFast, write or watermark lost in a failover).
	OutFailedFast
	// OutTimedOut: not served after waiting (wait budget and cap wait
	// spent, or a token nobody can serve).
	OutTimedOut
	// OutError: not served; a database, network or context error.
	OutError
	// OutDeferred: not served and not sent to the primary: the router
	// answered "retry after" (ActDefer, Policy.Defer or CapDefer).
	OutDeferred
	// NumOutcomes is the number of outcomes (array sizes).
	NumOutcomes = int(OutDeferred) + 1
)

// CapBehavior is what happens to a freshness fallback above the cap.
type CapBehavior uint8

const (
	// CapWaitLonger: wait on the best replica for up to Cap.ExtraWait more,
	// then fail with ReasonCapExceeded.
	CapWaitLonger CapBehavior = iota
	// CapFailFast: fail at once with ReasonCapExceeded (a retryable error).
	CapFailFast
	// CapServeStale: serve from the best replica, labelled stale (ActStale).
	CapServeStale
	// CapDefer: defer the read (ActDefer with ReasonCapExceeded and a retry
	// estimate); the primary is not touched.
	CapDefer
)

// MinRetryAfter is the shortest retry delay an ActDefer carries: the
// estimate when every up replica reports no time lag (caught up, or a lag
// the caller does not know) but none holds what the read needs.
const MinRetryAfter = 10 * time.Millisecond

// Policy configures one routing rule.
type Policy struct {
	// Kind is the routing rule.
	Kind PolicyKind
	// Window is PolicyWindow's length: reads go to the primary for this long
	// after the session's last write. Zero means no window at all (W=0 is a
	// point of the window experiment); constructors and flags default to
	// DefaultWindow (500ms). Negative is rejected by Validate.
	Window time.Duration
	// WaitBudget is PolicyTokenWait's longest wait before falling back.
	WaitBudget time.Duration
	// CheckEpoch makes tokens carry the topology epoch: a token from an older
	// epoch is honoured only if the current primary contains it, otherwise the
	// read fails fast with ReasonWriteLost.
	CheckEpoch bool
	// Defer (token policies and PolicyGlobal): a freshness fallback never
	// goes to the primary. When no replica holds what the read needs within
	// the budget, Decide answers ActDefer with a retry estimate instead (a
	// job that would rather wait its turn than load the primary). An
	// availability fallback (no replica up, ReasonNoReplicaUp) still goes to
	// the primary.
	Defer bool
	// SkipFutile (PolicyTokenWait, PolicyGlobal): skip a budget wait that
	// cannot succeed and fall back at once (ReasonWaitFutile, Decide's rule
	// 4): the replica it would wait on needs longer than the budget left to
	// hold what the read needs, if its lag holds steady (Replica.Lag minus
	// Input.NeedAge). Off by default: the steady-lag estimate fits a
	// standing lag (a delayed or distant replica, a stopped applier with
	// writes behind it) and misjudges a replica catching up faster than
	// real time after a stall, whose waits it skips although they would
	// have succeeded (docs/sim.md, "lagwait", measures both).
	SkipFutile bool
	// FutileTrend (with SkipFutile): the futile-wait test divides the
	// steady-lag estimate by the waited replica's Progress when it is
	// above 1 (a replica catching up reaches the need sooner than its lag
	// says); Progress 0 or at most 1 leaves the steady estimate.
	FutileTrend bool
	// HashMode selects the hashroute mode for PolicyAffinity (FullList, the
	// correct scheme, is the zero value; AvailableOnly and RebalanceOverride
	// reproduce Shopify's two bugs).
	HashMode hashroute.Mode
}

// Cap limits freshness fallbacks to the primary with a token bucket.
type Cap struct {
	// PerSecond is the sustained number of fallbacks allowed per second;
	// 0 disables the cap.
	PerSecond float64
	// Burst is the bucket size; default max(1, PerSecond).
	Burst float64
	// Behavior applies to a fallback that finds the bucket empty.
	Behavior CapBehavior
	// ExtraWait is CapWaitLonger's extra wait.
	ExtraWait time.Duration
}

// Bucket is the mutable state of a Cap. Decide takes and updates it; the
// caller owns it (one goroutine, or one simulator).
type Bucket struct {
	tokens float64
	last   time.Duration
	primed bool
}

// Session is the per-session causal state.
type Session[P gtid.Position[P]] struct {
	// Token is the position of the session's acknowledged writes.
	Token P
	// HasToken is false until the session's first acknowledged write.
	HasToken bool
	// Epoch is the topology epoch in which Token was issued.
	Epoch uint64
	// SeenEpoch is the topology epoch in which Seen was last raised.
	SeenEpoch uint64
	// Seen is the monotonic-reads watermark: at least every state the
	// session's reads may have observed.
	Seen P
	// HasSeen is false until the session's first read.
	HasSeen bool
	// HasPending (MR policies, a caller that bounds watermarks lazily):
	// the session's last reads ran on one node and what they saw is not in
	// Seen yet (ObservePending). Visibility on one server only grows, so
	// that node still holds it; any other node is shown to hold it only
	// once the caller bounds it (ResolvePending: an upper bound of the
	// node's position measured after the reads ended).
	HasPending bool
	// PendingReplica indexes View.Replicas for the pending reads' node;
	// -1: the primary.
	PendingReplica int
	// PendingEpoch is the topology epoch of the pending reads.
	PendingEpoch uint64
	// HasLast (set by a caller that keeps a connection per replica, as
	// router/live does; the simulator leaves it false): LastReplica
	// indexes View.Replicas for the replica that served the session's
	// last replica read. Where a token policy would pick a random
	// qualifying (or, with nothing to honour, up) replica, it picks that
	// one while it qualifies and no other candidate has fewer reads in
	// flight (Replica.InFlight): the session's connection there is open and
	// that server's threads are warm, as with MySQL Router, which routes
	// a connection, not a read. It never makes a replica qualify.
	HasLast     bool
	LastReplica int
	// LastWriteAt is the clock time of the last acknowledged write
	// (PolicyWindow); meaningful when HasToken.
	LastWriteAt time.Duration
	// AffinityKey is the session's hash key (hashroute.Hash of its
	// consistent_read_id, or of the session id).
	AffinityKey uint64
}

// Replica is the router's view of one replica.
type Replica[P gtid.Position[P]] struct {
	// Applied is a lower bound of what the replica has applied (never ahead).
	Applied P
	// Up is false when the replica is down or unreachable.
	Up bool
	// Behind estimates how many transactions the replica is behind the
	// primary; the smallest is the one likely to catch up first.
	Behind int64
	// InFlight is the number of reads in flight on it (rebalance-override).
	InFlight int
	// Lag is how far behind the primary the replica is in time: the age of
	// the oldest primary transaction it has not applied (0 when caught up or
	// unknown). Used for ActDefer's RetryAfter and, for the replica a budget
	// wait would wait on, for the futile-wait test (rule 4, with
	// Input.NeedAge); 0 never makes a wait futile. A caller that measures
	// it only when it is needed (the live router) fills it after an ActWait
	// with ReasonNoReplicaQualifies, for Decision.Replica, and decides again.
	Lag time.Duration
	// Progress is how fast the replica has recently moved through the
	// primary's history: seconds of primary time its view advanced per
	// second (1: a steady lag; above 1: catching up; 0: unknown). Read only
	// under Policy.FutileTrend, by the futile-wait test.
	Progress float64
}

// View is the router's view of the topology at decision time.
type View[P gtid.Position[P]] struct {
	// Replicas in configured order (the hashing list).
	Replicas []Replica[P]
	// Primary is the primary's position; consulted only when PrimaryKnown.
	// When known, the primary must contain a token to serve it.
	Primary      P
	PrimaryKnown bool
	// Epoch is the current topology epoch (increases at every failover).
	Epoch uint64
	// Bases are the promoted primaries' positions at each failover, oldest
	// first: Bases[i].Pos is what the primary of epoch Bases[i].Epoch held
	// when it was promoted. Rule 1 needs them for numbered positions (an
	// LSN, a MariaDB sequence, a scalar): the new timeline's numbers soon
	// pass a lost write's, so "the current primary contains it" stops
	// telling a surviving write from a lost one. A token of epoch e
	// survives only when every base of a later epoch contains it. Empty:
	// rule 1 consults Primary alone (exact for GTID sets, whose lost
	// transactions' UUIDs never come back).
	Bases []EpochBase[P]
	// Hash is the hashroute table built over Replicas' configured order
	// (Hash.Len() == len(Replicas), at most hashroute.MaxServers). Required
	// by PolicyAffinity only; nil otherwise is fine.
	Hash *hashroute.Table
}

// EpochBase is the promoted primary's position at the failover that
// began Epoch (View.Bases).
type EpochBase[P gtid.Position[P]] struct {
	Epoch uint64
	Pos   P
}

// Input is everything Decide reads.
type Input[P gtid.Position[P]] struct {
	Policy  *Policy
	Cap     *Cap
	Session *Session[P]
	View    *View[P]
	// Now is the clock (simulated or monotonic wall time since start).
	Now time.Duration
	// Rand is a uniformly random draw supplied by the caller (PolicyAny and
	// tie-breaks), so Decide stays deterministic.
	Rand uint64
	// Waited is how long this read has already waited (0 on the first call).
	Waited time.Duration
	// Global is PolicyGlobal's token: the primary's executed position when
	// this read began, with GlobalKnown true. The caller captures it once
	// per read (View.Primary at the read's first call, or the primary's
	// @@gtid_executed) and passes the same value on every call after a
	// wait, so a waiting read waits for a fixed target, not for the
	// primary's moving head. A deferred read that is retried is a new read:
	// it captures a fresh one. Ignored by the other policies.
	Global      P
	GlobalKnown bool
	// PendingWait (MR policies, Session.HasPending): how much longer the
	// caller can wait for its position source to bound the pending seen
	// (for the live router: a poll of the node that started after the
	// reads ended, on a connection open since before they began). Zero:
	// it cannot be bounded (the node restarted or went down since, with
	// no such poll): ReasonSeenUnknown.
	PendingWait time.Duration
	// NeedAge, with NeedAgeKnown true (PolicyTokenWait, PolicyGlobal): how
	// long ago the primary first held everything the read needs (its
	// token, its watermark under the MR policies, Global for PolicyGlobal):
	// the age of the newest of those transactions. With the waited
	// replica's Lag it makes the futile-wait test of rule 4: if that
	// replica's lag holds steady it shows at any moment what the primary
	// held Lag earlier, so it holds the need in Lag-NeedAge. Unknown
	// (NeedAgeKnown false): no wait is judged futile. Like Lag, a caller
	// may fill it only after an ActWait and decide again (Decide reads it
	// only when it is about to return a budget wait).
	NeedAge      time.Duration
	NeedAgeKnown bool
}

// Decision is Decide's answer.
type Decision struct {
	Action Action
	Reason Reason
	// Replica indexes View.Replicas for ActReplica, ActWait and ActStale.
	Replica int
	// Fallback is true when a read goes to the primary for freshness (counted
	// separately from ordinary primary reads and limited by the cap).
	Fallback bool
	// WaitFor is how much longer to wait (ActWait).
	WaitFor time.Duration
	// Reanchor is true when an older-epoch token (or watermark) was found in
	// the new primary: the caller calls Session.Reanchor(View.Epoch).
	Reanchor bool
	// HashReason is hashroute's reason for PolicyAffinity (first choice,
	// reselected, remapped, rebalanced); zero (hashroute.NoServerUp) for
	// other policies and when no replica is up.
	HashReason hashroute.Reason
	// RetryAfter is ActDefer's estimate of when to try again: the smallest
	// Lag among the up replicas (by then, if its lag holds steady, that
	// replica has applied everything the primary holds now, which contains
	// what the read needs), at least MinRetryAfter.
	RetryAfter time.Duration
}

func (a Action) String() string {
	switch a {
	case ActReplica:
		return "replica"
	case ActPrimary:
		return "primary"
	case ActWait:
		return "wait"
	case ActFail:
		return "fail"
	case ActStale:
		return "stale"
	case ActDefer:
		return "defer"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}
