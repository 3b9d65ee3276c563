package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/causallab/causallab/compose"
)

// Disrupter is what scripted events need beyond Faults: process and
// network faults and failover. *compose.Topology has it.
type Disrupter interface {
	Faults
	Kill(ctx context.Context, name string) error
	Restart(ctx context.Context, name string) error
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	Partition(ctx context.Context, name string) (compose.PartitionMode, error)
	Heal(ctx context.Context, name string) error
	Failover(ctx context.Context, name string) (compose.FailoverResult, error)
}

var _ Disrupter = (*compose.Topology)(nil)

// EventKind names a scripted fault.
type EventKind string

const (
	// EvKill kills a replica and restarts it after For.
	EvKill EventKind = "kill"
	// EvPause freezes a replica's process for For.
	EvPause EventKind = "pause"
	// EvPartition cuts a replica off its source for For.
	EvPartition EventKind = "partition"
	// EvHeavy commits one heavy transaction on the primary.
	EvHeavy EventKind = "heavy"
	// EvApplyDelay sets a 1 s SOURCE_DELAY on a replica for For.
	EvApplyDelay EventKind = "apply-delay"
	// EvStall stops a replica's applier for For.
	EvStall EventKind = "stall"
	// EvFailover kills the primary and promotes Node (a replica).
	EvFailover EventKind = "failover"
	// EvDrift adds Load outside reads in flight on Node, as the load
	// balancer sees them, for For (rebalance-override's trigger).
	EvDrift EventKind = "drift"
)

// Event is one scripted fault.
type Event struct {
	// At is when it starts, since the measurement began.
	At time.Duration
	// Kind is the fault.
	Kind EventKind
	// Node is the node's stable name ("replica2"); for kill, pause,
	// partition, apply-delay, stall, failover and drift.
	Node string
	// For is how long the fault lasts (not for heavy and failover).
	For time.Duration
	// Load is EvDrift's outside in-flight reads.
	Load int
}

func (e Event) String() string {
	s := fmt.Sprintf("%.1fs %s", e.At.Seconds(), e.Kind)
	if e.Node != "" {
		s += " " + e.Node
	}
	if e.For > 0 {
		s += fmt.Sprintf(" for %.1fs", e.For.Seconds())
	}
	return s
}

// eventLog records what the script did, for the result's notes.
type eventLog struct {
	mu    sync.Mutex
	lines []string
	errs  int
	// failovers holds the failovers' results.
	failovers []compose.FailoverResult
}

