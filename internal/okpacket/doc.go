// Package okpacket records the bytes a go-mysql client connection reads
// for one statement and parses the session tracking (GTID, state change,
// system variables) of the response's last OK packet from that private
// copy.
//
// Why a copy: go-mysql v1.16.0 reads a statement's response into a buffer
// from a process-wide sync.Pool (utils.ByteSliceGet in readResult) and
// returns it to the pool before Execute returns, while
// Result.SessionTracking's strings still alias it. Under concurrency
// another connection (any go-mysql user in the process) reuses the buffer
// before the caller can clone the GTID: the router's TestLive/shared-pool
// (2,000 sessions) saw a session's GTID overwritten with another
// connection's "@@GLOBAL.gtid_executed" result. A corrupted GTID that still
// parses is a silent read-your-writes violation, so a write's GTID is never
// taken from go-mysql's result; callers use a Recorder instead:
//
//	rec := okpacket.Install(conn) // once per connection (idempotent)
//	rec.Start()
//	_, err := conn.Execute("INSERT ...")
//	tr, perr := rec.LastOK() // tr.GTID is a copy; ErrNoOK for a result set
//
// The package depends on go-mysql only (no router, no binlogwatch), so the
// router, the proxy, the lab and binlogwatch's tests share one recorder and
// one parser.
package okpacket
