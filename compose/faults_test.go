package compose_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/compose/enginetest"
)

func TestStopStartApplier(t *testing.T) {
	composetest.Need(t, shared)
	ctx := testCtx(t)
	r1, _ := shared.Node("replica1")
	if err := shared.StopApplier(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.StartApplier(context.Background(), "replica1") })
	id := enginetest.Write(t, ctx, shared)
	gtid := queryStr(t, ctx, open(t, shared.Primary()), "SELECT @@gtid_executed")
	// The IO thread still receives: the write reaches the relay log but is
	// not applied.
	enginetest.Eventually(t, "replica1 to retrieve the write", func() bool {
		st := enginetest.Status(t, ctx, shared, "replica1")
		return queryInt(t, ctx, open(t, r1), "SELECT GTID_SUBSET(?, ?)", gtid, st.RetrievedGTIDs+","+st.GTIDExecuted) == 1
	})
	if enginetest.Has(t, ctx, shared, "replica1", id) {
		t.Fatal("replica1 applied a write with its applier stopped")
	}
	st := enginetest.Status(t, ctx, shared, "replica1")
	if st.SQLRunning != "No" || st.IORunning != "Yes" || st.Health != compose.HealthStopped {
		t.Fatalf("status with applier stopped: %+v", st)
	}
	if err := shared.StartApplier(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "replica1 to apply", func() bool { return enginetest.Has(t, ctx, shared, "replica1", id) })
	if err := shared.StopApplier(ctx, "primary"); !errors.Is(err, compose.ErrWrongRole) {
		t.Fatalf("StopApplier(primary) = %v, want ErrWrongRole", err)
	}
	if err := shared.StopApplier(ctx, "nosuch"); !errors.Is(err, compose.ErrUnknownNode) {
		t.Fatalf("StopApplier(nosuch) = %v, want ErrUnknownNode", err)
	}
}

func TestSetApplyDelay(t *testing.T) {
	composetest.Need(t, shared)
	ctx := testCtx(t)
	if err := shared.SetApplyDelay(ctx, "replica2", 1500*time.Millisecond); err == nil {
		t.Fatal("fractional delay accepted")
	}
	if err := shared.SetApplyDelay(ctx, "replica2", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.SetApplyDelay(context.Background(), "replica2", 0) })
	st := enginetest.Status(t, ctx, shared, "replica2")
	if st.SourceDelay != 2 || st.SQLRunning != "Yes" {
		t.Fatalf("status after SetApplyDelay: %+v", st)
	}
	id := enginetest.Write(t, ctx, shared)
	began := time.Now()
	if enginetest.Has(t, ctx, shared, "replica2", id) && time.Since(began) < 2*time.Second {
		t.Fatal("replica2 applied a write before its 2 s delay")
	}
	// While the write waits out the delay, replica2 is lagging: at least a
	// second behind, with a received transaction not applied.
	sawLagging := false
	enginetest.Eventually(t, "replica2 to apply after its delay", func() bool {
		if enginetest.Status(t, ctx, shared, "replica2").Health == compose.HealthLagging {
			sawLagging = true
		}
		return enginetest.Has(t, ctx, shared, "replica2", id)
	})
	if time.Since(began) < time.Second {
		t.Fatalf("replica2 applied after %v, inside its 2 s delay", time.Since(began))
	}
	if !sawLagging {
		t.Fatal("replica2 never reported lagging while delayed")
	}
	enginetest.Eventually(t, "replica1 (no delay) to apply", func() bool { return enginetest.Has(t, ctx, shared, "replica1", id) })
	if err := shared.SetApplyDelay(ctx, "replica2", 0); err != nil {
		t.Fatal(err)
	}
	if st := enginetest.Status(t, ctx, shared, "replica2"); st.SourceDelay != 0 {
		t.Fatalf("delay not removed: %+v", st)
	}
}

func TestPartitionHeal(t *testing.T) {
	composetest.Need(t, shared)
	ctx := testCtx(t)
	before := shared.Stats().WeakPartitions
	mode, err := shared.Partition(ctx, "replica1")
	if err != nil {
		t.Fatal(err)
	}
	switch mode {
	case compose.PartitionIOThread:
		if got := shared.Stats().WeakPartitions; got != before+1 {
			t.Fatalf("WeakPartitions %d, want %d", got, before+1)
		}
		st := enginetest.Status(t, ctx, shared, "replica1")
		if st.IORunning != "No" || st.Health != compose.HealthStopped {
			t.Fatalf("status of partitioned replica1: %+v", st)
		}
		id := enginetest.Write(t, ctx, shared)
		enginetest.Eventually(t, "replica2 to apply", func() bool { return enginetest.Has(t, ctx, shared, "replica2", id) })
		if enginetest.Has(t, ctx, shared, "replica1", id) {
			t.Fatal("partitioned replica1 received a write")
		}
		if err := shared.Heal(ctx, "replica1"); err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, "replica1 to catch up after heal", func() bool { return enginetest.Has(t, ctx, shared, "replica1", id) })
	case compose.PartitionNetwork:
		if st := enginetest.Status(t, ctx, shared, "replica1"); st.Health != compose.HealthUnreachable {
			t.Fatalf("status of partitioned replica1: %+v", st)
		}
		id := enginetest.Write(t, ctx, shared)
		if err := shared.Heal(ctx, "replica1"); err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, "replica1 to catch up after heal", func() bool { return enginetest.Has(t, ctx, shared, "replica1", id) })
	default:
		t.Fatalf("mode %q", mode)
	}
}

