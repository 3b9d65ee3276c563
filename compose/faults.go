package compose

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
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

func (t *Topology) begin(name string) (Node, error) {
	n, err := t.Node(name)
	if err != nil {
		return Node{}, err
	}
	return n, nil
}

// Kill stops a node without a clean shutdown (SIGKILL, docker kill).
// Killing a dead node is a no-op.
func (t *Topology) Kill(ctx context.Context, name string) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	if _, err := t.begin(name); err != nil {
		return err
	}
	return t.be.kill(ctx, name)
}

// Restart starts a node again with its data kept (stopping it cleanly
// first if it runs) and waits until it answers SQL. A replica resumes
// replication by itself (its source is stored in its data directory); if
// a failover happened while it was down (it still replicates from a former
// primary), Restart repoints it to the current primary. A retired former
// primary is fenced (super_read_only) again.
func (t *Topology) Restart(ctx context.Context, name string) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	n, err := t.begin(name)
	if err != nil {
		return err
	}
	if err := t.be.restart(ctx, name); err != nil {
		return err
	}
	switch n.Role {
	case RoleRetired:
		// A former primary that was dead at its failover was never fenced:
		// fence it now, or it would come back writable.
		return t.exec(ctx, n, "SET PERSIST super_read_only=ON")
	case RoleReplica:
		return t.follow(ctx, n)
	}
	return nil
}

// Pause freezes a node's process (SIGSTOP, docker pause): it keeps its
// connections but answers nothing.
func (t *Topology) Pause(ctx context.Context, name string) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	if _, err := t.begin(name); err != nil {
		return err
	}
	return t.be.pause(ctx, name)
}

// Resume thaws a paused node. A replica that a failover could not repoint
// while it was paused (it still replicates from a former primary) is then
// repointed to the current primary.
func (t *Topology) Resume(ctx context.Context, name string) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	n, err := t.begin(name)
	if err != nil {
		return err
	}
	if err := t.be.resume(ctx, name); err != nil {
		return err
	}
	if n.Role == RoleReplica {
		return t.follow(ctx, n)
	}
	return nil
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
	st, err := t.replicaStatus(fctx, n)
	if err != nil {
		return fmt.Errorf("compose: %s is back but its replication source could not be read: %w", n.Name, err)
	}
	if !pending && !t.fromRetired(st) {
		return nil
	}
	t.log.Debug("compose: repointing a returning replica", "node", n.Name, "primary", p.Name, "pending", why,
		"source", fmt.Sprintf("%s:%d", st.SourceHost, st.SourcePort))
	if _, err := t.repoint(fctx, n, p); err != nil {
		return fmt.Errorf("compose: %s is back but could not be repointed to the primary %s (still pending): %w", n.Name, p.Name, err)
	}
	t.mu.Lock()
	delete(t.pending, n.Name)
	t.mu.Unlock()
	return nil
}

// fromRetired reports whether a replica's source is a retired node.
func (t *Topology) fromRetired(st replicaStatus) bool {
	if !st.configured {
		return false
	}
	for _, n := range t.Nodes() {
		if n.Role == RoleRetired && st.SourceHost == n.PeerHost && st.SourcePort == n.PeerPort {
			return true
		}
	}
	return false
}

// repoint points replica r at primary p with auto-position, keeping its
// SOURCE_DELAY, and returns the GTIDs r has executed that p lacks (errant
// transactions: part of a failover's loss), counting a non-empty result in
// Stats().ErrantOnRepoint.
func (t *Topology) repoint(ctx context.Context, r, p Node) (string, error) {
	delay := time.Duration(0)
	if st, err := t.replicaStatus(ctx, r); err == nil {
		delay = time.Duration(st.Delay) * time.Second
	}
	if err := t.pointAt(ctx, r, p, delay); err != nil {
		return "", err
	}
	pExec, err := t.queryString(ctx, p, "SELECT @@gtid_executed")
	if err != nil {
		return "", err
	}
	errant, err := t.queryString(ctx, r, "SELECT GTID_SUBTRACT(@@gtid_executed, ?)", pExec)
	if err != nil {
		return "", err
	}
	errant = strings.ReplaceAll(errant, "\n", "")
	if errant != "" {
		t.mu.Lock()
		t.stats.ErrantOnRepoint++
		t.mu.Unlock()
		t.log.Warn("compose: repointed replica has transactions the primary lacks (lost at failover)", "node", r.Name, "primary", p.Name, "gtids", errant)
	}
	return errant, nil
}

func (t *Topology) replica(name string) (Node, error) {
	n, err := t.begin(name)
	if err != nil {
		return Node{}, err
	}
	if n.Role != RoleReplica {
		return Node{}, fmt.Errorf("compose: %s is %s, not a replica: %w", name, n.Role, ErrWrongRole)
	}
	return n, nil
}

