package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/lab"
	"github.com/causallab/causallab/sim"
)

// TestDefaultOutputFits80Columns: every command's default output fits 80
// columns (runes, not bytes), as its help promises: every help text; the
// simulator's every table (sim all, briefly); hash and gtid; and the
// lab's tables, status and fault reports rendered from recorded runs
// (testdata: lab scenario replica-down-hash and lab hash on MySQL,
// 2026-12-05) or results shaped as real runs return them. --wide may
// keep everything; it is not checked.
func TestDefaultOutputFits80Columns(t *testing.T) {
	// A state path as long as the usual ~/.cache/causallab/topology.json
	// (help prints it as a default), where nothing runs.
	t.Setenv("CAUSALLAB_STATE", "/nonexistent/.cache/causallab/topology.json")
	ctx := context.Background()
	check := func(what, out string) {
		t.Helper()
		if strings.TrimSpace(out) == "" {
			t.Errorf("%s: no output", what)
		}
		for _, l := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(l); n > termWidth {
				t.Errorf("%s: line of %d columns: %q", what, n, l)
			}
		}
	}
	cli := func(args ...string) {
		t.Helper()
		r := runCLI(t, ctx, args...)
		if r.code != exitOK {
			t.Fatalf("%q: %s", args, r)
		}
		check(strings.Join(args, " "), r.stdout)
	}

	// Help: every command, groups and cobra's own included.
	for _, c := range allCommands(newRootCmd()) {
		cli(append(strings.Fields(c.CommandPath())[1:], "--help")...)
	}
	// The simulator: every experiment's tables (sim all), each command's
	// default view; a second of offered writes, one trial.
	cli("sim", "all", "--trials", "1", "--duration", "1s", "--no-progress")
	cli("sim", "routers", "--trials", "1", "--duration", "1s", "--no-progress")
	// hash and gtid, as the README's tour runs them.
	cli("hash", "remap", "--servers", "a:1,b:1,c:1,d:1,e:1", "--down", "c")
	cli("hash", "remap", "--servers", "a:2,b:1,c:1", "--inflight", "a:9,b:1")
	cli("hash", "explain", "--servers", "a:1,b:1,c:1,d:1", "--id", "user-42", "--down", "c,d", "--inflight", "a:9")
	const set = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-10"
	cli("gtid", "subtract", set, "3e11fa47-71ca-11e1-9e33-c80aa9429562:3-4")
	cli("gtid", "union", set, "4e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
	cli("gtid", "normalize", set+",3e11fa47-71ca-11e1-9e33-c80aa9429562:11-20")

	// The lab's tables from recorded runs.
	for _, f := range []string{"lab-replica-down-hash.json", "lab-hash.json"} {
		var b bytes.Buffer
		if err := writeResults(&b, recordedResults(t, f), lab.Format("md"), false); err != nil {
			t.Fatal(err)
		}
		check(f, b.String())
	}
	var b bytes.Buffer
	if err := writeEngineFailover(&b, engineFailoverResult(), []string{"mariadb (not built: causallab image --engine mariadb)"}, "md", false); err != nil {
		t.Fatal(err)
	}
	srep, err := sim.Failover(ctx, sim.Options{Base: sim.Config{Trials: 1, Duration: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeTables(&b, srep.Tables, "md", false, true); err != nil {
		t.Fatal(err)
	}
	check("lab failover", b.String())
	b.Reset()
	if err := writeGatedEngine(&b, gatedEngineResult(), "md", false); err != nil {
		t.Fatal(err)
	}
	check("lab gated --engine postgres", b.String())

	// up and status, fault.
	b.Reset()
	if err := writeStatus(&b, statusHead{backend: compose.BackendLocal, epoch: 2}, statusFixture(), false, false); err != nil {
		t.Fatal(err)
	}
	check("status", b.String())
	b.Reset()
	for _, fr := range faultFixtures() {
		printFault(&b, fr.f, fr.res, fr.err)
	}
	check("fault", b.String())
}

// recordedResults reads a lab run's results as `lab ... --format json`
// printed them (one JSON object per result).
func recordedResults(t *testing.T, name string) []*lab.Result {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*lab.Result
	dec := json.NewDecoder(f)
	for {
		var r lab.Result
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, &r)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no results", name)
	}
	return out
}

// engineFailoverResult is lab failover --engines mysql,mariadb,postgres
// as it returns: MySQL's row the run of 2026-12-05 (this machine), the
// others shaped alike.
func engineFailoverResult() *lab.EngineFailoverResult {
	res := &lab.EngineFailoverResult{Sessions: 24, ReadsPerWrite: 3, GapMin: 15 * time.Millisecond, GapMax: 2 * time.Second,
		DurationSeconds: 12, FailoverAtSeconds: 6, HoldBackSeconds: 1, WaitBudgetMilliseconds: 400, Seed: 1}
	for _, e := range compose.Engines() {
		for _, tok := range lab.EngineTokens(e) {
			res.Rows = append(res.Rows, lab.EngineTokenRow{Engine: e, Token: tok, Reads: 543, Stale: 10, StaleAfter: 10, TimedOut: 60,
				FailedFast: 207, Errors: 17, OnReplica: 307, Fallback: 107, Backwards: 2, LostSessions: 13, SimKind: tok.SimKind()})
		}
	}
	res.Failovers = []lab.EngineFailover{
		{Engine: compose.EngineMySQL, Seconds: 31, Result: compose.FailoverResult{NewPrimary: "replica1", Epoch: 2,
			LostGTIDs: "432392d9-f0c9-11f1-8234-02fc00000001:258-291"}},
		{Engine: compose.EngineMariaDB, Seconds: 29, Result: compose.FailoverResult{NewPrimary: "replica1", Epoch: 2, LostGTIDs: "0-1-1201..1240"}},
		{Engine: compose.EnginePostgres, Seconds: 33, Result: compose.FailoverResult{NewPrimary: "replica1", Epoch: 2,
			LostWAL: "1:0/3A1B2C8..0/3A4F1D0", LostWALBytes: 208136, NewTimeline: 2, SwitchPoint: "0/3A1B2C8"}},
	}
	return res
}

// gatedEngineResult is lab gated --engine postgres as it returns.
func gatedEngineResult() *lab.GatedEngineResult {
	res := &lab.GatedEngineResult{Engine: compose.EnginePostgres, Flavor: "postgres-lsn", ApplyDelayMs: 250, Users: 300, WriteShare: 0.2,
		ReadOwnShare: 0.5, OpGapMs: 2, Seed: 1, StreamSeconds: 14.2, SweepSeconds: 41.5, Seconds: 63.1,
		Rows: []lab.GatedRouterRow{{Router: "naive", Reads: 3788, Served: 3788, Stale: 1423, OnReplica: 3788, ReadOwn: 1890, ReadOwnStale: 1402},
			{Router: "gated", Reads: 3788, Served: 3788, OnReplica: 2201, OnPrimary: 1587, PrimaryNoReplicaUp: 3}}}
	for d := 0; d <= 500; d += 25 {
		res.Sweep = append(res.Sweep, lab.GatedSweepRow{DelayMs: float64(d), Trials: 300, Stale: max(0, 300-int64(d)*300/250)})
	}
	return res
}

// statusFixture is a 1 + 2 topology's status after a failover: GTIDs of
// two sources, a stopped applier with its error, a pending repoint.
func statusFixture() []compose.NodeStatus {
	node := func(name string, role compose.Role, port int) compose.Node {
		return compose.Node{Name: name, Role: role, Host: "127.0.0.1", Port: port, User: "causallab", Password: "causallab"}
	}
	const gtids = "432392d9-f0c9-11f1-8234-02fc00000001:1-291,\n5a1b2c3d-f0c9-11f1-8234-02fc00000002:1-1204"
	pg := node("replica9", compose.RoleReplica, 65535)
	pg.Engine = compose.EnginePostgres // the longest DSN: a URL
	return []compose.NodeStatus{
		{Node: pg, Health: compose.HealthUnreachable, SecondsBehind: -1},
		{Node: node("replica1", compose.RolePrimary, 43933), Health: compose.HealthOK, GTIDExecuted: gtids, SecondsBehind: -1},
		{Node: node("primary", compose.RoleRetired, 41493), Health: compose.HealthUnreachable, SecondsBehind: -1,
			LastError: "dial tcp 127.0.0.1:41493: connect: connection refused"},
		{Node: node("replica2", compose.RoleReplica, 34307), Health: compose.HealthStopped, IORunning: "Yes", SQLRunning: "No",
			GTIDExecuted: gtids, SecondsBehind: -1, PendingRepoint: "paused",
			LastError: "Worker 1 failed executing transaction '432392d9-f0c9-11f1-8234-02fc00000001:292' at source log binlog.000002, end_log_pos 91822; Error 'Duplicate entry' on query."},
	}
}

// faultFixtures are faults as `causallab fault` reports them, the longest
// lines each can print.
func faultFixtures() []struct {
	f   compose.Fault
	res compose.FaultResult
	err error
} {
	type fr = struct {
		f   compose.Fault
		res compose.FaultResult
		err error
	}
	return []fr{
		{compose.Fault{Kind: compose.FaultStopReceiver, Node: "replica2"}, compose.FaultResult{}, nil},
		{compose.Fault{Kind: compose.FaultApplyDelay, Node: "replica2", Delay: 3 * time.Second}, compose.FaultResult{}, nil},
		{compose.Fault{Kind: compose.FaultPartition, Node: "replica3"}, compose.FaultResult{Partition: compose.PartitionIOThread}, nil},
		{compose.Fault{Kind: compose.FaultHeavy, Rows: 100000}, compose.FaultResult{Heavy: compose.HeavyResult{Rows: 100000, Elapsed: 2 * time.Second,
			GTIDs: "432392d9-f0c9-11f1-8234-02fc00000001:292-293"}}, nil},
		{compose.Fault{Kind: compose.FaultFailover, Node: "replica1"}, compose.FaultResult{Failover: compose.FailoverResult{OldPrimary: "primary",
			NewPrimary: "replica1", Epoch: 2, LostGTIDs: "432392d9-f0c9-11f1-8234-02fc00000001:258-291",
			Deferred: map[string]string{"replica2": "paused"}, Errant: map[string]string{"replica3": "432392d9-f0c9-11f1-8234-02fc00000001:258-260"}}}, nil},
	}
}
