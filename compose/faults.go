package compose

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// ErrWrongRole is returned (wrapped) when a fault targets a node whose role
// does not allow it (StopApplier on the primary, Failover to the primary).
var ErrWrongRole = errors.New("wrong role for this fault")

// PartitionMode says how Partition cut a node off.
type PartitionMode string

const (
	// PartitionNetwork disconnected the node from the topology's network
	// (docker backend): clients and peers cannot reach it.
	PartitionNetwork PartitionMode = "network"
	// PartitionIOThread is the local backend's weaker stand-in: replication
	// IO threads are stopped (the node's own, or for the primary every
	// replica's), but clients still reach the node.
	PartitionIOThread PartitionMode = "io-thread"
)

// onNode runs the fault f on node name, one fault at a time (faultMu).
func (t *Topology) onNode(name string, f func(n Node) error) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	n, err := t.Node(name)
	if err != nil {
		return err
	}
	return f(n)
}

// onReplica is onNode for a fault only a replica takes (ErrWrongRole).
func (t *Topology) onReplica(name string, f func(n Node) error) error {
	return t.onNode(name, func(n Node) error {
		if err := wantReplica(n); err != nil {
			return err
		}
		return f(n)
	})
}

// wantReplica refuses a node that is not a replica with ErrWrongRole.
func wantReplica(n Node) error {
	if n.Role != RoleReplica {
		return fmt.Errorf("compose: %s is %s, not a replica: %w", n.Name, n.Role, ErrWrongRole)
	}
	return nil
}

// Kill stops a node without a clean shutdown (SIGKILL, docker kill).
// Killing a dead node is a no-op.
func (t *Topology) Kill(ctx context.Context, name string) error {
	return t.onNode(name, func(Node) error {
		undo := t.markOut(name, "killed")
		err := t.be.kill(ctx, name)
		if err != nil {
			undo()
		}
		return err
	})
}

// Restart starts a node again with its data kept (stopping it cleanly
// first if it runs) and waits until it answers SQL. A replica resumes
// replication by itself (its source is stored in its data directory); if
// a failover happened while it was down (it still replicates from a former
// primary), Restart repoints it to the current primary. A retired former
// primary is fenced (super_read_only) again.
func (t *Topology) Restart(ctx context.Context, name string) error {
	return t.onNode(name, func(n Node) error {
		if err := t.be.restart(ctx, name); err != nil {
			return err
		}
		t.markBack(name)
		if err := t.eng.restarted(ctx, t, n); err != nil {
			return err
		}
		switch n.Role {
		case RoleRetired:
			// A former primary that was dead at its failover was never
			// fenced: fence it now, or it would come back writable.
			return t.eng.fence(ctx, t, n)
		case RoleReplica:
			return t.follow(ctx, n)
		}
		return nil
	})
}

// Pause freezes a node's process (SIGSTOP, docker pause): it keeps its
// connections but answers nothing.
func (t *Topology) Pause(ctx context.Context, name string) error {
	return t.onNode(name, func(Node) error {
		undo := t.markOut(name, "paused")
		err := t.be.pause(ctx, name)
		if err != nil {
			undo()
		}
		return err
	})
}

// Resume thaws a paused node. A replica that a failover could not repoint
// while it was paused (it still replicates from a former primary) is then
// repointed to the current primary.
func (t *Topology) Resume(ctx context.Context, name string) error {
	return t.onNode(name, func(n Node) error {
		if err := t.be.resume(ctx, name); err != nil || n.Role != RoleReplica {
			if err == nil {
				t.markBack(name)
			}
			return err
		}
		t.markBack(name)
		return t.follow(ctx, n)
	})
}

// follow makes replica n replicate from the current primary if it is
// marked pending (a failover could not repoint it) or replicates from a
// retired former primary, and clears its mark. A source that is no node's
// peer address is left alone: an external topology knows its servers by
// their client addresses, which need not be how they reach each other.
// Called by Resume, Restart and Heal.
func (t *Topology) follow(ctx context.Context, n Node) error {
	p := t.Primary()
	t.mu.Lock()
	why, pending := t.pending[n.Name]
	t.mu.Unlock()
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// A pooled connection that lived through the fault (a network
	// partition, a pause) can fail its first use once (PostgreSQL's driver
	// reports "unexpected EOF" and discards it): read again, within fctx.
	st, err := t.eng.source(fctx, t, n)
	for err != nil && fctx.Err() == nil {
		select {
		case <-fctx.Done():
		case <-time.After(100 * time.Millisecond):
			st, err = t.eng.source(fctx, t, n)
		}
	}
	if err != nil {
		return fmt.Errorf("compose: %s is back but its replication source could not be read: %w", n.Name, err)
	}
	if !pending && !t.fromRetired(st) {
		return nil
	}
	t.log.Debug("compose: repointing a returning replica", "node", n.Name, "primary", p.Name, "pending", why,
		"source", fmt.Sprintf("%s:%d", st.host, st.port))
	if _, err := t.repoint(fctx, n, p); err != nil {
		return fmt.Errorf("compose: %s is back but could not be repointed to the primary %s (still pending): %w", n.Name, p.Name, err)
	}
	t.mu.Lock()
	delete(t.pending, n.Name)
	t.mu.Unlock()
	return nil
}

