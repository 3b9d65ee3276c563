package lab

import (
	"math/rand/v2"
	"testing"

	"github.com/causallab/causallab/gtid"
)

// prefixWorld is a random primary history for the prefix check's
// property tests: writes[i] (GNO i+1) by session sess[i], its seq[i]-th,
// giving hot row hot[i] its next version.
type prefixWorld struct {
	sessions, hotRows int
	sess, hot         []int
	seq, version      []int64
}

func newPrefixWorld(rng *rand.Rand, n, sessions, hotRows int) *prefixWorld {
	w := &prefixWorld{sessions: sessions, hotRows: hotRows}
	seqs := make([]int64, sessions)
	vers := make([]int64, hotRows)
	for range n {
		s, h := rng.IntN(sessions), rng.IntN(hotRows)
		seqs[s]++
		vers[h]++
		w.sess, w.hot = append(w.sess, s), append(w.hot, h)
		w.seq, w.version = append(w.seq, seqs[s]), append(w.version, vers[h])
	}
	return w
}

// state is session s's read of the state after the first c writes.
func (w *prefixWorld) state(s, c int) (int64, []int64) {
	var own int64
	hot := make([]int64, w.hotRows)
	for i := range c {
		if w.sess[i] == s {
			own = w.seq[i]
		}
		hot[w.hot[i]] = w.version[i]
	}
	return own, hot
}

// isPrefix is the oracle: some cut of the history gives exactly this read.
func (w *prefixWorld) isPrefix(s int, own int64, hot []int64) bool {
	for c := 0; c <= len(w.sess); c++ {
		o, h := w.state(s, c)
		if o == own && slicesEqual(h, hot) {
			return true
		}
	}
	return false
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// check records the history's writes in a PrefixCheck, each GTID kept
// with probability keep.
func (w *prefixWorld) check(rng *rand.Rand, sid gtid.SID, keep float64) *PrefixCheck {
	p := NewPrefixCheck(w.sessions, w.hotRows)
	for i := range w.sess {
		if rng.Float64() < keep {
			p.Write(w.sess[i], w.seq[i], w.hot[i], w.version[i], gtid.GTID{SID: sid, GNO: int64(i + 1)})
		}
	}
	return p
}

// read is a random read of session s: a cut's state, perturbed (one or
// two rows set to another version the history has) half the time.
func (w *prefixWorld) read(rng *rand.Rand, s int) (int64, []int64) {
	own, hot := w.state(s, rng.IntN(len(w.sess)+1))
	if rng.IntN(2) == 0 {
		return own, hot
	}
	_, last := w.state(s, len(w.sess))
	lastOwn, _ := w.state(s, len(w.sess))
	for range 1 + rng.IntN(2) {
		if r := rng.IntN(w.hotRows + 1); r == w.hotRows {
			own = rng.Int64N(lastOwn + 1)
		} else {
			hot[r] = rng.Int64N(last[r] + 1)
		}
	}
	return own, hot
}

// eachPrefixRead draws 300 random histories, each checked with a
// fraction keep of its GTIDs known, and 20 random reads of each, and
// hands f every read with the check's verdict.
func eachPrefixRead(rng *rand.Rand, keep float64, f func(w *prefixWorld, s int, own int64, hot []int64, got bool, why PrefixWitness)) {
	for range 300 {
		w := newPrefixWorld(rng, 1+rng.IntN(40), 1+rng.IntN(4), 1+rng.IntN(4))
		p := w.check(rng, gtid.SID{1, 2, 3}, keep)
		for range 20 {
			s := rng.IntN(w.sessions)
			own, hot := w.read(rng, s)
			got, why := p.NonPrefix(s, own, hot)
			f(w, s, own, hot, got, why)
		}
	}
}

// TestPrefixCheckProperty: with every GTID known, the check flags a read
// exactly when no cut of the primary's history gives it (the oracle
// tries every cut), over random histories and reads, prefix and not.
// Removing the check (NonPrefix always false) fails it: some reads are no
// prefix.
func TestPrefixCheckProperty(t *testing.T) {
	var prefix, non int
	eachPrefixRead(rand.New(rand.NewPCG(41, 1)), 1, func(w *prefixWorld, s int, own int64, hot []int64, got bool, why PrefixWitness) {
		want := !w.isPrefix(s, own, hot)
		if got != want {
			t.Fatalf("session %d read own=%d hot=%v: non-prefix %v (%v), oracle %v; history sess=%v hot=%v",
				s, own, hot, got, why, want, w.sess, w.hot)
		}
		if want {
			non++
		} else {
			prefix++
		}
	})
	if prefix < 1000 || non < 1000 {
		t.Fatalf("the property test drew %d prefix and %d non-prefix reads: too few of one kind", prefix, non)
	}
	t.Logf("%d prefix and %d non-prefix reads judged as the oracle", prefix, non)
}

// TestPrefixCheckSoundWithUnknowns: with a third of the GTIDs unknown
// (writes of unknown outcome), every flag is still a proof: no prefix
// read is flagged, and most non-prefix reads still are.
func TestPrefixCheckSoundWithUnknowns(t *testing.T) {
	var non, flagged int
	eachPrefixRead(rand.New(rand.NewPCG(41, 2)), 0.67, func(w *prefixWorld, s int, own int64, hot []int64, got bool, why PrefixWitness) {
		if w.isPrefix(s, own, hot) {
			if got {
				t.Fatalf("prefix read own=%d hot=%v flagged: %v", own, hot, why)
			}
			return
		}
		non++
		if got {
			flagged++
		}
	})
	if flagged == 0 || flagged*2 < non {
		t.Fatalf("flagged %d of %d non-prefix reads with a third of the GTIDs unknown", flagged, non)
	}
	t.Logf("flagged %d of %d non-prefix reads with a third of the GTIDs unknown", flagged, non)
}

// TestPrefixCheckSources: writes of two sources are never compared, and
// a version given two GTIDs (a renumbered timeline) is skipped.
func TestPrefixCheckSources(t *testing.T) {
	a, b := gtid.SID{0xa}, gtid.SID{0xb}
	p := NewPrefixCheck(1, 2)
	p.Write(0, 1, 0, 1, gtid.GTID{SID: a, GNO: 1}) // hot0 v1
	p.Write(0, 2, 1, 1, gtid.GTID{SID: b, GNO: 9}) // hot1 v1, another source
	if non, why := p.NonPrefix(0, 2, []int64{0, 1}); non {
		t.Fatalf("compared two sources: %v", why)
	}
	p.Write(0, 3, 1, 2, gtid.GTID{SID: a, GNO: 2}) // hot1 v2, source a
	// own=3 (a:2) seen, hot0 v1 (a:1) missed: no prefix.
	non, why := p.NonPrefix(0, 3, []int64{0, 2})
	if !non || why.MissedGTID.GNO != 1 || why.MissedRow != "hot0" {
		t.Fatalf("missed a:1 behind a:2: %v %v", non, why)
	}
	// hot0 v1 given again by source b: the version is skipped, the flag gone.
	p.Write(0, 4, 0, 1, gtid.GTID{SID: b, GNO: 10})
	if non, why := p.NonPrefix(0, 3, []int64{0, 2}); non {
		t.Fatalf("a version of two sources was compared: %v", why)
	}
	if p.Conflicts() != 1 {
		t.Fatalf("conflicts %d, want 1", p.Conflicts())
	}
}
