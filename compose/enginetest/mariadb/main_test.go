package mariadb_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/compose/enginetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// topo is this package's one topology: a primary and two replicas.
var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Engine: compose.EngineMariaDB, Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

// TestTokenCapture: with session_track_system_variables=last_gtid a
// write's OK packet carries its GTID (read from a private copy of the
// packet with internal/mysqlwire, as the router does); it is the
// server's @@last_gtid, MASTER_GTID_WAIT on a replica returns 0 for it
// once the replica has the row, and the replica's gtid_slave_pos then
// contains it. (Runs before TestFaults, whose failover changes roles.)
func TestTokenCapture(t *testing.T) {
	composetest.Need(t, topo)
	ctx := enginetest.Ctx(t)
	p := topo.Primary()
	c, err := client.ConnectWithDialer(ctx, "", p.Addr(), p.User, p.Password, "", (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
		func(c *client.Conn) error { return c.SetCapability(mysql.CLIENT_SESSION_TRACK) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := mysqlwire.InstallRecorder(c)
	for _, q := range []string{"SET session_track_system_variables = 'last_gtid'", "CREATE DATABASE IF NOT EXISTS tokens", "CREATE TABLE IF NOT EXISTS tokens.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)"} {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	r1 := enginetest.DB(t, topo, "replica1")
	var prev gtid.MariaDBGTID
	for i := range 20 {
		rec.Start()
		res, err := c.Execute("INSERT INTO tokens.t (v) VALUES (?)", i)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := rec.LastOK()
		if err != nil {
			t.Fatal(err)
		}
		g, err := gtid.ParseMariaDBGTID(tr.Vars["last_gtid"])
		if err != nil {
			t.Fatalf("last_gtid %q in the OK packet: %v", tr.Vars["last_gtid"], err)
		}
		if i > 0 && (g.Domain != prev.Domain || g.Seq != prev.Seq+1) {
			t.Fatalf("write %d: GTID %s after %s", i, g, prev)
		}
		prev = g
		var last string
		if r, err := c.Execute("SELECT @@last_gtid"); err != nil {
			t.Fatal(err)
		} else if last, err = r.GetStringByName(0, "@@last_gtid"); err != nil || last != g.String() {
			t.Fatalf("@@last_gtid %q, OK packet %s (%v)", last, g, err)
		}
		var v int
		if err := r1.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, 10)", g.String()).Scan(&v); err != nil || v != 0 {
			t.Fatalf("MASTER_GTID_WAIT(%s) on replica1 = %d, %v", g, v, err)
		}
		var n int
		if err := r1.QueryRowContext(ctx, "SELECT COUNT(*) FROM tokens.t WHERE id = ?", res.InsertId).Scan(&n); err != nil || n != 1 {
			t.Fatalf("replica1 lacks row %d after MASTER_GTID_WAIT(%s) returned 0 (%v)", res.InsertId, g, err)
		}
		var sp string
		if err := r1.QueryRowContext(ctx, "SELECT @@gtid_slave_pos").Scan(&sp); err != nil {
			t.Fatal(err)
		}
		if !gtid.MustParseMariaDBPosition(sp).ContainsGTID(g) {
			t.Fatalf("replica1 gtid_slave_pos %s does not contain %s", sp, g)
		}
	}
	t.Logf("20 writes: GTIDs from the OK packet up to %s, each reached on replica1", prev)
}

// TestFaults runs the engine-neutral topology and fault tests, failover
// last (it leaves replica1 the primary). The failover holds replica1 back
// by stopping its applier: compose does not drain a stopped applier.
func TestFaults(t *testing.T) {
	composetest.Need(t, topo)
	enginetest.Run(t, topo, 2*time.Second, time.Second, func(_ *testing.T, ctx context.Context, topo *compose.Topology) error {
		return topo.StopApplier(ctx, "replica1")
	})
}