func TestHeavyTransaction(t *testing.T) {
	composetest.Need(t, shared)
	ctx := testCtx(t)
	if _, err := shared.HeavyTransaction(ctx, 0); err == nil {
		t.Fatal("0 rows accepted")
	}
	res, err := shared.HeavyTransaction(ctx, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 20000 || res.GTIDs == "" {
		t.Fatalf("result %+v", res)
	}
	pdb := open(t, shared.Primary())
	// One transaction: exactly one GTID.
	if n := queryInt(t, ctx, pdb, "SELECT LENGTH(?) - LENGTH(REPLACE(?, '-', ''))", res.GTIDs, res.GTIDs); n != 4 {
		t.Fatalf("heavy transaction made GTIDs %q, want one", res.GTIDs)
	}
	total := queryInt(t, ctx, pdb, "SELECT COUNT(*) FROM "+compose.HeavyTable)
	for _, r := range shared.Replicas() {
		db := open(t, r)
		if queryInt(t, ctx, db, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, 30)", res.GTIDs) != 0 {
			t.Fatalf("%s did not apply %s", r.Name, res.GTIDs)
		}
		if got := queryInt(t, ctx, db, "SELECT COUNT(*) FROM "+compose.HeavyTable); got != total {
			t.Fatalf("%s has %d rows, primary %d", r.Name, got, total)
		}
	}
}

func TestPauseResume(t *testing.T) {
	composetest.Need(t, shared)
	if shared.Backend() == compose.BackendExternal {
		t.Skip("external")
	}
	ctx := testCtx(t)
	if err := shared.Pause(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shared.Resume(context.Background(), "replica2") })
	st := enginetest.Status(t, ctx, shared, "replica2")
	if st.Health != compose.HealthUnreachable {
		t.Fatalf("paused replica2: %+v", st)
	}
	if err := shared.Resume(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	id := enginetest.Write(t, ctx, shared)
	enginetest.Eventually(t, "resumed replica2 to apply", func() bool { return enginetest.Has(t, ctx, shared, "replica2", id) })
}

