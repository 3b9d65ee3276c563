// Package enginestest runs lab.RunEngineFailover on real MySQL, MariaDB
// and PostgreSQL topologies (the experiment starts and removes one per
// engine, in turn; router/live/livetest/postgres covers PostgreSQL's
// routers in detail).
package enginestest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/lab"
)

// TestEngineFailover: every read is accounted for exactly once, each
// failover lost acknowledged writes (the experiment's premise), no read
// answered before the primary's kill is served without the session's
// write, and neither MySQL's GTID set nor any token with the epoch ever
// serves a read silently without the session's write.
func TestEngineFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real MySQL, MariaDB and PostgreSQL topologies")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := lab.RunEngineFailover(ctx, lab.EngineFailoverConfig{Engines: []compose.Engine{compose.EngineMySQL, compose.EngineMariaDB, compose.EnginePostgres},
		Backend: compose.BackendLocal, Sessions: 12, Duration: 8 * time.Second, RecordHistory: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 7 || len(res.Failovers) != 3 {
		t.Fatalf("%d rows, %d failovers; want 7 and 3", len(res.Rows), len(res.Failovers))
	}
	recounted(t, res)
	for _, f := range res.Failovers {
		if f.Result.LostGTIDs == "" && f.Result.LostWAL == "" {
			t.Errorf("%s: the failover lost nothing: %+v", f.Engine, f.Result)
		}
	}
	for _, r := range res.Rows {
		t.Logf("%+v", r)
		if r.Reads == 0 || r.Writes == 0 {
			t.Errorf("%s %s: no reads or writes", r.Engine, r.Token)
		}
		if r.LostSessions == 0 {
			t.Errorf("%s %s: the failover lost no session's write", r.Engine, r.Token)
		}
		if r.Served+r.TimedOut+r.FailedFast+r.Errors != r.Reads || r.OnReplica+r.Fallback != r.Served {
			t.Errorf("%s %s: outcomes do not add up: %+v", r.Engine, r.Token, r)
		}
		if r.Stale != r.StaleAfter {
			t.Errorf("%s %s: %d reads answered while the first primary lived were served without the session's write", r.Engine, r.Token, r.Stale-r.StaleAfter)
		}
		switch r.Token {
		case lab.TokMySQLGTID, lab.TokMySQLGTIDEpoch, lab.TokMariaDBGTIDEpoch, lab.TokPGLSNEpoch:
			if r.Stale != 0 {
				t.Errorf("%s %s: %d reads served without the session's write; a GTID set or the epoch never allows one", r.Engine, r.Token, r.Stale)
			}
		}
	}
}

// recounted: each engine's exported history, judged again from the JSON
// lines alone (lab.Recount), gives every token's table counts: reads,
// served, stale (RYW) and went backwards (OwnBackwards), and the hot
// rows' MR but for the hidden losses only the GTIDs show.
func recounted(t *testing.T, res *lab.EngineFailoverResult) {
	t.Helper()
	if len(res.Histories) != len(res.Failovers) {
		t.Fatalf("%d histories for %d engines", len(res.Histories), len(res.Failovers))
	}
	for _, h := range res.Histories {
		var js bytes.Buffer
		if err := lab.WriteHistoryJSON(&js, h.Ops); err != nil {
			t.Fatal(err)
		}
		rows, err := lab.Recount(&js, h.Sessions, h.HotRows)
		if err != nil {
			t.Fatalf("%s: %v", h.Engine, err)
		}
		for _, r := range res.Rows {
			if r.Engine != h.Engine {
				continue
			}
			got := rows[string(r.Token)]
			want := lab.RecountRow{Reads: r.Reads, Served: r.Served, RYW: r.Stale, OwnBackwards: r.Backwards, MR: got.MR}
			if got != want || got.MR > r.MR {
				t.Errorf("%s %s: recounted from the history %+v, the table %+v", r.Engine, r.Token, got, want)
			}
		}
	}
}
