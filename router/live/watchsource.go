package live

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/causallab/causallab/binlogwatch"
	"github.com/causallab/causallab/gtid"
)

// Watcher is what the router needs of one binlogwatch stream: the current
// immutable snapshot (an atomic load) and a bounded wait for a set.
// *binlogwatch.Watcher satisfies it.
type Watcher interface {
	// Snapshot returns the current published state; it never blocks.
	Snapshot() *binlogwatch.Snapshot
	// WaitFor blocks until the published set contains want or ctx ends.
	WaitFor(ctx context.Context, want gtid.Set) error
}

var (
	_ Watcher                  = (*binlogwatch.Watcher)(nil)
	_ PositionSource[gtid.Set] = (*WatchSource)(nil)
)

// WatchSourceConfig configures a WatchSource.
type WatchSourceConfig struct {
	// Watchers maps node names (the router's Node.Name) to their binlog
	// watchers: every replica, and the primary if the router should learn
	// its position from a stream too. At least one.
	Watchers map[string]Watcher
	// StaleAfter marks a node unhealthy when its watcher has heard nothing
	// (no event, no heartbeat) for this long while claiming to stream: a
	// hung stream the watcher has not noticed yet. Default 5s; it should
	// exceed the watchers' ReadTimeout, which already ends a silent stream.
	// Negative disables the check.
	StaleAfter time.Duration
	// Now is the clock for StaleAfter (tests). Default time.Now.
	Now func() time.Time
}

func (c *WatchSourceConfig) validate() error {
	if len(c.Watchers) == 0 {
		return errors.New("router: watch source: no watchers")
	}
	for name, w := range c.Watchers {
		if name == "" {
			return errors.New("router: watch source: a watcher has an empty node name")
		}
		if w == nil {
			return fmt.Errorf("router: watch source: nil watcher for node %q", name)
		}
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 5 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// WatchSource is the PositionSource of MySQL GTID sets backed by package
// binlogwatch, the router's recommended source: each node's set is the watcher's published
// snapshot (a lower bound confirmed against @@gtid_executed, never ahead of
// the node), read with an atomic load, and WaitFor is the watcher's own
// notification (a closed channel per publish), with no statement on the
// replica. Poller is the polling baseline.
//
// Health: a node is healthy while its watcher is streaming or catching up
// (connected, set valid) and its last event or heartbeat is recent
// (StaleAfter). Starting, reconnecting, down and stopped watchers make the
// node unhealthy: the router skips it (its set stays a valid lower bound,
// so no decision is unsound either way; this is about availability).
type WatchSource struct {
	cfg WatchSourceConfig
}

// NewWatchSource validates cfg. The watchers must be run by the caller
// (binlogwatch.Watcher.Run or Group.Run).
func NewWatchSource(cfg WatchSourceConfig) (*WatchSource, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Watchers = maps.Clone(cfg.Watchers)
	return &WatchSource{cfg: cfg}, nil
}

// NewGroupSource builds a WatchSource over the named watchers of g (names
// are the watchers' names, which must be the router's node names); with
// no names, every replica watcher of g.
func NewGroupSource(g *binlogwatch.Group, staleAfter time.Duration, names ...string) (*WatchSource, error) {
	if g == nil {
		return nil, errors.New("router: watch source: nil group")
	}
	ws := map[string]Watcher{}
	if len(names) == 0 {
		for _, w := range g.Replicas() {
			ws[w.Name()] = w
		}
	}
	for _, n := range names {
		w := g.Watcher(n)
		if w == nil {
			return nil, fmt.Errorf("router: watch source: the group has no watcher named %q", n)
		}
		ws[n] = w
	}
	return NewWatchSource(WatchSourceConfig{Watchers: ws, StaleAfter: staleAfter})
}

// Nodes returns the names of the watched nodes, sorted.
func (s *WatchSource) Nodes() []string { return slices.Sorted(maps.Keys(s.cfg.Watchers)) }

// Position implements PositionSource: one atomic load, no lock, no I/O.
func (s *WatchSource) Position(node string) (gtid.Set, bool) {
	w, ok := s.cfg.Watchers[node]
	if !ok {
		return gtid.Set{}, false
	}
	snap := w.Snapshot()
	if snap == nil {
		return gtid.Set{}, false
	}
	return snap.Executed, s.healthy(snap)
}

func (s *WatchSource) healthy(snap *binlogwatch.Snapshot) bool {
	if snap.Stopped {
		return false
	}
	switch snap.Health {
	case binlogwatch.HealthStreaming, binlogwatch.HealthCatchingUp:
	default:
		return false
	}
	if s.cfg.StaleAfter > 0 && !snap.LastEvent.IsZero() && s.cfg.Now().Sub(snap.LastEvent) > s.cfg.StaleAfter {
		return false
	}
	return true
}

// WaitFor implements PositionSource with the watcher's notification.
func (s *WatchSource) WaitFor(ctx context.Context, node string, want gtid.Set) error {
	w, ok := s.cfg.Watchers[node]
	if !ok {
		return fmt.Errorf("router: watch source: unknown node %q", node)
	}
	return w.WaitFor(ctx, want)
}
