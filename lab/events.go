package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/compose"
)

// Disrupter is what scripted events need beyond Faults: every fault
// compose can inject (process and network faults, failover).
// *compose.Topology has it.
type Disrupter interface {
	Faults
	compose.Injector
}

var _ Disrupter = (*compose.Topology)(nil)

// EventKind names a scripted event: a fault a run inflicts and undoes after
// the event's For (the kinds are compose's, spelled as compose.FaultKind
// spells them), or the lab's own drift, which is load, not a fault.
type EventKind string

const (
	// EvKill kills a replica and restarts it after For.
	EvKill = EventKind(compose.FaultKill)
	// EvPause freezes a replica's process for For.
	EvPause = EventKind(compose.FaultPause)
	// EvPartition cuts a replica off its source for For.
	EvPartition = EventKind(compose.FaultPartition)
	// EvHeavy commits one heavy transaction (HeavyEventRows rows) on the
	// primary.
	EvHeavy = EventKind(compose.FaultHeavy)
	// EvApplyDelay sets a 1 s SOURCE_DELAY on a replica for For.
	EvApplyDelay = EventKind(compose.FaultApplyDelay)
	// EvStopApplier stops a replica's applier for For.
	EvStopApplier = EventKind(compose.FaultStopApplier)
	// EvFailover kills the primary and promotes Node (a replica).
	EvFailover = EventKind(compose.FaultFailover)
	// EvDrift adds Load outside reads in flight on Node, as the load
	// balancer sees them, for For (rebalance-override's trigger).
	EvDrift EventKind = "drift"
	// EvHoldBack holds the replicas back for For, so that a failover
	// within it loses writes: on MySQL and MariaDB every replica's applier
	// stops (compose's failover does not drain a stopped applier; a
	// repointed replica starts its own again); on PostgreSQL replica1's
	// WAL receiver stops (pg_promote replays every record a standby
	// received, so only what it never received is lost). Undone on the
	// nodes still replicas. The lab's own, as drift: no one fault.
	EvHoldBack EventKind = "hold-back"
)

// HeavyEventRows is the size of an EvHeavy event's transaction.
const HeavyEventRows = 100_000

// EventKinds lists every kind an Event may have.
func EventKinds() []EventKind {
	return []EventKind{EvKill, EvPause, EvPartition, EvHeavy, EvApplyDelay, EvStopApplier, EvFailover, EvDrift, EvHoldBack}
}

// Valid reports whether k is one of EventKinds.
func (k EventKind) Valid() bool { return slices.Contains(EventKinds(), k) }

// needsNode reports whether an event of kind k targets a node.
func (k EventKind) needsNode() bool { return k != EvHeavy && k != EvHoldBack }

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
	// start is the run's start (runEvents sets it); down records when
	// nodes were killed or paused.
	start time.Time
	down  downLog
	// killedAt is when the first failover killed the primary, since
	// start (0: no failover yet).
	killedAt atomic.Int64
}

// killed is when the first failover's kill began, ok false before one.
func (l *eventLog) killed() (time.Duration, bool) {
	if l == nil {
		return 0, false
	}
	at := l.killedAt.Load()
	return time.Duration(at), at > 0
}

