// Package router is causallab's causal read router.
//
// The package has two layers:
//
//   - The decision core (this file's types and Decide): a pure, deterministic
//     function of (policy, session state, replica positions and health, clock,
//     a random draw, the fallback bucket). It performs no I/O, reads no clock,
//     imports nothing that talks to MySQL, and is generic over the position
//     type, so the simulator (package sim, plain log positions) and the live
//     router (gtid.Set positions) call exactly the same code.
//   - The live router (files named live*.go): connections, token capture from
//     OK packets, waits, positions (WatchSource over binlogwatch, the
//     recommended source; Poller, the baseline), metrics. Its decision path
//     is DecideLive, also pure: it builds the View from the router's
//     LiveState and the PositionSource, calls Decide, and the router
//     carries the Decision out. A test replays the simulator's recorded
//     decisions through DecideLive and gets the same answers.
//
// Positions are partially ordered. The core asks one question of them,
// Contains ("does the receiver hold every transaction of other?"), and, to
// raise a session's monotonic-reads watermark, Union. It never asks "less
// than".
//
// Every read gets exactly one typed outcome (Action plus Reason). A read that
// goes to the primary for freshness is a fallback, counted apart from reads
// that go to the primary for other reasons, and limited by the fallback cap.
// When the cap is spent the configured CapBehavior applies; nothing degrades
// silently.
package router
