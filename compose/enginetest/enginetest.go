// Package enginetest is the engine-neutral part of compose's integration
// tests for MariaDB and PostgreSQL: topology, faults and failover against
// the real servers. Each engine's test package (enginetest/mariadb,
// enginetest/postgres) starts one topology in TestMain and calls Run; its
// own tests add what only that engine has (token capture).
package enginetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

// Ctx returns a context that ends with the test (at most 2 minutes).
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// DB is the user's pool to node name.
func DB(t *testing.T, topo *compose.Topology, name string) *sql.DB {
	t.Helper()
	db, err := topo.DB(name)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// ph returns the i-th (1-based) placeholder of the engine's driver.
func ph(topo *compose.Topology, i int) string {
	if topo.Engine() == compose.EnginePostgres {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

// Write inserts a marker row on the primary and returns its id.
func Write(t *testing.T, ctx context.Context, topo *compose.Topology) int64 {
	t.Helper()
	db := DB(t, topo, topo.Primary().Name)
	var ddl []string
	if topo.Engine() == compose.EnginePostgres {
		ddl = []string{"CREATE TABLE IF NOT EXISTS public.markers (id BIGSERIAL PRIMARY KEY, note TEXT)"}
	} else {
		ddl = []string{"CREATE DATABASE IF NOT EXISTS faults", "CREATE TABLE IF NOT EXISTS faults.markers (id BIGINT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(64))"}
	}
	for _, q := range ddl {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if topo.Engine() == compose.EnginePostgres {
		var id int64
		if err := db.QueryRowContext(ctx, "INSERT INTO public.markers (note) VALUES ($1) RETURNING id", t.Name()).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	res, err := db.ExecContext(ctx, "INSERT INTO faults.markers (note) VALUES (?)", t.Name())
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	return id
}

// Has reports whether node name has the marker row id.
func Has(t *testing.T, ctx context.Context, topo *compose.Topology, name string, id int64) bool {
	t.Helper()
	table := "faults.markers"
	if topo.Engine() == compose.EnginePostgres {
		table = "public.markers"
	}
	var c int64
	err := DB(t, topo, name).QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE id="+ph(topo, 1), id).Scan(&c)
	if err != nil && (strings.Contains(err.Error(), "doesn't exist") || strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "Unknown database")) {
		return false
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c == 1
}

// Eventually polls cond every 20 ms until it holds or 30 s pass.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Status returns node name's status.
func Status(t *testing.T, ctx context.Context, topo *compose.Topology, name string) compose.NodeStatus {
	t.Helper()
	st, err := topo.NodeStatus(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// HoldBack keeps replica1 from having the next writes when the failover
// promotes it: for MariaDB its applier is stopped (compose does not drain
// a stopped applier); PostgreSQL replays all it received when promoted,
// so its receiver is cut (Partition on the local backend).
type HoldBack func(t *testing.T, ctx context.Context, topo *compose.Topology) error

// Run runs the engine-neutral tests on topo (one primary, two replicas),
// in order; delay is an apply delay to set (a whole number of the
// engine's unit) and slack how much sooner the engine may apply; the
// failover comes last and leaves replica1 the primary.
func Run(t *testing.T, topo *compose.Topology, delay, slack time.Duration, hold HoldBack) {
	t.Run("Healthy", func(t *testing.T) { healthy(t, topo) })
	t.Run("Client", func(t *testing.T) { client(t, topo) })
	t.Run("ReplicatesReadOnly", func(t *testing.T) { replicatesReadOnly(t, topo) })
	t.Run("StopStartApplier", func(t *testing.T) { stopStartApplier(t, topo) })
	t.Run("ApplyDelay", func(t *testing.T) { applyDelay(t, topo, delay, slack) })
	t.Run("PauseResume", func(t *testing.T) { pauseResume(t, topo) })
	t.Run("KillRestart", func(t *testing.T) { killRestart(t, topo) })
	t.Run("Partition", func(t *testing.T) { partition(t, topo) })
	t.Run("StopStartReceiver", func(t *testing.T) { stopStartReceiver(t, topo) })
	t.Run("Heavy", func(t *testing.T) { heavy(t, topo) })
	t.Run("Failover", func(t *testing.T) { failover(t, topo, hold) })
}

func healthy(t *testing.T, topo *compose.Topology) {
	ctx := Ctx(t)
	// A replica just started may still be applying the set-up
	// transactions (Health lagging, seen in CI on the docker backend at
	// load): healthy is the state once it has caught up.
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, st := range topo.Status(ctx) {
		if st.Health != compose.HealthOK || st.Node.Engine != topo.Engine() {
			t.Fatalf("%s: %+v", st.Node.Name, st)
		}
		if st.Node.Role == compose.RoleReplica && (st.IORunning != "Yes" || st.SQLRunning != "Yes" || !st.ReadOnly) {
			t.Fatalf("replica %s: %+v", st.Node.Name, st)
		}
	}
}

// client runs the engine's own command-line client (mariadb, psql) on a
// replica: what `causallab mysql NODE` opens.
func client(t *testing.T, topo *compose.Topology) {
	args := []string{"-N", "-e", "SELECT 40 + 2"}
	if topo.Engine() == compose.EnginePostgres {
		args = []string{"-tAc", "SELECT 40 + 2"}
	}
	cmd, err := topo.ClientCommand(compose.ClientOptions{Node: "replica1", Args: args})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("%v: %q, %v", cmd.Args, out, err)
	}
}

func replicatesReadOnly(t *testing.T, topo *compose.Topology) {
	ctx := Ctx(t)
	id := Write(t, ctx, topo)
	if err := topo.WaitReplicated(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, r := range topo.Replicas() {
		if !Has(t, ctx, topo, r.Name, id) {
			t.Fatalf("%s lacks marker %d after WaitReplicated", r.Name, id)
		}
		if st := Status(t, ctx, topo, r.Name); st.Position == "" {
			t.Fatalf("%s reports no position after a write: %+v", r.Name, st)
		}
	}
	// A replica refuses the user's writes.
	q := "INSERT INTO faults.markers (note) VALUES ('on a replica')"
	if topo.Engine() == compose.EnginePostgres {
		q = "INSERT INTO public.markers (note) VALUES ('on a replica')"
	}
	if _, err := DB(t, topo, "replica1").ExecContext(ctx, q); err == nil {
		t.Fatal("replica1 accepted a write")
	} else {
		t.Logf("replica1 refuses writes: %v", err)
	}
}

func stopStartApplier(t *testing.T, topo *compose.Topology) {
	ctx := Ctx(t)
	if err := topo.StopApplier(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topo.StartApplier(context.Background(), "replica1") })
	id := Write(t, ctx, topo)
	Eventually(t, "replica2 to apply", func() bool { return Has(t, ctx, topo, "replica2", id) })
	time.Sleep(200 * time.Millisecond)
	if Has(t, ctx, topo, "replica1", id) {
		t.Fatal("replica1 applied a write with its applier stopped")
	}
	if st := Status(t, ctx, topo, "replica1"); st.SQLRunning != "No" || st.IORunning != "Yes" || st.Health != compose.HealthStopped {
		t.Fatalf("status with applier stopped: %+v", st)
	}
	if err := topo.StartApplier(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "replica1 to apply", func() bool { return Has(t, ctx, topo, "replica1", id) })
	if err := topo.StopApplier(ctx, "primary"); !errors.Is(err, compose.ErrWrongRole) {
		t.Fatalf("StopApplier(primary) = %v, want ErrWrongRole", err)
	}
}

// applyDelay: slack is how much earlier than d the engine may apply (its
// timestamps' granularity: MariaDB's MASTER_DELAY counts from the event's
// whole-second timestamp, so a delay of N s holds a transaction N-1 to N s).
func applyDelay(t *testing.T, topo *compose.Topology, d, slack time.Duration) {
	ctx := Ctx(t)
	if err := topo.SetApplyDelay(ctx, "replica2", d+time.Millisecond/2); err == nil {
		t.Fatal("a delay finer than the engine's unit was accepted")
	}
	if err := topo.SetApplyDelay(ctx, "replica2", d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topo.SetApplyDelay(context.Background(), "replica2", 0) })
	if st := Status(t, ctx, topo, "replica2"); st.SourceDelayMS != d.Milliseconds() || st.SQLRunning != "Yes" {
		t.Fatalf("status after SetApplyDelay(%v): %+v", d, st)
	}
	id := Write(t, ctx, topo)
	wrote := time.Now()
	Eventually(t, "replica1 to apply", func() bool { return Has(t, ctx, topo, "replica1", id) })
	Eventually(t, "replica2 to apply after its delay", func() bool { return Has(t, ctx, topo, "replica2", id) })
	// The commit time on the primary is at or before wrote, so the
	// replica may not show the row before wrote+d minus clock granularity.
	if got := time.Since(wrote); got < d-slack {
		t.Fatalf("replica2 applied after %v, before its %v delay", got, d)
	} else {
		t.Logf("replica2 applied %v after the write (delay %v)", got.Round(time.Millisecond), d)
	}
	if err := topo.SetApplyDelay(ctx, "replica2", 0); err != nil {
		t.Fatal(err)
	}
}

func pauseResume(t *testing.T, topo *compose.Topology) {
	ctx := Ctx(t)
	if err := topo.Pause(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topo.Resume(context.Background(), "replica2") })
	if st := Status(t, ctx, topo, "replica2"); st.Health != compose.HealthUnreachable {
		t.Fatalf("paused replica2: %+v", st)
	}
	id := Write(t, ctx, topo)
	if err := topo.Resume(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "replica2 to apply after resume", func() bool { return Has(t, ctx, topo, "replica2", id) })
}

func killRestart(t *testing.T, topo *compose.Topology) {
	ctx := Ctx(t)
	if err := topo.Kill(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	if st := Status(t, ctx, topo, "replica2"); st.Health != compose.HealthUnreachable {
		t.Fatalf("killed replica2: %+v", st)
	}
	if err := topo.Kill(ctx, "replica2"); err != nil {
		t.Fatalf("killing a dead node: %v", err)
	}
	id := Write(t, ctx, topo)
	if err := topo.Restart(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "replica2 to apply after restart", func() bool { return Has(t, ctx, topo, "replica2", id) })
	Eventually(t, "replica2 healthy", func() bool { return Status(t, ctx, topo, "replica2").Health == compose.HealthOK })
	if st := Status(t, ctx, topo, "replica2"); !st.ReadOnly {
		t.Fatalf("restarted replica2 is writable: %+v", st)
	}
}

// cutOffWrite is the skeleton of the faults that cut a replica off from
// the primary's changes (partition, stop-receiver): it injects kind on
// replica, writes on the primary and waits for other to apply the write;
// where replica can still be read (all but a network partition), it
// checks that replica lacks the write and shows its receiver stopped;
// then it undoes kind (also at cleanup, should the test stop before) and
// waits for replica to apply the write. It returns what kind reported.
func cutOffWrite(t *testing.T, ctx context.Context, topo *compose.Topology, kind compose.FaultKind, replica, other string) compose.FaultResult {
	t.Helper()
	fault := compose.Fault{Kind: kind, Node: replica}
	undo, ok := fault.Undo()
	if !ok {
		t.Fatalf("%s has no undo", fault)
	}
	res, err := compose.Inject(ctx, topo, fault)
	if err != nil {
		t.Fatalf("%s: %v", fault, err)
	}
	t.Cleanup(func() { _, _ = compose.Inject(context.Background(), topo, undo) })
	id := Write(t, ctx, topo)
	Eventually(t, other+" to apply", func() bool { return Has(t, ctx, topo, other, id) })
	if res.Partition != compose.PartitionNetwork {
		// An absence has no condition to wait on: give the write time
		// to arrive.
		time.Sleep(200 * time.Millisecond)
		if Has(t, ctx, topo, replica, id) {
			t.Fatalf("%s applied a write after %s", replica, fault)
		}
		if st := Status(t, ctx, topo, replica); st.Health != compose.HealthStopped || st.IORunning == "Yes" {
			t.Fatalf("%s after %s: %+v", replica, fault, st)
		}
	}
	if _, err := compose.Inject(ctx, topo, undo); err != nil {
		t.Fatalf("%s: %v", undo, err)
	}
	Eventually(t, replica+" to apply after "+undo.String(), func() bool { return Has(t, ctx, topo, replica, id) })
	return res
}

// partition: a partitioned replica lacks the next write; healed, it has
// it. Only the local backend's stand-in (PartitionIOThread) leaves it
// readable while cut off.
func partition(t *testing.T, topo *compose.Topology) {
	res := cutOffWrite(t, Ctx(t), topo, compose.FaultPartition, "replica1", "replica2")
	if res.Partition != compose.PartitionIOThread && res.Partition != compose.PartitionNetwork {
		t.Fatalf("partition mode %q", res.Partition)
	}
}

// stopStartReceiver: a replica whose receiver is stopped (on any backend)
// stays reachable, shows no running receiver and lacks the next write;
// started again, it has it. The primary has no receiver to stop.
func stopStartReceiver(t *testing.T, topo *compose.Topology) {
	ctx := Ctx(t)
	if err := topo.StopReceiver(ctx, "primary"); !errors.Is(err, compose.ErrWrongRole) {
		t.Fatalf("StopReceiver(primary): %v, want ErrWrongRole", err)
	}
	cutOffWrite(t, ctx, topo, compose.FaultStopReceiver, "replica2", "replica1")
}

func heavy(t *testing.T, topo *compose.Topology) {
	ctx := Ctx(t)
	res, err := topo.HeavyTransaction(ctx, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 20000 || res.GTIDs == "" {
		t.Fatalf("heavy: %+v", res)
	}
	t.Logf("heavy transaction: %d rows in %v, position gained %s", res.Rows, res.Elapsed.Round(time.Millisecond), res.GTIDs)
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// failover promotes replica1 while it is held back (it lacks the last
// writes) and replica2 has applied them: the new primary lacks them (the
// loss), replica2 is ahead of it and is repointed all the same.
func failover(t *testing.T, topo *compose.Topology, hold HoldBack) {
	ctx := Ctx(t)
	if err := topo.WaitReplicated(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := hold(t, ctx, topo); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for range 3 {
		ids = append(ids, Write(t, ctx, topo))
	}
	Eventually(t, "replica2 to apply", func() bool { return Has(t, ctx, topo, "replica2", ids[2]) })
	time.Sleep(300 * time.Millisecond) // what replica1 receives has arrived
	res, err := topo.Failover(ctx, "replica1")
	if err != nil {
		t.Fatalf("failover: %v (%+v)", err, res)
	}
	t.Logf("failover: %+v", res)
	if res.NewPrimary != "replica1" || res.OldPrimary != "primary" || !res.OldPrimaryReachable || res.Epoch != compose.FirstEpoch+1 {
		t.Fatalf("failover result: %+v", res)
	}
	lost := res.LostGTIDs + res.LostWAL
	if lost == "" {
		t.Fatalf("nothing reported lost although replica1 had not applied %v: %+v", ids, res)
	}
	if Has(t, ctx, topo, "replica1", ids[2]) {
		t.Logf("replica1 applied the last write while promoting (the engine replays what it received)")
	}
	if len(res.Repointed) != 1 || res.Repointed[0] != "replica2" {
		t.Fatalf("repointed %v", res.Repointed)
	}
	t.Logf("replica2 errant: %q; stats %+v", res.Errant["replica2"], topo.Stats())
	// replica2 had applied everything the old primary had: it is ahead of
	// the new primary by exactly the loss.
	if !errantIsLoss(res.Errant["replica2"], lost, res.LostWAL != "") {
		t.Fatalf("replica2 errant %q, want the loss %q", res.Errant["replica2"], lost)
	}
	rewound := topo.Stats().RewindOnRepoint > 0
	id := Write(t, ctx, topo)
	if rewound {
		// pg_rewind discarded replica2's WAL past the switch point: it
		// follows the new primary.
		Eventually(t, "replica2 to follow the new primary", func() bool { return Has(t, ctx, topo, "replica2", id) })
	} else {
		// replica2 keeps the errant rows (as a MySQL replica would): the
		// new primary's next rows may collide with them. Whatever happens
		// is the engine's; it is logged, not asserted.
		time.Sleep(500 * time.Millisecond)
	}
	for _, st := range topo.Status(ctx) {
		t.Logf("after failover %s (%s): %s health %s source %s %s", st.Node.Name, st.Node.Role, st.Position, st.Health, st.Source, st.LastError)
		if st.Node.Name == "primary" && (st.Node.Role != compose.RoleRetired || !st.ReadOnly) {
			t.Fatalf("old primary: %+v", st)
		}
		if st.Node.Name == "replica2" && rewound && st.Health != compose.HealthOK {
			t.Fatalf("replica2 after failover and rewind: %+v", st)
		}
	}
}

// errantIsLoss: errant, a replica's transactions the new primary lacks,
// is the failover's loss. With WAL (PostgreSQL: "timeline:start..end"),
// the old primary also writes records of its own after the last client
// write (running-transactions snapshots, checkpoints) that a replica may
// receive after the loss was measured: the errant range then starts where
// the loss starts and ends at or after it.
func errantIsLoss(errant, lost string, wal bool) bool {
	if errant == lost || !wal {
		return errant == lost
	}
	eStart, eEnd, ok1 := strings.Cut(errant, "..")
	lStart, lEnd, ok2 := strings.Cut(lost, "..")
	if !ok1 || !ok2 || eStart != lStart {
		return false
	}
	e, err1 := pglsn(eEnd)
	l, err2 := pglsn(lEnd)
	return err1 == nil && err2 == nil && e >= l
}

// pglsn parses a PostgreSQL LSN "X/Y".
func pglsn(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("LSN %q", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, err
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, err
	}
	return h<<32 | l, nil
}
