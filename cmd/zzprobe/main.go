package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/okpacket"
)

func must[T any](v T, err error) T {
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	return v
}

func executed(c *client.Conn) gtid.Set {
	r := must(c.Execute("SELECT @@GLOBAL.gtid_executed"))
	s := must(r.GetString(0, 0))
	return must(gtid.Parse(s))
}

func main() {
	prim, repl := os.Args[1], os.Args[2]
	ctx := context.Background()
	p := must(client.ConnectWithContext(ctx, prim, "causallab", "causallab", "", 5*time.Second))
	must(p.Execute("CREATE DATABASE IF NOT EXISTS probe"))
	must(p.Execute("CREATE TABLE IF NOT EXISTS probe.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)"))
	stop := make(chan struct{})
	go func() {
		w := must(client.ConnectWithContext(ctx, prim, "causallab", "causallab", "", 5*time.Second))
		for {
			select {
			case <-stop:
				return
			default:
			}
			must(w.Execute("INSERT INTO probe.t (v) VALUES (1)"))
		}
	}()
	time.Sleep(500 * time.Millisecond)
	r := must(client.ConnectWithContext(ctx, repl, "causallab", "causallab", "", 5*time.Second, func(c *client.Conn) error {
		return c.SetCapability(mysql.CLIENT_SESSION_TRACK)
	}))
	fmt.Println("deprecate_eof granted:", r.HasCapability(mysql.CLIENT_DEPRECATE_EOF))
	rec := okpacket.Install(r)
	must(r.Execute("SET SESSION session_track_gtids = ALL_GTIDS"))
	r2 := must(client.ConnectWithContext(ctx, repl, "causallab", "causallab", "", 5*time.Second))
	var present, absent, belowPre, abovePost, flagOnly int
	const n = 3000
	for i := 0; i < n; i++ {
		pre := executed(r2)
		rec.Start()
		q := "SELECT COUNT(*) FROM probe.t"
		if i%2 == 1 {
			q = "SELECT 1"
		}
		must(r.Execute(q))
		raw := rec.Stop()
		post := executed(r2)
		// last packet
		var last []byte
		b := raw
		for len(b) >= 4 {
			l := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
			last, b = b[4:4+l], b[4+l:]
		}
		if len(last) == 0 || last[0] != 0xfe {
			fmt.Printf("last packet header %x\n", last[:1])
			os.Exit(1)
		}
		fake := append([]byte{byte(len(last)), byte(len(last) >> 8), byte(len(last) >> 16), 1, 0}, last[1:]...)
		tr := must(okpacket.ParseLastOK(fake))
		if tr.GTID == "" {
			absent++
			continue
		}
		present++
		g := must(gtid.Parse(tr.GTID))
		if !g.Contains(pre) {
			belowPre++
		}
		if !post.Contains(g) {
			abovePost++
		}
	}
	close(stop)
	fmt.Printf("statements %d: tracked GTID set present %d, absent %d; tracked ⊉ executed-before %d; tracked ⊄ executed-after %d; flagOnly %d\n", n, present, absent, belowPre, abovePost, flagOnly)
}
