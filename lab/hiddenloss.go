package lab

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/causallab/causallab/gtid"
)

// The MR check compares hot-row versions by number. Across a failover
// the new primary continues from the promoted replica's versions, so a
// number can name a lost transaction on the old timeline and another one
// on the new: a session shown a version that the failover lost, then a
// higher number on the new timeline, went back in time (the new state
// lacks what it was shown) and the numbers do not say so. The hidden-loss
// pass closes that blind spot with the versions' GTIDs, once the run has
// ended.
//
// The run's first failover lost the set L (compose.FailoverResult.
// LostGTIDs: what the old primary had and the new one lacked); the
// primaries it and later failovers promoted have the UUIDs N (on
// MariaDB: the writer sources of their domain and server id,
// serverFlavor.writeID, which tell a lost write from the new primary's
// write of the same sequence number). No state
// holding a write by a source in N holds any of L (no later primary
// applies what a promotion lost). So a served read that shows a row at a
// version written by a source in N, after its session was shown (in the
// scope the Checker judges MR in: one connection under --via proxy,
// restarted by a declared loss) a version whose write is in L, lost what
// the session saw: an MR violation, counted in mr (and mr_hidden_loss)
// unless the numbers already flagged it.
//
// Naming the write behind a version, where numbers repeat:
//   - The version shown before the failover: before the lab told its
//     routers (timelineChange.at) no new primary had been written to, and
//     one timeline never repeats a number: the one acknowledged write
//     sent before the read completed with that number is it.
//   - The version shown after: a number above every number the old
//     timeline can have reached (its acknowledged versions, plus one per
//     write of unknown outcome to that row) was given by the new timeline:
//     the one acknowledged write with that number is it.
//
// Anything else is not judged. Sound: every count is a loss MySQL
// confirmed (L) and a state shown from a timeline without it. Where the
// old primary could not be read, L is a lower bound (compose) and some
// losses go uncounted, never the reverse; losses of a run's later
// failovers are not judged.

// timelineChange is one failover as the hidden-loss pass needs it.
type timelineChange struct {
	lost   gtid.Set
	newSID gtid.SID
	// at is when the lab told its routers (no write reached the new
	// primary before).
	at time.Duration
}

// timelineLog collects the run's failovers (written by the events'
// goroutine, read once the run ended).
type timelineLog struct {
	mu      sync.Mutex
	changes []timelineChange
}

func (l *timelineLog) add(c timelineChange) {
	l.mu.Lock()
	l.changes = append(l.changes, c)
	l.mu.Unlock()
}

func (l *timelineLog) list() []timelineChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]timelineChange(nil), l.changes...)
}

// hiddenLoss judges each session's reads in completion order, with the
// Checker's watermark mirrored per row: wm[s][row] is the highest version
// session s was shown in its current scope, wmLost[s][row] whether that
// version's write is known lost.
type hiddenLoss struct {
	lost     gtid.Set
	promoted map[gtid.SID]bool
	at       time.Duration
	// slots[row][v] are the acknowledged writes that gave hot row row
	// version v; oldTop[row] the highest number the old timeline can have
	// given it.
	slots   [][][]prefixWrite
	oldTop  []int64
	wm      [][]int64
	wmLost  [][]bool
	started []bool
	conn    []uint32
}

