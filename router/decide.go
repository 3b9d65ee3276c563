package router

import (
	"math/bits"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
)

// Decide routes one read. It is a pure function of *in and *b: it reads no
// clock, does no I/O, does not allocate, and modifies nothing but the bucket
// (which it debits only when it returns a capped freshness fallback, i.e.
// Action ActPrimary with Fallback true, and refills from in.Now).
//
// in.Policy, in.Session and in.View must be non-nil; in.Cap may be nil (no
// cap). Decide does not modify the session: the caller applies what the
// Decision says.
//
// What the caller must do with each Action:
//
//   - ActReplica: run the read on View.Replicas[Replica]. Afterwards raise the
//     session's watermark with Observe (or, bounding it lazily, record the
//     read with ObservePending and resolve it before a later read that
//     needs it, ResolvePending), using a position that is at least
//     everything the read could have observed (for the live router: the
//     replica's @@gtid_executed read on the same connection after the
//     statement; for the simulator: the replica's applied position when the
//     query reached it). Applied from the View is only a lower bound and is
//     NOT a sound watermark.
//   - ActPrimary: run the read on the primary. Fallback tells whether it is a
//     freshness fallback (count it apart; the bucket was debited) or an
//     ordinary primary read (ReasonWindow, ReasonNoReplicaUp). Observe the
//     primary's position after the read, as for a replica.
//   - ActWait: wait until View.Replicas[Replica] qualifies (contains the token
//     and, for the MR policies, the watermark) or WaitFor elapses, whichever
//     first (for ReasonSeenPending, Replica -1: until the pending seen is
//     bounded, then ResolvePending, or WaitFor elapses); then call Decide again with a fresh View, Now and Waited
//     increased by the time actually waited (the wait may end early for
//     another replica, too). Reason is ReasonNoReplicaQualifies for a
//     PolicyTokenWait budget wait and ReasonCapExceeded for CapWaitLonger.
//   - ActFail: do not run the read; return a typed error for Reason:
//     ReasonCapExceeded (retryable), ReasonWriteLost (the session's write is
//     gone), ReasonSeenLost (call Session.DropSeen), ReasonTimedOut.
//   - ActStale: run the read on View.Replicas[Replica], which does NOT
//     qualify, and label the result stale (CapServeStale). Observe it like
//     any read (the session was shown that state; the watermark only grows).
//   - ActDefer: do not run the read, on any node; return a typed deferral
//     carrying Reason and RetryAfter (how long to wait before trying
//     again). A retry is a new read: Waited starts at 0 and, for
//     PolicyGlobal, Input.Global is captured afresh. The bucket is not
//     debited.
//
// Whatever the Action, if Reanchor is true the caller calls
// Session.Reanchor(View.Epoch): an older-epoch token (and watermark) was
// found in the new primary and stays valid on the new timeline.
//
// What a read needs (the token policies): the session's token; for the MR
// policies (PolicyTokenRYWMR, PolicyTokenWait, PolicyGlobal) also its
// watermark; for PolicyGlobal also Input.Global, the primary's executed
// position when the read began. A replica qualifies when it is up and its
// Applied contains every part the read needs.
//
// Rules, in order:
//
//  1. Epoch (Policy.CheckEpoch, token policies only): a token whose Epoch is
//     older than View.Epoch must be contained in the primary (PrimaryKnown
//     required) and in every View.Bases entry of a later epoch (what each
//     promoted primary held when promoted), else ActFail/ReasonWriteLost;
//     for the MR policies the same holds for the watermark, else
//     ActFail/ReasonSeenLost. A pending seen (Session.HasPending) of an
//     older epoch must be bounded first: ActWait/ReasonSeenPending
//     (Replica -1, WaitFor Input.PendingWait) while PendingWait > 0,
//     else ActFail/ReasonSeenLost (it cannot be shown to survive).
//  2. PolicyAny: a uniformly random up replica (Rand).
//     PolicyAffinity: hashroute's View.Hash.Select(Session.AffinityKey,
//     Policy.HashMode, up replicas, InFlight counts) (HashReason says why);
//     no table, or one whose length differs from Replicas: ActFail with
//     ReasonInvalidPolicy. Affinity ignores tokens (monotonic reads by
//     hashing alone).
//     PolicyWindow: the primary (ReasonWindow, not a fallback, not capped)
//     while Now-LastWriteAt < Window after a write; else as PolicyAny.
//     Token policies: with nothing to honour (no token, and no watermark for
//     the MR policies; PolicyGlobal always has Input.Global to honour), as
//     PolicyAny with ReasonNoToken. Otherwise a uniformly random qualifying
//     replica. Either way, Session.LastReplica (HasLast) when it is up
//     (nothing to honour) or qualifies and no other such replica has fewer
//     reads in flight (InFlight): the session stays where its last replica
//     read ran unless that server is the busier one. PolicyGlobal without
//     Input.GlobalKnown: no replica can be shown to qualify; it goes straight to rule 5 with
//     ReasonPrimaryUnknown (no wait: there is nothing to wait for).
//     The lazy watermark (MR policies, Session.HasPending): the pending
//     reads' replica, View.Replicas[PendingReplica], qualifies on the
//     pending part without a test (visibility on one server only grows:
//     it still holds what it showed; the token, Input.Global and Seen are
//     tested as usual), every other replica does not qualify (what the
//     pending reads saw is unknown until bounded); when it qualifies it
//     serves, whatever Rand (stickiness). A pending seen on the primary
//     lets no replica qualify, and so does one with Input.PendingWait 0
//     (its node may have restarted since: it is not sticky either).
//  3. No replica up: the primary, ReasonNoReplicaUp, not a fallback (not
//     capped, not deferred: an availability fallback).
//  4. A pending seen, none qualifies: ActWait/ReasonSeenPending (Replica
//     -1, WaitFor Input.PendingWait) while PendingWait > 0: the caller
//     waits for the bound, calls ResolvePending, and decides again with
//     Waited increased; with PendingWait 0, a freshness fallback with
//     ReasonSeenUnknown (rules 5-7, except that an empty bucket never
//     serves stale nor waits longer: ReasonCapExceeded fails).
//     Token policy, none qualifies: PolicyTokenWait and PolicyGlobal with
//     Waited < WaitBudget wait (ActWait) on the up replica with the
//     smallest Behind (lowest index on ties), unless the wait is futile
//     (Policy.SkipFutile, NeedAgeKnown, and that replica's Lag minus
//     NeedAge, how long it still needs to hold what the read needs if its
//     lag holds steady, exceeds WaitBudget - Waited). Otherwise a
//     freshness fallback, with Reason ReasonNoReplicaQualifies (token-ryw,
//     token-ryw-mr), ReasonWaitFutile (token-wait, global: the wait was
//     skipped), ReasonWaitBudgetSpent (token-wait, global) or
//     ReasonPrimaryUnknown.
//  5. The primary serves a token only if it contains it when PrimaryKnown:
//     otherwise ActFail/ReasonTimedOut (this is what makes a GTID-set token
//     of a lost timeline time out instead of reading stale data, while a
//     scalar position token is contained by any later position). Rule 3
//     applies the same test.
//  6. Policy.Defer: the fallback is deferred instead (ActDefer, the
//     fallback's Reason, RetryAfter); the bucket is not touched.
//  7. The fallback takes one token from the bucket (Cap.PerSecond > 0). When
//     it is empty: CapFailFast fails (ReasonCapExceeded); CapServeStale
//     serves the best replica labelled stale (ActStale); CapWaitLonger waits
//     on the best replica until Waited reaches the policy's budget plus
//     Cap.ExtraWait, then fails (ReasonCapExceeded); CapDefer defers
//     (ActDefer, ReasonCapExceeded, RetryAfter).
//
// RetryAfter is the smallest Lag among the up replicas, at least
// MinRetryAfter.
func Decide[P gtid.Position[P]](in *Input[P], b *Bucket) Decision {
	pol, s, v := in.Policy, in.Session, in.View
	switch pol.Kind {
	case PolicyAny:
		return pickAny(v, in.Rand, ReasonRouted)
	case PolicyAffinity:
		return pickAffinity(v, pol.HashMode, s.AffinityKey)
	case PolicyWindow:
		if s.HasToken && in.Now-s.LastWriteAt < pol.Window {
			return Decision{Action: ActPrimary, Reason: ReasonWindow, Replica: -1}
		}
		return pickAny(v, in.Rand, ReasonRouted)
	case PolicyTokenRYW, PolicyTokenRYWMR, PolicyTokenWait, PolicyGlobal:
		return decideToken(in, b)
	}
	// An unknown kind is a caller bug; fail rather than guess.
	return Decision{Action: ActFail, Reason: ReasonInvalidPolicy, Replica: -1}
}

