package sim

import (
	"time"

	"github.com/causallab/causallab/hashroute"
)

// HashBin is the width of HashCauses' time bins.
const HashBin = time.Second

// hashBins is how many HashBin bins past the offered period a trial keeps
// (the reads that follow the last write); later moves and violations land
// in the last bin.
const hashTailBins = 30

// HashCauses attributes an affinity router's session moves and
// monotonic-reads violations to their cause, with one hashroute.Tracker
// per session (the lab does the same on real MySQL): a read served by
// another replica than the session's previous read is a move; its cause,
// and the charge of a violation, follow hashroute.Tracker's rules. A
// replica is down while a Fault holds it. Zero under other policies.
type HashCauses struct {
	// Moves counts moves by cause; Sessions the sessions moved at least
	// once for each cause.
	Moves, Sessions [hashroute.NumCauses]int64
	// MR counts monotonic-reads violations by charge (CauseNone: a
	// session that never moved, on a replica never down).
	MR [hashroute.NumCauses]int64
	// MovesBin and MRBin count the same per HashBin of trial time (by the
	// time the read reached its node).
	MovesBin, MRBin [][hashroute.NumCauses]int32
}

// hashTrack is the engine's per-trial attribution state.
type hashTrack struct {
	on     bool
	trk    []hashroute.Tracker // per session
	lastAt []usec              // per session: its previous replica read
	moved  []uint8             // per session: bit c set when moved for cause c
	out    HashCauses
}

func (h *hashTrack) reset(on bool, sessions int, cfg *Config) {
	h.on = on
	if !on {
		return
	}
	h.trk, h.lastAt, h.moved = grow(h.trk, sessions), grow(h.lastAt, sessions), grow(h.moved, sessions)
	for i := range h.trk {
		h.trk[i] = hashroute.NewTracker()
	}
	clear(h.lastAt)
	clear(h.moved)
	nb := int((cfg.Duration+HashBin-1)/HashBin) + hashTailBins
	mb, rb := h.out.MovesBin, h.out.MRBin
	h.out = HashCauses{MovesBin: grow(mb, nb), MRBin: grow(rb, nb)}
	clear(h.out.MovesBin)
	clear(h.out.MRBin)
}

// downBetween reports whether replica r was down at some moment of
// (from, to].
func (e *engine) downBetween(r int, from, to usec) bool {
	for _, iv := range e.down[r] {
		if iv.from < to && iv.to > from {
			return true
		}
	}
	return false
}

// hashObserve attributes session s's read that reached replica node at t
// routed with why; mr says whether it saw the world go back.
func (e *engine) hashObserve(s int32, node int32, why hashroute.Reason, t usec, mr bool) {
	h := &e.hash
	if !h.on || node < 0 {
		return
	}
	tr := &h.trk[s]
	down := tr.Node() >= 0 && e.downBetween(int(node), h.lastAt[s], t)
	moved, cause := tr.Observe(int(node), why, down)
	h.lastAt[s] = t
	b := min(int(t/dur(HashBin)), len(h.out.MovesBin)-1)
	if moved {
		h.out.Moves[cause]++
		h.out.MovesBin[b][cause]++
		if bit := uint8(1) << cause; h.moved[s]&bit == 0 {
			h.moved[s] |= bit
			h.out.Sessions[cause]++
		}
	}
	if mr {
		c := tr.Charge()
		h.out.MR[c]++
		h.out.MRBin[b][c]++
	}
}

// result copies the trial's attribution (its bins are reused).
func (h *hashTrack) result() HashCauses {
	if !h.on {
		return HashCauses{}
	}
	out := h.out
	out.MovesBin = append([][hashroute.NumCauses]int32(nil), h.out.MovesBin...)
	out.MRBin = append([][hashroute.NumCauses]int32(nil), h.out.MRBin...)
	return out
}

// result is the trial's Result under the router just run.
func (e *engine) result() Result {
	r := e.m.result()
	r.Hash = e.hash.result()
	return r
}
