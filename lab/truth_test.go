package lab

import (
	"testing"

	"github.com/causallab/causallab/router"
)

func served(sess int, acked, own int64, hot ...int64) *Read {
	return &Read{Session: sess, AckedSeq: acked, Own: own, Hot: hot, Outcome: router.OutReplica}
}

// on marks r as served on connection conn (Read.Conn).
func on(conn uint32, r *Read) *Read { r.Conn = conn; return r }

// TestCheckerCraftedHistories feeds hand-written histories and pins every
// verdict: both kinds of violation, and none where there is none.
func TestCheckerCraftedHistories(t *testing.T) {
	type step struct {
		r       *Read
		ryw, mr bool
		mrRow   int
		// reconnect and across: Verdict.Reconnect and
		// Verdict.MRAcrossReconnect (mrRow is then the row that went back).
		reconnect, across bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"fresh reads: no violation", []step{
			{r: served(0, 0, 0, 0, 0, 0)},
			{r: served(0, 1, 1, 1, 0, 0)},
			{r: served(0, 1, 1, 1, 2, 0)},
			{r: served(0, 2, 3, 1, 2, 5)}, // own ahead of the ack (a later write landed): fine
		}},
		{"own row behind the ack: RYW", []step{
			{r: served(0, 1, 1, 1, 0)},
			{r: served(0, 2, 1, 1, 0), ryw: true},
			{r: served(0, 2, 2, 1, 0)},
		}},
		{"own row at zero with a write acked: RYW", []step{
			{r: served(1, 1, 0, 0, 0), ryw: true},
		}},
		{"a hot row goes down: MR", []step{
			{r: served(0, 0, 0, 3, 7)},
			{r: served(0, 0, 0, 3, 6), mr: true, mrRow: 1},
			// the watermark stays at 7: still backwards
			{r: served(0, 0, 0, 4, 6), mr: true, mrRow: 1},
			{r: served(0, 0, 0, 4, 7)},
		}},
		{"both at once", []step{
			{r: served(0, 1, 1, 5, 5)},
			{r: served(0, 2, 1, 4, 5), ryw: true, mr: true, mrRow: 0},
		}},
		{"equal versions are not backwards", []step{
			{r: served(0, 0, 0, 2, 2)},
			{r: served(0, 0, 0, 2, 2)},
		}},
		{"sessions are independent", []step{
			{r: served(0, 0, 0, 9, 9)},
			{r: served(1, 0, 0, 1, 1)}, // session 1 never saw 9
			{r: served(1, 0, 0, 1, 1)},
		}},
		{"unserved reads show nothing and change nothing", []step{
			{r: served(0, 0, 0, 5)},
			{r: &Read{Session: 0, AckedSeq: 3, Outcome: router.OutTimedOut}},
			{r: &Read{Session: 0, AckedSeq: 3, Outcome: router.OutFailedFast}},
			{r: &Read{Session: 0, AckedSeq: 3, Outcome: router.OutError}},
			{r: served(0, 3, 3, 5)},
		}},
		{"a declared loss restarts the watermark", []step{
			{r: served(0, 0, 0, 9)},
			{r: &Read{Session: 0, Outcome: router.OutFailedFast, ResetSeen: true}},
			{r: served(0, 0, 0, 4)}, // lower, but the client was told
			{r: served(0, 0, 0, 3), mr: true},
		}},
		{"a failed read without a declared loss keeps the watermark", []step{
			{r: served(0, 0, 0, 9)},
			{r: &Read{Session: 0, Outcome: router.OutFailedFast}},
			{r: served(0, 0, 0, 4), mr: true},
		}},
		{"a reconnect starts a new scope: a regression across it is counted apart", []step{
			{r: on(7, served(0, 0, 0, 3, 9))},
			{r: on(8, served(0, 0, 0, 3, 4)), reconnect: true, across: true, mrRow: 1},
			// the new connection's watermark is (3, 4): 4 again is fine,
			// 3 is an MR violation within it
			{r: on(8, served(0, 0, 0, 3, 4))},
			{r: on(8, served(0, 0, 0, 3, 3)), mr: true, mrRow: 1},
		}},
		{"a reconnect that shows nothing older is counted, not flagged", []step{
			{r: on(7, served(0, 0, 0, 3, 9))},
			{r: &Read{Session: 0, Outcome: router.OutTimedOut}}, // the read that broke the connection
			{r: on(8, served(0, 0, 0, 5, 9)), reconnect: true},
			{r: on(8, served(0, 0, 0, 4, 9)), mr: true, mrRow: 0},
		}},
		{"RYW is judged across a reconnect as ever", []step{
			{r: on(7, served(0, 1, 1, 2))},
			{r: on(8, served(0, 2, 1, 2)), ryw: true, reconnect: true},
		}},
		{"a declared loss then a reconnect: a fresh start, no reconnect", []step{
			{r: on(7, served(0, 0, 0, 9))},
			{r: &Read{Session: 0, Outcome: router.OutFailedFast, ResetSeen: true}},
			{r: on(8, served(0, 0, 0, 4))},
		}},
		{"stale-labelled reads are judged too", []step{
			{r: served(0, 0, 0, 5)},
			{r: &Read{Session: 0, AckedSeq: 1, Own: 0, Hot: []int64{4}, Outcome: router.OutStale}, ryw: true, mr: true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hot := 0
			for _, s := range tc.steps {
				if s.r.Outcome.Served() {
					hot = len(s.r.Hot)
				}
			}
			c, err := NewChecker(2, hot)
			if err != nil {
				t.Fatal(err)
			}
			var tally Tally
			var wantRYW, wantMR, wantReconnects, wantAcross int64
			for i, s := range tc.steps {
				v, err := c.Check(s.r)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if v.RYW != s.ryw || v.MR != s.mr || ((s.mr || s.across) && v.MRRow != s.mrRow) ||
					v.Reconnect != s.reconnect || v.MRAcrossReconnect != s.across {
					t.Fatalf("step %d: verdict %+v, want ryw=%v mr=%v row=%d reconnect=%v across=%v", i, v, s.ryw, s.mr, s.mrRow, s.reconnect, s.across)
				}
				tally.Add(s.r, v)
				if s.ryw {
					wantRYW++
				}
				if s.mr {
					wantMR++
				}
				if s.reconnect {
					wantReconnects++
				}
				if s.across {
					wantAcross++
				}
			}
			if tally.RYW != wantRYW || tally.MR != wantMR || tally.Reconnects != wantReconnects || tally.MRAcrossReconnect != wantAcross ||
				tally.Reads != int64(len(tc.steps)) || !tally.Accounted() {
				t.Fatalf("tally %+v, want ryw=%d mr=%d reconnects=%d across=%d reads=%d", tally, wantRYW, wantMR, wantReconnects, wantAcross, len(tc.steps))
			}
			var merged Tally
			merged.Merge(&tally)
			merged.Merge(&tally)
			if merged.Reconnects != 2*wantReconnects || merged.MRAcrossReconnect != 2*wantAcross {
				t.Fatalf("merged tally %+v, want reconnects=%d across=%d", merged, 2*wantReconnects, 2*wantAcross)
			}
		})
	}
}