// StopApplier stops a replica's SQL (applier) thread; its IO thread keeps
// receiving, so its relay log grows and its lag stands.
func (t *Topology) StopApplier(ctx context.Context, name string) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	n, err := t.replica(name)
	if err != nil {
		return err
	}
	return t.exec(ctx, n, "STOP REPLICA SQL_THREAD")
}

// StartApplier starts a replica's SQL thread again.
func (t *Topology) StartApplier(ctx context.Context, name string) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	n, err := t.replica(name)
	if err != nil {
		return err
	}
	return t.exec(ctx, n, "START REPLICA SQL_THREAD")
}

// SetApplyDelay sets a replica's SOURCE_DELAY (whole seconds; 0 removes
// it). The applier's running state is kept.
func (t *Topology) SetApplyDelay(ctx context.Context, name string, d time.Duration) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	if d < 0 || d%time.Second != 0 {
		return fmt.Errorf("compose: apply delay %v is not a whole, non-negative number of seconds", d)
	}
	n, err := t.replica(name)
	if err != nil {
		return err
	}
	st, err := t.replicaStatus(ctx, n)
	if err != nil {
		return err
	}
	stmts := []string{"STOP REPLICA SQL_THREAD", fmt.Sprintf("CHANGE REPLICATION SOURCE TO SOURCE_DELAY=%d", int(d/time.Second))}
	if st.SQLRunning == "Yes" {
		stmts = append(stmts, "START REPLICA SQL_THREAD")
	}
	return t.exec(ctx, n, stmts...)
}

// Partition cuts a node off. The docker backend disconnects it from the
// network (PartitionNetwork). The local backend cannot cut loopback, so it
// stops replication IO threads instead (PartitionIOThread): the node's own
// if it is a replica, every replica's if it is the primary. This is weaker
// than a real partition (clients still reach the node) and is counted in
// Stats().WeakPartitions.
func (t *Topology) Partition(ctx context.Context, name string) (PartitionMode, error) {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	n, err := t.begin(name)
	if err != nil {
		return "", err
	}
	err = t.be.partition(ctx, name)
	if err == nil {
		return PartitionNetwork, nil
	}
	if !errors.Is(err, ErrNotSupported) {
		return "", err
	}
	t.mu.Lock()
	t.stats.WeakPartitions++
	t.mu.Unlock()
	t.log.Debug("compose: partition falls back to stopping IO threads", "node", name)
	return PartitionIOThread, t.ioThreads(ctx, n, "STOP REPLICA IO_THREAD")
}

// Heal undoes Partition. A replica that a failover could not repoint while
// it was cut off is then repointed to the current primary.
func (t *Topology) Heal(ctx context.Context, name string) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	n, err := t.begin(name)
	if err != nil {
		return err
	}
	err = t.be.heal(ctx, name)
	if errors.Is(err, ErrNotSupported) {
		err = t.ioThreads(ctx, n, "START REPLICA IO_THREAD")
	}
	if err != nil || n.Role != RoleReplica {
		return err
	}
	return t.follow(ctx, n)
}

func (t *Topology) ioThreads(ctx context.Context, n Node, stmt string) error {
	targets := []Node{n}
	switch n.Role {
	case RolePrimary:
		targets = t.Replicas()
	case RoleRetired:
		return fmt.Errorf("compose: %s is retired: %w", n.Name, ErrWrongRole)
	}
	var errs []error
	for _, r := range targets {
		errs = append(errs, t.exec(ctx, r, stmt))
	}
	return errors.Join(errs...)
}

// HeavyResult describes a HeavyTransaction.
type HeavyResult struct {
	// Rows is the number of rows the statement inserted.
	Rows int64
	// GTIDs is what the primary's gtid_executed gained while the statement
	// ran (the heavy transaction, plus any concurrent writes).
	GTIDs string
	// Elapsed is how long the statement took on the primary.
	Elapsed time.Duration
}

// HeavyTable is the table HeavyTransaction fills.
const HeavyTable = "causallab_fault.heavy"

// HeavyTransaction runs one INSERT ... SELECT of rows rows on the primary:
// one transaction that every replica must replay serially.
func (t *Topology) HeavyTransaction(ctx context.Context, rows int) (HeavyResult, error) {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	if rows < 1 || rows > 50_000_000 {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction of %d rows (want 1..50000000)", rows)
	}
	p := t.Primary()
	if err := t.exec(ctx, p,
		"CREATE DATABASE IF NOT EXISTS causallab_fault",
		"CREATE TABLE IF NOT EXISTS "+HeavyTable+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, pad CHAR(100) NOT NULL)"); err != nil {
		return HeavyResult{}, err
	}
	db, err := t.db(p)
	if err != nil {
		return HeavyResult{}, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return HeavyResult{}, err
	}
	defer conn.Close()
	var before string
	if err := conn.QueryRowContext(ctx, "SELECT @@gtid_executed").Scan(&before); err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction: %w", err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION cte_max_recursion_depth=%d", rows+1)); err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction: %w", err)
	}
	began := time.Now()
	res, err := conn.ExecContext(ctx, fmt.Sprintf(
		"INSERT INTO %s (pad) WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM seq WHERE n < %d) SELECT REPEAT('x', 100) FROM seq", HeavyTable, rows))
	if err != nil {
		return HeavyResult{}, fmt.Errorf("compose: heavy transaction on %s: %w", p.Name, err)
	}
	out := HeavyResult{Elapsed: time.Since(began)}
	out.Rows, _ = res.RowsAffected()
	if err := conn.QueryRowContext(ctx, "SELECT GTID_SUBTRACT(@@gtid_executed, ?)", before).Scan(&out.GTIDs); err != nil {
		return out, fmt.Errorf("compose: heavy transaction GTIDs: %w", err)
	}
	return out, nil
}

