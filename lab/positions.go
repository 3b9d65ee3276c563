package lab

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/gtid"
)

// Nodes is what the driver needs to know about a topology: where the
// primary and the replicas are, and the epoch. *compose.Topology has it.
type Nodes interface {
	Primary() compose.Node
	Replicas() []compose.Node
	Epoch() uint64
}

var _ Nodes = (*compose.Topology)(nil)

// snapshot is one immutable view of the topology's replication state, as
// polled. Sets in it are never mutated; readers share it freely.
type snapshot struct {
	// primary is the current primary node; primaryPos its executed set
	// (primaryKnown false when its last poll failed).
	primary      compose.Node
	primaryPos   gtid.Set
	primaryKnown bool
	// replicas in configured order, with their executed sets and health.
	replicas []compose.Node
	applied  []gtid.Set
	up       []bool
}

// nodeSlot is the latest poll of one node.
type nodeSlot struct {
	pos gtid.Set
	ok  bool
}

// poller keeps a live snapshot of every node's executed set (MySQL's
// @@GLOBAL.gtid_executed; MariaDB's position as a set: serverFlavor) by
// polling each node on its own goroutine.
//
// It is the lab's measuring instrument (the achieved lag, the catch-up
// wait before a run); the routers under test read their own positions
// (binlogwatch streams, or router/live's poller for scalar tokens).
type poller struct {
	nodes    Nodes
	f        serverFlavor
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger
	lag      *lagTracker
	// firstPoll bounds start's wait for the primary's first successful
	// poll (retried every interval until then).
	firstPoll time.Duration

	mu    sync.Mutex // guards slots
	slots map[string]nodeSlot

	cur atomic.Pointer[snapshot]

	// polls and pollErrors count polls, for the report.
	polls, pollErrors atomic.Int64
}

func newPoller(nodes Nodes, f serverFlavor, interval, timeout time.Duration, lag *lagTracker, log *slog.Logger) *poller {
	return &poller{nodes: nodes, f: f, interval: interval, timeout: timeout, lag: lag, log: log,
		firstPoll: 30 * time.Second, slots: map[string]nodeSlot{}}
}

// allNodes lists every node the poller should watch, by stable name.
func allNodes(n Nodes) []compose.Node {
	return append([]compose.Node{n.Primary()}, n.Replicas()...)
}