// fromRetired reports whether a replica's source is a retired node.
func (t *Topology) fromRetired(st replSource) bool {
	if !st.configured {
		return false
	}
	for _, n := range t.Nodes() {
		if n.Role == RoleRetired && st.host == n.PeerHost && st.port == n.PeerPort {
			return true
		}
	}
	return false
}

// repoint points replica r at primary p (the engine's way, keeping its
// apply delay) and returns what r has that p lacks (errant transactions or
// WAL: part of a failover's loss), counting a non-empty result in
// Stats().ErrantOnRepoint.
func (t *Topology) repoint(ctx context.Context, r, p Node) (string, error) {
	// PostgreSQL restarts a standby to repoint it (pg_rewind first when
	// it is ahead): its clients' errors meanwhile are this step's.
	t.markOut(r.Name, "restarted to follow "+p.Name)
	errant, err := t.eng.repoint(ctx, t, r, p)
	t.markBack(r.Name)
	if err != nil {
		return "", err
	}
	if errant != "" {
		t.mu.Lock()
		t.stats.ErrantOnRepoint++
		t.mu.Unlock()
		// The expected effect of a failover that lost writes: said, not
		// warned (the failover's result and Stats count it).
		t.log.Info(fmt.Sprintf("compose: %s, repointed to %s, had transactions %s lacks: they were lost at the failover", r.Name, p.Name, p.Name), "node", r.Name, "lost", errant)
	}
	return errant, nil
}

// StopApplier stops a replica's applier (MySQL, MariaDB: the SQL thread;
// PostgreSQL: pg_wal_replay_pause()); it keeps receiving, so its relay log
// or received WAL grows and its lag stands.
func (t *Topology) StopApplier(ctx context.Context, name string) error {
	return t.onReplica(name, func(n Node) error { return t.eng.setApplier(ctx, t, n, false) })
}

// StartApplier starts a replica's applier again (PostgreSQL:
// pg_wal_replay_resume()).
func (t *Topology) StartApplier(ctx context.Context, name string) error {
	return t.onReplica(name, func(n Node) error { return t.eng.setApplier(ctx, t, n, true) })
}

// StopReceiver stops a replica's receiving of changes (MySQL, MariaDB: the
// IO thread; PostgreSQL: primary_conninfo cleared and reloaded, waiting
// until no WAL receiver runs): it applies what it has and then falls
// behind, while clients and compose still reach it, on every backend
// (unlike a docker Partition). What it has not received stays with the
// primary: PostgreSQL's pg_promote replays every WAL record a standby
// received, so this is how a failover test keeps a standby behind.
func (t *Topology) StopReceiver(ctx context.Context, name string) error {
	return t.onReplica(name, func(n Node) error { return t.eng.setReceiver(ctx, t, n, false) })
}

// StartReceiver undoes StopReceiver: the replica receives from the current
// primary again.
func (t *Topology) StartReceiver(ctx context.Context, name string) error {
	return t.onReplica(name, func(n Node) error { return t.eng.setReceiver(ctx, t, n, true) })
}

// SetApplyDelay sets a replica's apply delay; 0 removes it. MySQL
// (SOURCE_DELAY) and MariaDB (MASTER_DELAY) take whole seconds,
// PostgreSQL (recovery_min_apply_delay, reloaded without a restart) whole
// milliseconds; other values are rejected. The applier's running state is
// kept.
func (t *Topology) SetApplyDelay(ctx context.Context, name string, d time.Duration) error {
	if err := t.eng.checkApplyDelay(d); err != nil {
		return fmt.Errorf("compose: %w", err)
	}
	return t.onReplica(name, func(n Node) error { return t.eng.setApplyDelay(ctx, t, n, d) })
}

// Partition cuts a node off. The docker backend disconnects it from the
// network (PartitionNetwork). The local backend cannot cut loopback, so it
// stops replication IO threads instead (PartitionIOThread): the node's own
// if it is a replica, every replica's if it is the primary. This is weaker
// than a real partition (clients still reach the node) and is counted in
// Stats().WeakPartitions.
func (t *Topology) Partition(ctx context.Context, name string) (PartitionMode, error) {
	var mode PartitionMode
	err := t.onNode(name, func(n Node) error {
		undo := t.markOut(name, "cut off the network")
		err := t.be.partition(ctx, name)
		if err == nil {
			mode = PartitionNetwork
			return nil
		}
		undo() // clients still reach it (or the fault failed)
		if !errors.Is(err, ErrNotSupported) {
			return err
		}
		t.mu.Lock()
		t.stats.WeakPartitions++
		t.mu.Unlock()
		t.log.Debug("compose: partition falls back to stopping IO threads", "node", name)
		mode = PartitionIOThread
		return t.receivers(ctx, n, false)
	})
	return mode, err
}