// need is what a token-policy read needs of a replica (rule 2): each flag
// says whether that part is tested.
type need[P gtid.Position[P]] struct {
	global, tok, seen bool
}

// holds reports whether position a contains every part of the need.
func (n need[P]) holds(in *Input[P], a P) bool {
	s := in.Session
	return (!n.global || a.Contains(in.Global)) && (!n.tok || a.Contains(s.Token)) && (!n.seen || a.Contains(s.Seen))
}

// decideToken handles the token policies (token-ryw, token-ryw-mr,
// token-wait, global): the rules of Decide in order, one function per
// rule group, each returning when its rule decides.
func decideToken[P gtid.Position[P]](in *Input[P], b *Bucket) Decision {
	t := newTokenRead(in, b)
	// Rule 1: epochs.
	if in.Policy.CheckEpoch {
		if t.ruleEpoch() {
			return t.d
		}
	}
	// Rule 2: nothing to honour, else the qualifying replicas.
	if t.nothingToHonour() {
		return t.pickNoToken()
	}
	t.scan()
	if t.nq > 0 {
		return t.pickQualifying()
	}
	// Rule 3: nothing up.
	if t.nUp == 0 {
		return t.noneUp()
	}
	// Rule 4: the pending seen's wait, or the budget wait.
	if t.ruleWait() {
		return t.d
	}
	// Rules 5-7: the freshness fallback.
	return t.fallback()
}

