package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

// TestSoak holds many client connections on the proxy for a long time
// under a light read/write load and checks that the process's goroutines
// and heap stay level: not a correctness test, it runs only with
// CAUSALLAB_PROXY_SOAK=1.
//
//	CAUSALLAB_PROXY_SOAK=1 go test -count=1 -timeout 30m -run TestSoak -v ./proxy/
//
// Knobs: CAUSALLAB_PROXY_SOAK_CONNS (default 500),
// CAUSALLAB_PROXY_SOAK_MINUTES (default 5), CAUSALLAB_PROXY_SOAK_QPS per
// connection (default 2), CAUSALLAB_PROXY_SOAK_MULTIPLEX=1 (shared backend
// pools), CAUSALLAB_PROXY_SOAK_TEXT=1 (text queries, not prepared
// statements). Without multiplexing each proxy session holds a primary
// connection and one per replica it reads from, so the test raises
// max_connections on the topology's servers for its duration (restored
// after).
func TestSoak(t *testing.T) {
	if os.Getenv("CAUSALLAB_PROXY_SOAK") != "1" {
		t.Skip("soak run: set CAUSALLAB_PROXY_SOAK=1")
	}
	conns := envInt(t, "CAUSALLAB_PROXY_SOAK_CONNS", 500)
	minutes := envInt(t, "CAUSALLAB_PROXY_SOAK_MINUTES", 5)
	qps := envInt(t, "CAUSALLAB_PROXY_SOAK_QPS", 2)
	ctx := context.Background()
	// Room for conns sessions x (primary + replicas) backend connections.
	var nodes []*sql.DB
	nodes = append(nodes, primaryDB(t, topo))
	for _, r := range topo.Replicas() {
		db, err := sql.Open("mysql", r.User+":"+r.Password+"@tcp("+r.Addr()+")/")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		nodes = append(nodes, db)
	}
	for _, db := range nodes {
		var old int
		if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.max_connections").Scan(&old); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, "SET GLOBAL max_connections = "+strconv.Itoa(conns+200))
		t.Cleanup(func() { _, _ = db.Exec("SET GLOBAL max_connections = " + strconv.Itoa(old)) })
	}
	// CAUSALLAB_PROXY_SOAK_SOCKETIO: the proxy's socket_io (default raw).
	socketIO := os.Getenv("CAUSALLAB_PROXY_SOAK_SOCKETIO")
	// CAUSALLAB_PROXY_SOAK_MULTIPLEX=1: shared backend pools
	// (Config.Multiplex, default pool_size and pool_wait).
	multiplex := os.Getenv("CAUSALLAB_PROXY_SOAK_MULTIPLEX") == "1"
	// CAUSALLAB_PROXY_SOAK_TEXT=1: the statements as text queries instead
	// of go-mysql's prepared statements (a prepare, an execute and a
	// close each).
	text := os.Getenv("CAUSALLAB_PROXY_SOAK_TEXT") == "1"
	s := startProxy(t, func(c *Config) {
		c.AuthMethod, c.SocketIO, c.Multiplex = "mysql_native_password", socketIO, multiplex
	})
	mustExec(t, nodes[0], "CREATE DATABASE IF NOT EXISTS soak")
	mustExec(t, nodes[0], "DROP TABLE IF EXISTS soak.t")
	mustExec(t, nodes[0], "CREATE TABLE soak.t (id INT PRIMARY KEY, n INT NOT NULL)")
	for i := 0; i < 1000; i += 100 {
		q := "INSERT INTO soak.t VALUES "
		for j := i; j < i+100; j++ {
			if j > i {
				q += ","
			}
			q += fmt.Sprintf("(%d,0)", j)
		}
		mustExec(t, nodes[0], q)
	}
	if err := topo.WaitReplicated(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var queries, failures atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, err)
	}
	for i := 0; i < conns; i++ {
		wg.Go(func() {
			c, err := client.ConnectWithContext(runCtx, s.Addr(), "app", "apppw", "soak", 10*time.Second)
			if err != nil {
				fail(fmt.Errorf("connect: %w", err))
				return
			}
			defer c.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			tick := time.NewTicker(time.Second / time.Duration(qps))
			defer tick.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
				}
				id := rng.IntN(1000)
				var err error
				var args []any
				upd, sel := "UPDATE t SET n = n + 1 WHERE id = ?", "SELECT n FROM t WHERE id = ?"
				if text {
					upd = "UPDATE t SET n = n + 1 WHERE id = " + strconv.Itoa(id)
					sel = "SELECT n FROM t WHERE id = " + strconv.Itoa(id)
				} else {
					args = []any{id}
				}
				if rng.IntN(10) == 0 {
					_, err = c.Execute(upd, args...)
				} else {
					var r interface{ Close() }
					res, e := c.Execute(sel, args...)
					err, r = e, res
					if e == nil {
						r.Close()
					}
				}
				if err != nil {
					fail(err)
					continue
				}
				queries.Add(1)
			}
		})
	}
	type sample struct {
		at         time.Duration
		goroutines int
		heap       uint64
		sessions   string
	}
	var samples []sample
	start := time.Now()
	take := func() sample {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return sample{at: time.Since(start).Round(time.Second), goroutines: runtime.NumGoroutine(), heap: ms.HeapInuse,
			// Cloned: grepLines may return a substring of the whole
			// scrape, which the samples would otherwise keep alive (it
			// showed as heap growth of this test's own).
			sessions: strings.Clone(strings.ReplaceAll(grepLines(metricText(t, s), "causallab_proxy_sessions ",
				`causallab_proxy_pool_connections{backend="primary"`, `causallab_proxy_pool_acquire_failures_total`), "\n", " "))}
	}
	every := 15 * time.Second
	end := time.Duration(minutes) * time.Minute
	for time.Since(start) < end {
		time.Sleep(every)
		sm := take()
		samples = append(samples, sm)
		t.Logf("t=%v goroutines=%d heap_inuse=%.1f MiB queries=%d failures=%d %s",
			sm.at, sm.goroutines, float64(sm.heap)/(1<<20), queries.Load(), failures.Load(), sm.sessions)
		// CAUSALLAB_PROXY_SOAK_HEAPPROFILE=prefix writes a heap profile per
		// sample (prefix-<seconds>.pb.gz), for go tool pprof -base.
		if prefix := os.Getenv("CAUSALLAB_PROXY_SOAK_HEAPPROFILE"); prefix != "" {
			f, err := os.Create(fmt.Sprintf("%s-%d.pb.gz", prefix, int(sm.at.Seconds())))
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	stop()
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d failed statements or connections (first: %v)", n, firstErr.Load())
	}
	if len(samples) < 3 {
		t.Fatalf("only %d samples: run longer", len(samples))
	}
	// The first sample (after 15 s, every client connected) is the
	// baseline; growth is judged on the last one.
	base, last := samples[0], samples[len(samples)-1]
	t.Logf("baseline t=%v: %d goroutines, %.1f MiB; end t=%v: %d goroutines, %.1f MiB; %d queries (uptime load: %s)",
		base.at, base.goroutines, float64(base.heap)/(1<<20), last.at, last.goroutines, float64(last.heap)/(1<<20), queries.Load(), loadavg())
	if last.goroutines > base.goroutines+conns/50 {
		t.Errorf("goroutines grew from %d to %d", base.goroutines, last.goroutines)
	}
	if float64(last.heap) > 1.25*float64(base.heap)+4<<20 {
		t.Errorf("heap in use grew from %.1f to %.1f MiB", float64(base.heap)/(1<<20), float64(last.heap)/(1<<20))
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return string(b)
}
