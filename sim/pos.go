package sim

import "github.com/causallab/causallab/gtid"

// LogPos is a position in the single primary's log: the number of
// transactions applied (a transaction number, like a GTID's GNO, with no
// gaps). It is gtid.LSN, the project's one scalar position (totally
// ordered: Contains is >= and Union is max); the simulator keeps its own
// name for it.
type LogPos = gtid.LSN
