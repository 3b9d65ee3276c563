// Package mysqlwire holds the MySQL wire helpers that the live router
// (router/live), the proxy, the lab and binlogwatch share, so that each is
// written once:
//
//   - Dialer: go-mysql client connections with raw socket I/O (package
//     rawnet) unless told otherwise.
//   - WithCtx, Exec, StmtExec: a statement bounded by a context (go-mysql's
//     client takes none: the connection's deadline expires when the
//     context ends).
//   - PipeConn, ExecPipelined, ReadValueAnswer, Caps: a follow-up query
//     pipelined behind a statement (one write, no round trip of its own)
//     and its answer read in the framing the server granted.
//   - ExecutedQuery, ReadExecuted, WaitForExecutedQuery: a node's executed
//     GTID set, and WAIT_FOR_EXECUTED_GTID_SET built from a parsed set
//     (never from caller text).
//   - Recorder, ParseLastOK: the OK recorder (below).
//   - FrameReader, InstallFrames: a reader under go-mysql's that lets a
//     relay take a response's packets in place, go-mysql reading in turn.
//   - GoMySQLSet, FromGoMySQLSet: gtid.Set to and from go-mysql's set, for
//     the binlog syncer (so package gtid imports no MySQL driver).
//
// # The OK recorder
//
// A write's GTID and session state changes are parsed from a private copy
// of the response's last OK packet. Why a copy: go-mysql v1.16.0 reads a
// statement's response into a buffer from a process-wide sync.Pool
// (utils.ByteSliceGet in readResult) and returns it to the pool before
// Execute returns, while Result.SessionTracking's strings still alias it.
// Under concurrency another connection (any go-mysql user in the process)
// reuses the buffer before the caller can clone the GTID: the router's
// TestLive/shared-pool (2,000 sessions) saw a session's GTID overwritten
// with another connection's "@@GLOBAL.gtid_executed" result. A corrupted
// GTID that still parses is a silent read-your-writes violation, so a
// write's GTID is never taken from go-mysql's result; callers use a
// Recorder instead:
//
//	rec := mysqlwire.InstallRecorder(conn) // once per connection (idempotent)
//	rec.Start()
//	_, err := conn.Execute("INSERT ...")
//	tr, perr := rec.LastOK() // tr.GTID is a copy; ErrNoOK for a result set
//
// The package depends on go-mysql, gtid and rawnet only (no router, no
// binlogwatch, no proxy): it is the bottom of the wire stack.
package mysqlwire
