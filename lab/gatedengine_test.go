package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

func TestGatedEngineConfigValidate(t *testing.T) {
	pg := GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal}
	if err := pg.validate(); err != nil {
		t.Fatalf("postgres defaults: %v", err)
	}
	if pg.ApplyDelay != 250*time.Millisecond || pg.Users != 300 || pg.Reads != 3788 || pg.Trials != 300 ||
		pg.SweepMax != 500*time.Millisecond || pg.SweepStep != 25*time.Millisecond {
		t.Errorf("postgres defaults not the harness's: %+v", pg)
	}
	my := GatedEngineConfig{Engine: compose.EngineMySQL, Backend: compose.BackendDocker}
	if err := my.validate(); err != nil {
		t.Fatalf("mysql defaults: %v", err)
	}
	if my.ApplyDelay != time.Second || my.SweepMax != 3*time.Second {
		t.Errorf("mysql defaults: delay %v, sweep to %v; want 1s and 3s", my.ApplyDelay, my.SweepMax)
	}
	if err := (GatedEngineConfig{Engine: compose.EngineMySQL, Backend: compose.BackendLocal, Trials: -1, OpGap: -1}).Validate(); err != nil {
		t.Errorf("no sweep, no pause: %v", err)
	}
	for _, c := range []struct {
		cfg  GatedEngineConfig
		want string
	}{
		{GatedEngineConfig{Engine: "oracle", Backend: compose.BackendLocal}, `unknown engine "oracle"`},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendExternal}, "want local or docker"},
		{GatedEngineConfig{Engine: compose.EngineMySQL, Backend: compose.BackendLocal, ApplyDelay: 250 * time.Millisecond}, "whole seconds"},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal, ApplyDelay: 1500 * time.Microsecond}, "milliseconds"},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal, Users: -3}, "users"},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal, Reads: -1}, "reads"},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal, WriteShare: 1}, "write share"},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal, ReadOwnShare: 2}, "read-own share"},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal, SweepStep: time.Microsecond, SweepMax: time.Second}, "at most 1000 steps"},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal, Trials: 200000}, "trials"},
		{GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal, SweepSessions: 1000}, "sessions"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
}

// TestGatedStream: the stream has exactly the configured reads, is the
// same for the same seed, and every own read follows its user's write at
// once.
func TestGatedStream(t *testing.T) {
	cfg := GatedEngineConfig{Engine: compose.EnginePostgres, Backend: compose.BackendLocal}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ops := gatedStream(&cfg)
	if !slices.Equal(ops, gatedStream(&cfg)) {
		t.Fatal("the same seed gave two streams")
	}
	other := cfg
	other.Seed = 2
	if slices.Equal(ops, gatedStream(&other)) {
		t.Error("seeds 1 and 2 gave the same stream")
	}
	var reads, own, writes int
	users := map[int]bool{}
	var gaps time.Duration
	for i, op := range ops {
		users[op.user] = true
		gaps += op.gap
		switch op.kind {
		case opWrite:
			writes++
		case opRead:
			reads++
		case opReadOwn:
			reads++
			own++
			if i == 0 || ops[i-1].kind != opWrite || ops[i-1].user != op.user || op.gap != 0 {
				t.Fatalf("op %d: an own read not right after its user's write: %+v after %+v", i, op, ops[max(i-1, 0)])
			}
		}
	}
	if reads != cfg.Reads {
		t.Errorf("%d reads, want %d", reads, cfg.Reads)
	}
	// Expected shares: writes are half the steps, 60 % of them followed
	// by an own read: own reads are 0.3/0.8 of the reads.
	if f := float64(own) / float64(reads); f < 0.34 || f > 0.41 {
		t.Errorf("own reads %.3f of the reads, want about 0.375", f)
	}
	if f := float64(writes) / float64(len(ops)-own); f < 0.47 || f > 0.53 {
		t.Errorf("writes %.3f of the steps, want about 0.5", f)
	}
	if len(users) != cfg.Users {
		t.Errorf("%d users touched, want all %d", len(users), cfg.Users)
	}
	if mean := gaps / time.Duration(len(ops)-own); mean < 1800*time.Microsecond || mean > 2200*time.Microsecond {
		t.Errorf("mean pause %v, want about 2ms", mean)
	}
}

func TestQuantileMs(t *testing.T) {
	if quantileMs(nil, 0.5) != 0 {
		t.Error("empty")
	}
	d := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	if q := quantileMs(d, 0.5); q != 2 {
		t.Errorf("p50 %v, want 2", q)
	}
	if q := quantileMs(d, 0.99); q != 4 {
		t.Errorf("p99 %v, want 4", q)
	}
}

// TestGatedEngineTables: the tables carry the counts and the published
// figures; --out writes the tables, the result and the picture.
func TestGatedEngineTables(t *testing.T) {
	res := &GatedEngineResult{Engine: compose.EnginePostgres, Flavor: "postgres-lsn", ApplyDelayMs: 250, Users: 300, Seed: 1,
		Rows: []GatedRouterRow{{Router: "naive", Reads: 100, Served: 100, Stale: 40, OnReplica: 100, ReadOwn: 30, ReadOwnStale: 30},
			{Router: "gated", Reads: 100, Served: 100, OnReplica: 58, OnPrimary: 42}},
		Sweep: []GatedSweepRow{{DelayMs: 0, Trials: 10, Stale: 10}, {DelayMs: 250, Trials: 10, Stale: 1}, {DelayMs: 500, Trials: 10, Errors: 1}}}
	ts := GatedEngineTables(res)
	if len(ts) != 2 {
		t.Fatalf("%d tables", len(ts))
	}
	var b strings.Builder
	for _, tb := range ts {
		if err := tb.Compact().Write(&b, "md"); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"| naive | 100 | 40 | 40.0 | 100.0 | 30 |", "| gated | 100 | 0 | 0.0 | 58.0 | 0 |", "fresh on 60.0 %",
		"37.6 %", "| 0 | 10 | 10 | 100.0 |", "| 250 | 10 | 1 | 10.0 |", "| 500 | 10 | 0 | 0.0 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, b.String())
		}
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("line wider than 80 columns: %q", l)
		}
	}
	if strings.Contains(b.String(), "saw no replica up") {
		t.Errorf("a note on reads with no replica up, and there were none:\n%s", b.String())
	}
	// Reads the router sent to the primary for want of a replica up are
	// said, per router.
	down := *res
	down.Rows = slices.Clone(res.Rows)
	down.Rows[0].OnReplica, down.Rows[0].OnPrimary, down.Rows[0].PrimaryNoReplicaUp = 95, 5, 5
	var nb strings.Builder
	if err := GatedEngineTables(&down)[0].Compact().Write(&nb, "md"); err != nil {
		t.Fatal(err)
	}
	if want := "naive: 5 of its 5 reads on the primary went there because the router saw no replica up"; !strings.Contains(strings.Join(strings.Fields(nb.String()), " "), want) {
		t.Errorf("tables lack %q:\n%s", want, nb.String())
	}
	for _, l := range strings.Split(nb.String(), "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("line wider than 80 columns: %q", l)
		}
	}
	dir := t.TempDir()
	if err := WriteGatedEngineOut(dir, res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"gated-postgres.md", "gated-postgres.csv", "gated-sweep-postgres.json", "gated-postgres-result.json",
		"lab-gated-sweep-postgres.svg", "lab-gated-sweep-postgres.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
