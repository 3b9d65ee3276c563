package router

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genBset draws a small set of transactions.
func genBset(t *rapid.T, label string) bset {
	return bset(rapid.Uint64Range(0, 1<<12-1).Draw(t, label))
}

// TestDecideProperties checks, over random inputs with set-like positions:
//   - a token policy never sends a read to a replica (ActReplica) that lacks
//     the token, nor (MR policies) the watermark;
//   - the primary serves a token read only if it contains the token when
//     PrimaryKnown, and an older-epoch token under CheckEpoch only if the
//     primary contains it;
//   - ActWait/ActStale name an up replica; ActStale happens only under
//     CapServeStale; Fallback only with ActPrimary;
//   - PolicyGlobal never sends a read to a replica that lacks Input.Global
//     (the primary's position at read start), and without GlobalKnown never
//     to a qualifying-looking replica at all;
//   - ActDefer happens only under Policy.Defer or CapDefer, never names a
//     node, carries RetryAfter >= MinRetryAfter; under Policy.Defer no
//     freshness fallback reaches the primary and the bucket is untouched;
//   - the lazy watermark: with a pending seen (MR policies) a read goes to
//     no replica but the pending reads' one (ActReplica, ActStale); it
//     waits (ReasonSeenPending, Replica -1, WaitFor Input.PendingWait)
//     only for a pending seen, falls back with ReasonSeenUnknown only when
//     PendingWait is 0, and under CheckEpoch an older epoch's pending seen
//     is bounded (or the read fails) before anything else;
//   - the futile-wait skip (Policy.SkipFutile): the decision differs from
//     the one without the skip only where that one is a budget wait
//     (ActWait, ReasonNoReplicaQualifies) on a replica whose Lag minus
//     Input.NeedAge (NeedAgeKnown) exceeds its WaitFor, the budget left;
//     every such wait is skipped; and the skip is exactly the decision of
//     a spent budget (Waited = WaitBudget): the same action, node,
//     fallback flag and bucket, ReasonWaitFutile for ReasonWaitBudgetSpent
//     (a cap wait's WaitFor still runs to WaitBudget + ExtraWait);
//     under Policy.FutileTrend the estimate is divided by the waited
//     replica's Progress when above 1 (a catching-up replica's waits are
//     skipped only when Lag-NeedAge exceeds WaitFor×Progress), so it skips
//     a subset of the steady estimate's skips;
//   - Decide is deterministic and does not modify its inputs.
func TestDecideProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 8).Draw(t, "replicas")
		reps := make([]Replica[bset], n)
		for i := range reps {
			reps[i] = Replica[bset]{
				Applied: genBset(t, "applied"),
				Up:      rapid.Bool().Draw(t, "up"),
				Behind:  rapid.Int64Range(0, 100).Draw(t, "behind"),
				Lag:     time.Duration(rapid.IntRange(0, 1000).Draw(t, "lagMs")) * time.Millisecond,
				// 0 (unknown), 0.5 (falling behind), 1 (steady) ... 4.
				Progress: float64(rapid.IntRange(0, 8).Draw(t, "progressHalves")) / 2,
			}
		}
		pol := Policy{
			Kind:       PolicyKind(rapid.IntRange(int(PolicyTokenRYW), int(PolicyGlobal)).Draw(t, "kind")),
			WaitBudget: time.Duration(rapid.IntRange(0, 3).Draw(t, "budget")) * 100 * time.Millisecond,
			CheckEpoch: rapid.Bool().Draw(t, "checkEpoch"),
			Defer:      rapid.Bool().Draw(t, "defer"),
			SkipFutile: rapid.Bool().Draw(t, "skipFutile"),
		}
		pol.FutileTrend = pol.SkipFutile && rapid.Bool().Draw(t, "futileTrend")
		var cp *Cap
		if rapid.Bool().Draw(t, "capped") {
			cp = &Cap{PerSecond: 1, Burst: 1, Behavior: CapBehavior(rapid.IntRange(0, int(CapDefer)).Draw(t, "behavior")),
				ExtraWait: 200 * time.Millisecond}
		}
		sess := Session[bset]{
			Token: genBset(t, "token"), HasToken: rapid.Bool().Draw(t, "hasToken"),
			Epoch: rapid.Uint64Range(0, 2).Draw(t, "epoch"),
			Seen:  genBset(t, "seen"), HasSeen: rapid.Bool().Draw(t, "hasSeen"),
			SeenEpoch: rapid.Uint64Range(0, 2).Draw(t, "seenEpoch"),
		}
		if rapid.Bool().Draw(t, "hasPending") {
			sess.HasPending = true
			sess.PendingReplica = rapid.IntRange(-1, n).Draw(t, "pendingReplica")
			sess.PendingEpoch = rapid.Uint64Range(0, 2).Draw(t, "pendingEpoch")
		}
		if rapid.Bool().Draw(t, "hasLast") {
			sess.HasLast = true
			sess.LastReplica = rapid.IntRange(-1, n).Draw(t, "lastReplica")
		}
		view := View[bset]{Replicas: reps, Primary: genBset(t, "primary"),
			PrimaryKnown: rapid.Bool().Draw(t, "primaryKnown"), Epoch: rapid.Uint64Range(0, 2).Draw(t, "viewEpoch")}
		in := Input[bset]{Policy: &pol, Cap: cp, Session: &sess, View: &view,
			Now:    time.Duration(rapid.IntRange(0, 3000).Draw(t, "nowMs")) * time.Millisecond,
			Rand:   rapid.Uint64().Draw(t, "rand"),
			Waited: time.Duration(rapid.IntRange(0, 8).Draw(t, "waited")) * 100 * time.Millisecond,
			Global: genBset(t, "global"), GlobalKnown: rapid.Bool().Draw(t, "globalKnown"),
			PendingWait:  time.Duration(rapid.IntRange(0, 2).Draw(t, "pendingWaitMs")) * time.Millisecond,
			NeedAge:      time.Duration(rapid.IntRange(0, 600).Draw(t, "needAgeMs")) * time.Millisecond,
			NeedAgeKnown: rapid.Bool().Draw(t, "needAgeKnown")}
		var b Bucket
		if cp != nil && rapid.Bool().Draw(t, "spent") {
			b.take(cp, in.Now)
		}
		sess0, reps0, b0 := sess, append([]Replica[bset](nil), reps...), b

		d := Decide(&in, &b)

		b1 := b0
		if d2 := Decide(&in, &b1); d2 != d || b1 != b {
			t.Fatalf("not deterministic: %+v vs %+v", d, d2)
		}
		if sess.HasLast {
			// The last replica only chooses among replicas the decision
			// would take anyway: same action and reason, and either the
			// same replica or the last one.
			noLast := sess
			noLast.HasLast = false
			in0 := in
			in0.Session = &noLast
			b2 := b0
			d0 := Decide(&in0, &b2)
			if d.Action != d0.Action || d.Reason != d0.Reason || (d.Replica != d0.Replica && d.Replica != sess.LastReplica) {
				t.Fatalf("LastReplica %d changed the decision: %+v, without it %+v", sess.LastReplica, d, d0)
			}
		}
		if sess != sess0 {
			t.Fatal("session modified")
		}
		for i := range reps {
			if reps[i] != reps0[i] {
				t.Fatal("replica modified")
			}
		}
		needSeen := sess.HasSeen && pol.Kind != PolicyTokenRYW
		pending := sess.HasPending && pol.Kind != PolicyTokenRYW
		if pending && (d.Action == ActReplica || d.Action == ActStale) && d.Replica != sess.PendingReplica {
			t.Fatalf("lazy MR: %v on replica %d while the pending seen is on %d: %+v", d.Action, d.Replica, sess.PendingReplica, d)
		}
		if (d.Reason == ReasonSeenPending || d.Reason == ReasonSeenUnknown) && !pending {
			t.Fatalf("%v without a pending seen: %+v", d.Reason, d)
		}
		if d.Reason == ReasonSeenPending && (d.Action != ActWait || d.Replica != -1 || d.WaitFor != in.PendingWait) {
			t.Fatalf("bad seen-pending wait: %+v", d)
		}
		if d.Reason == ReasonSeenUnknown && in.PendingWait > 0 {
			t.Fatalf("seen-unknown while the pending seen can still be bounded: %+v", d)
		}
		if pending && pol.CheckEpoch && sess.PendingEpoch < view.Epoch && d.Action != ActFail && d.Reason != ReasonSeenPending {
			t.Fatalf("an older epoch's pending seen was not bounded first: %+v", d)
		}
		switch d.Action {
		case ActReplica:
			r := reps[d.Replica]
			if !r.Up {
				t.Fatalf("picked down replica %d", d.Replica)
			}
			if sess.HasToken && !r.Applied.Contains(sess.Token) {
				t.Fatalf("RYW: replica %d (%b) lacks token %b", d.Replica, r.Applied, sess.Token)
			}
			if needSeen && !r.Applied.Contains(sess.Seen) {
				t.Fatalf("MR: replica %d (%b) lacks watermark %b", d.Replica, r.Applied, sess.Seen)
			}
			if pol.Kind == PolicyGlobal && (!in.GlobalKnown || !r.Applied.Contains(in.Global)) {
				t.Fatalf("global: replica %d (%b) served without holding the read-start position %b (known %v)",
					d.Replica, r.Applied, in.Global, in.GlobalKnown)
			}
		case ActPrimary:
			if sess.HasToken && view.PrimaryKnown && !view.Primary.Contains(sess.Token) {
				t.Fatalf("primary %b lacks token %b but serves it: %+v", view.Primary, sess.Token, d)
			}
			if d.Fallback != (d.Reason == ReasonNoReplicaQualifies || d.Reason == ReasonWaitBudgetSpent || d.Reason == ReasonWaitFutile || d.Reason == ReasonPrimaryUnknown || d.Reason == ReasonSeenUnknown) {
				t.Fatalf("fallback flag/reason mismatch: %+v", d)
			}
			if d.Fallback && pol.Defer {
				t.Fatalf("freshness fallback to the primary under Defer: %+v", d)
			}
		case ActWait, ActStale:
			if d.Reason == ReasonSeenPending {
				break
			}
			if d.Replica < 0 || d.Replica >= n || !reps[d.Replica].Up {
				t.Fatalf("%v on a bad replica: %+v", d.Action, d)
			}
			if d.Action == ActWait && d.WaitFor <= 0 {
				t.Fatalf("wait of %v", d.WaitFor)
			}
			if d.Action == ActStale && (cp == nil || cp.Behavior != CapServeStale) {
				t.Fatalf("stale without CapServeStale: %+v", d)
			}
		case ActDefer:
			if !pol.Defer && (cp == nil || cp.Behavior != CapDefer) {
				t.Fatalf("defer without Policy.Defer or CapDefer: %+v", d)
			}
			if d.Replica != -1 || d.RetryAfter < MinRetryAfter {
				t.Fatalf("bad deferral: %+v", d)
			}
			if pol.Defer && b != b0 {
				t.Fatal("Policy.Defer touched the bucket")
			}
			minLag := time.Duration(-1)
			for _, r := range reps {
				if r.Up && (minLag < 0 || r.Lag < minLag) {
					minLag = r.Lag
				}
			}
			if minLag < 0 {
				t.Fatalf("deferred with no replica up (an availability fallback goes to the primary): %+v", d)
			}
			if want := max(minLag, MinRetryAfter); d.RetryAfter != want {
				t.Fatalf("RetryAfter %v, want the least up lag %v", d.RetryAfter, want)
			}
		case ActFail:
		default:
			t.Fatalf("unknown action %v", d.Action)
		}
		if d.Action != ActPrimary && d.Fallback {
			t.Fatalf("fallback without the primary: %+v", d)
		}
		if d.Action != ActDefer && d.RetryAfter != 0 {
			t.Fatalf("RetryAfter without a deferral: %+v", d)
		}
		if d.Action != ActFail && pol.CheckEpoch {
			if sess.HasToken && sess.Epoch < view.Epoch && !(view.PrimaryKnown && view.Primary.Contains(sess.Token)) {
				t.Fatalf("lost-epoch token served: %+v", d)
			}
		}
		if d.Fallback && cp != nil && b0.primed && b0.tokens < 1 && in.Now <= b0.last {
			t.Fatalf("fallback from an empty bucket: %+v", d)
		}

		// The futile-wait skip against the same read without it.
		polOff := pol
		polOff.SkipFutile, polOff.FutileTrend = false, false
		inOff := in
		inOff.Policy = &polOff
		bOff := b0
		dOff := Decide(&inOff, &bOff)
		if d.Reason == ReasonWaitFutile && !pol.SkipFutile {
			t.Fatalf("wait-futile without SkipFutile: %+v", d)
		}
		futile := pol.SkipFutile && in.NeedAgeKnown && dOff.Action == ActWait && dOff.Reason == ReasonNoReplicaQualifies &&
			reps[dOff.Replica].Lag-in.NeedAge > dOff.WaitFor
		if futile && pol.FutileTrend {
			if r := &reps[dOff.Replica]; r.Progress > 1 && float64(r.Lag-in.NeedAge) <= float64(dOff.WaitFor)*r.Progress {
				futile = false // catching up fast enough: the wait is made
			}
		}
		if !futile {
			if d != dOff || b != bOff {
				t.Fatalf("skip-futile changed a decision the estimate does not call futile: %+v, without it %+v (lag %v, need age %v known %v)",
					d, dOff, lagOf(reps, dOff.Replica), in.NeedAge, in.NeedAgeKnown)
			}
			return
		}
		// Futile: exactly the spent budget's decision, taken now.
		inSpent := inOff
		inSpent.Waited = pol.WaitBudget
		bSpent := b0
		dSpent := Decide(&inSpent, &bSpent)
		if d.Action != dSpent.Action || d.Replica != dSpent.Replica || d.Fallback != dSpent.Fallback || d.Reanchor != dSpent.Reanchor ||
			d.RetryAfter != dSpent.RetryAfter || b != bSpent {
			t.Fatalf("futile skip %+v is not the spent budget's decision %+v", d, dSpent)
		}
		switch {
		case dSpent.Reason == ReasonWaitBudgetSpent:
			if d.Reason != ReasonWaitFutile {
				t.Fatalf("futile skip with reason %v (the spent budget's: %v)", d.Reason, dSpent.Reason)
			}
		case d.Reason != dSpent.Reason:
			t.Fatalf("futile skip's reason %v, the spent budget's %v", d.Reason, dSpent.Reason)
		}
		if d.Action == ActWait && d.WaitFor != pol.WaitBudget+cp.ExtraWait-in.Waited {
			t.Fatalf("cap wait after a futile skip for %v, want up to budget+extra: %+v", d.WaitFor, d)
		}
	})
}

