package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/binlogwatch"
	"github.com/causallab/causallab/compose/composetest"
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