// tokenRead is what decideToken's rules share about one token-policy
// read: what the read needs (set up by newTokenRead), what rule 1 found,
// what rule 2's pass over the replicas found (scan) and what rule 4 left
// for the fallback.
type tokenRead[P gtid.Position[P]] struct {
	in *Input[P]
	b  *Bucket
	// global: PolicyGlobal; needSeen: an MR policy with a watermark.
	global, needSeen bool
	// pending: the MR part of the last reads is not bounded yet; sticky is
	// the replica they ran on (-1: the primary, or no longer a replica).
	pending bool
	sticky  int
	// reanchor: rule 1 found an older-epoch part on the new timeline
	// (every decision after rule 1 carries it).
	reanchor bool

	// Rule 2's pass (scan). nd is what a replica is tested for; unknown:
	// PolicyGlobal without Input.GlobalKnown (no replica can qualify).
	// mask holds the qualifying replicas among the first 64, nq counts
	// them, nUp the up replicas; best is the up, non-qualifying replica
	// with the smallest Behind (-1: none), the one rules 4 and 7 wait on
	// or serve stale.
	nd      need[P]
	unknown bool
	mask    uint64
	nq, nUp int
	best    int

	// Rule 4's verdict for the fallback: its reason, and the wait budget
	// the policy had (CapWaitLonger waits beyond it).
	reason Reason
	budget time.Duration

	// d is the decision of a rule function that reports whether it
	// decided (ruleEpoch, ruleWait).
	d Decision
}

