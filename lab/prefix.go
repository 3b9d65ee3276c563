package lab

import (
	"fmt"
	"strings"
	"time"

	"github.com/causallab/causallab/gtid"
)

// PrefixCheck decides whether the state a read returned is a prefix of
// the primary's history: the state after some transaction of the
// primary's commit order, every earlier one included and no later one.
// MySQL gives that order for free: with binlog_order_commits (the
// default) a source assigns GTID numbers in the order it commits, so for
// one source UUID the order is the GNO order.
//
// Each lab write is one transaction that sets its session's own row to
// the write's number and gives one hot row its next version; a read is
// one statement (one snapshot) of its session's own row and every hot
// row. From the acknowledged writes' GTIDs the check knows, per row,
// which GTID produced each version. A read is non-prefix when it saw a
// row at a version whose write committed at or after the write it missed
// on another row (or on the same transaction's other row: a torn
// transaction):
//
//	seenLow(r2) >= missedHigh(r1), same source UUID
//
// seenLow(r) is the largest known GNO among the versions of r up to the
// one seen (a lower bound of the seen version's own GNO: versions of a
// row commit in order), missedHigh(r) the smallest known GNO among the
// later versions (an upper bound of the next version's). Sound: every
// flag is a proof, from acknowledged GTIDs, that no prefix holds the
// state. Complete when every write's GTID is known and every write has
// one source: a state that is no prefix has a row r1 whose next version
// v+1 committed before some seen version of another row r2, and the
// check compares exactly those GNOs. Versions whose GTID is unknown (a
// write of unknown outcome) or given twice with different sources (a
// hot row's versions renumbered on a new timeline after a failover) are
// skipped; writes of different sources are not compared.
//
// Not safe for concurrent use; the zero value is not usable (NewPrefixCheck).
type PrefixCheck struct {
	// hot[h][v] is the GTID that gave hot row h version v (zero SID:
	// unknown); own[s][n] the GTID of session s's write n.
	hot, own [][]gtid.GTID
	// conflicts counts versions given two GTIDs of different sources.
	conflicts int64
	// writes counts the writes recorded with a GTID.
	writes int64
}

// NewPrefixCheck returns a check for sessions sessions and hotRows hot
// rows.
func NewPrefixCheck(sessions, hotRows int) *PrefixCheck {
	return &PrefixCheck{hot: make([][]gtid.GTID, hotRows), own: make([][]gtid.GTID, sessions)}
}

// Write records an acknowledged write: session sess's write seq, which
// gave hot row hot version version (0: not known), committed as g.
// Writes without a GTID are not recorded.
func (p *PrefixCheck) Write(sess int, seq int64, hot int, version int64, g gtid.GTID) {
	if g.SID == (gtid.SID{}) || g.GNO <= 0 {
		return
	}
	p.writes++
	if sess >= 0 && sess < len(p.own) && seq > 0 {
		p.own[sess] = p.put(p.own[sess], seq, g)
	}
	if hot >= 0 && hot < len(p.hot) && version > 0 {
		p.hot[hot] = p.put(p.hot[hot], version, g)
	}
}

// put sets versions[v] = g, growing versions; a version already given a
// GTID of another source is marked unknown for good (conflict).
func (p *PrefixCheck) put(versions []gtid.GTID, v int64, g gtid.GTID) []gtid.GTID {
	if v > 1<<24 {
		return versions // beyond any lab run: not tracked
	}
	for int64(len(versions)) <= v {
		versions = append(versions, gtid.GTID{})
	}
	switch old := versions[v]; {
	case old == conflictGTID:
	case old.SID == (gtid.SID{}):
		versions[v] = g
	case old != g:
		versions[v] = conflictGTID
		p.conflicts++
	}
	return versions
}

// conflictGTID marks a version given two different GTIDs.
var conflictGTID = gtid.GTID{GNO: -1}

// Writes is how many writes were recorded with a GTID: 0 means the check
// had nothing to judge by (an engine without GTIDs).
func (p *PrefixCheck) Writes() int64 { return p.writes }

// Conflicts is how many versions were given GTIDs of two sources.
func (p *PrefixCheck) Conflicts() int64 { return p.conflicts }

// PrefixWitness is the proof that a read's state is no prefix: it saw
// row SeenRow at version SeenVersion or later (SeenVersion committed as
// SeenGTID) and missed MissedRow's version MissedVersion (MissedGTID),
// which committed no later. Rows are named "own" (the session's row) or "hot<i>".
type PrefixWitness struct {
	SeenRow       string
	SeenVersion   int64
	SeenGTID      gtid.GTID
	MissedRow     string
	MissedVersion int64
	MissedGTID    gtid.GTID
}

func (w PrefixWitness) String() string {
	return fmt.Sprintf("saw %s at version %d or past it (%s) but not %s version %d (%s, committed no later)",
		w.SeenRow, w.SeenVersion, w.SeenGTID, w.MissedRow, w.MissedVersion, w.MissedGTID)
}

// bound is one row's bounds for a read: the seen version's lower bound
// and the next version's upper bound (zero SID: none known).
type bound struct {
	row                 string
	seenV, missedV      int64
	seenLow, missedHigh gtid.GTID
}

