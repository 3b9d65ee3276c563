package router

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
)

var _ gtid.Position[gtid.Set] = gtid.Set{}

// uuidN returns a deterministic server UUID number i.
func uuidN(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", 0x3e11fa47+i, i) }

// setOf builds a set with nUUID sources, each executed 1..hi: what a
// replica's @@gtid_executed looks like. With holes, every 1000th pair of
// transactions is missing (a fragmented history: a stress case).
func setOf(nUUID int, hi int64, holes bool) gtid.Set {
	var parts []string
	for u := range nUUID {
		var iv []string
		step := hi
		if holes {
			step = 1000
		}
		for start := int64(1); start <= hi; start += step {
			end := min(start+step-3, hi)
			if !holes {
				end = hi
			}
			iv = append(iv, fmt.Sprintf("%d-%d", start, end))
		}
		parts = append(parts, uuidN(u)+":"+strings.Join(iv, ":"))
	}
	return gtid.MustParse(strings.Join(parts, ","))
}

func benchDecide(b *testing.B, nReplicas, nUUID int, holes bool, pol Policy) {
	// Replicas are a few transactions apart; the token (the session's last
	// write) and the watermark sit near the top, so only the most advanced
	// replicas qualify and every replica is tested.
	reps := make([]Replica[gtid.Set], nReplicas)
	for i := range reps {
		reps[i] = Replica[gtid.Set]{Applied: setOf(nUUID, int64(50000+i), holes), Up: true, Behind: int64(nReplicas - i)}
	}
	var tokParts []string
	for u := range nUUID {
		tokParts = append(tokParts, fmt.Sprintf("%s:%d", uuidN(u), 50000+nReplicas-2))
	}
	sess := Session[gtid.Set]{
		Token: gtid.MustParse(strings.Join(tokParts, ",")), HasToken: true,
		Seen: setOf(nUUID, int64(50000+nReplicas-3), holes), HasSeen: true,
	}
	view := View[gtid.Set]{Replicas: reps}
	cp := &Cap{PerSecond: 100, Behavior: CapFailFast}
	if err := cp.Validate(); err != nil {
		b.Fatal(err)
	}
	in := Input[gtid.Set]{Policy: &pol, Cap: cp, Session: &sess, View: &view}
	var bk Bucket
	if d := Decide(&in, &bk); d.Action != ActReplica {
		b.Fatalf("setup: %+v", d)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		in.Rand = uint64(i)
		in.Now = time.Duration(i) * time.Microsecond
		d := Decide(&in, &bk)
		if d.Action != ActReplica {
			b.Fatalf("%+v", d)
		}
	}
}

// BenchmarkDecide: the targets are 5 replicas / 1-UUID token
// <= 200 ns, 0 allocs; 20 replicas / 10-UUID tokens <= 2 µs.
func BenchmarkDecide(b *testing.B) {
	for _, c := range []struct {
		reps, uuids int
		holes       bool
	}{{5, 1, false}, {20, 10, false}, {5, 1, true}, {20, 10, true}} {
		for _, k := range []PolicyKind{PolicyAny, PolicyTokenRYW, PolicyTokenRYWMR, PolicyTokenWait} {
			pol := Policy{Kind: k, WaitBudget: DefaultWaitBudget, CheckEpoch: true}
			name := fmt.Sprintf("replicas=%d/uuids=%d/%v", c.reps, c.uuids, k)
			if c.holes {
				name = fmt.Sprintf("replicas=%d/uuids=%d/fragmented/%v", c.reps, c.uuids, k)
			}
			b.Run(name, func(b *testing.B) {
				benchDecide(b, c.reps, c.uuids, c.holes, pol)
			})
		}
		// The zero-wait path with the futile-wait test on: a replica
		// qualifies, so the test is never reached.
		pol := Policy{Kind: PolicyTokenWait, WaitBudget: DefaultWaitBudget, CheckEpoch: true, SkipFutile: true}
		name := fmt.Sprintf("replicas=%d/uuids=%d/%v", c.reps, c.uuids, pol.Kind)
		if c.holes {
			name = fmt.Sprintf("replicas=%d/uuids=%d/fragmented/%v", c.reps, c.uuids, pol.Kind)
		}
		b.Run(name+"+skip-futile", func(b *testing.B) {
			benchDecide(b, c.reps, c.uuids, c.holes, pol)
		})
	}
}

// BenchmarkDecideWait: no replica qualifies under token-wait(400ms): the
// budget wait, and with +skip-futile the wait the estimate lets through
// (lag 100 ms) and the futile one it skips to the primary (lag 2 s).
func BenchmarkDecideWait(b *testing.B) {
	for _, c := range []struct {
		name string
		skip bool
		lag  time.Duration
		want Action
	}{{"token-wait", false, 2 * time.Second, ActWait}, {"skip-futile/waits", true, 100 * time.Millisecond, ActWait},
		{"skip-futile/futile", true, 2 * time.Second, ActPrimary}} {
		b.Run(c.name, func(b *testing.B) {
			reps := make([]Replica[gtid.Set], 5)
			for i := range reps {
				reps[i] = Replica[gtid.Set]{Applied: setOf(1, 100, false), Up: true, Behind: int64(5 - i), Lag: c.lag}
			}
			sess := Session[gtid.Set]{Token: gtid.MustParse(uuidN(0) + ":200"), HasToken: true}
			pol := Policy{Kind: PolicyTokenWait, WaitBudget: DefaultWaitBudget, SkipFutile: c.skip}
			cp := &Cap{PerSecond: 1e9, Behavior: CapFailFast}
			_ = cp.Validate()
			in := Input[gtid.Set]{Policy: &pol, Cap: cp, Session: &sess, View: &View[gtid.Set]{Replicas: reps},
				NeedAge: 5 * time.Millisecond, NeedAgeKnown: true}
			var bk Bucket
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				in.Now = time.Duration(i) * time.Microsecond
				if d := Decide(&in, &bk); d.Action != c.want {
					b.Fatalf("%+v", d)
				}
			}
		})
	}
}

// BenchmarkDecideFallback: no replica qualifies; the bucket is consulted.
func BenchmarkDecideFallback(b *testing.B) {
	reps := make([]Replica[gtid.Set], 5)
	for i := range reps {
		reps[i] = Replica[gtid.Set]{Applied: setOf(1, 100, false), Up: true}
	}
	sess := Session[gtid.Set]{Token: gtid.MustParse(uuidN(0) + ":200"), HasToken: true}
	pol := Policy{Kind: PolicyTokenRYW}
	cp := &Cap{PerSecond: 1e9, Behavior: CapFailFast}
	_ = cp.Validate()
	in := Input[gtid.Set]{Policy: &pol, Cap: cp, Session: &sess, View: &View[gtid.Set]{Replicas: reps}}
	var bk Bucket
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in.Now = time.Duration(i) * time.Microsecond
		if d := Decide(&in, &bk); d.Action != ActPrimary {
			b.Fatalf("%+v", d)
		}
	}
}
