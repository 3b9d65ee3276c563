package lab

import (
	"errors"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
)

// serverFlavor is what the driver's own instruments (the poller that
// measures lag, the prefix check, the lag tracker) ask of the servers'
// engine. The routers under test use their own flavors (router/live);
// this one only measures.
//
// On MariaDB the instruments see positions as MySQL GTID sets, one
// source per replication domain: position "d-s-n" is the set
// domainSource(d):1-n and a write "d-s-n" the GTID domainSource(d):n
// (parseWrite). That is exact for what the lag measurement asks: a
// MariaDB replica applies a domain in order (a position is a per-domain
// prefix), so a node's position holds the write d-s-m if and only if the
// set holds domainSource(d):m. It is not exact across a failover, where
// the new primary's sequence numbers repeat lost ones under another
// server id: the checks that must tell writes apart (the prefix check,
// the hidden-loss pass) name a write by its domain and server id
// (writeID, gtid.MariaDBWrite) and never compare it with a position.
//
// On PostgreSQL the instruments see an LSN as the set PGLSNSID():1-lsn
// and a write's token as the GTID PGLSNSID():lsn (gtid.PGSetOf): exact
// for the lag measurement, since a standby replays WAL in order. A write's
// token is pg_current_wal_lsn() read after its commit, an upper bound of
// its commit record and not its place in the commit order, so writeID
// refuses it: the prefix check and the hidden-loss pass judge nothing on
// PostgreSQL, and the run's note says so (prefixNote).
type serverFlavor struct{ engine compose.Engine }

// flavorOf is the instruments' flavor of engine e ("": MySQL).
func flavorOf(e compose.Engine) serverFlavor {
	if e == "" {
		e = compose.EngineMySQL
	}
	return serverFlavor{engine: e}
}

func (f serverFlavor) mariaDB() bool { return f.engine == compose.EngineMariaDB }

func (f serverFlavor) postgres() bool { return f.engine == compose.EnginePostgres }

// errPGCommitOrder is writeID's answer on PostgreSQL.
var errPGCommitOrder = errors.New("lab: a PostgreSQL write's token is the WAL position read after its commit, not its place in the commit order")

// trackQuery asks a lab connection's server to report each write's GTID
// in its OK packet (nodeConn.ExecuteWrite).
func (f serverFlavor) trackQuery() string {
	if f.mariaDB() {
		return "SET SESSION session_track_system_variables = 'last_gtid'"
	}
	return "SET SESSION session_track_gtids = OWN_GTID"
}

// executedQuery reads what a node has applied.
func (f serverFlavor) executedQuery() string {
	if f.postgres() {
		return "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text"
	}
	if f.mariaDB() {
		return "SELECT @@GLOBAL.gtid_current_pos"
	}
	return "SELECT @@GLOBAL.gtid_executed"
}

// parseExecuted reads executedQuery's answer as a set.
func (f serverFlavor) parseExecuted(text string) (gtid.Set, error) {
	if f.postgres() {
		l, err := gtid.ParsePGLSN(text)
		if err != nil {
			return gtid.Set{}, err
		}
		return gtid.PGSetOf(l)
	}
	if !f.mariaDB() {
		return gtid.Parse(text)
	}
	return gtid.MariaDBSetOf(text)
}

// parseWrite reads a write's GTID (WriteAck.GTID, as the server reported
// it) as a GTID the nodes' positions (parseExecuted) can be asked about:
// on MariaDB under its domain's source, so that it is not exact across a
// failover (writeID is).
func (f serverFlavor) parseWrite(text string) (gtid.GTID, error) {
	if f.postgres() {
		l, err := gtid.ParsePGLSN(text)
		if err != nil {
			return gtid.GTID{}, err
		}
		return gtid.PGWrite(l)
	}
	if !f.mariaDB() {
		return gtid.ParseGTID(text)
	}
	g, err := gtid.ParseMariaDBGTID(text)
	if err != nil {
		return gtid.GTID{}, err
	}
	return gtid.NewGTID(domainSource(g.Domain), "", int64(g.Seq))
}

// writeID names a write (WriteAck.GTID) exactly, for the checks that
// tell writes apart (the prefix check, the hidden-loss pass): MySQL's
// GTID; on MariaDB the GTID under its writer's source
// (gtid.MariaDBWrite: domain and server id), so that a write a failover
// lost and the new primary's write of the same sequence number differ.
// Never compared with a node's position.
func (f serverFlavor) writeID(text string) (gtid.GTID, error) {
	if f.postgres() {
		return gtid.GTID{}, errPGCommitOrder
	}
	if !f.mariaDB() {
		return gtid.ParseGTID(text)
	}
	return gtid.MariaDBWrite(text)
}

// lostWrites reads a failover's lost transactions
// (compose.FailoverResult.LostGTIDs) as writeID names them: MySQL's GTID
// set; MariaDB's ranges under their writer's source.
func (f serverFlavor) lostWrites(text string) (gtid.Set, error) {
	if f.postgres() {
		return gtid.Set{}, nil // writeID names no PostgreSQL write
	}
	if !f.mariaDB() {
		return gtid.Parse(text)
	}
	return gtid.ParseMariaDBRanges(text)
}

// writerQuery reads the source a node's own writes have under writeID:
// MySQL's server_uuid; MariaDB's domain and server id (parseWriter).
func (f serverFlavor) writerQuery() string {
	if f.mariaDB() {
		return "SELECT CONCAT(@@gtid_domain_id, '-', @@server_id, '-1')"
	}
	return "SELECT @@server_uuid"
}

// parseWriter reads writerQuery's answer.
func (f serverFlavor) parseWriter(text string) (gtid.SID, error) {
	if !f.mariaDB() {
		return gtid.ParseSID(text)
	}
	g, err := gtid.MariaDBWrite(text)
	return g.SID, err
}

// domainSource is the source that stands for MariaDB replication domain
// d in the instruments' sets (gtid.MariaDBDomainSID).
func domainSource(d uint32) gtid.SID { return gtid.MariaDBDomainSID(d) }
