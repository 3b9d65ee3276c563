package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// TestWorkerHTTP: worker i's metrics port is the configured one plus i;
// port 0 and "" stay as they are; a port with no room is refused.
func TestWorkerHTTP(t *testing.T) {
	for _, c := range []struct {
		http string
		i    int
		want string
		err  string
	}{
		{"", 3, "", ""},
		{"127.0.0.1:9033", 0, "127.0.0.1:9033", ""},
		{"127.0.0.1:9033", 2, "127.0.0.1:9035", ""},
		{"127.0.0.1:0", 5, "127.0.0.1:0", ""},
		{"[::1]:9033", 1, "[::1]:9034", ""},
		{"127.0.0.1:65535", 1, "", "no room for worker 1"},
		{"nonsense", 0, "", "http address"},
	} {
		got, err := workerHTTP(c.http, c.i)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("workerHTTP(%q, %d) = %q, %v; want an error naming %q", c.http, c.i, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("workerHTTP(%q, %d) = %q, %v; want %q", c.http, c.i, got, err, c.want)
		}
	}
}

// TestWorkerArgs: a worker gets the flags its supervisor was given but
// for --pool-size, then its index, its addresses and its
// share of the pool size (none without multiplexing).
func TestWorkerArgs(t *testing.T) {
	cmd := newProxyCmd()
	if err := cmd.ParseFlags([]string{"--config", "p.yaml", "--workers", "3", "--policy", "token-wait", "--multiplex", "--pool-size", "10", "--listen", "127.0.0.1:0", "--http", ""}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(workerArgs(cmd.Flags(), 2, "127.0.0.1:7000", "127.0.0.1:9035", "/tmp/w", 3), " ")
	want := "proxy --config=p.yaml --multiplex=true --policy=token-wait --workers=3 --worker-index=2 --listen=127.0.0.1:7000 --http=127.0.0.1:9035 --worker-dir=/tmp/w --pool-size=3"
	if got != want {
		t.Errorf("workerArgs:\n got %s\nwant %s", got, want)
	}
	got = strings.Join(workerArgs(cmd.Flags(), 0, "127.0.0.1:7000", "", "/tmp/w", 0), " ")
	if want := "proxy --config=p.yaml --multiplex=true --policy=token-wait --workers=3 --worker-index=0 --listen=127.0.0.1:7000 --http= --worker-dir=/tmp/w"; got != want {
		t.Errorf("workerArgs without a pool share:\n got %s\nwant %s", got, want)
	}
}

// TestProxyWorkersFlags: a bad --workers is a usage error, found before
// anything starts; a worker started by hand says what starts one.
func TestProxyWorkersFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(cfg, []byte("users: [{name: app, password: app}]\nprimary: {addr: '127.0.0.1:1', user: u, password: p}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if r := runCLI(t, ctx, "proxy", "--config", cfg, "--workers", "65"); r.code != exitUsage || !strings.Contains(r.stderr, "workers 65 out of range") {
		t.Errorf("--workers 65: %s", r)
	}
	if r := runCLI(t, ctx, "proxy", "--config", cfg, "--workers", "2", "--listen", "nonsense"); r.code == 0 || !strings.Contains(r.stderr, "listen") {
		t.Errorf("--workers 2 on a bad address: %s", r)
	}
	if r := runCLI(t, ctx, "proxy", "--config", cfg, "--worker-index", "0"); r.code == 0 || !strings.Contains(r.stderr, "started by `causallab proxy --workers`") {
		t.Errorf("a worker without a supervisor: %s", r)
	}
	if r := runCLI(t, ctx, "proxy", "--config", cfg, "--workers", "3", "--multiplex", "--pool-size", "2", "--listen", "127.0.0.1:0", "--http", ""); r.code != exitUsage || !strings.Contains(r.stderr, "pool_size 2 is smaller than workers 3") {
		t.Errorf("--pool-size 2 for 3 workers: %s", r)
	}
}

// freeAddrs returns n consecutive free loopback ports' addresses.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	for try := 0; try < 50; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := ln.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{ln}
		ok := base+n <= 65535
		for i := 1; ok && i < n; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, l)
		}
		for _, l := range lns {
			l.Close()
		}
		if ok {
			addrs := make([]string, n)
			for i := range addrs {
				addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i))
			}
			return addrs
		}
	}
	t.Fatal("no run of free ports")
	return nil
}

// metricValue reads one unlabelled sample from a worker's /metrics.
func metricValue(ctx context.Context, addr, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", addr, name)
}

// metricValues reads the samples whose series starts with prefix and
// contains label, by series, from a worker's /metrics.
func metricValues(ctx context.Context, addr, prefix, label string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		series, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(series, prefix) || !strings.Contains(series, label) {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", addr, sc.Text(), err)
		}
		out[series] = f
	}
	return out, sc.Err()
}