func newHiddenLoss(changes []timelineChange, writes []prefixWrite, sessions, hotRows int) *hiddenLoss {
	h := &hiddenLoss{lost: changes[0].lost, at: changes[0].at, promoted: map[gtid.SID]bool{},
		slots: make([][][]prefixWrite, hotRows), oldTop: make([]int64, hotRows),
		wm: make([][]int64, sessions), wmLost: make([][]bool, sessions), started: make([]bool, sessions), conn: make([]uint32, sessions)}
	for _, c := range changes {
		h.promoted[c.newSID] = true
	}
	for i := range h.wm {
		h.wm[i], h.wmLost[i] = make([]int64, hotRows), make([]bool, hotRows)
	}
	unknown := make([]int64, hotRows)
	for _, w := range writes {
		if w.hot < 0 || w.hot >= hotRows {
			continue
		}
		if w.version <= 0 || w.g.SID == (gtid.SID{}) {
			unknown[w.hot]++ // a write of unknown outcome: a number, maybe
			continue
		}
		if !h.promoted[w.g.SID] {
			h.oldTop[w.hot] = max(h.oldTop[w.hot], w.version)
		}
		if w.version <= 1<<24 {
			for int64(len(h.slots[w.hot])) <= w.version {
				h.slots[w.hot] = append(h.slots[w.hot], nil)
			}
			h.slots[w.hot][w.version] = append(h.slots[w.hot][w.version], w)
		}
	}
	for row := range h.oldTop {
		h.oldTop[row] += unknown[row]
	}
	return h
}

// only is the one acknowledged write that gave hot row row version v and
// was sent before done, if there is exactly one.
func (h *hiddenLoss) only(row int, v int64, done time.Duration) (gtid.GTID, bool) {
	if row >= len(h.slots) || v <= 0 || v >= int64(len(h.slots[row])) {
		return gtid.GTID{}, false
	}
	var g gtid.GTID
	n := 0
	for _, w := range h.slots[row][v] {
		if w.sent < done {
			g, n = w.g, n+1
		}
	}
	return g, n == 1
}

// shownLost: a read that completed at done, before the failover was
// told, showed hot row row at a version whose write the failover lost.
func (h *hiddenLoss) shownLost(row int, v int64, done time.Duration) bool {
	if done >= h.at {
		return false
	}
	g, ok := h.only(row, v, done)
	return ok && h.lost.ContainsGTID(g)
}

// newTimeline: hot row row at version v was given by a promoted primary,
// above every number the old timeline can have reached.
func (h *hiddenLoss) newTimeline(row int, v int64, done time.Duration) bool {
	if row >= len(h.oldTop) || v <= h.oldTop[row] {
		return false
	}
	g, ok := h.only(row, v, done)
	return ok && h.promoted[g.SID]
}

// read judges one read (rd, in completion order); true: an MR violation
// only the GTIDs show (no row below the watermark by number, but the
// state is on a timeline that lost a version the session was shown).
func (h *hiddenLoss) read(rd *prefixRead) bool {
	s := rd.sess
	if rd.resetSeen || (h.started[s] && rd.conn != h.conn[s]) {
		h.started[s] = false // a new scope, as the Checker's
	}
	if rd.resetSeen && rd.resetScope && rd.conn != 0 {
		for o := range h.started {
			if h.conn[o] == rd.conn {
				h.started[o] = false
			}
		}
	}
	if !rd.served {
		return false
	}
	if !h.started[s] {
		h.started[s], h.conn[s] = true, rd.conn
		for row, v := range rd.hot {
			h.wm[s][row], h.wmLost[s][row] = v, h.shownLost(row, v, rd.done)
		}
		return false
	}
	after := false
	for row, v := range rd.hot {
		after = after || h.newTimeline(row, v, rd.done)
	}
	numeric, hidden := false, false
	for row, v := range rd.hot {
		if v < h.wm[s][row] {
			numeric = true // the Checker's MR; the watermark stays
			continue
		}
		hidden = hidden || (after && h.wmLost[s][row])
		h.wm[s][row], h.wmLost[s][row] = v, h.shownLost(row, v, rd.done)
	}
	return hidden && !numeric
}

// hiddenLossNote names, per router, the MR violations only the GTIDs
// showed ("" when there were none).
func hiddenLossNote(rs []RouterResult) string {
	var parts []string
	for _, r := range rs {
		if r.MRHiddenLoss > 0 {
			parts = append(parts, fmt.Sprintf("%s %d of %d", r.Name, r.MRHiddenLoss, r.MR))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "MR counts reads that lost a version the failover lost although no row's number went down (mr_hidden_loss, named by the writes' GTIDs): " +
		strings.Join(parts, ", ") + "."
}