func TestKillRestart(t *testing.T) {
	composetest.Need(t, shared)
	ctx := testCtx(t)
	id := enginetest.Write(t, ctx, shared)
	enginetest.Eventually(t, "replica1 to apply", func() bool { return enginetest.Has(t, ctx, shared, "replica1", id) })
	if err := shared.Kill(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	if st := enginetest.Status(t, ctx, shared, "replica1"); st.Health != compose.HealthUnreachable {
		t.Fatalf("killed replica1: %+v", st)
	}
	if err := shared.Kill(ctx, "replica1"); err != nil {
		t.Fatalf("second Kill is not a no-op: %v", err)
	}
	if err := shared.Pause(ctx, "replica1"); !errors.Is(err, compose.ErrNodeDown) {
		t.Fatalf("Pause of dead node = %v, want ErrNodeDown", err)
	}
	id2 := enginetest.Write(t, ctx, shared)
	if err := shared.Restart(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	if !enginetest.Has(t, ctx, shared, "replica1", id) {
		t.Fatal("restart lost data")
	}
	enginetest.Eventually(t, "restarted replica1 to catch up", func() bool { return enginetest.Has(t, ctx, shared, "replica1", id2) })
	// Seconds_Behind_Source can read 1 for a moment after catching up.
	enginetest.Eventually(t, "restarted replica1 to be healthy", func() bool {
		return enginetest.Status(t, ctx, shared, "replica1").Health == compose.HealthOK
	})
	if st := enginetest.Status(t, ctx, shared, "replica1"); !st.ReadOnly {
		t.Fatalf("restarted replica1 is writable: %+v", st)
	}
	// Restart of a running primary: clean shutdown, replicas reconnect.
	if err := shared.Restart(ctx, "primary"); err != nil {
		t.Fatal(err)
	}
	id3 := enginetest.Write(t, ctx, shared)
	for _, r := range shared.Replicas() {
		enginetest.Eventually(t, r.Name+" to reconnect after primary restart", func() bool { return enginetest.Has(t, ctx, shared, r.Name, id3) })
	}
}

func TestFailover(t *testing.T) {
	topo := composetest.Start(t, compose.Config{Replicas: 2})
	ctx := testCtx(t)
	first := enginetest.Write(t, ctx, topo)
	if err := topo.WaitReplicated(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Stop every replica's IO thread, write once more: that write exists
	// only on the primary, so promoting replica1 loses it and replica2
	// stays consistent with replica1.
	for _, r := range topo.Replicas() {
		mustExec(t, ctx, open(t, r), "STOP REPLICA IO_THREAD")
	}
	lost := enginetest.Write(t, ctx, topo)
	pdb := open(t, topo.Primary())
	r1, _ := topo.Node("replica1")
	want := queryStr(t, ctx, pdb, "SELECT GTID_SUBTRACT(@@gtid_executed, ?)", queryStr(t, ctx, open(t, r1), "SELECT @@gtid_executed"))
	if want == "" {
		t.Fatal("setup: replica1 lacks nothing")
	}
	res, err := topo.Failover(ctx, "replica1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != compose.FirstEpoch+1 || topo.Epoch() != compose.FirstEpoch+1 || res.OldPrimary != "primary" || res.NewPrimary != "replica1" || !res.OldPrimaryReachable {
		t.Fatalf("result %+v", res)
	}
	if res.LostGTIDs != want {
		t.Fatalf("lost %q, want %q", res.LostGTIDs, want)
	}
	if p := topo.Primary(); p.Name != "replica1" || p.Role != compose.RolePrimary {
		t.Fatalf("primary after failover: %+v", p)
	}
	if reps := topo.Replicas(); len(reps) != 1 || reps[0].Name != "replica2" {
		t.Fatalf("replicas after failover: %+v", reps)
	}
	if old, _ := topo.Node("primary"); old.Role != compose.RoleRetired {
		t.Fatalf("old primary role %s", old.Role)
	}
	if _, err := pdb.ExecContext(ctx, "INSERT INTO faults.markers (note) VALUES ('fenced?')"); err == nil {
		t.Fatal("old primary still accepts writes")
	}
	if !enginetest.Has(t, ctx, topo, "replica1", first) || enginetest.Has(t, ctx, topo, "replica1", lost) {
		t.Fatal("new primary's data is not what it had replicated")
	}
	// The new primary takes writes and replica2 follows it.
	after := enginetest.Write(t, ctx, topo)
	enginetest.Eventually(t, "replica2 to follow the new primary", func() bool { return enginetest.Has(t, ctx, topo, "replica2", after) })
	if st := enginetest.Status(t, ctx, topo, "replica2"); st.Source != net.JoinHostPort(r1.PeerHost, strconv.Itoa(r1.PeerPort)) || st.Health != compose.HealthOK {
		t.Fatalf("replica2 after failover: %+v", st)
	}

	// Second failover with the current primary dead: the loss is computed
	// from the survivors, which is said and counted.
	if err := topo.Kill(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	res2, err := topo.Failover(ctx, "replica2")
	if err != nil {
		t.Fatal(err)
	}
	if res2.Epoch != compose.FirstEpoch+2 || res2.OldPrimaryReachable || topo.Stats().FailoverUnreachableOldPrimary != 1 {
		t.Fatalf("second failover %+v, stats %+v", res2, topo.Stats())
	}
	if _, err := topo.Failover(ctx, "replica2"); !errors.Is(err, compose.ErrWrongRole) {
		t.Fatalf("failover to the primary = %v, want ErrWrongRole", err)
	}
	if id := enginetest.Write(t, ctx, topo); !enginetest.Has(t, ctx, topo, "replica2", id) {
		t.Fatal("replica2 as primary lost a write")
	}
	// replica1 died as primary (writable, persisted) and was never fenced:
	// Restart brings it back retired and read-only.
	if err := topo.Restart(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	if st := enginetest.Status(t, ctx, topo, "replica1"); !st.ReadOnly || st.Node.Role != compose.RoleRetired {
		t.Fatalf("restarted former primary: %+v", st)
	}
	if _, err := open(t, r1).ExecContext(ctx, "INSERT INTO faults.markers (note) VALUES ('fenced?')"); err == nil {
		t.Fatal("restarted former primary accepts writes")
	}
}

// TestFailoverDeferredReplicas: a replica paused and a replica dead during
// Failover are left as they are (the faults stand), marked pending, and
// repointed to the new primary by Resume and Restart. Each then holds
// everything the new primary has and nothing beyond it except GTIDs the
// failover reported lost.
func TestFailoverDeferredReplicas(t *testing.T) {
	topo := composetest.Start(t, compose.Config{Replicas: 3})
	ctx := testCtx(t)
	before := enginetest.Write(t, ctx, topo)
	if err := topo.WaitReplicated(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	r1, _ := topo.Node("replica1")
	r2, _ := topo.Node("replica2")
	r3, _ := topo.Node("replica3")
	// A write that replica1 and replica3 receive but replica2 (the future
	// primary) does not: it is lost at the failover, and replica1 and
	// replica3 come back holding it (errant). Its id is far from what the
	// new primary's auto-increment will hand out: a conflicting errant row
	// would break their replication (real MySQL behaviour, documented).
	mustExec(t, ctx, open(t, r2), "STOP REPLICA IO_THREAD")
	const lostID = 1_000_000
	mustExec(t, ctx, open(t, topo.Primary()), "INSERT INTO faults.markers (id, note) VALUES (?, 'lost')", lostID)
	enginetest.Eventually(t, "replica1 and replica3 to apply the write replica2 misses", func() bool {
		return enginetest.Has(t, ctx, topo, "replica1", lostID) && enginetest.Has(t, ctx, topo, "replica3", lostID)
	})
	if err := topo.Pause(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topo.Resume(context.Background(), "replica1") })
	if err := topo.Kill(ctx, "replica3"); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.Failover(ctx, "replica1"); !errors.Is(err, compose.ErrNodeDown) {
		t.Fatalf("failover to the paused replica1 = %v, want ErrNodeDown", err)
	}
	res, err := topo.Failover(ctx, "replica2")
	if err != nil {
		t.Fatalf("failover with deferred replicas: %v (result %+v)", err, res)
	}
	if res.Deferred["replica1"] != "paused" || res.Deferred["replica3"] != "down" || len(res.Deferred) != 2 ||
		len(res.Repointed) != 0 || len(res.NotRepointed) != 0 {
		t.Fatalf("result %+v", res)
	}
	if res.LostGTIDs == "" {
		t.Fatal("the write replica2 missed is not reported lost")
	}
	if got := enginetest.Status(t, ctx, topo, "replica3").PendingRepoint; got != "down" {
		t.Fatalf("replica3 pending %q, want down", got)
	}
	// Written on the new primary while replica1 is paused and replica3
	// dead: they catch up on it from the new primary when back.
	after := enginetest.Write(t, ctx, topo)

	// The pending marks survive a state file round trip (the CLI runs
	// each fault in its own process).
	st, err := compose.ParseState(mustJSON(t, topo.State()))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.PendingRepoint) != 2 {
		t.Fatalf("state pending %v", st.PendingRepoint)
	}

	if err := topo.Resume(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	if err := topo.Restart(ctx, "replica3"); err != nil {
		t.Fatal(err)
	}
	pdb := open(t, r2)
	want := net.JoinHostPort(r2.PeerHost, strconv.Itoa(r2.PeerPort))
	for _, r := range []compose.Node{r1, r3} {
		enginetest.Eventually(t, r.Name+" to apply the new primary's write", func() bool { return enginetest.Has(t, ctx, topo, r.Name, after) })
		if !enginetest.Has(t, ctx, topo, r.Name, before) {
			t.Fatalf("%s lost a write the new primary has", r.Name)
		}
		st := enginetest.Status(t, ctx, topo, r.Name)
		if st.Source != want || st.PendingRepoint != "" || st.IORunning != "Yes" || st.SQLRunning != "Yes" {
			t.Fatalf("%s after coming back: %+v", r.Name, st)
		}
		pExec := queryStr(t, ctx, pdb, "SELECT @@gtid_executed")
		rdb := open(t, r)
		if queryInt(t, ctx, rdb, "SELECT GTID_SUBSET(?, @@gtid_executed)", pExec) != 1 {
			t.Fatalf("%s lacks some of the new primary's %s", r.Name, pExec)
		}
		extra := queryStr(t, ctx, rdb, "SELECT GTID_SUBTRACT(@@gtid_executed, ?)", pExec)
		if extra == "" {
			t.Fatalf("%s does not hold the write lost at failover", r.Name)
		}
		if queryInt(t, ctx, rdb, "SELECT GTID_SUBSET(?, ?)", extra, res.LostGTIDs) != 1 {
			t.Fatalf("%s holds %s beyond the new primary, not within the lost %s", r.Name, extra, res.LostGTIDs)
		}
	}
	if got := topo.Stats().ErrantOnRepoint; got != 2 {
		t.Fatalf("ErrantOnRepoint %d, want 2", got)
	}
	// Restart of a replica that follows the primary already is plain.
	if err := topo.Restart(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	last := enginetest.Write(t, ctx, topo)
	enginetest.Eventually(t, "restarted replica1 to follow", func() bool { return enginetest.Has(t, ctx, topo, "replica1", last) })
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
