package binlogwatch

import (
	"context"
	"fmt"
	"sync"

	"github.com/causallab/causallab/gtid"
)

// Group runs the watchers of a topology's replicas (and optionally of its
// primary, as the reference for "transactions behind").
type Group struct {
	primary  *Watcher
	replicas []*Watcher
	byName   map[string]*Watcher
}

// NewGroup groups replica watchers; primary may be nil. Names must be unique.
func NewGroup(primary *Watcher, replicas ...*Watcher) (*Group, error) {
	g := &Group{primary: primary, replicas: replicas, byName: map[string]*Watcher{}}
	all := replicas
	if primary != nil {
		all = append([]*Watcher{primary}, replicas...)
	}
	for _, w := range all {
		if _, dup := g.byName[w.Name()]; dup {
			return nil, fmt.Errorf("binlogwatch: two watchers named %q", w.Name())
		}
		g.byName[w.Name()] = w
	}
	return g, nil
}

// Run runs every watcher until ctx ends.
func (g *Group) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	all := g.replicas
	if g.primary != nil {
		all = append([]*Watcher{g.primary}, all...)
	}
	for _, w := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(ctx) // Run returns nil once ctx ends; state is in its snapshots
		}()
	}
	wg.Wait()
	return nil
}

// Watcher returns the watcher named name, or nil.
func (g *Group) Watcher(name string) *Watcher { return g.byName[name] }

// Replicas returns the replica watchers in order.
func (g *Group) Replicas() []*Watcher { return g.replicas }

// Snapshot returns the current snapshot of the replica named name, or nil.
func (g *Group) Snapshot(name string) *Snapshot {
	if w := g.byName[name]; w != nil {
		return w.Snapshot()
	}
	return nil
}

// WaitFor waits until the named replica contains want.
func (g *Group) WaitFor(ctx context.Context, name string, want gtid.Set) error {
	w := g.byName[name]
	if w == nil {
		return fmt.Errorf("binlogwatch: no watcher named %q", name)
	}
	return w.WaitFor(ctx, want)
}

// ReplicaStatus is one replica's snapshot with its distance to the primary.
type ReplicaStatus struct {
	*Snapshot
	// Behind counts the transactions of the primary's published set that
	// this replica's published set lacks; -1 when the group has no primary
	// watcher.
	Behind int64 `json:"behind"`
}

// Status returns every replica's snapshot and how far behind the primary
// it is, computed on the read from both published sets.
func (g *Group) Status() []ReplicaStatus {
	var ref gtid.Set
	if g.primary != nil {
		ref = g.primary.Snapshot().Executed
	}
	out := make([]ReplicaStatus, len(g.replicas))
	for i, w := range g.replicas {
		s := w.Snapshot()
		behind := int64(-1)
		if g.primary != nil {
			behind = int64(min(ref.Subtract(s.Executed).Count(), uint64(1<<62)))
		}
		out[i] = ReplicaStatus{Snapshot: s, Behind: behind}
	}
	return out
}
