// Package binlogwatch keeps, for every watched MySQL replica, a live lower
// bound of its executed GTID set, read from the replica's own binary log.
//
// A Watcher reads @@server_uuid and @@gtid_executed from its replica, then
// streams the replica's binlog from that set (replicas log what they apply)
// and adds each transaction's GTID when the transaction's commit event
// arrives: the XID event, a committing query event (DDL, or COMMIT of a
// non-transactional change), an XA prepare event, or the same events inside
// a compressed transaction payload. go-mysql's per-event GTID set is not a
// commit marker (it already holds the in-flight transaction) and is
// discarded; anonymous GTIDs are ignored; re-streamed transactions are
// deduplicated and counted.
//
// One goroutine (Run) owns the mutable state. Every change is published as an
// immutable Snapshot through an atomic pointer swap, so readers (the router)
// never take a lock. WaitFor blocks, with a context, until the published set
// contains a token.
//
// Invariant: the published set is a subset of what the replica has written
// to its binary log and (after the commit stage, microseconds later) to
// @@gtid_executed. See docs/binlogwatch.md for the exact window.
package binlogwatch
