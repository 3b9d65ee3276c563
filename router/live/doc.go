// Package live is the live layer of causallab's causal read router: it
// carries the decisions of the pure core (package router) out against real
// servers.
//
// It owns connections (a shared, bounded primary pool for writes and a
// per-node read pool, dialled through internal/mysqlwire), token capture
// from the router's own copy of each OK packet, bounded waits, the sound
// monotonic-reads watermark (pipelined behind the read), position sources
// (WatchSource over binlogwatch, the recommended source; Poller, the
// baseline), metrics and read traces. Its decision path is DecideLive,
// also pure: it builds the router.View from the Router's LiveState and the
// PositionSource, calls router.Decide, and the Router carries the Decision
// out. A test (TestSimLiveEquivalence) replays the simulator's recorded
// decisions through DecideLive and gets the same answers.
package live