func (l *eventLog) add(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// runEvents plays events (sorted by At) against d until ctx ends; each
// event runs on its own goroutine so a long one does not delay the next,
// except on the same node: an event waits until the node's previous event
// is over (a kill restarted, a pause resumed), so faults on one node never
// overlap (a flapping replica is down, then up, then down). The fault
// windows in the result say when each actually happened. drift receives
// EvDrift's load changes (replica name, delta).
func runEvents(ctx context.Context, d Disrupter, events []Event, start time.Time, log *eventLog, drift func(string, int), onFailover func(context.Context, compose.FailoverResult) error, lg *slog.Logger) {
	log.start = start
	evs := append([]Event(nil), events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
	var wg sync.WaitGroup
	defer wg.Wait()
	prev := map[string]chan struct{}{} // per node: closed when its last event is over
	for _, ev := range evs {
		if !sleepCtx(ctx, time.Until(start.Add(ev.At))) {
			return
		}
		before, over := prev[ev.Node], make(chan struct{})
		if ev.Node != "" {
			prev[ev.Node] = over
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(over)
			if before != nil {
				select {
				case <-before:
				case <-ctx.Done():
					return
				}
			}
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
	switch ev.Kind {
	case EvDrift:
		log.down.begin(EvDrift, ev.Node, ev.Load, time.Since(log.start))
		drift(ev.Node, ev.Load)
		log.add("%s: +%d in flight", ev, ev.Load)
		sleepCtx(ctx, ev.For)
		drift(ev.Node, -ev.Load)
		log.down.end(EvDrift, ev.Node, time.Since(log.start))
		return nil
	case EvFailover:
		return playFailover(ctx, undo, d, ev, log, onFailover)
	case EvHoldBack:
		return playHoldBack(ctx, undo, d, ev, log)
	}
	if !ev.Kind.Valid() {
		return fmt.Errorf("lab: unknown event kind %q", ev.Kind)
	}
	f := compose.Fault{Kind: compose.FaultKind(ev.Kind), Node: ev.Node}
	switch ev.Kind {
	case EvHeavy:
		f.Node, f.Rows = "", HeavyEventRows
	case EvApplyDelay:
		f.Delay = time.Second
	}
	downs := ev.Kind == EvKill || ev.Kind == EvPause
	if downs {
		log.down.begin(ev.Kind, ev.Node, 0, time.Since(log.start))
	}
	res, err := compose.Inject(ctx, d, f)
	if err != nil {
		if downs {
			log.down.end(ev.Kind, ev.Node, time.Since(log.start))
		}
		return err
	}
	switch ev.Kind {
	case EvKill:
		log.add("%s: killed", ev)
	case EvPause:
		log.add("%s: paused", ev)
	case EvPartition:
		log.add("%s: partitioned (%s)", ev, res.Partition)
	case EvHeavy:
		log.add("%s: %d rows in %.0f ms", ev, res.Heavy.Rows, ms(res.Heavy.Elapsed))
	case EvApplyDelay:
		log.add("%s: SOURCE_DELAY=1", ev)
	case EvStopApplier:
		log.add("%s: applier stopped", ev)
	}
	u, ok := f.Undo()
	if !ok {
		return nil
	}
	sleepCtx(ctx, ev.For)
	uctx, cancel := context.WithTimeout(undo, 90*time.Second) // a restart waits for the server
	defer cancel()
	_, err = compose.Inject(uctx, d, u)
	if downs {
		log.down.end(ev.Kind, ev.Node, time.Since(log.start))
	}
	return err
}

// playHoldBack holds the replicas back (EvHoldBack) and, after For,
// releases those still replicas.
func playHoldBack(ctx, undo context.Context, d Disrupter, ev Event, log *eventLog) error {
	held, err := holdBack(ctx, d)
	log.add("%s: %s", ev, held)
	if err != nil {
		return err
	}
	sleepCtx(ctx, ev.For)
	uctx, cancel := context.WithTimeout(undo, 90*time.Second)
	defer cancel()
	return release(uctx, d)
}

// engineOf is d's engine (MySQL when it does not say).
func engineOf(d Nodes) compose.Engine {
	if et, ok := d.(interface{ Engine() compose.Engine }); ok {
		return et.Engine()
	}
	return compose.EngineMySQL
}

// holdBack keeps the replicas from applying what the primary writes next
// (EvHoldBack) and says what it held.
func holdBack(ctx context.Context, d Disrupter) (string, error) {
	if engineOf(d) == compose.EnginePostgres {
		_, err := compose.Inject(ctx, d, compose.Fault{Kind: compose.FaultStopReceiver, Node: "replica1"})
		return "replica1's WAL receiver stopped", err
	}
	var names []string
	for _, r := range d.Replicas() {
		if _, err := compose.Inject(ctx, d, compose.Fault{Kind: compose.FaultStopApplier, Node: r.Name}); err != nil {
			return "appliers stopped: " + strings.Join(names, ", "), err
		}
		names = append(names, r.Name)
	}
	return "appliers stopped: " + strings.Join(names, ", "), nil
}

// release undoes holdBack on the nodes still replicas (a promoted one
// receives from no one; a failover repointed the others).
func release(ctx context.Context, d Disrupter) error {
	pg := engineOf(d) == compose.EnginePostgres
	var errs []error
	for _, r := range d.Replicas() {
		switch {
		case !pg:
			_, err := compose.Inject(ctx, d, compose.Fault{Kind: compose.FaultStartApplier, Node: r.Name})
			errs = append(errs, err)
		case r.Name == "replica1":
			_, err := compose.Inject(ctx, d, compose.Fault{Kind: compose.FaultStartReceiver, Node: r.Name})
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// playFailover kills the primary and promotes ev.Node, then tells the
// routers (onFailover).
func playFailover(ctx, undo context.Context, d Disrupter, ev Event, log *eventLog, onFailover func(context.Context, compose.FailoverResult) error) error {
	old := d.Primary().Name
	log.killedAt.CompareAndSwap(0, int64(max(time.Since(log.start), 1)))
	if _, err := compose.Inject(ctx, d, compose.Fault{Kind: compose.FaultKill, Node: old}); err != nil {
		return err
	}
	res, err := compose.Inject(ctx, d, compose.Fault{Kind: compose.FaultFailover, Node: ev.Node})
	fr := res.Failover
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
}

// ChaosEvents draws a seeded random fault schedule over dur: one fault
// every ~every, on random replicas, of every kind but failover, plus one
// failover (kill the primary, promote replica1) at the middle. Faults never
// overlap on one node.
func ChaosEvents(seed uint64, dur, every time.Duration, replicas []string) []Event {
	r := newRNG(seed ^ 0xc4a05)
	kinds := []EventKind{EvKill, EvPause, EvPartition, EvHeavy, EvApplyDelay, EvStopApplier}
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