// run polls until ctx ends. It first waits for one round so View is never
// empty, then returns; polling continues on background goroutines that end
// with ctx. wg tracks them.
func (p *poller) start(ctx context.Context, wg *sync.WaitGroup) error {
	nodes := allNodes(p.nodes)
	first := make(chan struct{}, len(nodes))
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.pollNode(ctx, n, first)
		}()
	}
	// Every node's first poll ends (the primary's first successful one:
	// on a loaded machine its first attempt may time out), within
	// firstPoll.
	bound := time.NewTimer(p.firstPoll)
	defer bound.Stop()
	for range nodes {
		select {
		case <-first:
		case <-bound.C:
			return fmt.Errorf("lab: the primary did not answer a position poll within %v", p.firstPoll)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s := p.cur.Load(); s == nil || !s.primaryKnown {
		return fmt.Errorf("lab: the primary did not answer its first position poll")
	}
	return nil
}

func (p *poller) pollNode(ctx context.Context, n compose.Node, first chan<- struct{}) {
	var conn valueConn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	signalled := false
	var prev gtid.Set
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		pos, ok := p.pollOnce(ctx, n, &conn)
		if ctx.Err() != nil {
			return
		}
		if ok && p.lag != nil {
			p.lag.observe(n.Name, prev, pos, time.Now())
			prev = pos
		}
		p.update(n.Name, pos, ok)
		// A replica's first poll counts whatever it found (a replica may
		// be down); the primary's only once it answered.
		if !signalled && (ok || n.Name != p.nodes.Primary().Name) {
			first <- struct{}{}
			signalled = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *poller) pollOnce(ctx context.Context, n compose.Node, conn *valueConn) (gtid.Set, bool) {
	p.polls.Add(1)
	pctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if *conn == nil {
		c, err := p.f.dialValue(pctx, n)
		if err != nil {
			p.pollErrors.Add(1)
			return gtid.Set{}, false
		}
		*conn = c
	}
	text, err := (*conn).readValue(pctx, p.f.executedQuery())
	if err != nil {
		p.pollErrors.Add(1)
		if p.f.postgres() {
			// A pgx connection is not re-dialled by itself: a fresh one
			// next time (MySQL's nodeConn redials when broken).
			(*conn).Close()
			*conn = nil
		}
		return gtid.Set{}, false
	}
	s, err := p.f.parseExecuted(text)
	if err != nil {
		p.pollErrors.Add(1)
		p.log.Debug("lab: bad executed position", "node", n.Name, "err", err)
		return gtid.Set{}, false
	}
	return s, true
}

// update stores a node's poll and publishes a new snapshot.
func (p *poller) update(name string, pos gtid.Set, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slots[name] = nodeSlot{pos: pos, ok: ok}
	p.publishLocked()
}

// publishLocked builds and stores a snapshot; p.mu must be held.
func (p *poller) publishLocked() {
	primary := p.nodes.Primary()
	replicas := p.nodes.Replicas()
	s := &snapshot{primary: primary, replicas: replicas}
	ps := p.slots[primary.Name]
	s.primaryPos, s.primaryKnown = ps.pos, ps.ok
	s.applied = make([]gtid.Set, len(replicas))
	s.up = make([]bool, len(replicas))
	for i, r := range replicas {
		sl, seen := p.slots[r.Name]
		if !seen {
			continue // not polled yet: down until proven up
		}
		s.applied[i], s.up[i] = sl.pos, sl.ok
	}
	p.cur.Store(s)
}

// view returns the latest snapshot (non-nil after start).
func (p *poller) view() *snapshot { return p.cur.Load() }

// lagTracker measures replication lag from the lab's own writes: the time
// from a write's acknowledgement to the first poll of a replica that holds
// it. Its resolution is the poll interval.
type lagTracker struct {
	mu      sync.Mutex
	acked   map[gtid.GTID]time.Time            // write -> acknowledged at
	seen    map[string]map[gtid.GTID]time.Time // replica -> write -> first seen
	primary func() string
	max     int
}

func newLagTracker(primary func() string) *lagTracker {
	return &lagTracker{acked: map[gtid.GTID]time.Time{}, seen: map[string]map[gtid.GTID]time.Time{}, primary: primary, max: 2_000_000}
}

// ack records a write's acknowledgement.
func (l *lagTracker) ack(g gtid.GTID, at time.Time) {
	l.mu.Lock()
	if len(l.acked) < l.max {
		l.acked[g] = at
	}
	l.mu.Unlock()
}

// observe records the transactions node gained between two polls.
func (l *lagTracker) observe(node string, prev, cur gtid.Set, at time.Time) {
	if node == l.primary() {
		return
	}
	gained := cur.Subtract(prev)
	if gained.IsEmpty() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.seen[node]
	if m == nil {
		m = map[gtid.GTID]time.Time{}
		l.seen[node] = m
	}
	for k, ivs := range gained.Sources() {
		for _, iv := range ivs {
			if iv.End-iv.Start > 100_000 { // the initial catch-up of a big set: not our writes
				continue
			}
			for g := iv.Start; g <= iv.End; g++ {
				key := gtid.GTID{SID: k.SID, Tag: k.Tag, GNO: g}
				if _, ok := m[key]; !ok && len(m) < l.max {
					m[key] = at
				}
			}
		}
	}
}

// samples returns every (write, replica) lag measured, and how many
// acknowledged writes some replica was never seen to apply.
func (l *lagTracker) samples() (lags []time.Duration, unseen int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for g, at := range l.acked {
		for _, m := range l.seen {
			if s, ok := m[g]; ok {
				lags = append(lags, max(0, s.Sub(at)))
			} else {
				unseen++
			}
		}
	}
	return lags, unseen
}

// spreads returns, per acknowledged write seen applied on every one of
// replicas, the time from the first to the last replica's first poll
// holding it.
func (l *lagTracker) spreads(replicas []string) []time.Duration {
	if len(replicas) < 2 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for g := range l.acked {
		var first, last time.Time
		all := true
		for i, r := range replicas {
			s, ok := l.seen[r][g]
			if !ok {
				all = false
				break
			}
			if i == 0 || s.Before(first) {
				first = s
			}
			if s.After(last) {
				last = s
			}
		}
		if all {
			out = append(out, last.Sub(first))
		}
	}
	return out
}

// spreadStats summarises spreads (the lag's statistics, lagStats).
func spreadStats(d []time.Duration) SpreadStats {
	l := lagStats(d, 0)
	return SpreadStats{Writes: len(d), MeanMs: l.MeanMs, P50Ms: l.P50Ms, P99Ms: l.P99Ms}
}

// heavyHolds returns, per heavy transaction committed at one of ends and
// per replica (in replicas' order), how long after the commit the
// replica applied the first write acknowledged after it: the time the
// heavy transaction held that replica, normal lag included. A heavy
// transaction with no later write seen on every replica is left out.
func (l *lagTracker) heavyHolds(ends []time.Time, replicas []string) [][]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][]time.Duration
	for _, end := range ends {
		var next gtid.GTID
		var at time.Time
		for g, a := range l.acked {
			if a.After(end) && (at.IsZero() || a.Before(at)) {
				next, at = g, a
			}
		}
		if at.IsZero() {
			continue
		}
		holds := make([]time.Duration, 0, len(replicas))
		for _, r := range replicas {
			s, ok := l.seen[r][next]
			if !ok {
				break
			}
			holds = append(holds, s.Sub(end))
		}
		if len(holds) == len(replicas) {
			out = append(out, holds)
		}
	}
	return out
}
