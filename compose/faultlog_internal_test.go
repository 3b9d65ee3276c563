package compose

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestFaultLogger: a WARN about a node killed on purpose becomes one INFO
// sentence per node, fault and message, without the driver's raw error
// (kept at DEBUG); other WARNs pass; the node is matched by name or
// address; a node back for longer than faultGrace is warned about again.
func TestFaultLogger(t *testing.T) {
	topo := &Topology{nodes: []Node{
		{Name: "primary", Role: RolePrimary, Host: "127.0.0.1", Port: 4001},
		{Name: "replica1", Role: RoleReplica, Host: "127.0.0.1", Port: 4002},
	}}
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	raw := errors.New("io.ReadFull(header) failed. err read tcp: connection reset by peer: connection was bad")
	lines := func() []string {
		defer buf.Reset()
		return strings.Split(strings.TrimSpace(buf.String()), "\n")
	}

	undo := topo.markOut("primary", "killed")
	for range 3 { // three routers, one sentence
		topo.FaultLogger(base).Warn("router: node marked down", "node", "primary", "hold", time.Second, "err", raw)
	}
	topo.FaultLogger(base).With("watcher", "w").Warn("walwatch: reading pg_stat_replication failed", "primary", "127.0.0.1:4001", "err", raw)
	topo.FaultLogger(base).Warn("poller: poll failed", "node", "replica1", "err", raw)
	got := lines()
	if len(got) != 3 {
		t.Fatalf("want 3 lines, got %d:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i, want := range []string{
		`level=INFO msg="router: node marked down: primary was killed on purpose (an injected fault), as expected" node=primary`,
		`level=INFO msg="walwatch: reading pg_stat_replication failed: primary was killed on purpose (an injected fault), as expected"`,
		`level=WARN msg="poller: poll failed" node=replica1`,
	} {
		if !strings.Contains(got[i], want) {
			t.Errorf("line %d: %s\nwant %s", i, got[i], want)
		}
	}
	if strings.Contains(got[0]+got[1], "ReadFull") {
		t.Errorf("raw error at INFO: %v", got)
	}

	// -v: the raw record too, at DEBUG.
	dbg := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	topo.FaultLogger(dbg).Warn("poller: poll failed", "node", "primary", "err", raw)
	if got := lines(); len(got) != 2 || !strings.Contains(got[0], "level=DEBUG") || !strings.Contains(got[0], "ReadFull") || !strings.Contains(got[1], "level=INFO") {
		t.Errorf("with debug: %v", got)
	}

	// A failed fault is no fault; a new fault is said again; a node back
	// beyond the grace is warned about.
	undo()
	topo.FaultLogger(base).Warn("router: node marked down", "node", "primary")
	if got := lines(); !strings.Contains(got[0], "level=WARN") {
		t.Errorf("after undo: %v", got)
	}
	topo.markOut("primary", "paused")
	topo.FaultLogger(base).Warn("router: node marked down", "node", "primary")
	if got := lines(); !strings.Contains(got[0], "primary was paused on purpose") {
		t.Errorf("second fault: %v", got)
	}
	topo.markBack("primary")
	topo.mu.Lock()
	f := topo.injected["primary"]
	f.backAt = time.Now().Add(-faultGrace - time.Second)
	topo.injected["primary"] = f
	topo.mu.Unlock()
	topo.FaultLogger(base).Warn("router: node marked down", "node", "primary")
	if got := lines(); !strings.Contains(got[0], "level=WARN") {
		t.Errorf("back beyond the grace: %v", got)
	}
}