// newTokenRead sets up decideToken's shared state for in.
func newTokenRead[P gtid.Position[P]](in *Input[P], b *Bucket) tokenRead[P] {
	pol, s, v := in.Policy, in.Session, in.View
	mr := pol.Kind != PolicyTokenRYW
	t := tokenRead[P]{in: in, b: b, global: pol.Kind == PolicyGlobal, needSeen: s.HasSeen && mr,
		pending: s.HasPending && mr, sticky: -1}
	if t.pending && in.PendingWait > 0 && s.PendingReplica >= 0 && s.PendingReplica < len(v.Replicas) {
		t.sticky = s.PendingReplica
	}
	return t
}

// with is d carrying rule 1's Reanchor.
func (t *tokenRead[P]) with(d Decision) Decision {
	d.Reanchor = t.reanchor
	return d
}

// ruleEpoch is rule 1 (Policy.CheckEpoch): an older epoch's token and
// watermark must have survived onto the current timeline, and an older
// epoch's pending seen must be bounded first. It reports whether it
// decided (t.d).
func (t *tokenRead[P]) ruleEpoch() bool {
	s, v := t.in.Session, t.in.View
	if s.HasToken && s.Epoch < v.Epoch {
		if !survived(v, s.Token, s.Epoch) {
			t.d = Decision{Action: ActFail, Reason: ReasonWriteLost, Replica: -1}
			return true
		}
		t.reanchor = true
	}
	if t.needSeen && s.SeenEpoch < v.Epoch {
		if !survived(v, s.Seen, s.SeenEpoch) {
			t.d = Decision{Action: ActFail, Reason: ReasonSeenLost, Replica: -1}
			return true
		}
		t.reanchor = true
	}
	if t.pending && s.PendingEpoch < v.Epoch {
		// What the pending reads saw must be bounded before the
		// watermark's survival can be judged.
		t.d = Decision{Action: ActFail, Reason: ReasonSeenLost, Replica: -1}
		if t.in.PendingWait > 0 {
			t.d = t.with(Decision{Action: ActWait, Reason: ReasonSeenPending, Replica: -1, WaitFor: t.in.PendingWait})
		}
		return true
	}
	return false
}

// nothingToHonour reports rule 2's no-token case: no token, and no
// watermark or pending seen for the MR policies (PolicyGlobal always has
// Input.Global to honour).
func (t *tokenRead[P]) nothingToHonour() bool {
	return !t.in.Session.HasToken && !t.needSeen && !t.pending && !t.global
}

// pickNoToken is rule 2 with nothing to honour: the session's last
// replica when it is up and not the busier one, else as PolicyAny, with
// ReasonNoToken.
func (t *tokenRead[P]) pickNoToken() Decision {
	s, v := t.in.Session, t.in.View
	if i, ok := s.last(v); ok && v.Replicas[i].Up && !busier(v, i, func(j int) bool { return v.Replicas[j].Up }) {
		return t.with(Decision{Action: ActReplica, Reason: ReasonNoToken, Replica: i})
	}
	return t.with(pickAny(v, t.in.Rand, ReasonNoToken))
}

// needs is what rule 2 tests a replica for (nd), and whether no replica
// can be shown to qualify (unknown: PolicyGlobal without
// Input.GlobalKnown). A part already contained in another part is not
// tested again: when the watermark holds the token (the usual case once
// a session has read its own write), or the global target holds both (it
// usually does: the primary has every acknowledged write), one Contains
// per replica instead of two or three.
func (t *tokenRead[P]) needs() (nd need[P], unknown bool) {
	in, s := t.in, t.in.Session
	nd = need[P]{global: t.global && in.GlobalKnown, tok: s.HasToken, seen: t.needSeen}
	if nd.global {
		if nd.tok && in.Global.Contains(s.Token) {
			nd.tok = false
		}
		if nd.seen && in.Global.Contains(s.Seen) {
			nd.seen = false
		}
	}
	if nd.tok && nd.seen && len(in.View.Replicas) > 1 && s.Seen.Contains(s.Token) {
		nd.tok = false
	}
	return nd, t.global && !in.GlobalKnown
}

