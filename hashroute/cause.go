package hashroute

import "strconv"

// Cause is why a session's reads moved to another server, and what a
// monotonic-reads violation seen after the move is charged to. The lab and
// the simulator attribute every move and every violation of a hashed
// session with a Tracker, so both speak of the same three causes:
//
//   - ChosenDown: the id's first choice was down, so the session had to be
//     reselected elsewhere: unavoidable for any hashing scheme.
//   - Needless: the first choice was up and the mode moved the session
//     anyway (AvailableOnly's remap when another server went down, the
//     rebalancer overriding the hash): Shopify's two edge cases.
//   - CameBack: the session returned to, or stayed on, a server that had
//     been down since its previous read; a violation there means the server
//     came back behind what the session was shown.
//
// CauseNone is a session that never moved and whose server was never down:
// hashing promises it monotonic reads, so a violation charged to it is a
// defect of the world (a server going backwards), not of the hashing.
type Cause uint8

const (
	// CauseNone: no move (the session's first read, or a server it never
	// left and that was never down).
	CauseNone Cause = iota
	// CauseChosenDown: the first choice was down (unavoidable).
	CauseChosenDown
	// CauseNeedless: the first choice was up and the mode moved the
	// session anyway (the edge cases).
	CauseNeedless
	// CauseCameBack: the session's server had been down since its
	// previous read (it returned to its first choice after an outage, or
	// stayed on a server that restarted).
	CauseCameBack
	// NumCauses is the number of causes (for arrays indexed by Cause).
	NumCauses
)

// Causes lists the causes a move can have, in table order.
func Causes() []Cause { return []Cause{CauseChosenDown, CauseNeedless, CauseCameBack} }

// String returns the cause's name: none, chosen-down, needless, came-back.
func (c Cause) String() string {
	switch c {
	case CauseNone:
		return "none"
	case CauseChosenDown:
		return "chosen-down"
	case CauseNeedless:
		return "needless"
	case CauseCameBack:
		return "came-back"
	}
	return "cause(" + strconv.Itoa(int(c)) + ")"
}

// MarshalText encodes the cause as its name.
func (c Cause) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// reasonCause is why a session is off its first choice after a read with
// reason why (CauseNone when it is on it).
func reasonCause(why Reason) Cause {
	switch why {
	case Reselected:
		return CauseChosenDown
	case Remapped, Rebalanced:
		return CauseNeedless
	}
	return CauseNone
}

// Tracker attributes one session's moves and violations to their causes,
// from the selections that routed its reads (Select's server and reason,
// the router's own decision) and one fact of ground truth: whether the
// serving server was down at some moment since the session's previous
// read. The zero value is not ready: use NewTracker. A Tracker is one
// session's state and is not safe for concurrent use.
//
// The rules, for a served read at server i with reason why:
//
//   - A move is a read served by another server than the session's
//     previous read. Its cause is Needless when why is Remapped or
//     Rebalanced, ChosenDown when why is Reselected, and, when why is
//     FirstChoice (the session returns to its first choice), the cause that
//     had sent it away: Needless if it left needlessly, CameBack if it left
//     because its first choice was down (that server came back).
//   - A read on the session's previous server charges CameBack when that
//     server was down since the previous read, and otherwise keeps the
//     charge of the move that brought the session there: a session moved to
//     a server that is behind keeps seeing the world older than it was
//     shown until that server catches up, and those violations are the
//     move's.
//   - Whatever the move, a read on a server that was down since the
//     session's previous read charges CameBack (the conservative charge:
//     never Needless for what an outage may explain).
//
// Under FullList the reason is never Remapped or Rebalanced (Select's
// contract), so a Tracker fed FullList selections never yields Needless:
// the full-list zero is structural (TestTrackerFullListNeverNeedless).
type Tracker struct {
	node   int   // the previous read's server; -1 before the first read
	away   Cause // why the session is off its first choice (CauseNone: on it)
	charge Cause // what a violation on the current server is charged to
}

// NewTracker returns a session's tracker before its first read.
func NewTracker() Tracker { return Tracker{node: -1} }

// Node is the server of the session's previous read (-1 before the first).
func (t *Tracker) Node() int { return t.node }

// Charge is what a monotonic-reads violation of the read last observed is
// charged to.
func (t *Tracker) Charge() Cause { return t.charge }

// Observe records a served read at server i routed with reason why;
// downSince says whether server i was down at some moment since the
// session's previous read. It returns whether the read moved the session
// and the move's cause (CauseNone when it did not move). Reads not served
// by a configured server (i < 0: the primary, or no read) are not
// observed.
func (t *Tracker) Observe(i int, why Reason, downSince bool) (moved bool, cause Cause) {
	if i < 0 {
		return false, CauseNone
	}
	if t.node < 0 {
		t.node, t.away, t.charge = i, reasonCause(why), CauseNone
		return false, CauseNone
	}
	if i == t.node {
		t.away = reasonCause(why)
		if downSince {
			t.charge = CauseCameBack
		}
		return false, CauseNone
	}
	switch why {
	case Remapped, Rebalanced:
		cause = CauseNeedless
	case Reselected:
		cause = CauseChosenDown
	case FirstChoice:
		switch t.away {
		case CauseNeedless:
			cause = CauseNeedless
		case CauseChosenDown, CauseCameBack:
			cause = CauseCameBack
		default:
			// On its first choice before and after, yet another server: the
			// table changed (a failover's new list). Not hashing's doing.
			cause = CauseNone
		}
	}
	t.node, t.away, t.charge = i, reasonCause(why), cause
	if downSince {
		t.charge = CauseCameBack
	}
	return true, cause
}
