package binlogwatch

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// shared is one primary and two replicas: replica1 for gentle scenarios,
// replica2 for the destructive ones (restart, kill, pause, purge), run one
// after the other.
var shared *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Replicas: 2}, func(t *compose.Topology) int {
		shared = t
		return m.Run()
	}))
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func openDB(t testing.TB, n compose.Node) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", n.DSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db
}

func node(t testing.TB, name string) compose.Node {
	t.Helper()
	n, err := shared.Node(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// startWatcher runs a watcher on n until the test ends.
func startWatcher(t testing.TB, n compose.Node, mod func(*Config)) (*Watcher, *Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	met, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Name: n.Name, Host: n.Host, Port: uint16(n.Port), User: n.User, Password: n.Password,
		HeartbeatPeriod: 200 * time.Millisecond, ReadTimeout: 1 * time.Second,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 500 * time.Millisecond, DownAfter: 2 * time.Second,
		Metrics: met,
	}
	if mod != nil {
		mod(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("watcher did not stop within 30s")
		}
	})
	return w, met
}

// subsetChecker checks, until stopped, that every published set is a subset
// of the replica's @@gtid_executed read after it (GTID_SUBSET on the server).
type subsetChecker struct {
	checks     int
	violations []string
	stop       chan struct{}
	done       chan struct{}
}

func checkSubset(t testing.TB, w *Watcher, n compose.Node) *subsetChecker {
	t.Helper()
	db := openDB(t, n)
	c := &subsetChecker{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			s := w.Snapshot() // load first: the server is read after
			var ok sql.NullInt64
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := db.QueryRowContext(ctx, "SELECT GTID_SUBSET(?, @@gtid_executed)", s.Executed.String()).Scan(&ok)
			cancel()
			if err != nil {
				continue // the server may be down during a fault: nothing to compare
			}
			c.checks++
			if ok.Int64 != 1 {
				var exec string
				_ = db.QueryRow("SELECT @@gtid_executed").Scan(&exec)
				c.violations = append(c.violations, "published "+s.Executed.String()+" not within "+exec)
			}
		}
	}()
	t.Cleanup(func() { c.finish(t) })
	return c
}

func (c *subsetChecker) finish(t testing.TB) {
	t.Helper()
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	<-c.done
	if len(c.violations) > 0 {
		t.Errorf("published set ahead of the replica %d times (of %d checks); first: %s", len(c.violations), c.checks, c.violations[0])
	}
	if c.checks == 0 {
		t.Error("subset checker made no successful check")
	}
	t.Logf("GTID_SUBSET(published, @@gtid_executed) held in %d checks", c.checks)
}

// converge waits until the watcher's set equals the replica's
// @@gtid_executed (read after the primary's writes have replicated).
func converge(t testing.TB, w *Watcher, n compose.Node, within time.Duration) {
	t.Helper()
	ctx := testCtx(t, within+10*time.Second)
	if err := shared.WaitReplicated(ctx, within); err != nil {
		t.Fatalf("replication did not catch up: %v", err)
	}
	db := openDB(t, n)
	var text string
	if err := db.QueryRowContext(ctx, "SELECT @@gtid_executed").Scan(&text); err != nil {
		t.Fatal(err)
	}
	want := gtid.MustParse(text)
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if err := w.WaitFor(wctx, want); err != nil {
		s := w.Snapshot()
		t.Fatalf("watcher did not converge to %s: %v (published %s, health %s, reason %q)", want, err, s.Executed, s.Health, s.Reason)
	}
	if s := w.Snapshot(); !s.Executed.Equal(want) && !s.Executed.Contains(want) {
		t.Fatalf("published %s, replica %s", s.Executed, want)
	}
}

// writer inserts rows on the primary until stopped.
type writer struct {
	stop chan struct{}
	wg   sync.WaitGroup
	n    int
}

func startWriter(t testing.TB, table string) *writer {
	t.Helper()
	db := openDB(t, shared.Primary())
	mustExec(t, db, "CREATE DATABASE IF NOT EXISTS bw", "CREATE TABLE IF NOT EXISTS bw."+table+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64))")
	w := &writer{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			if _, err := db.Exec("INSERT INTO bw."+table+" (v) VALUES (?)", "row"+strconv.Itoa(w.n)); err == nil {
				w.n++
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

func mustExec(t testing.TB, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func waitHealth(t testing.TB, w *Watcher, want Health, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := w.Snapshot()
		if s.Health == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %s (%q), want %s within %v", s.Health, s.Reason, want, within)
		}
		select {
		case <-s.Changed():
		case <-time.After(time.Until(deadline)):
		}
	}
}