// scan is rule 2's pass over the replicas. One pass; qualifying indexes
// go into a bitmask (first 64 replicas) so the random pick needs no
// second pass of Contains calls. With a pending seen only its replica
// (sticky) can qualify.
func (t *tokenRead[P]) scan() {
	nd, unknown := t.needs()
	in, pending, sticky := t.in, t.pending, t.sticky
	v := in.View
	var mask uint64
	nq, nUp := 0, 0
	best, bestBehind := -1, int64(0)
	for i := range v.Replicas {
		r := &v.Replicas[i]
		if !r.Up {
			continue
		}
		nUp++
		if !unknown && (!pending || i == sticky) && nd.holds(in, r.Applied) {
			if i < 64 {
				mask |= 1 << uint(i)
			}
			nq++
			continue
		}
		if best < 0 || r.Behind < bestBehind {
			best, bestBehind = i, r.Behind
		}
	}
	if pending && nq == 0 {
		// No stale read or cap wait elsewhere: the session's pending seen
		// is on one node only (and, unbounded, not sticky).
		best = -1
		if sticky >= 0 && v.Replicas[sticky].Up {
			best = sticky
		}
	}
	t.nd, t.unknown, t.mask, t.nq, t.nUp, t.best = nd, unknown, mask, nq, nUp, best
}

// pickQualifying is rule 2's pick among the qualifying replicas (t.nq >
// 0): the pending reads' replica, else the session's last replica when
// it qualifies and is not the busier one, else a uniformly random one.
func (t *tokenRead[P]) pickQualifying() Decision {
	if t.pending {
		// Only the pending reads' replica can qualify: it serves.
		return t.with(Decision{Action: ActReplica, Reason: ReasonRouted, Replica: t.sticky})
	}
	in, mask := t.in, t.mask
	v := in.View
	if i, ok := in.Session.last(v); ok && i < 64 && mask&(1<<uint(i)) != 0 &&
		!busier(v, i, func(j int) bool { return j < 64 && mask&(1<<uint(j)) != 0 }) {
		return t.with(Decision{Action: ActReplica, Reason: ReasonRouted, Replica: i})
	}
	k := int(in.Rand % uint64(t.nq))
	idx := nthQualifying(in, mask, k, t.nd)
	return t.with(Decision{Action: ActReplica, Reason: ReasonRouted, Replica: idx})
}

// primaryOK is rule 5's precondition: can the primary serve the token at
// all?
func (t *tokenRead[P]) primaryOK() bool {
	s, v := t.in.Session, t.in.View
	return !s.HasToken || !v.PrimaryKnown || v.Primary.Contains(s.Token)
}

// noneUp is rule 3: no replica up, the primary (an availability
// fallback), when it can serve the token (rule 5's test).
func (t *tokenRead[P]) noneUp() Decision {
	if !t.primaryOK() {
		return t.with(Decision{Action: ActFail, Reason: ReasonTimedOut, Replica: -1})
	}
	return t.with(Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1})
}

// ruleWait is rule 4: the pending seen's wait, or the budget wait. It
// reports whether it decided (t.d); otherwise it has set the fallback's
// reason and budget.
func (t *tokenRead[P]) ruleWait() bool {
	in := t.in
	t.reason = ReasonNoReplicaQualifies
	switch {
	case t.unknown:
		t.reason = ReasonPrimaryUnknown
	case t.pending && in.PendingWait > 0:
		t.d = t.with(Decision{Action: ActWait, Reason: ReasonSeenPending, Replica: -1, WaitFor: in.PendingWait})
		return true
	case t.pending:
		t.reason = ReasonSeenUnknown
	case in.Policy.Kind == PolicyTokenWait || t.global:
		return t.budgetWait()
	}
	return false
}

