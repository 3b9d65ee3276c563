package binlogwatch

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// liveClient is a ported ProxySQL that, like ProxySQL, reconnects to its
// reader whenever the connection ends (binlog_reader_connect_retry_msec).
type liveClient struct {
	name string
	pc   *portClient
	stop atomic.Bool
	done chan struct{}
}

func startLiveClient(t *testing.T, name string, addr *atomic.Value, v psqlVersion) *liveClient {
	t.Helper()
	lc := &liveClient{name: name, done: make(chan struct{})}
	lc.pc = &portClient{t: t, addr: addr.Load().(string), r: newPSQLReader(v)}
	lc.pc.connect()
	go func() {
		defer close(lc.done)
		for !lc.stop.Load() {
			lc.pc.mu.Lock()
			gone, done := lc.pc.eof || lc.pc.err != nil, lc.pc.done
			lc.pc.mu.Unlock()
			if !gone {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			<-done
			lc.pc.mu.Lock()
			perr := lc.pc.err
			lc.pc.mu.Unlock()
			if perr != nil {
				return // a parser error: active() reports it
			}
			time.Sleep(50 * time.Millisecond) // binlog_reader_connect_retry_msec
			lc.pc.addr = addr.Load().(string)
			_ = lc.pc.tryConnect() // refused while causallab restarts: retried

		}
	}()
	t.Cleanup(func() { lc.stop.Store(true); <-lc.done; lc.pc.close() })
	return lc
}

// active returns the client's belief when ProxySQL would use it: connected,
// and the connection's ST= read (bootstrapped). A connected client that has
// not read its ST= yet is the reconnect window (see docs/binlogwatch.md).
func (lc *liveClient) active() (set gtid.Set, ok bool, window bool) {
	lc.pc.mu.Lock()
	defer lc.pc.mu.Unlock()
	if lc.pc.err != nil {
		lc.pc.t.Errorf("%s: %v", lc.name, lc.pc.err)
		return gtid.Set{}, false, false
	}
	if lc.pc.eof {
		return gtid.Set{}, false, false
	}
	b, odd := lc.pc.r.believed()
	if len(odd) > 0 {
		lc.pc.t.Errorf("%s believes what no GTID can be: %v", lc.name, odd)
	}
	if lc.pc.r.st <= lc.pc.stBase {
		return b, false, true
	}
	return b, true, false
}

// TestProxySQLLive: a real replica (replica2) with writes on the primary,
// a transaction executed on the replica only (a new UUID, with a gap later
// filled), a purged range, a replica restart, a causallab restart, and a
// replica reset and restore (a resync to a smaller set and back). Four
// ported ProxySQLs read the watcher throughout: 2.x on a server with
// ShrinkRebootstrap, 2.x, 3.0.8 and 3.x on a server with ShrinkFence. A
// checker compares, every few milliseconds, what each one believes (when it
// would be used) with @@gtid_executed read after: never ahead. At the end
// each believes exactly the replica's untagged @@gtid_executed.
func TestProxySQLLive(t *testing.T) {
	composetest.Need(t, shared)
	n := node(t, "replica2")
	rdb := openDB(t, n)
	quiet := slog.New(slog.DiscardHandler)

	// causallab: a watcher and two servers, restartable on the same ports.
	fenceAddr, rebootAddr := &atomic.Value{}, &atomic.Value{}
	type causallab struct {
		w      *Watcher
		fence  *ProxySQLServer
		reboot *ProxySQLServer
		cancel context.CancelFunc
		wg     sync.WaitGroup
	}
	start := func() *causallab {
		t.Helper()
		cl := &causallab{}
		cfg := Config{Name: n.Name, Host: n.Host, Port: uint16(n.Port), User: n.User, Password: n.Password,
			HeartbeatPeriod: 200 * time.Millisecond, ReadTimeout: time.Second,
			BackoffMin: 20 * time.Millisecond, BackoffMax: 300 * time.Millisecond, Logger: quiet}
		w, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cl.w = w
		ctx, cancel := context.WithCancel(context.Background())
		cl.cancel = cancel
		cl.wg.Add(1)
		go func() { defer cl.wg.Done(); _ = w.Run(ctx) }()
		for _, s := range []struct {
			srv  **ProxySQLServer
			addr *atomic.Value
			p    ShrinkPolicy
		}{{&cl.fence, fenceAddr, ShrinkFence}, {&cl.reboot, rebootAddr, ShrinkRebootstrap}} {
			srv, err := NewProxySQLServer(w, ProxySQLConfig{OnShrink: s.p, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			a := "127.0.0.1:0"
			if v := s.addr.Load(); v != nil {
				a = v.(string)
			}
			var ln net.Listener
			for i := 0; ; i++ {
				if ln, err = net.Listen("tcp", a); err == nil || i == 50 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			s.addr.Store(ln.Addr().String())
			*s.srv = srv
			cl.wg.Add(1)
			go func() { defer cl.wg.Done(); _ = srv.Serve(ctx, ln) }()
		}
		return cl
	}
	cl := start()
	defer func() { cl.cancel(); cl.wg.Wait() }()
	waitHealth(t, cl.w, HealthStreaming, 20*time.Second)

	clients := []*liveClient{
		startLiveClient(t, "2.x (rebootstrap)", rebootAddr, psql2),
		startLiveClient(t, "2.x (fence)", fenceAddr, psql2),
		startLiveClient(t, "3.0.8 (fence)", fenceAddr, psql308),
		startLiveClient(t, "3.x (fence)", fenceAddr, psql3),
	}

	// The checker. inWindow marks the reset: from the replica losing its
	// GTIDs to the watcher's resync, every reader (the upstream one too)
	// still serves the old set; that latency is counted apart.
	var inWindow atomic.Bool
	var mu sync.Mutex
	checks, windowHits, reconnectWindow := 0, 0, 0
	var violations []string
	stopCheck := make(chan struct{})
	checkDone := make(chan struct{})
	go func() {
		defer close(checkDone)
		for {
			select {
			case <-stopCheck:
				return
			case <-time.After(5 * time.Millisecond):
			}
			type obs struct {
				name string
				set  gtid.Set
			}
			var got []obs
			win := 0
			for _, c := range clients {
				set, ok, w := c.active()
				if w {
					win++
				}
				if ok {
					got = append(got, obs{c.name, set})
				}
			}
			during := inWindow.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var text string
			err := rdb.QueryRowContext(ctx, "SELECT @@gtid_executed").Scan(&text)
			cancel()
			if err != nil {
				continue // the replica is restarting
			}
			exec := gtid.MustParse(text)
			during = during || inWindow.Load()
			mu.Lock()
			reconnectWindow += win
			for _, o := range got {
				checks++
				if exec.Contains(o.set) {
					continue
				}
				if during {
					windowHits++
					continue
				}
				violations = append(violations, fmt.Sprintf("%s believes %s; @@gtid_executed %s", o.name, o.set.Subtract(exec), exec))
			}
			mu.Unlock()
		}
	}()
	finishCheck := func() {
		close(stopCheck)
		<-checkDone
		mu.Lock()
		defer mu.Unlock()
		if len(violations) > 0 {
			t.Errorf("a ported ProxySQL believed a GTID the replica lacks, %d times of %d checks; first: %s", len(violations), checks, violations[0])
		}
		if checks == 0 {
			t.Error("the checker made no check")
		}
		t.Logf("belief within @@gtid_executed in %d checks (%d more during the reset-to-resync window, %d client-checks in a reconnect window before ST=)", checks, windowHits, reconnectWindow)
	}

	// settle waits until replication caught up and every client believes
	// at least the replica's untagged @@gtid_executed read then (the
	// checker says it is never more); exact, once the writer has stopped.
	settle := func(what string, exact bool) {
		t.Helper()
		ctx := testCtx(t, 90*time.Second)
		if err := shared.WaitReplicated(ctx, 60*time.Second); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var text string
		if err := rdb.QueryRowContext(ctx, "SELECT @@gtid_executed").Scan(&text); err != nil {
			t.Fatal(err)
		}
		want, _, err := untagged(gtid.MustParse(text))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range clients {
			if exact {
				c.pc.believes(want.String())
				continue
			}
			c.pc.waitFor(c.name+" catches up", func(pc *portClient) bool {
				b, _ := pc.r.believed()
				return pc.err == nil && b.Contains(want)
			})
		}
		t.Logf("%s: all four believe %s %d transactions over %d sources", what, map[bool]string{true: "exactly", false: "at least"}[exact], want.Count(), want.Len())
	}

	wr := startWriter(t, "proxysql")
	time.Sleep(300 * time.Millisecond)

	// A transaction executed on the replica only, with a gap (uuid:5 and :7),
	// later filled (:6): a new source, out of order.
	const errant = "e1e1e1e1-0000-4000-8000-00000000e17a"
	execErrant := func(gno int) {
		t.Helper()
		conn, err := rdb.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx := testCtx(t, 30*time.Second)
		for _, q := range []string{"SET GLOBAL super_read_only = OFF",
			fmt.Sprintf("SET GTID_NEXT = '%s:%d'", errant, gno), "BEGIN", "COMMIT", "SET GTID_NEXT = 'AUTOMATIC'",
			"SET GLOBAL super_read_only = ON"} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	execErrant(5)
	execErrant(7)
	time.Sleep(200 * time.Millisecond)
	execErrant(6)

	// A purged range: the replica's binlogs up to now are purged
	// (gtid_purged grows, @@gtid_executed does not change).
	mustExec(t, rdb, "FLUSH BINARY LOGS")
	var file string
	var pos, bdo, bio, egs any
	if err := rdb.QueryRow("SHOW BINARY LOG STATUS").Scan(&file, &pos, &bdo, &bio, &egs); err != nil {
		t.Fatal(err)
	}
	mustExec(t, rdb, "PURGE BINARY LOGS TO '"+file+"'")
	settle("errant transactions and a purge", false)

	// The replica restarts under writes.
	if err := shared.Restart(testCtx(t, 2*time.Minute), n.Name); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, cl.w, HealthStreaming, 30*time.Second)
	settle("replica restart", false)

	// causallab restarts (same ports): every client reconnects and
	// re-bootstraps; the 3.x ones add the new ST= to what they had.
	cl.cancel()
	cl.wg.Wait()
	cl = start()
	waitHealth(t, cl.w, HealthStreaming, 20*time.Second)
	settle("causallab restart", false)

	// The replica is reset (RESET BINARY LOGS AND GTIDS: @@gtid_executed
	// empty) and then restored (gtid_purged set back, replication resumed),
	// as a restore from a backup would: a resync to a smaller set and back.
	var saved string
	mustExec(t, rdb, "STOP REPLICA")
	if err := rdb.QueryRow("SELECT @@gtid_executed").Scan(&saved); err != nil {
		t.Fatal(err)
	}
	inWindow.Store(true)
	mustExec(t, rdb, "SET GLOBAL super_read_only = OFF", "RESET BINARY LOGS AND GTIDS", "SET GLOBAL super_read_only = ON")
	// RESET BINARY LOGS AND GTIDS ends the replica's dump threads: the
	// watcher reconnects, reads the empty set and resyncs.
	deadline := time.Now().Add(30 * time.Second)
	for up, _ := cl.fence.Fenced(); !up; up, _ = cl.fence.Fenced() {
		if time.Now().After(deadline) {
			t.Fatalf("the fence did not go up after the reset (watcher %s, %q)", cl.w.Snapshot().Health, cl.w.Snapshot().Reason)
		}
		time.Sleep(10 * time.Millisecond)
	}
	inWindow.Store(false)
	// 2.x on the rebootstrap server re-bootstraps to the empty set; the
	// fenced ones stay out.
	clients[0].pc.believes("")
	_, missing := cl.fence.Fenced()
	t.Logf("fenced after the reset: %d GTIDs ProxySQL was sent are missing", missing.Count())
	time.Sleep(300 * time.Millisecond)
	if refused := cl.fence.Refused(); refused == 0 {
		t.Error("no connection was refused while fenced")
	}
	mustExec(t, rdb, "SET GLOBAL super_read_only = OFF", "SET GLOBAL gtid_purged = '"+saved+"'", "SET GLOBAL super_read_only = ON", "START REPLICA")
	// SET gtid_purged writes no binlog event: the watcher sees the restored
	// set at its next session. A restore from a backup restarts the server.
	if err := shared.Restart(testCtx(t, 2*time.Minute), n.Name); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	for up, _ := cl.fence.Fenced(); up; up, _ = cl.fence.Fenced() {
		if time.Now().After(deadline) {
			_, missing := cl.fence.Fenced()
			var exec string
			_ = rdb.QueryRow("SELECT @@gtid_executed").Scan(&exec)
			t.Fatalf("the fence did not lift after the restore (watcher %s %q, published %s; replica %s; missing %s)",
				cl.w.Snapshot().Health, cl.w.Snapshot().Reason, cl.w.Snapshot().Executed, exec, missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wr.halt()
	settle("reset and restore", true)
	finishCheck()
	if cl.fence.Fences() != 1 || cl.fence.MidLineDrops() != 0 {
		t.Errorf("fences %d (want 1), mid-line drops %d (want 0)", cl.fence.Fences(), cl.fence.MidLineDrops())
	}
	t.Logf("%d rows written; fence server: %d dropped, %d refused", wr.n, cl.fence.Dropped(), cl.fence.Refused())
}
