package proxy

import (
	"testing"

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