// budgetWait is rule 4's budget wait (token-wait, global): on the best
// replica for what is left of the budget, unless the budget is spent or
// the wait is futile (Policy.SkipFutile).
func (t *tokenRead[P]) budgetWait() bool {
	in, pol := t.in, t.in.Policy
	t.budget = pol.WaitBudget
	t.reason = ReasonWaitBudgetSpent
	left := t.budget - in.Waited
	if left <= 0 {
		return false
	}
	if pol.SkipFutile && in.NeedAgeKnown && futile(pol, &in.View.Replicas[t.best], in.NeedAge, left) {
		t.reason = ReasonWaitFutile
		return false
	}
	t.d = t.with(Decision{Action: ActWait, Reason: ReasonNoReplicaQualifies, Replica: t.best, WaitFor: left})
	return true
}

// fallback is rules 5-7: a freshness fallback with t.reason.
func (t *tokenRead[P]) fallback() Decision {
	in := t.in
	// Rule 5.
	if !t.primaryOK() {
		return t.with(Decision{Action: ActFail, Reason: ReasonTimedOut, Replica: -1})
	}
	// Rule 6: never the primary for freshness.
	if in.Policy.Defer {
		return t.with(Decision{Action: ActDefer, Reason: t.reason, Replica: -1, RetryAfter: RetryAfter(in.View)})
	}
	// Rule 7: the cap.
	if t.b.take(in.Cap, in.Now) {
		return t.with(Decision{Action: ActPrimary, Reason: t.reason, Replica: -1, Fallback: true})
	}
	return t.capEmpty()
}

// capEmpty is rule 7 with an empty bucket: the cap's behaviour.
func (t *tokenRead[P]) capEmpty() Decision {
	in := t.in
	switch in.Cap.Behavior {
	case CapServeStale:
		if t.best >= 0 {
			return t.with(Decision{Action: ActStale, Reason: ReasonCapExceeded, Replica: t.best})
		}
	case CapWaitLonger:
		if limit := t.budget + in.Cap.ExtraWait; in.Waited < limit && t.best >= 0 {
			return t.with(Decision{Action: ActWait, Reason: ReasonCapExceeded, Replica: t.best, WaitFor: limit - in.Waited})
		}
	case CapDefer:
		return t.with(Decision{Action: ActDefer, Reason: ReasonCapExceeded, Replica: -1, RetryAfter: RetryAfter(in.View)})
	}
	return t.with(Decision{Action: ActFail, Reason: ReasonCapExceeded, Replica: -1})
}

// futile is rule 4's futile-wait test of a wait on r with left of the
// budget: r needs Lag-age to hold the need if its lag holds steady, that
// divided by Progress under FutileTrend when r is catching up.
func futile[P gtid.Position[P]](pol *Policy, r *Replica[P], age, left time.Duration) bool {
	need := r.Lag - age
	if need <= left {
		return false
	}
	if pol.FutileTrend && r.Progress > 1 {
		return float64(need) > float64(left)*r.Progress
	}
	return true
}

// RetryAfter is ActDefer's estimate: the smallest Lag of an up replica, at
// least MinRetryAfter. Off the hot path (only when a read is deferred). A
// caller that learns the replicas' Lag only after a deferral (the live
// router) fills it in and calls RetryAfter on the same view.
func RetryAfter[P gtid.Position[P]](v *View[P]) time.Duration {
	d := time.Duration(-1)
	for i := range v.Replicas {
		if r := &v.Replicas[i]; r.Up && (d < 0 || r.Lag < d) {
			d = r.Lag
		}
	}
	return max(d, MinRetryAfter)
}