// TestCheckerAllWrites pins the all-writes verdict on crafted reads: a hot
// row below the acknowledged floor, the session's own write missing, and
// neither.
func TestCheckerAllWrites(t *testing.T) {
	c, err := NewChecker(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	withFloor := func(r *Read, floor ...int64) *Read { r.AckedHot = floor; return r }
	var tally Tally
	for i, s := range []struct {
		r        *Read
		all, ryw bool
	}{
		{r: withFloor(served(0, 0, 0, 3, 4), 3, 4)},                          // exactly the floor
		{r: withFloor(served(1, 0, 0, 5, 4), 3, 4)},                          // above it
		{r: withFloor(served(1, 0, 0, 5, 4), 5, 5), all: true},               // another session's write to row 1 missing
		{r: withFloor(served(0, 2, 1, 9, 9), 3, 4), all: true, ryw: true},    // its own write missing
		{r: served(0, 0, 0, 9, 9)},                                           // no floor: not checked
		{r: withFloor(&Read{Session: 0, Outcome: router.OutDeferred}, 9, 9)}, // not served: nothing shown
	} {
		v, err := c.Check(s.r)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if v.AllWrites != s.all || v.RYW != s.ryw {
			t.Errorf("read %d: verdict %+v, want all-writes=%v ryw=%v", i, v, s.all, s.ryw)
		}
		tally.Add(s.r, v)
	}
	if tally.AllWrites != 2 || tally.ByOutcome[router.OutDeferred] != 1 || !tally.Accounted() {
		t.Errorf("tally %+v", tally)
	}
	if _, err := c.Check(withFloor(served(0, 0, 0, 1, 1), 1)); err == nil {
		t.Error("a floor of the wrong length accepted")
	}
}

func TestCheckerRejectsMisfits(t *testing.T) {
	if _, err := NewChecker(0, 1); err == nil {
		t.Fatal("zero sessions accepted")
	}
	if _, err := NewChecker(1, -1); err == nil {
		t.Fatal("a negative hot row count accepted")
	}
	c, _ := NewChecker(2, 2)
	if _, err := c.Check(served(2, 0, 0, 1, 1)); err == nil {
		t.Fatal("session out of range accepted")
	}
	if _, err := c.Check(served(-1, 0, 0, 1, 1)); err == nil {
		t.Fatal("negative session accepted")
	}
	if _, err := c.Check(served(0, 0, 0, 1)); err == nil {
		t.Fatal("wrong hot row count accepted")
	}
	// a rejected read changes nothing: the next good read starts the watermark
	if v, err := c.Check(served(0, 0, 0, 1, 1)); err != nil || v.MR {
		t.Fatalf("after misfits: %+v %v", v, err)
	}
}

// TestCheckerAgainstPrefixModel replays random prefix histories: a log of
// writes (session, hot row), states as prefixes of it, and sessions reading
// states in arbitrary order. The checker must flag exactly the reads whose
// prefix misses the session's acknowledged write (RYW), is shorter than a
// prefix the session already read (MR) or misses any session's
// acknowledged write (all-writes): on one timeline, the checks are complete
// as well as sound.
func TestCheckerAgainstPrefixModel(t *testing.T) {
	const (
		sessions = 5
		hot      = 3
		logLen   = 200
	)
	rng := newSplitMix(42)
	for trial := 0; trial < 200; trial++ {
		// the primary's log
		type write struct {
			session int
			seq     int64
			hot     int
		}
		log := make([]write, logLen)
		nextSeq := make([]int64, sessions)
		for i := range log {
			s := int(rng.next() % sessions)
			nextSeq[s]++
			log[i] = write{s, nextSeq[s], int(rng.next() % hot)}
		}
		// state after prefix p
		state := func(p, session int) (own int64, hv []int64) {
			hv = make([]int64, hot)
			for _, w := range log[:p] {
				hv[w.hot]++
				if w.session == session {
					own = w.seq
				}
			}
			return own, hv
		}
		c, _ := NewChecker(sessions, hot)
		ackedAll := 0 // every write of log[:ackedAll] was acknowledged to its session
		maxSeen := make([]int, sessions)
		acked := make([]int, sessions) // log index+1 of the last acked write
		for step := 0; step < 100; step++ {
			s := int(rng.next() % sessions)
			// the session's acked write: its writes inside some committed prefix
			committed := int(rng.next()%logLen) + 1
			for i := acked[s]; i < committed; i++ {
				if log[i].session == s {
					acked[s] = i + 1
				}
			}
			var ackSeq int64
			if acked[s] > 0 {
				ackSeq = log[acked[s]-1].seq
			}
			ackedAll = max(ackedAll, committed)
			_, floor := state(ackedAll, s) // each hot row's version after the acknowledged prefix
			p := int(rng.next() % (logLen + 1))
			own, hv := state(p, s)
			v, err := c.Check(&Read{Session: s, AckedSeq: ackSeq, AckedHot: floor, Own: own, Hot: hv, Outcome: router.OutReplica})
			if err != nil {
				t.Fatal(err)
			}
			wantRYW := p < acked[s]
			// MR: p misses a transaction an earlier answer had, and that
			// transaction moved a hot row: every write moves one, so any
			// shorter prefix is backwards.
			wantMR := p < maxSeen[s]
			// All-writes: p misses an acknowledged write of anyone (every
			// write moves a hot row, so any prefix shorter than the
			// acknowledged one shows a hot row below its floor).
			wantAll := p < ackedAll
			if v.RYW != wantRYW || v.MR != wantMR || v.AllWrites != wantAll {
				t.Fatalf("trial %d step %d: session %d prefix %d acked %d (all %d) maxSeen %d: got %+v want ryw=%v mr=%v all-writes=%v",
					trial, step, s, p, acked[s], ackedAll, maxSeen[s], v, wantRYW, wantMR, wantAll)
			}
			maxSeen[s] = max(maxSeen[s], p)
		}
	}
}

// splitMix is a tiny deterministic generator for tests.
type splitMix struct{ s uint64 }

func newSplitMix(seed uint64) *splitMix { return &splitMix{seed} }

func (r *splitMix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// TestCheckerResetScope: a loss declared on a connection the lab's
// sessions share (the proxy keeps the watermark per connection) restarts
// every session judged in that connection's scope, not only the one
// whose read got the error; without ResetScope only that one.
func TestCheckerResetScope(t *testing.T) {
	for _, scope := range []bool{true, false} {
		c, err := NewChecker(2, 1)
		if err != nil {
			t.Fatal(err)
		}
		served := func(sess int, v int64) Verdict {
			t.Helper()
			vd, err := c.Check(&Read{Session: sess, Hot: []int64{v}, Outcome: router.OutProxied, Conn: 5})
			if err != nil {
				t.Fatal(err)
			}
			return vd
		}
		served(0, 3)
		served(1, 3)
		if _, err := c.Check(&Read{Session: 1, Hot: []int64{0}, Outcome: router.OutFailedFast, Conn: 5, ResetSeen: true, ResetScope: scope}); err != nil {
			t.Fatal(err)
		}
		if got := served(0, 2).MR; got == scope {
			t.Errorf("ResetScope %v: session 0's lower read after the connection's declared loss: MR %v", scope, got)
		}
	}
}

// TestCheckerOwnRow: sessions that read only their own row (no hot rows,
// the engines failover's workload): RYW when the row lacks the last
// acknowledged write, OwnBackwards when it is lower than an earlier
// answer on the same connection (shown an unacknowledged write, then not),
// restarted by a declared loss and by a new connection.
func TestCheckerOwnRow(t *testing.T) {
	c, err := NewChecker(2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		r             *Read
		ryw, backward bool
	}{
		{served(0, 1, 2), false, false}, // write 2 in flight, shown
		{served(0, 1, 1), false, true},  // then not: backwards, not RYW
		{served(0, 2, 1), true, true},   // write 2 acknowledged, still missing
		{served(1, 0, 0), false, false}, // another session
		{served(0, 2, 2), false, false},
		{&Read{Session: 0, Outcome: router.OutFailedFast, ResetSeen: true}, false, false},
		{served(0, 0, 1), false, false}, // after the declared loss: a new watermark
		{on(7, served(0, 0, 0)), false, false},
		{on(7, served(0, 0, 0)), false, false},
	} {
		v, err := c.Check(tc.r)
		if err != nil {
			t.Fatal(err)
		}
		if v.RYW != tc.ryw || v.OwnBackwards != tc.backward || v.MR {
			t.Errorf("read %d %+v: verdict %+v, want RYW %v OwnBackwards %v", i, tc.r, v, tc.ryw, tc.backward)
		}
	}
}
