package binlogwatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/gtid"
)

// Health is a watcher's state.
type Health int

const (
	// HealthStarting: no snapshot of the replica has been taken yet.
	HealthStarting Health = iota
	// HealthCatchingUp: the executed set was read and the binlog stream is
	// opening; the set is a valid lower bound but may trail by the
	// transactions committed since the read.
	HealthCatchingUp
	// HealthStreaming: events arrive; the set trails the replica only by the
	// stream's delivery delay.
	HealthStreaming
	// HealthReconnecting: the stream broke; the set is frozen (still a valid
	// lower bound) while the watcher reconnects.
	HealthReconnecting
	// HealthDown: reconnecting has failed for longer than Config.DownAfter,
	// or the watcher has stopped.
	HealthDown
)

func (h Health) String() string {
	switch h {
	case HealthStarting:
		return "starting"
	case HealthCatchingUp:
		return "catching-up"
	case HealthStreaming:
		return "streaming"
	case HealthReconnecting:
		return "reconnecting"
	case HealthDown:
		return "down"
	}
	return fmt.Sprintf("health(%d)", int(h))
}

// MarshalText makes Health print as its name in JSON.
func (h Health) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// Snapshot is one published state of a replica. It is immutable: never
// modify it or its Executed set in place (Clone first).
type Snapshot struct {
	// Replica is the watcher's name.
	Replica string `json:"replica"`
	// ServerUUID is the @@server_uuid the set was read from ("" until the
	// first connection).
	ServerUUID string `json:"server_uuid"`
	// Executed is a lower bound of the replica's executed GTID set.
	Executed gtid.Set `json:"executed"`
	// Health is the watcher's state and Reason says why it is not streaming
	// ("" while streaming).
	Health Health `json:"health"`
	Reason string `json:"reason,omitempty"`
	// LastEvent is when the last binlog event or heartbeat arrived.
	LastEvent time.Time `json:"last_event"`
	// Published is when this snapshot was published; Seq counts publishes.
	Published time.Time `json:"published"`
	Seq       uint64    `json:"seq"`
	// Stopped marks the final snapshot of a watcher whose Run has returned.
	Stopped bool `json:"stopped,omitempty"`

	changed chan struct{} // closed when a newer snapshot replaces this one
	stages  stageTimes    // where the time went (the freshness benchmark reads it)
}

// stageTimes are the moments a published set passed the watcher's stages;
// zero when the snapshot did not come from the stream.
type stageTimes struct {
	streamed    time.Time // the stream goroutine had the commit event
	confirmSent time.Time // the confirmation query was sent ("" if none was needed)
	confirmed   time.Time // the confirmation returned
}

// Changed returns a channel closed when a newer snapshot is published.
func (s *Snapshot) Changed() <-chan struct{} { return s.changed }

// Contains reports whether the replica is known to have executed every
// transaction of want.
func (s *Snapshot) Contains(want gtid.Set) bool { return s.Executed.Contains(want) }

// ErrStopped is returned by WaitFor when the watcher stopped before the
// replica was known to contain the awaited set.
var ErrStopped = errors.New("binlogwatch: watcher stopped")

// publisher holds the current snapshot. load and wait take no lock;
// publish is serialized by mu.
type publisher struct {
	mu  sync.Mutex
	cur atomic.Pointer[Snapshot]
}

func newPublisher(first *Snapshot) *publisher {
	p := &publisher{}
	first.changed = make(chan struct{})
	p.cur.Store(first)
	return p
}

// publish replaces the snapshot and wakes every waiter of the old one.
// s is complete before it is stored: readers never see it change.
func (p *publisher) publish(s *Snapshot) {
	s.changed = make(chan struct{})
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	s.Seq = old.Seq + 1
	p.cur.Store(s)
	close(old.changed)
}

func (p *publisher) load() *Snapshot { return p.cur.Load() }

// waitFor blocks until the snapshot contains want, ctx ends or the watcher
// stops.
func (p *publisher) waitFor(ctx context.Context, want gtid.Set) error {
	for {
		s := p.cur.Load()
		if s.Executed.Contains(want) {
			return nil
		}
		if s.Stopped {
			return ErrStopped
		}
		select {
		case <-s.changed:
		case <-ctx.Done():
			return fmt.Errorf("binlogwatch: %s (%s) does not yet contain the awaited set: %w", s.Replica, s.Health, ctx.Err())
		}
	}
}