// nthQualifying returns the index of the k-th (0-based) qualifying replica.
// For the first 64 replicas it reads the bitmask; beyond, it re-tests.
func nthQualifying[P gtid.Position[P]](in *Input[P], mask uint64, k int, nd need[P]) int {
	if c := bits.OnesCount64(mask); k < c {
		for ; k > 0; k-- {
			mask &= mask - 1
		}
		return bits.TrailingZeros64(mask)
	} else {
		k -= c
	}
	v := in.View
	for i := 64; i < len(v.Replicas); i++ {
		r := &v.Replicas[i]
		if r.Up && nd.holds(in, r.Applied) {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1 // unreachable when k < number qualifying
}

// last returns Session.LastReplica when it is set and indexes v.Replicas.
func (s *Session[P]) last(v *View[P]) (int, bool) {
	if !s.HasLast || s.LastReplica < 0 || s.LastReplica >= len(v.Replicas) {
		return -1, false
	}
	return s.LastReplica, true
}

// busier reports whether replica i has more reads in flight than some
// other replica j for which ok(j) holds (a candidate of the same pick).
func busier[P gtid.Position[P]](v *View[P], i int, ok func(j int) bool) bool {
	for j := range v.Replicas {
		if j != i && ok(j) && v.Replicas[j].InFlight < v.Replicas[i].InFlight {
			return true
		}
	}
	return false
}

// pickAny returns a uniformly random up replica, or the primary
// (ReasonNoReplicaUp) when none is up.
func pickAny[P gtid.Position[P]](v *View[P], rnd uint64, reason Reason) Decision {
	nUp := 0
	for i := range v.Replicas {
		if v.Replicas[i].Up {
			nUp++
		}
	}
	if nUp == 0 {
		return Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}
	}
	k := int(rnd % uint64(nUp))
	for i := range v.Replicas {
		if !v.Replicas[i].Up {
			continue
		}
		if k == 0 {
			return Decision{Action: ActReplica, Reason: reason, Replica: i}
		}
		k--
	}
	return Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1} // unreachable
}

