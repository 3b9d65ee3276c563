package binlogwatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// TestStreamDDLAndRotation: writes, DDL and binlog rotation on the replica.
func TestStreamDDLAndRotation(t *testing.T) {
	composetest.Need(t, shared)
	n := node(t, "replica1")
	w, met := startWatcher(t, n, nil)
	chk := checkSubset(t, w, n)
	wr := startWriter(t, "rot")
	pdb := openDB(t, shared.Primary())
	rdb := openDB(t, n)
	for i := range 3 {
		mustExec(t, pdb, "CREATE TABLE IF NOT EXISTS bw.ddl"+string(rune('a'+i))+" (a INT)",
			"ALTER TABLE bw.ddl"+string(rune('a'+i))+" ADD COLUMN b INT", "DROP TABLE bw.ddl"+string(rune('a'+i)))
		mustExec(t, rdb, "FLUSH BINARY LOGS")
		time.Sleep(100 * time.Millisecond)
	}
	wr.halt()
	converge(t, w, n, 10*time.Second)
	chk.finish(t)
	if wr.n == 0 {
		t.Fatal("writer wrote nothing")
	}
	if got := testutil.ToFloat64(met.transactions.WithLabelValues(n.Name)); got < float64(wr.n) {
		t.Errorf("transactions_total %v < %d rows written", got, wr.n)
	}
	// The subset checker above also covered the ahead waiter's publishes.
	ahead := testutil.ToFloat64(met.aheadHits.WithLabelValues(n.Name))
	if ahead == 0 {
		t.Errorf("ahead_confirms_total 0 after %d single-source writes: the ahead waiter never published", wr.n)
	}
	t.Logf("%v transactions published by the ahead waiter (%d rows written, plus the DDL)", ahead, wr.n)
	if s := w.Snapshot(); s.Health != HealthStreaming {
		t.Errorf("health %s (%s)", s.Health, s.Reason)
	}
}

