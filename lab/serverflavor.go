package lab

import (
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
// domainSource(d):1-n and a write "d-s-n" the GTID domainSource(d):n.
// That is exact for what they ask: a MariaDB replica applies a domain in
// order (a position is a per-domain prefix), so a node's position holds
// the write d-s-m if and only if the set holds domainSource(d):m; and a
// domain's commit order is its sequence order, as a MySQL source's is
// its GNO order (the prefix check). It is not exact across a failover,
// where the new primary's sequence numbers repeat lost ones under
// another server id: the driver refuses failovers on MariaDB
// (Config.validate).
type serverFlavor struct{ engine compose.Engine }

// flavorOf is the instruments' flavor of engine e ("": MySQL).
func flavorOf(e compose.Engine) serverFlavor {
	if e == "" {
		e = compose.EngineMySQL
	}
	return serverFlavor{engine: e}
}

func (f serverFlavor) mariaDB() bool { return f.engine == compose.EngineMariaDB }

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
	if f.mariaDB() {
		return "SELECT @@GLOBAL.gtid_current_pos"
	}
	return "SELECT @@GLOBAL.gtid_executed"
}

// parseExecuted reads executedQuery's answer as a set.
func (f serverFlavor) parseExecuted(text string) (gtid.Set, error) {
	if !f.mariaDB() {
		return gtid.Parse(text)
	}
	return gtid.MariaDBSetOf(text)
}

// parseWrite reads a write's GTID (WriteAck.GTID, as the server reported
// it) as a GTID.
func (f serverFlavor) parseWrite(text string) (gtid.GTID, error) {
	if !f.mariaDB() {
		return gtid.ParseGTID(text)
	}
	g, err := gtid.ParseMariaDBGTID(text)
	if err != nil {
		return gtid.GTID{}, err
	}
	return gtid.NewGTID(domainSource(g.Domain), "", int64(g.Seq))
}

// domainSource is the source that stands for MariaDB replication domain
// d in the instruments' sets (gtid.MariaDBDomainSID).
func domainSource(d uint32) gtid.SID { return gtid.MariaDBDomainSID(d) }
