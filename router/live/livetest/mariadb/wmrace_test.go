package mariadb_test

import (
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/router/live"
)

// TestWatermarkRace: the MariaDB flavor's watermark, read on a replica's
// connection right after a read there, holds what the read saw. Eight
// writers bump one row on the primary (version v is domain 0's sequence
// number base+v, nothing else writing), four readers read it on replica1
// and then, in turn, the flavor's watermark query or gtid_current_pos
// alone. The watermark never lacks the version read; gtid_current_pos
// (the replica's gtid_slave_pos, updated after the transaction is
// visible) is logged with how often it did (hundreds per 10 s on a
// two-core VM: the race the watermark query closes).
func TestWatermarkRace(t *testing.T) {
	composetest.Need(t, topo)
	ctx := ctxFor(t)
	p, r := topo.Primary(), topo.Replicas()[0]
	prim, err := sql.Open("mysql", p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer prim.Close()
	rep, err := sql.Open("mysql", r.User+":"+r.Password+"@tcp("+r.Addr()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS rt", "CREATE TABLE IF NOT EXISTS rt.race (id INT PRIMARY KEY, v BIGINT NOT NULL)",
		"INSERT INTO rt.race VALUES (1, 0) ON DUPLICATE KEY UPDATE v = v"} {
		if _, err := prim.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	f := live.MariaDB{}
	seq := func(text string) int64 {
		pos, err := f.ParseExecuted(text)
		if err != nil {
			t.Error(err)
			return 0
		}
		g, _ := pos.Domain(0)
		return int64(g.Seq)
	}
	var v0 int64
	var at string
	c, err := prim.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRowContext(ctx, "SELECT v FROM rt.race WHERE id = 1").Scan(&v0); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&at); err != nil {
		t.Fatal(err)
	}
	c.Close()
	base := seq(at) - v0 // the row was the last write: version v is sequence number base+v
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	stop := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	var writes, reads, oldReads, races, oldRaces atomic.Int64
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				if _, err := prim.ExecContext(ctx, "UPDATE rt.race SET v = v + 1 WHERE id = 1"); err == nil {
					writes.Add(1)
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			rc, err := rep.Conn(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer rc.Close()
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				var v int64
				var text string
				if err := rc.QueryRowContext(ctx, "SELECT v FROM rt.race WHERE id = 1").Scan(&v); err != nil {
					t.Error(err)
					return
				}
				q, n, bad := f.WatermarkQuery(), &reads, &races
				if i%2 == 1 {
					q, n, bad = "SELECT @@GLOBAL.gtid_current_pos", &oldReads, &oldRaces
				}
				if err := rc.QueryRowContext(ctx, q).Scan(&text); err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
				if base+v > seq(text) {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d writes; the watermark query lacked the version read in %d of %d reads, gtid_current_pos alone in %d of %d",
		writes.Load(), races.Load(), reads.Load(), oldRaces.Load(), oldReads.Load())
	if reads.Load() < 1000 || writes.Load() < 1000 {
		t.Fatalf("%d reads, %d writes: too few to judge", reads.Load(), writes.Load())
	}
	if races.Load() != 0 {
		t.Errorf("the watermark lacked the version a read saw %d times", races.Load())
	}
}