// NonPrefix reports whether session sess's read, which returned own for
// its own row and hot[i] for hot row i, saw a state that is no prefix of
// the primary's history, with the proof.
func (p *PrefixCheck) NonPrefix(sess int, own int64, hot []int64) (bool, PrefixWitness) {
	bs := make([]bound, 0, len(hot)+1)
	if sess >= 0 && sess < len(p.own) {
		bs = append(bs, rowBound("own", p.own[sess], own))
	}
	for i, v := range hot {
		if i < len(p.hot) {
			bs = append(bs, rowBound(fmt.Sprintf("hot%d", i), p.hot[i], v))
		}
	}
	for _, m := range bs {
		if m.missedHigh.SID == (gtid.SID{}) {
			continue
		}
		for _, s := range bs {
			if s.seenLow.SID == m.missedHigh.SID && s.seenLow.Tag == m.missedHigh.Tag && s.seenLow.GNO >= m.missedHigh.GNO {
				return true, PrefixWitness{SeenRow: s.row, SeenVersion: s.seenV, SeenGTID: s.seenLow,
					MissedRow: m.row, MissedVersion: m.missedV, MissedGTID: m.missedHigh}
			}
		}
	}
	return false, PrefixWitness{}
}

// rowBound is the bounds of a row whose versions' GTIDs are versions,
// seen at version seen.
func rowBound(row string, versions []gtid.GTID, seen int64) bound {
	b := bound{row: row}
	known := func(v int64) bool {
		g := versions[v]
		return g.SID != (gtid.SID{}) && g != conflictGTID
	}
	for v := min(seen, int64(len(versions))-1); v >= 1; v-- {
		if known(v) {
			b.seenV, b.seenLow = v, versions[v]
			break
		}
	}
	for v := max(seen+1, 1); v < int64(len(versions)); v++ {
		if known(v) {
			b.missedV, b.missedHigh = v, versions[v]
			break
		}
	}
	return b
}

// prefixRun applies a PrefixCheck to a run: it records the writes as
// they complete and keeps the served reads, judged once the run ended
// (a read may see a version whose write's acknowledgement comes later).
type prefixRun struct {
	check *PrefixCheck
	reads []prefixRead
	// writes are the hot versions' writes with their send times (the
	// hidden-loss pass), in completion order.
	writes []prefixWrite
	// f reads the writes' GTIDs (the servers' engine).
	f serverFlavor
}

// prefixWrite is a completed write: its hot row, and, when acknowledged
// with them, the version it gave and its GTID (else zero: its outcome is
// not known); sent is when the driver sent it.
type prefixWrite struct {
	hot     int
	version int64
	g       gtid.GTID
	sent    time.Duration
}

// prefixRead is a completed read as the GTID passes need it: served (its
// versions), or not (a declared loss resets the session's watermark).
type prefixRead struct {
	router, sess int
	own          int64
	hot          []int64
	served       bool
	resetSeen    bool
	resetScope   bool
	conn         uint32
	done         time.Duration
}

// maxWitnesses bounds the flagged reads a router's note shows.
const maxWitnesses = 3

func newPrefixRun(sessions, hotRows int, f serverFlavor) *prefixRun {
	return &prefixRun{check: NewPrefixCheck(sessions, hotRows), f: f}
}

// completed takes a completed operation of router r.
func (p *prefixRun) completed(o *op, r int) {
	if o.write {
		w := prefixWrite{hot: o.hot, sent: o.started}
		if g, err := p.f.writeID(o.ack.GTID); err == nil && (o.err == nil || o.ack.Hot > 0) {
			p.check.Write(o.sess, o.seq, o.hot, o.ack.Hot, g)
			w.version, w.g = o.ack.Hot, g
		}
		p.writes = append(p.writes, w)
		return
	}
	served := o.read.Outcome.Served()
	if served || o.read.ResetSeen {
		p.reads = append(p.reads, prefixRead{router: r, sess: o.sess, own: o.read.Own, hot: o.read.Hot,
			served: served, resetSeen: o.read.ResetSeen, resetScope: o.read.ResetScope, conn: o.read.Conn, done: o.read.Done})
	}
}

// judge counts each router's non-prefix reads into accs (none judged
// when no write had a GTID), and the MR violations only the GTIDs show
// across the run's failovers (hiddenLoss), into mr.
func (p *prefixRun) judge(accs []*routerAcc, changes []timelineChange) {
	if p.check.Writes() == 0 {
		return
	}
	if len(changes) > 0 {
		h := newHiddenLoss(changes, p.writes, len(p.check.own), len(p.check.hot))
		for i := range p.reads {
			if h.read(&p.reads[i]) {
				a := accs[p.reads[i].router]
				a.tally.MR++
				a.hiddenLoss++
			}
		}
	}
	for _, rd := range p.reads {
		if !rd.served || (len(changes) > 0 && rd.done >= changes[0].at) {
			// After a failover a version number may name two writes
			// (PrefixCheck): those reads are not judged.
			continue
		}
		a := accs[rd.router]
		a.prefixJudged++
		if non, why := p.check.NonPrefix(rd.sess, rd.own, rd.hot); non {
			a.nonPrefix++
			if len(a.prefixWitnesses) < maxWitnesses {
				a.prefixWitnesses = append(a.prefixWitnesses, fmt.Sprintf("session %d %v", rd.sess, why))
			}
		}
	}
}

// prefixNote is the run's note on the prefix check: each router's
// non_prefix count and the reads it flagged ("" when nothing was judged).
func prefixNote(rs []RouterResult) string {
	var parts, shown []string
	for _, r := range rs {
		if r.NonPrefixJudged == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d of %d", r.Name, r.NonPrefix, r.NonPrefixJudged))
		for _, w := range r.NonPrefixExamples {
			shown = append(shown, r.Name+": "+w)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	n := "non_prefix (served reads whose state is no prefix of the primary's commit order, judged from the writes' GTIDs): " + strings.Join(parts, ", ") + "."
	if len(shown) > 0 {
		n += " Flagged: " + strings.Join(shown, "; ") + "."
	}
	return n
}