func lagOf(reps []Replica[bset], i int) time.Duration {
	if i < 0 || i >= len(reps) {
		return -1
	}
	return reps[i].Lag
}

// TestCapNeverExceeded: a stream of fallback-needing reads at random times
// never gets more than burst + rate*elapsed fallbacks.
func TestCapNeverExceeded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cp := &Cap{PerSecond: rapid.Float64Range(0.5, 50).Draw(t, "rate"), Behavior: CapFailFast}
		if err := cp.Validate(); err != nil {
			t.Fatal(err)
		}
		pol := Policy{Kind: PolicyTokenRYW}
		sess := Session[lsn]{Token: 5, HasToken: true}
		view := View[lsn]{Replicas: []Replica[lsn]{up(1)}}
		var b Bucket
		now := time.Duration(0)
		start := time.Duration(-1)
		fallbacks := 0
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for range steps {
			now += time.Duration(rapid.IntRange(0, 200).Draw(t, "gapMs")) * time.Millisecond
			d := Decide(&Input[lsn]{Policy: &pol, Cap: cp, Session: &sess, View: &view, Now: now}, &b)
			if start < 0 {
				start = now
			}
			if d.Fallback {
				fallbacks++
			} else if d.Reason != ReasonCapExceeded {
				t.Fatalf("unexpected %+v", d)
			}
			limit := cp.Burst + cp.PerSecond*(now-start).Seconds()
			if float64(fallbacks) > limit+1e-9 {
				t.Fatalf("%d fallbacks by %v, limit %.2f", fallbacks, now-start, limit)
			}
		}
	})
}
