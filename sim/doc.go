// Package sim is causallab's deterministic discrete-event simulator of a MySQL
// primary, lagging replicas and the read routers of package router.
//
// The contract is the project's sim-model specification; docs/sim.md records
// every modelling choice the specification leaves open.
//
// Time is simulated in integer microseconds (type usec). One binary heap of
// value events drives a trial; nothing reads the wall clock and nothing is
// global. Each trial draws its offered workload (writes, sessions, read gaps)
// from its own PCG stream, once, and replays it under every router, so every
// router's rates share one denominator. The routers are not re-implemented
// here: every read's routing decision comes from router.Decide, the same pure
// core the live router uses, over the plain log position LogPos.
//
// Experiments (Routers, Window, Load, ...) return Tables that render as
// markdown, CSV or JSON lines, and can be drawn as pictures (plot.go).
package sim