// take debits one fallback from the bucket, refilling it first from now.
// A nil cap or PerSecond <= 0 means no cap. Burst <= 0 means max(1, PerSecond).
func (b *Bucket) take(c *Cap, now time.Duration) bool {
	if c == nil || c.PerSecond <= 0 {
		return true
	}
	burst := c.Burst
	if burst <= 0 {
		burst = max(1, c.PerSecond)
	}
	if !b.primed {
		b.tokens, b.last, b.primed = burst, now, true
	}
	if now > b.last {
		b.tokens += (now - b.last).Seconds() * c.PerSecond
		if b.tokens > burst {
			b.tokens = burst
		}
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// Tokens reports the bucket's current content (for traces and tests).
func (b *Bucket) Tokens() float64 { return b.tokens }

// Observe raises the session's monotonic-reads watermark after a read served
// at position p (which must be at least everything the read could observe),
// recording the epoch in which it was raised. The watermark keeps the oldest
// epoch of its parts (an older part is verified only by Decide's epoch rule,
// after which the caller Reanchors). Off the hot path: Union may allocate.
func Observe[P gtid.Position[P]](s *Session[P], p P, epoch uint64) {
	if s.HasSeen {
		s.Seen = s.Seen.Union(p)
		s.SeenEpoch = min(s.SeenEpoch, epoch)
	} else {
		s.Seen, s.HasSeen, s.SeenEpoch = p, true, epoch
	}
}

// RecordWrite adds an acknowledged write's position to the session's token
// (Union, so earlier writes stay required), with the epoch in which the
// primary acknowledged it and the clock time of the acknowledgement. The
// token keeps the oldest epoch of its parts, so an unverified pre-failover
// write is still checked. Under CheckEpoch with PrimaryKnown, View.Primary
// must include every write the primary acknowledged (the live router adds
// acknowledged GTIDs to it), or a fresh token could be judged lost.
func RecordWrite[P gtid.Position[P]](s *Session[P], p P, epoch uint64, now time.Duration) {
	if s.HasToken {
		s.Token = s.Token.Union(p)
		s.Epoch = min(s.Epoch, epoch)
	} else {
		s.Token, s.HasToken, s.Epoch = p, true, epoch
	}
	s.LastWriteAt = now
}

// Reanchor moves the session's token and watermark to epoch (after a
// Decision with Reanchor: both were found in the new primary).
func (s *Session[P]) Reanchor(epoch uint64) {
	if s.HasToken && s.Epoch < epoch {
		s.Epoch = epoch
	}
	if s.HasSeen && s.SeenEpoch < epoch {
		s.SeenEpoch = epoch
	}
}

// DropSeen forgets the watermark and any pending seen (after
// ReasonSeenLost: what the session was shown no longer exists on any
// timeline the router serves).
func (s *Session[P]) DropSeen() {
	var zero P
	s.Seen, s.HasSeen, s.SeenEpoch = zero, false, 0
	s.HasPending, s.PendingReplica, s.PendingEpoch = false, 0, 0
}

// ObservePending records, instead of Observe, that a read on replica i
// (-1: the primary) in epoch ended and what it saw is not bounded yet
// (the lazy watermark: the caller bounds it later, ResolvePending). The
// session's pending seen is on one node: Decide routes an MR read only to
// that replica while it is pending, and a read on the primary takes it
// over (within an epoch the primary holds everything a replica showed;
// an older epoch's pending seen is resolved first, rule 1). The epoch
// kept is the oldest.
func ObservePending[P gtid.Position[P]](s *Session[P], i int, epoch uint64) {
	if s.HasPending {
		epoch = min(epoch, s.PendingEpoch)
	}
	s.HasPending, s.PendingReplica, s.PendingEpoch = true, i, epoch
}

// ResolvePending folds bound, an upper bound of everything the pending
// reads could have seen (measured on their node after they ended), into
// the watermark (Observe, in the pending reads' epoch) and clears the
// pending seen. Off the hot path: Union may allocate.
func ResolvePending[P gtid.Position[P]](s *Session[P], bound P) {
	if !s.HasPending {
		return
	}
	Observe(s, bound, s.PendingEpoch)
	s.HasPending, s.PendingReplica, s.PendingEpoch = false, 0, 0
}

// pickAffinity hashes the session's key onto View.Hash under the policy's
// mode. Replica order is the table's order.
func pickAffinity[P gtid.Position[P]](v *View[P], mode hashroute.Mode, key uint64) Decision {
	if v.Hash == nil || v.Hash.Len() != len(v.Replicas) {
		return Decision{Action: ActFail, Reason: ReasonInvalidPolicy, Replica: -1}
	}
	var up hashroute.Availability
	for i := range v.Replicas {
		if v.Replicas[i].Up {
			up = up.With(i)
		}
	}
	var inflight []int
	var buf [hashroute.MaxServers]int
	if mode == hashroute.RebalanceOverride {
		for i := range v.Replicas {
			buf[i] = v.Replicas[i].InFlight
		}
		inflight = buf[:len(v.Replicas)]
	}
	i, why := v.Hash.Select(key, mode, up, inflight)
	if i < 0 {
		return Decision{Action: ActPrimary, Reason: ReasonNoReplicaUp, Replica: -1}
	}
	return Decision{Action: ActReplica, Reason: ReasonRouted, Replica: i, HashReason: why}
}

// survived reports whether p, recorded in epoch, is on the current
// timeline (rule 1): the primary holds it, and so did every primary
// promoted since epoch, when it was promoted.
func survived[P gtid.Position[P]](v *View[P], p P, epoch uint64) bool {
	if !v.PrimaryKnown || !v.Primary.Contains(p) {
		return false
	}
	for i := range v.Bases {
		if b := &v.Bases[i]; b.Epoch > epoch && !b.Pos.Contains(p) {
			return false
		}
	}
	return true
}