// Heal undoes Partition. A replica that a failover could not repoint while
// it was cut off is then repointed to the current primary.
func (t *Topology) Heal(ctx context.Context, name string) error {
	return t.onNode(name, func(n Node) error {
		err := t.be.heal(ctx, name)
		if errors.Is(err, ErrNotSupported) {
			err = t.receivers(ctx, n, true)
		}
		if err == nil {
			t.markBack(name)
		}
		if err != nil || n.Role != RoleReplica {
			return err
		}
		return t.follow(ctx, n)
	})
}

// receivers stops or starts the receiving of changes (IO threads, WAL
// receivers) of n, or of every replica when n is the primary.
func (t *Topology) receivers(ctx context.Context, n Node, run bool) error {
	targets := []Node{n}
	switch n.Role {
	case RolePrimary:
		targets = t.Replicas()
	case RoleRetired:
		return fmt.Errorf("compose: %s is retired: %w", n.Name, ErrWrongRole)
	}
	var errs []error
	for _, r := range targets {
		errs = append(errs, t.eng.setReceiver(ctx, t, r, run))
	}
	return errors.Join(errs...)
}

// HeavyResult describes a HeavyTransaction.
type HeavyResult struct {
	// Rows is the number of rows the statement inserted.
	Rows int64
	// GTIDs is what the primary's position gained while the statement ran
	// (the heavy transaction, plus any concurrent writes): MySQL's GTID
	// set; MariaDB's domain-server-from..to ranges; PostgreSQL's WAL range
	// "<timeline>:<from>..<to>".
	GTIDs string
	// Elapsed is how long the statement took on the primary.
	Elapsed time.Duration
}

// HeavyTable is the table HeavyTransaction fills (PostgreSQL: schema
// causallab_fault of database postgres).
const HeavyTable = "causallab_fault.heavy"

// HeavyTransaction runs one INSERT ... SELECT of rows rows on the primary:
// one transaction that every replica must replay serially.
func (t *Topology) HeavyTransaction(ctx context.Context, rows int) (HeavyResult, error) {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	if rows < 1 || rows > 50_000_000 {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction of %d rows (want 1..50000000)", rows)
	}
	return t.eng.heavy(ctx, t, t.Primary(), rows)
}

// FailoverResult describes a completed failover.
type FailoverResult struct {
	// OldPrimary and NewPrimary are node names.
	OldPrimary, NewPrimary string
	// Epoch is the topology epoch after the failover.
	Epoch uint64
	// LostGTIDs is what the old primary had that the new one lacks; ""
	// when nothing was lost. MySQL: GTID_SUBTRACT(old primary's
	// gtid_executed, new primary's) in MySQL's GTID-set text form.
	// MariaDB: per domain, the sequence numbers the new primary lacks,
	// "domain-server-from..to" joined by ',' (gtid.MariaDBPosition.Ahead).
	// PostgreSQL: empty (see LostWAL).
	LostGTIDs string
	// LostWAL is PostgreSQL's loss: the old timeline's WAL past the new
	// timeline's switch point, "<old timeline>:<switch point>..<old end>"
	// (gtid.PGRange); "" when nothing was lost. LostWALBytes is its length.
	LostWAL      string `json:",omitempty"`
	LostWALBytes uint64 `json:",omitempty"`
	// NewTimeline is the PostgreSQL timeline the promotion started and
	// SwitchPoint the LSN where it forked off the old one.
	NewTimeline uint32 `json:",omitempty"`
	SwitchPoint string `json:",omitempty"`
	// OldPrimaryReachable is false when the old primary did not answer; then
	// LostGTIDs (LostWAL) is computed against the union (the furthest) of
	// what the surviving replicas had executed or received (a lower bound
	// of the real loss), and Stats().FailoverUnreachableOldPrimary counts
	// it.
	OldPrimaryReachable bool
	// Repointed are the replicas now replicating from NewPrimary.
	Repointed []string
	// NotRepointed maps running replicas that could not be repointed to
	// why (the returned error says so too). They are pending, like
	// Deferred ones.
	NotRepointed map[string]string
	// Deferred maps replicas that were paused or down at the failover to
	// their condition ("paused", "down"). Failover does not undo those
	// faults: the replicas are marked pending (Status shows it) and
	// Resume, Restart or Heal repoints them to the then-current primary.
	Deferred map[string]string
	// Errant maps repointed replicas that had executed transactions the
	// new primary lacks to those GTIDs (PostgreSQL: the WAL range past the
	// switch point they held, removed by pg_rewind). They are within the
	// loss when the old primary answered; Stats().ErrantOnRepoint counts
	// them.
	Errant map[string]string
}

