package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/causallab/causallab/binlogwatch"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/router"
)

// TestFleetSharesWatchers (issue 40, item 3): two proxies take the
// replicas' positions from one watcher per replica (binlogwatch's
// binlog-reader server, updates coalesced to one per millisecond) instead
// of each opening its own binlog stream or polls: both subscribe to each
// watcher, and both serve read-your-writes with reads on the replicas.
func TestFleetSharesWatchers(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	watchers := map[string]string{}
	servers := map[string]*binlogwatch.ProxySQLServer{}
	done := make(chan struct{}, 2*len(topo.Replicas()))
	for _, r := range topo.Replicas() {
		w, err := binlogwatch.New(binlogwatch.Config{Name: r.Name, Host: r.Host, Port: uint16(r.Port), User: r.User, Password: r.Password, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := binlogwatch.NewProxySQLServer(w, binlogwatch.ProxySQLConfig{Batch: time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = w.Run(ctx); done <- struct{}{} }()
		go func() { _ = srv.Serve(ctx, ln); done <- struct{}{} }()
		watchers[r.Name], servers[r.Name] = ln.Addr().String(), srv
	}
	t.Cleanup(func() {
		cancel()
		for range 2 * len(servers) {
			<-done
		}
	})
	fleet := []*Server{}
	for range 2 {
		fleet = append(fleet, startProxy(t, func(c *Config) { c.Positions, c.Watchers = "watchers", watchers }))
	}
	for name, srv := range servers {
		for deadline := time.Now().Add(30 * time.Second); srv.Clients() != 2; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("watcher of %s: %d subscribers, want the fleet's 2", name, srv.Clients())
			}
		}
	}
	p := topo.Primary()
	direct := sqlOpen(t, p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	emptyTable(t, direct, "ptest", "fleet", "id INT PRIMARY KEY")
	for i, s := range fleet {
		c := conn1(t, openDB(t, s, ""))
		for k := range 20 {
			id := 1000*i + k
			mustExec(t, c, "INSERT INTO ptest.fleet VALUES (?)", id)
			var got int
			if err := c.QueryRowContext(ctx, "SELECT id FROM ptest.fleet WHERE id = ?", id).Scan(&got); err != nil {
				t.Fatalf("proxy %d: read-your-writes of row %d: %v", i, id, err)
			}
		}
		m := metricText(t, s)
		if !strings.Contains(grepLines(m, "causallab_proxy_statements_total"), `read",role="replica"`) {
			t.Fatalf("proxy %d: no read served by a replica:\n%s", i, grepLines(m, "causallab_proxy_statements_total"))
		}
		if l := grepLines(m, "causallab_proxy_polls_total"); strings.Contains(l, "replica") {
			t.Fatalf("proxy %d polled a replica it has a watcher for:\n%s", i, l)
		}
		t.Logf("proxy %d: %s", i, strings.TrimSpace(fmt.Sprint(grepLines(m, `role="replica"`))))
	}
}

// TestFleetFallbackCap (issue 40, item 3): fallback_per_second is one cap
// for the whole fleet. Four proxies, every replica's applier stopped (a
// lag spike no replica recovers from), token-ryw: each read of a row the
// session has just written needs a freshness fallback to the primary.
// 32 clients dealt across the proxies offer far more than the cap of
// 40/s. Over 5 s after a 1.5 s warm-up (each proxy's burst spent):
//   - fleet_members 4: the fleet's fallbacks stay within the cap (at most
//     40/s + 10 %), and are not starved (at least half of it); the rest
//     fail fast with cap-exceeded;
//   - fleet_members 1 (each proxy believing it is alone): the fleet
//     allows about 4 times the cap, which is what fleet_members prevents.
func TestFleetFallbackCap(t *testing.T) {
	composetest.Need(t, topo)
	const capPerSecond, proxies, clients = 40.0, 4, 32
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := topo.Primary()
	direct := sqlOpen(t, p.User+":"+p.Password+"@tcp("+p.Addr()+")/")
	emptyTable(t, direct, "ptest", "fleetcap", "id BIGINT PRIMARY KEY")
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, r := range topo.Replicas() {
		if err := topo.StopApplier(ctx, r.Name); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		for _, r := range topo.Replicas() {
			if err := topo.StartApplier(cctx, r.Name); err != nil {
				t.Error(err)
			}
		}
		if err := topo.WaitReplicated(cctx, 30*time.Second); err != nil {
			t.Error(err)
		}
	})
	var next atomic.Int64
	measure := func(members int) (fallbacks, capped int64) {
		t.Helper()
		var fb, cp atomic.Int64
		var fleet []*Server
		for range proxies {
			fleet = append(fleet, startProxy(t, func(c *Config) {
				c.Policy, c.FallbackPerSecond, c.FleetMembers = "token-ryw", capPerSecond, members
				c.OnRead = func(r ReadRoute) {
					if r.Replica < 0 && r.Reason == router.ReasonNoReplicaQualifies {
						fb.Add(1)
					}
				}
			}))
		}
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := range clients {
			c := conn1(t, openDB(t, fleet[i%proxies], ""))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for lctx.Err() == nil {
					id := next.Add(1)
					if _, err := c.ExecContext(lctx, "INSERT INTO ptest.fleetcap VALUES (?)", id); err != nil {
						continue
					}
					var got int64
					err := c.QueryRowContext(lctx, "SELECT id FROM ptest.fleetcap WHERE id = ?", id).Scan(&got)
					if err != nil && strings.Contains(err.Error(), "cap-exceeded") {
						cp.Add(1)
					}
				}
			}()
		}
		time.Sleep(1500 * time.Millisecond)
		fb0, cp0 := fb.Load(), cp.Load()
		time.Sleep(5 * time.Second)
		fallbacks, capped = fb.Load()-fb0, cp.Load()-cp0
		stop()
		wg.Wait()
		return fallbacks, capped
	}
	const window = 5.0
	fb, cp := measure(proxies)
	t.Logf("fleet_members %d: %d fallbacks in %gs (%.1f/s, cap %g/s), %d reads failed fast (cap-exceeded)", proxies, fb, window, float64(fb)/window, capPerSecond, cp)
	if limit := capPerSecond * window * 1.1; float64(fb) > limit {
		t.Errorf("fleet_members %d: %d fallbacks in %gs, above the fleet's cap (%g with 10 %%)", proxies, fb, window, limit)
	}
	if floor := capPerSecond * window / 2; float64(fb) < floor {
		t.Errorf("fleet_members %d: %d fallbacks in %gs, under half the cap (%g): the cap was split too finely", proxies, fb, window, floor)
	}
	if cp == 0 {
		t.Errorf("fleet_members %d: no read failed fast: the clients did not offer more than the cap", proxies)
	}
	alone, _ := measure(1)
	t.Logf("fleet_members 1: %d fallbacks in %gs (%.1f/s)", alone, window, float64(alone)/window)
	if float64(alone) < 2*float64(fb) {
		t.Errorf("fleet_members 1: %d fallbacks, not well above the shared cap's %d: the test cannot tell a shared cap from none", alone, fb)
	}
}
