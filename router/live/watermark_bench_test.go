package live

import (
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// BenchmarkWatermarkQuery measures, on real MySQL, what the sound
// watermark costs over gtid_executed alone: a point read on replica1
// followed by the watermark on the same connection, pipelined as the
// router sends it (one write, both answers read), with
// mysqlwire.ExecutedQuery (gtid_executed alone, unsound: "The commit
// race" in docs/router.md) and with mysqlwire.WatermarkQuery
// (gtid_executed joined with the received set). Sub-benchmarks alternate
// in one run so the machine's load falls on both.
func BenchmarkWatermarkQuery(b *testing.B) {
	composetest.Need(b, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pu, rn := topo.Primary(), topo.Replicas()[0]
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 5 * time.Second}
	c, err := d.Dial(ctx, rn.Addr(), false)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	mysqlwire.InstallPipe(c)
	const read = "SELECT 1 FROM mysql.user LIMIT 1"
	for round := range 2 {
		for _, q := range []struct{ name, query string }{
			{"executed-alone", mysqlwire.ExecutedQuery},
			{"executed+received", mysqlwire.WatermarkQuery},
		} {
			b.Run(q.name+"/round"+string(rune('1'+round)), func(b *testing.B) {
				for b.Loop() {
					if _, _, err := mysqlwire.ExecPipelined(ctx, c, q.query, read); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
