package sim

import "github.com/causallab/causallab/router"

// LogPos is a position in the single primary's log: the number of
// transactions applied (a transaction number, like a GTID's GNO, with no
// gaps). It is totally ordered, so Contains is >= and Union is max.
type LogPos uint64

var _ router.Position[LogPos] = LogPos(0)

// Contains reports whether p holds every transaction of o (p >= o).
func (p LogPos) Contains(o LogPos) bool { return p >= o }

// Union returns max(p, o).
func (p LogPos) Union(o LogPos) LogPos {
	if o > p {
		return o
	}
	return p
}