func (l *eventLog) add(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// runEvents plays events (sorted by At) against d until ctx ends; each
// event runs on its own goroutine so a long one does not delay the next.
// drift receives EvDrift's load changes (replica name, delta).
func runEvents(ctx context.Context, d Disrupter, events []Event, start time.Time, log *eventLog, drift func(string, int), onFailover func(context.Context, compose.FailoverResult) error, lg *slog.Logger) {
	evs := append([]Event(nil), events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, ev := range evs {
		if !sleepCtx(ctx, time.Until(start.Add(ev.At))) {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := playEvent(ctx, d, ev, log, drift, onFailover); err != nil {
				log.mu.Lock()
				log.errs++
				log.mu.Unlock()
				log.add("%s: %v", ev, err)
				lg.Debug("lab: event failed", "event", ev.String(), "err", err)
			}
		}()
	}
}

// playEvent carries one event out, undoing it after For (with a context
// that outlives the run's, so the topology is left healthy).
func playEvent(ctx context.Context, d Disrupter, ev Event, log *eventLog, drift func(string, int), onFailover func(context.Context, compose.FailoverResult) error) error {
	undo := context.WithoutCancel(ctx)
	hold := func() { sleepCtx(ctx, ev.For) }
	switch ev.Kind {
	case EvKill:
		if err := d.Kill(ctx, ev.Node); err != nil {
			return err
		}
		log.add("%s: killed", ev)
		hold()
		rctx, cancel := context.WithTimeout(undo, 90*time.Second)
		defer cancel()
		return d.Restart(rctx, ev.Node)
	case EvPause:
		if err := d.Pause(ctx, ev.Node); err != nil {
			return err
		}
		log.add("%s: paused", ev)
		hold()
		return d.Resume(undo, ev.Node)
	case EvPartition:
		mode, err := d.Partition(ctx, ev.Node)
		if err != nil {
			return err
		}
		log.add("%s: partitioned (%s)", ev, mode)
		hold()
		return d.Heal(undo, ev.Node)
	case EvHeavy:
		hr, err := d.HeavyTransaction(ctx, 100_000)
		if err != nil {
			return err
		}
		log.add("%s: %d rows in %.0f ms", ev, hr.Rows, ms(hr.Elapsed))
		return nil
	case EvApplyDelay:
		if err := d.SetApplyDelay(ctx, ev.Node, time.Second); err != nil {
			return err
		}
		log.add("%s: SOURCE_DELAY=1", ev)
		hold()
		return d.SetApplyDelay(undo, ev.Node, 0)
	case EvStall:
		if err := d.StopApplier(ctx, ev.Node); err != nil {
			return err
		}
		hold()
		return d.StartApplier(undo, ev.Node)
	case EvFailover:
		old := d.Primary().Name
		if err := d.Kill(ctx, old); err != nil {
			return err
		}
		fr, err := d.Failover(ctx, ev.Node)
		log.mu.Lock()
		log.failovers = append(log.failovers, fr)
		log.mu.Unlock()
		lost := fr.LostGTIDs
		if lost == "" {
			lost = "none"
		}
		log.add("%s: %s killed, %s promoted, epoch %d, lost GTIDs %s (old primary reachable: %v)",
			ev, old, fr.NewPrimary, fr.Epoch, strings.ReplaceAll(lost, "\n", ""), fr.OldPrimaryReachable)
		if fr.NewPrimary != "" && onFailover != nil {
			if herr := onFailover(undo, fr); herr != nil {
				err = errors.Join(err, herr)
			}
		}
		return err
	case EvDrift:
		drift(ev.Node, ev.Load)
		log.add("%s: +%d in flight", ev, ev.Load)
		hold()
		drift(ev.Node, -ev.Load)
		return nil
	}
	return fmt.Errorf("lab: unknown event kind %q", ev.Kind)
}

// ChaosEvents draws a seeded random fault schedule over dur: one fault
// every ~every, on random replicas, of every kind but failover, plus one
// failover (kill the primary, promote replica1) at the middle. Faults never
// overlap on one node.
func ChaosEvents(seed uint64, dur, every time.Duration, replicas []string) []Event {
	r := newRNG(seed ^ 0xc4a05)
	kinds := []EventKind{EvKill, EvPause, EvPartition, EvHeavy, EvApplyDelay, EvStall}
	var out []Event
	busy := map[string]time.Duration{}
	mid := dur / 2
	out = append(out, Event{At: mid, Kind: EvFailover, Node: replicas[0]})
	for t := every / 2; t < dur-every/2; t += time.Duration(float64(every) * (0.5 + r.float())) {
		k := kinds[r.next()%uint64(len(kinds))]
		node := replicas[1+int(r.next()%uint64(max(1, len(replicas)-1)))%len(replicas)]
		hold := time.Duration(500+r.next()%2500) * time.Millisecond
		if k == EvHeavy {
			out = append(out, Event{At: t, Kind: k})
			continue
		}
		// keep faults off the failover's candidate around the failover and
		// off a node that is still disrupted
		if node == replicas[0] && t+hold > mid-2*time.Second && t < mid+2*time.Second {
			continue
		}
		if busy[node] > t {
			continue
		}
		if k == EvKill {
			hold += 3 * time.Second // restart takes a while
		}
		busy[node] = t + hold + 500*time.Millisecond
		out = append(out, Event{At: t, Kind: k, Node: node, For: hold})
	}
	return out
}
