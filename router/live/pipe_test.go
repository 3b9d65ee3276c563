package live

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// TestReadStatementCache runs reads with arguments through one router
// (policy token-ryw-mr: every read also pipelines its watermark) with more
// distinct statements than a connection caches, each several times, and
// checks every answer: cache hits, the emptying of a full cache, and an
// argument-count error that leaves the connection usable.
func TestReadStatementCache(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl := startPoller(t, ctx, 5*time.Millisecond)
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: router.Policy{Kind: router.PolicyTokenRYWMR}, MaxIdle: 1})
	s := r.NewSession()
	defer s.Close()
	// A write first: on a fresh topology gtid_executed is empty, and so
	// would be every watermark.
	if _, err := s.Exec(ctx, "CREATE DATABASE IF NOT EXISTS rt"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, "CREATE TABLE IF NOT EXISTS rt.stmtcache (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, "REPLACE INTO rt.stmtcache VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// Replicas catch up first (a test before this one may have left them
	// behind): the reads must reach them to exercise their statement cache.
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	replicaReads := 0
	for round := range 3 {
		for i := range mysqlwire.MaxCachedStmts + 6 {
			// Distinct texts (the alias differs), the same shape.
			q := fmt.Sprintf("SELECT ? + %d AS v%d", i, i)
			rd, err := s.Query(ctx, q, round)
			if err != nil {
				t.Fatalf("round %d query %d: %v", round, i, err)
			}
			if got := readInt(t, rd); got != int64(round+i) {
				t.Fatalf("round %d query %d on %s: %d, want %d", round, i, rd.Node, got, round+i)
			}
			if rd.Outcome == router.OutReplica {
				replicaReads++
				if rd.Watermark.IsEmpty() {
					t.Fatalf("round %d query %d on %s: no watermark", round, i, rd.Node)
				}
			}
		}
	}
	if replicaReads < mysqlwire.MaxCachedStmts {
		t.Fatalf("only %d reads served by replicas", replicaReads)
	}
	heldDown := func() []string {
		r.mu.Lock()
		defer r.mu.Unlock()
		var down []string
		for name, until := range r.st.DownUntil {
			if time.Now().Before(until) {
				down = append(down, name)
			}
		}
		return down
	}
	if down := heldDown(); len(down) != 0 {
		t.Fatalf("nodes %v held down before the refused read", down)
	}
	if _, err := s.Query(ctx, "SELECT ? + ?", 1); !errors.Is(err, ErrArgCount) {
		t.Fatalf("a read with too few arguments: %v, want ErrArgCount", err)
	}
	// The caller's mistake holds no node down (before the fix it held down
	// every node it was retried on).
	if down := heldDown(); len(down) != 0 {
		t.Fatalf("nodes %v held down after a caller's argument error", down)
	}
	rd, err := s.Query(ctx, "SELECT ? * 2", 21)
	if err != nil || readInt(t, rd) != 42 {
		t.Fatalf("after the refused read: %v", err)
	}
}
