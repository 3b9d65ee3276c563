// Package router is causallab's causal read router: its decision core.
//
// Decide is a pure, deterministic function of (policy, session state,
// replica positions and health, clock, a random draw, the fallback bucket).
// It performs no I/O, reads no clock, imports nothing that talks to a
// database, and is generic over the position type, so the simulator
// (package sim, scalar log positions) and the live router (package
// router/live, MySQL GTID sets or scalar positions) call exactly the same
// code. The live layer (connections, token capture, waits, position
// sources, metrics) is package router/live; this package imports only
// gtid (the position interface) and hashroute.
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