// FailoverResult describes a completed failover.
type FailoverResult struct {
	// OldPrimary and NewPrimary are node names.
	OldPrimary, NewPrimary string
	// Epoch is the topology epoch after the failover.
	Epoch int64
	// LostGTIDs is GTID_SUBTRACT(old primary's gtid_executed, new primary's
	// gtid_executed) in MySQL's GTID-set text form; "" when nothing was lost.
	LostGTIDs string
	// OldPrimaryReachable is false when the old primary did not answer; then
	// LostGTIDs is computed against the union of what the surviving
	// replicas had executed or received (a lower bound of the real loss),
	// and Stats().FailoverUnreachableOldPrimary counts it.
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
	// new primary lacks to those GTIDs (they are within LostGTIDs when the
	// old primary answered; Stats().ErrantOnRepoint counts them).
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
	cand, err := t.replica(name)
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

	// Fence the old primary, then read what it executed.
	var oldExec string
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = t.exec(fctx, old, "SET PERSIST super_read_only=ON")
	if err == nil {
		oldExec, err = t.queryString(fctx, old, "SELECT @@gtid_executed")
	}
	cancel()
	res.OldPrimaryReachable = err == nil
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
	if !res.OldPrimaryReachable {
		t.mu.Lock()
		t.stats.FailoverUnreachableOldPrimary++
		t.mu.Unlock()
		t.log.Debug("compose: old primary unreachable; lost GTIDs from replicas' sets", "old", old.Name, "err", err)
		var parts []string
		for _, r := range append([]Node{cand}, others...) {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			st, err := t.replicaStatus(sctx, r)
			cancel()
			if err != nil {
				continue
			}
			for _, s := range []string{st.Executed, st.Retrieved} {
				if s = strings.TrimSpace(s); s != "" {
					parts = append(parts, s)
				}
			}
		}
		oldExec = strings.Join(parts, ",")
	}

	// Promote.
	st, err := t.replicaStatus(ctx, cand)
	if err != nil {
		return FailoverResult{}, err
	}
	if err := t.exec(ctx, cand, "STOP REPLICA IO_THREAD"); err != nil {
		return FailoverResult{}, err
	}
	if st.SQLRunning == "Yes" && st.Delay == 0 {
		st2, err := t.replicaStatus(ctx, cand)
		if err == nil && st2.Retrieved != "" {
			_, err = t.queryString(ctx, cand, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, 10)", st2.Retrieved)
		}
		if err != nil {
			return FailoverResult{}, fmt.Errorf("compose: draining %s: %w", cand.Name, err)
		}
	}
	if err := t.exec(ctx, cand, "STOP REPLICA", "RESET REPLICA ALL", "SET PERSIST super_read_only=OFF", "SET PERSIST read_only=OFF"); err != nil {
		return FailoverResult{}, err
	}
	newExec, err := t.queryString(ctx, cand, "SELECT @@gtid_executed")
	if err != nil {
		return FailoverResult{}, err
	}
	res.LostGTIDs, err = t.queryString(ctx, cand, "SELECT GTID_SUBTRACT(?, ?)", oldExec, newExec)
	if err != nil {
		return FailoverResult{}, err
	}
	res.LostGTIDs = strings.ReplaceAll(res.LostGTIDs, "\n", "")

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

// WaitReplicated waits until every current replica has executed what the
// primary has executed now (WAIT_FOR_EXECUTED_GTID_SET), up to timeout.
func (t *Topology) WaitReplicated(ctx context.Context, timeout time.Duration) error {
	p := t.Primary()
	set, err := t.queryString(ctx, p, "SELECT @@gtid_executed")
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range t.Replicas() {
		v, err := t.queryString(ctx, r, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)", set, timeout.Seconds())
		if err != nil {
			errs = append(errs, err)
		} else if v != "0" {
			errs = append(errs, fmt.Errorf("compose: %s did not reach %s within %v", r.Name, set, timeout))
		}
	}
	return errors.Join(errs...)
}
