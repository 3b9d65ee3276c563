package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/router/live"
)

// TestTopologyHolds: a router target is the topology's only when its node
// has that role there: a decision made in a promotion's new epoch is not
// run on a session's connection of the old one (session.conn).
func TestTopologyHolds(t *testing.T) {
	p, r1, r2 := &Backend{Name: "primary"}, &Backend{Name: "replica1"}, &Backend{Name: "replica2"}
	old := &topology{epoch: 1, primary: p, replicas: []*Backend{r1, r2}}
	next := &topology{epoch: 2, primary: r1, replicas: []*Backend{r2}}
	for _, c := range []struct {
		topo *topology
		t    live.Target
		want bool
	}{
		{old, live.Target{Node: live.Node{Name: "primary"}, Replica: -1}, true},
		{old, live.Target{Node: live.Node{Name: "replica2"}, Replica: 1}, true},
		{old, live.Target{Node: live.Node{Name: "replica1"}, Replica: -1}, false}, // the new primary
		{old, live.Target{Node: live.Node{Name: "replica2"}, Replica: 0}, false},  // the new order
		{next, live.Target{Node: live.Node{Name: "replica1"}, Replica: -1}, true},
		{next, live.Target{Node: live.Node{Name: "primary"}, Replica: -1}, false},
		{next, live.Target{Node: live.Node{Name: "replica2"}, Replica: 1}, false},
	} {
		if got := c.topo.holds(c.t); got != c.want {
			t.Errorf("epoch %d holds %s as %d: %v, want %v", c.topo.epoch, c.t.Node.Name, c.t.Replica, got, c.want)
		}
	}
	if i := next.replicaIndex("replica2"); i != 0 {
		t.Errorf("replicaIndex(replica2) in epoch 2: %d", i)
	}
}

// TestDiscoverRound: discovery follows nothing while the primary is
// writable, nor when no replica or two replicas are writable without a
// source (ambiguous: counted, never followed); a replica that still
// replicates, or does not answer, is no candidate.
func TestDiscoverRound(t *testing.T) {
	p, r1, r2 := &Backend{Name: "primary"}, &Backend{Name: "replica1"}, &Backend{Name: "replica2"}
	s := &Server{m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.topo.Store(&topology{epoch: 1, primary: p, replicas: []*Backend{r1, r2}})
	type role struct {
		ro, repl bool
		err      error
	}
	down := errors.New("no answer")
	for _, c := range []struct {
		name  string
		roles map[string]role
		want  []string
	}{
		{"primary writable", map[string]role{"primary": {}, "replica1": {}, "replica2": {}}, nil},
		{"primary fenced, replicas read-only", map[string]role{"primary": {ro: true}, "replica1": {ro: true, repl: true}, "replica2": {ro: true, repl: true}}, nil},
		{"primary down, writable replica still replicating", map[string]role{"primary": {err: down}, "replica1": {repl: true}, "replica2": {err: down}}, nil},
		{"ambiguous", map[string]role{"primary": {ro: true}, "replica1": {}, "replica2": {}}, []string{"replica1", "replica2"}},
	} {
		var warned uint64
		got := s.discoverRound(context.Background(), func(b *Backend) (bool, bool, error) {
			r := c.roles[b.Name]
			return r.ro, r.repl, r.err
		}, &warned)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: candidates %v, want %v", c.name, got, c.want)
		}
	}
	if n := testutil.ToFloat64(s.m.discoveries.WithLabelValues("ambiguous")); n != 1 {
		t.Errorf("ambiguous rounds counted %v, want 1", n)
	}
	if e := s.topo.Load().epoch; e != 1 {
		t.Errorf("epoch %d after rounds that follow nothing", e)
	}
}