// Failover promotes a replica: the old primary, if it answers, is fenced
// (super_read_only) and retired; the new primary drains its relay log
// (only if its applier runs without SOURCE_DELAY, for at most 10 s), stops
// replicating and becomes writable; every other reachable replica is
// repointed to it with auto-position. A replica that is paused or down is
// left as it is (the fault stands) and listed in Deferred: it is marked
// pending, and Resume or Restart repoints it when it comes back. Running
// replicas that cannot be repointed are listed in NotRepointed (and marked
// pending too) and make the returned error non-nil while the failover
// itself stands (the result is valid). A paused or dead candidate is
// refused with ErrNodeDown.
func (t *Topology) Failover(ctx context.Context, name string) (FailoverResult, error) {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	cand, err := t.Node(name)
	if err == nil {
		err = wantReplica(cand)
	}
	if err != nil {
		return FailoverResult{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cond, err := t.be.condition(cctx, cand.Name)
	cancel()
	if err != nil {
		return FailoverResult{}, err
	}
	if cond != condRunning {
		return FailoverResult{}, fmt.Errorf("compose: cannot promote %s: it is %s: %w", cand.Name, cond, ErrNodeDown)
	}
	old := t.Primary()
	res := FailoverResult{OldPrimary: old.Name, NewPrimary: cand.Name, NotRepointed: map[string]string{},
		Deferred: map[string]string{}, Errant: map[string]string{}}

	// The other replicas: running ones are repointed, paused or dead ones
	// deferred (asking a paused server anything would hang).
	others := make([]Node, 0)
	for _, r := range t.Replicas() {
		if r.Name == cand.Name {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cond, err := t.be.condition(cctx, r.Name)
		cancel()
		switch {
		case err != nil:
			res.NotRepointed[r.Name] = err.Error()
		case cond != condRunning:
			res.Deferred[r.Name] = string(cond)
		default:
			others = append(others, r)
		}
	}
	// Fence the old primary, read its position, promote the candidate and
	// compute the loss: the engine's part.
	plan := &failoverPlan{old: old, cand: cand, others: others, res: &res, unreachable: func(err error) {
		t.mu.Lock()
		t.stats.FailoverUnreachableOldPrimary++
		t.mu.Unlock()
		t.log.Debug("compose: old primary unreachable; loss computed from the replicas' positions", "old", old.Name, "err", err)
	}}
	if err := t.eng.promote(ctx, t, plan); err != nil {
		return FailoverResult{}, err
	}

	t.mu.Lock()
	for i := range t.nodes {
		switch t.nodes[i].Name {
		case old.Name:
			t.nodes[i].Role = RoleRetired
		case cand.Name:
			t.nodes[i].Role = RolePrimary
			cand = t.nodes[i]
		}
	}
	t.epoch++
	res.Epoch = t.epoch
	t.mu.Unlock()

	// Repoint the others, in parallel.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range others {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			errant, err := t.repoint(rctx, r, cand)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.NotRepointed[r.Name] = err.Error()
			} else {
				res.Repointed = append(res.Repointed, r.Name)
				if errant != "" {
					res.Errant[r.Name] = errant
				}
			}
		})
	}
	wg.Wait()
	sort.Strings(res.Repointed)
	t.mu.Lock()
	delete(t.pending, cand.Name)
	for _, n := range res.Repointed {
		delete(t.pending, n)
	}
	for n, why := range res.Deferred {
		t.pending[n] = why
	}
	for n, why := range res.NotRepointed {
		t.pending[n] = why
	}
	t.mu.Unlock()
	if len(res.NotRepointed) > 0 {
		var errs []error
		for n, e := range res.NotRepointed {
			errs = append(errs, fmt.Errorf("%s: %s", n, e))
		}
		return res, fmt.Errorf("compose: failover to %s done (epoch %d) but not every replica was repointed: %w", cand.Name, res.Epoch, errors.Join(errs...))
	}
	return res, nil
}

// WaitReplicated waits until every current replica has applied what the
// primary has now (MySQL: WAIT_FOR_EXECUTED_GTID_SET; MariaDB:
// MASTER_GTID_WAIT; PostgreSQL: polling pg_last_wal_replay_lsn()), up to
// timeout.
func (t *Topology) WaitReplicated(ctx context.Context, timeout time.Duration) error {
	return t.eng.waitReplicated(ctx, t, timeout)
}