// TestCompressedTransactions: binlog_transaction_compression=ON on the
// primary and the replica's applier, so the replica logs payload events.
func TestCompressedTransactions(t *testing.T) {
	composetest.Need(t, shared)
	n := node(t, "replica1")
	pdb := openDB(t, shared.Primary())
	rdb := openDB(t, n)
	mustExec(t, pdb, "SET GLOBAL binlog_transaction_compression=ON")
	mustExec(t, rdb, "STOP REPLICA SQL_THREAD", "SET GLOBAL binlog_transaction_compression=ON", "START REPLICA SQL_THREAD")
	t.Cleanup(func() {
		_, _ = pdb.Exec("SET GLOBAL binlog_transaction_compression=OFF")
		_, _ = rdb.Exec("STOP REPLICA SQL_THREAD")
		_, _ = rdb.Exec("SET GLOBAL binlog_transaction_compression=OFF")
		_, _ = rdb.Exec("START REPLICA SQL_THREAD")
	})
	w, _ := startWatcher(t, n, nil)
	chk := checkSubset(t, w, n)
	mustExec(t, rdb, "FLUSH BINARY LOGS") // a file that holds only compressed transactions
	wr := startWriter(t, "zstd")
	time.Sleep(1500 * time.Millisecond)
	wr.halt()
	converge(t, w, n, 10*time.Second)
	chk.finish(t)
	// The scenario really happened: the replica's binlog holds payload events.
	var file string
	var pos, bdo, bio, egs any
	if err := rdb.QueryRow("SHOW BINARY LOG STATUS").Scan(&file, &pos, &bdo, &bio, &egs); err != nil {
		t.Fatal(err)
	}
	rows, err := rdb.Query("SHOW BINLOG EVENTS IN '" + file + "'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	payloads := 0
	for rows.Next() {
		var logName, evType, info string
		var p, sid, end any
		if err := rows.Scan(&logName, &p, &evType, &sid, &end, &info); err != nil {
			t.Fatal(err)
		}
		if evType == "Transaction_payload" {
			payloads++
		}
	}
	if payloads == 0 {
		t.Fatal("the replica logged no Transaction_payload event: compression did not take effect")
	}
	t.Logf("%d compressed transactions in %s", payloads, file)
}

// TestTaggedGTIDs: transactions with a GTID tag (MySQL 8.3+).
func TestTaggedGTIDs(t *testing.T) {
	composetest.Need(t, shared)
	n := node(t, "replica1")
	w, _ := startWatcher(t, n, nil)
	chk := checkSubset(t, w, n)
	ctx := testCtx(t, time.Minute)
	pdb := openDB(t, shared.Primary())
	conn, err := pdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range []string{
		"CREATE DATABASE IF NOT EXISTS bw", "CREATE TABLE IF NOT EXISTS bw.tagged (a INT)",
		"SET gtid_next='AUTOMATIC:bw_tag'", "INSERT INTO bw.tagged VALUES (1)", "INSERT INTO bw.tagged VALUES (2)",
		"SET gtid_next='AUTOMATIC'",
	} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	converge(t, w, n, 10*time.Second)
	chk.finish(t)
	if s := w.Snapshot().Executed.String(); !strings.Contains(s, ":bw_tag:") {
		t.Fatalf("published set has no bw_tag GTIDs: %s", s)
	}
}

// TestIdleLongerThanReadTimeout: heartbeats keep an idle stream alive: it
// stays idle for three read timeouts, receiving heartbeats (counted in
// events_total: nothing else is written meanwhile), without a reconnect.
// The read timeout is 10 heartbeat periods (1 s, 100 ms): a reconnect then
// needs 1 s without an event. It was 4 periods (400 ms), which passed 8
// of 8 runs at load average 16-40 but left a delayed heartbeat little
// room.
func TestIdleLongerThanReadTimeout(t *testing.T) {
	composetest.Need(t, shared)
	n := node(t, "replica1")
	const period, timeout = 100 * time.Millisecond, time.Second
	w, met := startWatcher(t, n, func(c *Config) { c.HeartbeatPeriod = period; c.ReadTimeout = timeout })
	waitHealth(t, w, HealthStreaming, 10*time.Second)
	events := met.events.WithLabelValues(n.Name)
	before, eventsBefore := w.Snapshot().LastEvent, testutil.ToFloat64(events)
	time.Sleep(3 * timeout) // 3 read timeouts without a transaction
	if got := testutil.ToFloat64(met.reconnects.WithLabelValues(n.Name)); got != 0 {
		t.Fatalf("%v reconnects on an idle replica", got)
	}
	// 30 heartbeats are due; a few suffice to show they flowed.
	if hb := testutil.ToFloat64(events) - eventsBefore; hb < 3 {
		t.Fatalf("%v events in %v of idle stream: heartbeats did not flow", hb, 3*timeout)
	}
	s := w.Snapshot()
	if s.Health != HealthStreaming || !s.LastEvent.After(before) {
		t.Fatalf("health %s, last event %v (before idle %v)", s.Health, s.LastEvent, before)
	}
}

// TestPartitionAndHeal: the watcher's link to the replica drops packets for
// longer than the read timeout.
func TestPartitionAndHeal(t *testing.T) {
	composetest.Need(t, shared)
	n := node(t, "replica1")
	fd := newFaultDialer()
	w, met := startWatcher(t, n, func(c *Config) { c.Dialer = fd.dial; c.ConnectTimeout = time.Second })
	chk := checkSubset(t, w, n)
	waitHealth(t, w, HealthStreaming, 10*time.Second)
	wr := startWriter(t, "part")
	time.Sleep(300 * time.Millisecond)
	fd.partition()
	waitHealth(t, w, HealthDown, 10*time.Second)
	frozen := w.Snapshot().Executed
	time.Sleep(500 * time.Millisecond)
	if !w.Snapshot().Executed.Equal(frozen) {
		t.Fatal("published set moved during the partition")
	}
	fd.heal()
	waitHealth(t, w, HealthStreaming, 15*time.Second)
	wr.halt()
	converge(t, w, n, 10*time.Second)
	chk.finish(t)
	if got := testutil.ToFloat64(met.reconnects.WithLabelValues(n.Name)); got < 1 {
		t.Fatalf("reconnects_total %v after a partition", got)
	}
}

// processFault runs a process fault on replica2 under a stream of writes:
// a watcher (mod adjusts its config) streams, fault breaks the server and
// brings it back; then the watcher must stream again, converge on the
// replica's executed set, and never have published a set the replica
// lacked.
func processFault(t *testing.T, table string, mod func(*Config), fault func(ctx context.Context, n compose.Node, w *Watcher)) *Metrics {
	t.Helper()
	composetest.Need(t, shared)
	n := node(t, "replica2")
	w, met := startWatcher(t, n, mod)
	chk := checkSubset(t, w, n)
	waitHealth(t, w, HealthStreaming, 10*time.Second)
	wr := startWriter(t, table)
	fault(testCtx(t, 2*time.Minute), n, w)
	waitHealth(t, w, HealthStreaming, 20*time.Second)
	wr.halt()
	converge(t, w, n, 20*time.Second)
	chk.finish(t)
	return met
}

// TestReplicaRestart, TestReplicaKill, TestReplicaPause: process faults on
// replica2.
func TestReplicaRestart(t *testing.T) {
	met := processFault(t, "restart", nil, func(ctx context.Context, n compose.Node, w *Watcher) {
		time.Sleep(300 * time.Millisecond)
		if err := shared.Restart(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
		waitHealth(t, w, HealthStreaming, 20*time.Second)
		time.Sleep(300 * time.Millisecond)
	})
	if got := testutil.ToFloat64(met.reconnects.WithLabelValues("replica2")); got < 1 {
		t.Fatalf("reconnects_total %v after a restart", got)
	}
}

func TestReplicaKill(t *testing.T) {
	processFault(t, "kill", nil, func(ctx context.Context, n compose.Node, w *Watcher) {
		time.Sleep(300 * time.Millisecond)
		if err := shared.Kill(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
		waitHealth(t, w, HealthDown, 10*time.Second)
		if s := w.Snapshot(); s.Reason == "" {
			t.Fatal("down without a reason")
		} else if s.LastEvent.IsZero() {
			t.Fatal("the down snapshot lost the last event time")
		}
		if err := shared.Restart(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReplicaPause(t *testing.T) {
	processFault(t, "pause", func(c *Config) { c.ConnectTimeout = time.Second }, func(ctx context.Context, n compose.Node, w *Watcher) {
		if err := shared.Pause(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
		resumed := false
		t.Cleanup(func() {
			if !resumed {
				_ = shared.Resume(context.Background(), n.Name)
			}
		})
		waitHealth(t, w, HealthDown, 15*time.Second)
		if err := shared.Resume(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
		resumed = true
	})
}

// TestPurgePastPosition: while the watcher is cut off, the replica rotates
// and purges the binlogs holding the transactions the watcher lacks. The
// watcher resumes from a fresh snapshot; a stream from its old set is
// refused with error 1236, which the watcher classifies as a resync.
func TestPurgePastPosition(t *testing.T) {
	composetest.Need(t, shared)
	n := node(t, "replica2")
	fd := newFaultDialer()
	w, met := startWatcher(t, n, func(c *Config) { c.Dialer = fd.dial; c.ConnectTimeout = time.Second })
	chk := checkSubset(t, w, n)
	waitHealth(t, w, HealthStreaming, 10*time.Second)
	old := w.Snapshot().Executed
	fd.partition()
	waitHealth(t, w, HealthReconnecting, 10*time.Second)
	// Transactions the old set lacks, written (not timed: a writer given
	// 500 ms could write nothing on a loaded machine).
	pdb := openDB(t, shared.Primary())
	mustExec(t, pdb, "CREATE DATABASE IF NOT EXISTS bw", "CREATE TABLE IF NOT EXISTS bw.purge (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64))")
	for range 20 {
		mustExec(t, pdb, "INSERT INTO bw.purge (v) VALUES ('row')")
	}
	if err := shared.WaitReplicated(testCtx(t, time.Minute), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	rdb := openDB(t, n)
	rdb.SetMaxOpenConns(1)
	mustExec(t, rdb, "FLUSH BINARY LOGS")
	var file string
	var pos, bdo, bio, egs any
	if err := rdb.QueryRow("SHOW BINARY LOG STATUS").Scan(&file, &pos, &bdo, &bio, &egs); err != nil {
		t.Fatal(err)
	}
	// The cut-off watcher's dump thread lives on in the server (only its
	// bytes are dropped); PURGE keeps every file from the one a dump
	// thread still reads, which under load can be an old one: end it
	// (the watcher's reconnection waits for the partition to heal).
	var dumps []string
	rows, err := rdb.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		dumps = append(dumps, id)
	}
	rows.Close()
	for _, id := range dumps {
		_, _ = rdb.Exec("KILL " + id) // it may have ended meanwhile
	}
	mustExec(t, rdb, "PURGE BINARY LOGS TO '"+file+"'")
	var purgedPast int
	if err := rdb.QueryRow("SELECT GTID_SUBSET(@@GLOBAL.gtid_purged, ?)", old.String()).Scan(&purgedPast); err != nil || purgedPast != 0 {
		t.Fatalf("the purge did not remove transactions the old set lacks (GTID_SUBSET = %d, %v)", purgedPast, err)
	}

	// A stream from the old set is now impossible: error 1236.
	err = streamFrom(t, n.Host, uint16(n.Port), n.User, n.Password, old)
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		t.Fatalf("stream from the pre-purge set: %v, want error 1236", err)
	}

	fd.heal()
	waitHealth(t, w, HealthStreaming, 20*time.Second)
	converge(t, w, n, 20*time.Second)
	chk.finish(t)
	_ = met
}

// streamFrom opens a raw stream from set and returns its first error.
func streamFrom(t *testing.T, host string, port uint16, user, pw string, set gtid.Set) error {
	t.Helper()
	s := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 1<<31 + 77, Flavor: mysql.MySQLFlavor, Host: host, Port: port, User: user, Password: pw,
		DisableRetrySync: true, DiscardGTIDSet: true, RowsEventDecodeFunc: skipRows,
	})
	defer s.Close()
	st, err := s.StartSyncGTID(mysqlwire.GoMySQLSet(set))
	if err != nil {
		return err
	}
	// The refusal follows the dump request at once; the bound only stops a
	// stream that was (wrongly) granted.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := st.GetEvent(ctx); err != nil {
			return err
		}
	}
}

// TestServerUUIDChanged: replica2 is killed, its auto.cnf removed and the
// server started again, so it comes back with a new @@server_uuid (as a
// replica re-created from a clone would). The watcher must take a fresh
// snapshot, count a server-uuid-changed resync and report the new UUID.
func TestServerUUIDChanged(t *testing.T) {
	composetest.Need(t, shared)
	if shared.Backend() != compose.BackendLocal {
		t.Skipf("needs the local backend to reach the data directory (backend %s)", shared.Backend())
	}
	n := node(t, "replica2")
	rdb := openDB(t, n)
	var datadir, oldUUID string
	if err := rdb.QueryRow("SELECT @@datadir, @@server_uuid").Scan(&datadir, &oldUUID); err != nil {
		t.Fatal(err)
	}
	// The local backend runs mysqld chrooted into the root filesystem (or,
	// with HostMysqld, on the host): find auto.cnf in either view.
	var autoCnf string
	for _, p := range []string{filepath.Join(compose.DefaultRootFS(), datadir, "auto.cnf"), filepath.Join(datadir, "auto.cnf")} {
		if _, err := os.Stat(p); err == nil {
			autoCnf = p
			break
		}
	}
	if autoCnf == "" {
		t.Skipf("auto.cnf of %s (datadir %s) not found from this process", n.Name, datadir)
	}
	w, met := startWatcher(t, n, nil)
	chk := checkSubset(t, w, n)
	waitHealth(t, w, HealthStreaming, 10*time.Second)
	if got := w.Snapshot().ServerUUID; got != oldUUID {
		t.Fatalf("watcher reports server_uuid %q, replica %q", got, oldUUID)
	}
	wr := startWriter(t, "uuid")
	time.Sleep(300 * time.Millisecond)
	ctx := testCtx(t, 2*time.Minute)
	if err := shared.Kill(ctx, n.Name); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(autoCnf); err != nil {
		t.Fatal(err)
	}
	if err := shared.Restart(ctx, n.Name); err != nil {
		t.Fatal(err)
	}
	var newUUID string
	if err := rdb.QueryRowContext(ctx, "SELECT @@server_uuid").Scan(&newUUID); err != nil {
		t.Fatal(err)
	}
	if newUUID == oldUUID {
		t.Fatalf("server_uuid did not change (%s): the scenario did not happen", newUUID)
	}
	deadline := time.Now().Add(20 * time.Second)
	for w.Snapshot().ServerUUID != newUUID {
		if time.Now().After(deadline) {
			s := w.Snapshot()
			t.Fatalf("watcher still reports server_uuid %s (health %s, %q), replica has %s", s.ServerUUID, s.Health, s.Reason, newUUID)
		}
		select {
		case <-w.Snapshot().Changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
	waitHealth(t, w, HealthStreaming, 20*time.Second)
	wr.halt()
	converge(t, w, n, 20*time.Second)
	chk.finish(t)
	if got := testutil.ToFloat64(met.resyncs.WithLabelValues(n.Name, resyncUUIDChanged)); got != 1 {
		t.Fatalf("resyncs_total{reason=%q} = %v, want 1", resyncUUIDChanged, got)
	}
	t.Logf("server_uuid %s -> %s; watcher resynced and converged", oldUUID, newUUID)
}

// TestAheadMispredicted: transactions alternate between a tag and no tag,
// so the transaction after each prediction (the last GTID's source and tag,
// GNO + 1) is never the predicted one: the parked wait is satisfied only a
// transaction later (tags count separately). The wrongly parked wait must
// not hold back publishing: the confirmer publishes the transaction in
// between.
func TestAheadMispredicted(t *testing.T) {
	composetest.Need(t, shared)
	n := node(t, "replica1")
	w, met := startWatcher(t, n, nil)
	chk := checkSubset(t, w, n)
	waitHealth(t, w, HealthStreaming, 10*time.Second)
	ctx := testCtx(t, time.Minute)
	pdb := openDB(t, shared.Primary())
	conn, err := pdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range []string{"CREATE DATABASE IF NOT EXISTS bw", "CREATE TABLE IF NOT EXISTS bw.alt (a INT)"} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	before := testutil.ToFloat64(met.aheadHits.WithLabelValues(n.Name))
	const writes = 20
	for i := range writes {
		next := "AUTOMATIC"
		if i%2 == 0 {
			next = "AUTOMATIC:bw_alt"
		}
		for _, s := range []string{"SET gtid_next='" + next + "'", "INSERT INTO bw.alt VALUES (1)"} {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	if _, err := conn.ExecContext(ctx, "SET gtid_next='AUTOMATIC'"); err != nil {
		t.Fatal(err)
	}
	// Well within one ConfirmWait per transaction (20 s): the confirmer
	// did not wait for the ahead waiter.
	converge(t, w, n, 5*time.Second)
	chk.finish(t)
	t.Logf("ahead waiter published %v of %d alternating transactions", testutil.ToFloat64(met.aheadHits.WithLabelValues(n.Name))-before, writes)
}
