package lab

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
)

// TestServerFlavorMariaDB: the instruments' reading of MariaDB positions
// as sets answers what MariaDB's own comparison answers: a node's
// position holds a write exactly when the set holds the write's GTID,
// for random positions and writes over a few domains and server ids;
// and the commit order within a domain is the GNO order.
func TestServerFlavorMariaDB(t *testing.T) {
	f := flavorOf(compose.EngineMariaDB)
	rng := rand.New(rand.NewPCG(7, 41))
	for range 2000 {
		var parts []string
		for d := range uint32(3) {
			if rng.IntN(3) > 0 {
				parts = append(parts, fmt.Sprintf("%d-%d-%d", d, 1+rng.IntN(3), rng.IntN(20)))
			}
		}
		text := strings.Join(parts, ",")
		pos, err := gtid.ParseMariaDBPosition(text)
		if err != nil {
			t.Fatal(err)
		}
		set, err := f.parseExecuted(text)
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		w := fmt.Sprintf("%d-%d-%d", rng.IntN(3), 1+rng.IntN(3), 1+rng.IntN(20))
		g, err := gtid.ParseMariaDBGTID(w)
		if err != nil {
			t.Fatal(err)
		}
		mg, err := f.parseWrite(w)
		if err != nil {
			t.Fatalf("%q: %v", w, err)
		}
		if got, want := set.ContainsGTID(mg), pos.ContainsGTID(g); got != want {
			t.Fatalf("position %q, write %q: the set %s says %v, MariaDB %v", text, w, set, got, want)
		}
		if mg.SID != domainSource(g.Domain) || mg.GNO != int64(g.Seq) {
			t.Fatalf("write %q read as %v", w, mg)
		}
	}
	if _, err := f.parseWrite("3e11fa47-71ca-11e1-9e33-c80aa9429562:5"); err == nil {
		t.Fatal("a MySQL GTID read as a MariaDB write")
	}
	if s, err := flavorOf("").parseExecuted("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"); err != nil || s.Count() != 5 {
		t.Fatalf("MySQL's flavor: %v, %v", s, err)
	}
}

// TestConfigEngine: on MariaDB the driver polls positions and reads the
// watermark after each read by default, and refuses what it cannot run
// there, each named. PostgreSQL's refusals: TestConfigPostgres.
func TestConfigEngine(t *testing.T) {
	routers, err := ParseRouters("any,token-ryw-mr")
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Engine: compose.EngineMariaDB, Routers: routers}
	if err := c.validate(); err != nil || c.Positions != PositionsPoll || c.WatermarkSource != WatermarkQuery {
		t.Fatalf("MariaDB defaults: %v, positions %q, watermark %q", err, c.Positions, c.WatermarkSource)
	}
	for name, mod := range map[string]func(*Config){
		"via proxy": func(c *Config) { c.Via = ViaProxy },
		"failover":  func(c *Config) { c.Condition.Events = []Event{{Kind: EvFailover, Node: "replica1"}} },
	} {
		c := Config{Engine: compose.EngineMariaDB, Routers: routers}
		mod(&c)
		if err := c.validate(); err != nil {
			t.Errorf("MariaDB %s: %v", name, err)
		}
	}
	lsn := []RouterSpec{{Name: "lsn-token", Policy: routers[1].Policy, Token: TokenLSN}}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"binlog", func(c *Config) { c.Positions = PositionsBinlog }, "positions poll"},
		{"lazy", func(c *Config) { c.WatermarkSource = WatermarkLazy }, "watermark source query"},
		{"unordered", func(c *Config) { c.Condition.Names = append(c.Condition.Names, CondUnordered) }, "replica_preserve_commit_order"},
		{"scalar", func(c *Config) { c.Routers = lsn }, "scalar token"},
		{"unknown engine", func(c *Config) { c.Engine = "oracle" }, "unknown engine"},
	} {
		c := Config{Engine: compose.EngineMariaDB, Routers: routers}
		tc.mod(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// TestServerFlavorWriteID: on MariaDB a write is named by its domain and
// server id, so a failover's lost write and the new primary's write of
// the same sequence number differ, and the lost ranges compose reports
// hold the first and not the second; the writer query's answer names the
// new primary's writes. MySQL's names are its GTIDs. Bad text is an
// error.
func TestServerFlavorWriteID(t *testing.T) {
	f := flavorOf(compose.EngineMariaDB)
	lost, err := f.writeID("0-1-103")
	if err != nil {
		t.Fatal(err)
	}
	next, err := f.writeID("0-2-103")
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := f.lostWrites("0-1-100..105")
	if err != nil {
		t.Fatal(err)
	}
	writer, err := f.parseWriter("0-2-1")
	if err != nil {
		t.Fatal(err)
	}
	if lost == next || !ranges.ContainsGTID(lost) || ranges.ContainsGTID(next) || writer != next.SID {
		t.Fatalf("lost %v, next %v, ranges %s, new primary's writer %v", lost, next, ranges, writer)
	}
	if p1, _ := f.parseWrite("0-1-103"); p1 != (gtid.GTID{SID: domainSource(0), GNO: 103}) {
		t.Fatalf("the lag's name of 0-1-103: %v", p1)
	}
	for _, bad := range []func() error{
		func() error { _, err := f.writeID("3e11fa47-71ca-11e1-9e33-c80aa9429562:5"); return err },
		func() error { _, err := f.lostWrites("0-1-5"); return err },
		func() error { _, err := f.parseWriter("x"); return err },
		func() error { _, err := flavorOf("").lostWrites("0-1-1..2"); return err },
	} {
		if bad() == nil {
			t.Error("bad text read without an error")
		}
	}
	my := flavorOf("")
	g, err := my.writeID("3e11fa47-71ca-11e1-9e33-c80aa9429562:5")
	if err != nil || g.GNO != 5 || my.writerQuery() != "SELECT @@server_uuid" {
		t.Fatalf("MySQL: %v, %v", g, err)
	}
}

// TestConfigPostgres: on PostgreSQL the driver polls positions by
// default and refuses, each named, what live.PGRouter and the lab's own
// PostgreSQL workload cannot run; a failover is allowed.
func TestConfigPostgres(t *testing.T) {
	routers, err := ParseRouters("any,token-wait+epoch")
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Engine: compose.EnginePostgres, Routers: routers, Condition: ConditionSpec{Events: []Event{{Kind: EvFailover, Node: "replica1"}}}}
	if err := c.validate(); err != nil || c.Positions != PositionsPoll {
		t.Fatalf("PostgreSQL defaults: %v, positions %q", err, c.Positions)
	}
	global, err := ParseRouters("global")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"via proxy", func(c *Config) { c.Via = ViaProxy }, "via router"},
		{"binlog", func(c *Config) { c.Positions = PositionsBinlog }, "positions poll"},
		{"workload", func(c *Config) { c.Workload = &otherWorkload{} }, "runs MySQL statements"},
		{"row-lock", func(c *Config) { c.Condition.Names = append(c.Condition.Names, CondRowLock) }, "row-lock is MySQL's"},
		{"drift", func(c *Config) { c.Condition.Events = []Event{{Kind: EvDrift, Node: "replica1", Load: 4}} }, "drift"},
		{"global", func(c *Config) { c.Routers = global }, "no global policy"},
	} {
		c := Config{Engine: compose.EnginePostgres, Routers: routers}
		tc.mod(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// otherWorkload is a Workload other than DefaultWorkload.
type otherWorkload struct{ DefaultWorkload }