// workerPids finds the worker processes of the supervisor listening on
// listen, by their command lines.
func workerPids(t *testing.T, listen string) map[int]int {
	t.Helper()
	out := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		idx, mine := -1, false
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--worker-index="); ok {
				idx, _ = strconv.Atoi(v)
			}
			if a == "--listen="+listen {
				mine = true
			}
		}
		if mine && idx >= 0 {
			out[idx] = pid
		}
	}
	return out
}

// testProxyWorkers runs `causallab proxy --workers 2` on the topology of
// state (this test binary as the workers: TestMain): four clients are
// dealt out two and two, each reads its own write, and both workers
// report two sessions. Stopping the supervisor stops the workers; a
// killed worker ends the supervisor with exit 1 naming it, and the other
// worker is stopped.
func testProxyWorkers(t *testing.T, ctx context.Context, state string) {
	t.Setenv("CAUSALLAB_TEST_RUN_MAIN", "1") // the workers run this binary
	// start runs the supervisor until stop, returning where it listens,
	// the workers' metrics addresses and their pids (checked: two).
	start := func(t *testing.T) (listen string, metrics []string, pids map[int]int, stop context.CancelFunc, res chan cliResult) {
		addrs := freeAddrs(t, 3)
		listen, metrics = addrs[0], addrs[1:]
		sctx, stop := context.WithCancel(ctx)
		res = make(chan cliResult, 1)
		go func() {
			res <- runCLI(t, sctx, "proxy", "--topology", state, "--user", "app", "--password", "app",
				"--workers", "2", "--listen", listen, "--http", metrics[0], "--multiplex", "--pool-size", "3")
		}()
		// Ready when both workers' /ready answers 200 (no probe on the
		// MySQL port: it would take a worker's turn).
		deadline := time.Now().Add(60 * time.Second)
		for _, m := range metrics {
			for {
				resp, err := http.Get("http://" + m + "/ready")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
				}
				select {
				case r := <-res:
					t.Fatalf("supervisor exited before its workers were ready: %s", r)
				default:
				}
				if time.Now().After(deadline) {
					stop()
					t.Fatalf("worker at %s not ready: %v", m, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		pids = workerPids(t, listen)
		if len(pids) != 2 {
			stop()
			t.Fatalf("worker processes: %v, want 2", pids)
		}
		return listen, metrics, pids, stop, res
	}
	gone := func(t *testing.T, pids map[int]int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for i, pid := range pids {
			for syscall.Kill(pid, 0) == nil {
				// A zombie (exited, not yet reaped) counts as gone.
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(b), ") Z ") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("worker %d (pid %d) still runs", i, pid)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}

	t.Run("serves and stops", func(t *testing.T) {
		listen, metrics, pids, stop, res := start(t)
		defer stop()
		db := appDB(t, listen)
		var conns []*sql.Conn
		for i := range 4 {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		if _, err := conns[0].ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS workers"); err != nil {
			t.Fatal(err)
		}
		if _, err := conns[0].ExecContext(ctx, "CREATE TABLE IF NOT EXISTS workers.notes (id INT PRIMARY KEY AUTO_INCREMENT, body TEXT)"); err != nil {
			t.Fatal(err)
		}
		// Session ids are unique across the workers (worker i of N
		// gives i+1, i+1+N, ...): before, each worker counted from
		// 10001.
		ids := map[uint64]int{}
		for i, c := range conns {
			var id uint64
			if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				t.Fatalf("client %d: CONNECTION_ID(): %v", i, err)
			}
			if j, dup := ids[id]; dup {
				t.Fatalf("clients %d and %d (two workers) share the id %d", j, i, id)
			}
			ids[id] = i
		}
		for i, c := range conns {
			body := fmt.Sprintf("worker test %d %d", i, time.Now().UnixNano())
			if _, err := c.ExecContext(ctx, "INSERT INTO workers.notes (body) VALUES (?)", body); err != nil {
				t.Fatalf("client %d: insert: %v", i, err)
			}
			var got string
			if err := c.QueryRowContext(ctx, "SELECT body FROM workers.notes WHERE body = ?", body).Scan(&got); err != nil || got != body {
				t.Fatalf("client %d: its own write: %q, %v", i, got, err)
			}
		}
		for i, m := range metrics {
			n, err := metricValue(ctx, m, "causallab_proxy_sessions")
			if err != nil || n != 2 {
				t.Errorf("worker at %s: %v sessions (%v), want 2 (clients dealt out in turn)", m, n, err)
			}
			// --pool-size 3 is the proxy's: worker 0 pools 2 connections
			// per node, worker 1 one.
			share := 2 - i
			open, err := metricValues(ctx, m, "causallab_proxy_pool_connections{", `state="open"`)
			if err != nil || len(open) != 3 {
				t.Errorf("worker %d: pool connections %v (%v), want one series per node", i, open, err)
			}
			used := 0.0
			for series, v := range open {
				if v > float64(share) {
					t.Errorf("worker %d: %s = %v, more than its share %d of --pool-size 3", i, series, v, share)
				}
				used = max(used, v)
			}
			if used < 1 {
				t.Errorf("worker %d: no pooled connection open (%v): its clients' statements did not go through its pools", i, open)
			}
		}
		stop()
		select {
		case r := <-res:
			if r.code != 0 || !strings.Contains(r.stdout, "proxy listening on "+listen+" (2 workers") {
				t.Errorf("stopped supervisor: %s", r)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("supervisor did not stop")
		}
		gone(t, pids)
	})

	t.Run("kill and processlist across workers", func(t *testing.T) {
		listen, _, _, stop, _ := start(t)
		defer stop()
		testWorkerPeers(t, ctx, listen)
	})

	t.Run("a worker dies", func(t *testing.T) {
		_, _, pids, stop, res := start(t)
		defer stop()
		if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-res:
			if r.code != exitFailure || !strings.Contains(r.stderr, "worker 1 exited") {
				t.Errorf("supervisor after its worker 1 was killed: %s", r)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("supervisor did not exit after a worker died")
		}
		gone(t, pids)
	})
}

// testWorkerPeers: with two workers, a client on worker 1 sees worker 0's
// sessions in SHOW PROCESSLIST (the running statement too), its KILL
// QUERY ends a statement worker 0 runs (1317, as the mysql client's
// Ctrl-C needs: its KILL's connection may be dealt to the other worker),
// its KILL ends worker 0's session, and a KILL of an id no worker gives
// is 1094. Before, each worker knew only its own sessions: the KILL
// answered 1094 and the statement ran on.
func testWorkerPeers(t *testing.T, ctx context.Context, listen string) {
	db := appDB(t, listen)
	// Clients are dealt out in turn; worker w's ids are w+1, w+3, ...
	byWorker := map[int]*sql.Conn{}
	ids := map[int]uint64{}
	for i := 0; i < 4 && len(byWorker) < 2; i++ {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var id uint64
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			t.Fatal(err)
		}
		w := int((id - 1) % 2)
		if _, ok := byWorker[w]; !ok {
			byWorker[w], ids[w] = c, id
		}
	}
	if len(byWorker) != 2 {
		t.Fatalf("clients on workers %v, want one on each", ids)
	}
	victim, killer, vid := byWorker[0], byWorker[1], ids[0]
	done := make(chan error, 1)
	go func() {
		_, err := victim.ExecContext(ctx, "SELECT 1 FROM DUAL WHERE SLEEP(30) = 0")
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		rows, err := killer.QueryContext(ctx, "SHOW FULL PROCESSLIST")
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		running := false
		for rows.Next() {
			var id uint64
			var user, host, command, state string
			var db, info sql.NullString
			var secs int64
			if err := rows.Scan(&id, &user, &host, &db, &command, &secs, &state, &info); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, fmt.Sprint(id))
			running = running || id == vid && strings.Contains(info.String, "SLEEP(30)")
		}
		rows.Close()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker 1's SHOW PROCESSLIST lists %v, never worker 0's session %d running SLEEP(30)", seen, vid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := killer.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", vid)); err != nil {
		t.Fatalf("KILL QUERY of worker 0's session from worker 1: %v", err)
	}
	select {
	case err := <-done:
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1317 {
			t.Fatalf("the killed statement: %v, want 1317", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("KILL QUERY from the other worker did not end the statement within 20 s")
	}
	if _, err := killer.ExecContext(ctx, "KILL 1001"); err == nil || !strings.Contains(err.Error(), "1094") {
		t.Fatalf("KILL of an id worker 0 never gave: %v, want 1094", err)
	}
	if _, err := killer.ExecContext(ctx, fmt.Sprintf("KILL %d", vid)); err != nil {
		t.Fatalf("KILL of worker 0's session from worker 1: %v", err)
	}
	if err := victim.PingContext(ctx); err == nil {
		t.Fatal("worker 0's killed session still answers")
	}
}

// appDB is a pool of the app account's connections to the proxy at
// listen, closed when t ends.
func appDB(t *testing.T, listen string) *sql.DB {
	mc := mysql.NewConfig()
	mc.User, mc.Passwd, mc.Net, mc.Addr = "app", "app", "tcp", listen
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	return db
}
