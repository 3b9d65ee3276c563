package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/compose"
)

// Faults is what conditions need from a topology. *compose.Topology has it.
type Faults interface {
	Nodes
	StopApplier(ctx context.Context, name string) error
	StartApplier(ctx context.Context, name string) error
	SetApplyDelay(ctx context.Context, name string, d time.Duration) error
	HeavyTransaction(ctx context.Context, rows int) (compose.HeavyResult, error)
}

var _ Faults = (*compose.Topology)(nil)

// Condition names, as the simulator's worlds.
const (
	CondIdentical  = "identical"
	CondStraggler  = "straggler"
	CondHeavy      = "heavy"
	CondApplyDelay = "apply-delay"
	CondStaggered  = "staggered"
	// CondRowLock: the first replica's applier is held now and then by a
	// row lock on hot row 0 (a locking read in an open transaction on
	// the replica, super_read_only OFF for it, read_only kept), as a long
	// read holding locks would.
	CondRowLock = "row-lock"
	// CondUnordered: every replica commits its applier's transactions
	// out of order (replica_preserve_commit_order=OFF): what a replica
	// shows may then be no prefix of the primary's history.
	CondUnordered = "unordered-commit"
)

// ConditionSpec is the lag a run produces on purpose. Several conditions
// combine with '+' ("straggler+heavy").
type ConditionSpec struct {
	// Names are the conditions in force; empty means identical.
	Names []string
	// StragglerEvery is the mean time between applier stalls of the
	// straggler (the first replica); default 5s.
	StragglerEvery time.Duration
	// StragglerMin and StragglerMax bound a stall (log-uniform); defaults
	// 20ms and 800ms.
	StragglerMin, StragglerMax time.Duration
	// HeavyEvery is the period of heavy transactions; default 6s.
	HeavyEvery time.Duration
	// HeavyRows is the size of one heavy transaction; default 100000 rows.
	HeavyRows int
	// ApplyDelay is the standing SOURCE_DELAY on every replica (whole
	// seconds, MySQL's unit); default 1s.
	ApplyDelay time.Duration
	// Stagger is the staggered condition's step: replica i (1-based) runs
	// at SOURCE_DELAY (i-1)×Stagger, so each replica stands behind the one
	// before it by about Stagger (whole seconds); default 2s: more than a
	// session's gap between reads (the hash scenarios' 1 s at most) plus
	// the second by which MySQL's delayed applier moves, so a session moved
	// to the next replica back sees the world go back on its next read.
	Stagger time.Duration
	// RowLockEvery is the mean time between the row-lock condition's
	// locks (uniform on [0, 2×]); default 1s. RowLockHold is how long each
	// is held; default 300ms.
	RowLockEvery, RowLockHold time.Duration
	// Events are scripted faults played during the measurement (failover,
	// a replica going down, drift, chaos); they need a Disrupter topology.
	Events []Event
}

// ParseCondition parses "identical", "straggler", "heavy", "apply-delay",
// "staggered", "row-lock", "unordered-commit" or a '+' combination.
func ParseCondition(s string) (ConditionSpec, error) {
	var c ConditionSpec
	for _, f := range strings.Split(strings.ToLower(strings.TrimSpace(s)), "+") {
		f = strings.TrimSpace(f)
		switch f {
		case CondIdentical, CondStraggler, CondHeavy, CondApplyDelay, CondStaggered, CondRowLock, CondUnordered:
			if !slices.Contains(c.Names, f) {
				c.Names = append(c.Names, f)
			}
		default:
			return ConditionSpec{}, fmt.Errorf("lab: unknown condition %q (want identical, straggler, heavy, apply-delay, staggered, row-lock, unordered-commit, or a '+' combination)", f)
		}
	}
	return c, c.validate()
}

// String is the '+' joined name.
func (c ConditionSpec) String() string {
	if len(c.Names) == 0 {
		return CondIdentical
	}
	return strings.Join(c.Names, "+")
}

func (c ConditionSpec) has(n string) bool { return slices.Contains(c.Names, n) }

func (c *ConditionSpec) validate() error {
	if len(c.Names) == 0 {
		c.Names = []string{CondIdentical}
	}
	if c.has(CondIdentical) && len(c.Names) > 1 {
		return errors.New("lab: condition identical does not combine with others")
	}
	if c.StragglerEvery == 0 {
		c.StragglerEvery = 5 * time.Second
	}
	if c.StragglerMin == 0 {
		c.StragglerMin = 20 * time.Millisecond
	}
	if c.StragglerMax == 0 {
		c.StragglerMax = 800 * time.Millisecond
	}
	if c.HeavyEvery == 0 {
		c.HeavyEvery = 6 * time.Second
	}
	if c.HeavyRows == 0 {
		c.HeavyRows = 100_000
	}
	if c.ApplyDelay == 0 {
		c.ApplyDelay = time.Second
	}
	if c.Stagger == 0 {
		c.Stagger = 2 * time.Second
	}
	if c.RowLockEvery == 0 {
		c.RowLockEvery = time.Second
	}
	if c.RowLockHold == 0 {
		c.RowLockHold = 300 * time.Millisecond
	}
	if c.has(CondApplyDelay) && c.has(CondStaggered) {
		return errors.New("lab: conditions apply-delay and staggered both set SOURCE_DELAY: pick one")
	}
	switch {
	case c.StragglerEvery < 10*time.Millisecond || c.StragglerMin <= 0 || c.StragglerMax < c.StragglerMin:
		return fmt.Errorf("lab: straggler every %v, stalls [%v, %v] make no sense", c.StragglerEvery, c.StragglerMin, c.StragglerMax)
	case c.HeavyEvery < 100*time.Millisecond || c.HeavyRows < 1:
		return fmt.Errorf("lab: heavy every %v of %d rows makes no sense", c.HeavyEvery, c.HeavyRows)
	case c.ApplyDelay < 0 || c.ApplyDelay%time.Millisecond != 0 || c.ApplyDelay > time.Hour:
		return fmt.Errorf("lab: apply delay %v is not a whole, positive number of milliseconds up to 1h (MySQL and MariaDB take whole seconds: Config.checkEngine)", c.ApplyDelay)
	case c.RowLockEvery < 10*time.Millisecond || c.RowLockHold <= 0 || c.RowLockHold > time.Minute:
		return fmt.Errorf("lab: row lock every %v held %v makes no sense (hold up to 1m)", c.RowLockEvery, c.RowLockHold)
	case c.Stagger < 0 || c.Stagger%time.Second != 0 || c.Stagger > time.Hour:
		return fmt.Errorf("lab: stagger %v is not a whole, positive number of seconds up to 1h (MySQL's SOURCE_DELAY unit)", c.Stagger)
	}
	return nil
}

// conditionStats counts what a condition did.
type conditionStats struct {
	Stalls      atomic.Int64 // straggler applier stalls
	HeavyTxns   atomic.Int64 // heavy transactions committed
	HeavyNanos  atomic.Int64 // their total time on the primary
	RowLocks    atomic.Int64 // row locks held on the first replica
	heavyMu     sync.Mutex
	heavyEnds   []time.Time  // when each heavy transaction committed on the primary
	FaultErrors atomic.Int64 // fault calls that failed (each logged once at debug)
}

// setUp applies standing conditions (apply delay, staggered delays)
// before the measurement.
func (c *ConditionSpec) setUp(ctx context.Context, f Faults) error {
	if c.has(CondUnordered) {
		if err := setCommitOrder(ctx, f, false); err != nil {
			return fmt.Errorf("lab: condition unordered-commit: %w", err)
		}
	}
	if c.has(CondRowLock) {
		if err := setSuperReadOnly(ctx, f, false); err != nil {
			return fmt.Errorf("lab: condition row-lock: %w", err)
		}
	}
	for i, r := range f.Replicas() {
		switch {
		case c.has(CondApplyDelay):
			if err := f.SetApplyDelay(ctx, r.Name, c.ApplyDelay); err != nil {
				return fmt.Errorf("lab: condition apply-delay: %w", err)
			}
		case c.has(CondStaggered):
			if err := f.SetApplyDelay(ctx, r.Name, c.StaggerDelay(i)); err != nil {
				return fmt.Errorf("lab: condition staggered: %w", err)
			}
		}
	}
	return nil
}

// StaggerDelay is the staggered condition's SOURCE_DELAY of replica i
// (0-based): i×Stagger.
func (c *ConditionSpec) StaggerDelay(i int) time.Duration { return time.Duration(i) * c.Stagger }

// tearDown undoes standing conditions; ctx should outlive the run's.
func (c *ConditionSpec) tearDown(ctx context.Context, f Faults) error {
	var errs []error
	if c.has(CondApplyDelay) || c.has(CondStaggered) {
		for _, r := range f.Replicas() {
			errs = append(errs, f.SetApplyDelay(ctx, r.Name, 0))
		}
	}
	if c.has(CondStraggler) {
		if rs := f.Replicas(); len(rs) > 0 {
			errs = append(errs, f.StartApplier(ctx, rs[0].Name))
		}
	}
	if c.has(CondUnordered) {
		errs = append(errs, setCommitOrder(ctx, f, true))
	}
	if c.has(CondRowLock) {
		errs = append(errs, setSuperReadOnly(ctx, f, true))
	}
	return errors.Join(errs...)
}

// run drives the periodic conditions until ctx ends; lockQuery is the
// workload's locking read of hot row 0 (row-lock).
func (c *ConditionSpec) run(ctx context.Context, f Faults, seed uint64, lockQuery string, st *conditionStats, log *slog.Logger) {
	done := make(chan struct{}, 3)
	n := 0
	if c.has(CondRowLock) {
		n++
		go func() { c.rowLock(ctx, f, seed, lockQuery, st, log); done <- struct{}{} }()
	}
	if c.has(CondStraggler) {
		n++
		go func() { c.straggle(ctx, f, seed, st, log); done <- struct{}{} }()
	}
	if c.has(CondHeavy) {
		n++
		go func() { c.heavy(ctx, f, st, log); done <- struct{}{} }()
	}
	for range n {
		<-done
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// straggle stalls the first replica's applier now and then: a straggler
// that stays readable but falls behind (the simulator's stall schedule).
func (c *ConditionSpec) straggle(ctx context.Context, f Faults, seed uint64, st *conditionStats, log *slog.Logger) {
	r := newRNG(seed ^ 0x5743a91)
	for {
		every := time.Duration(float64(c.StragglerEvery) * 2 * r.float())
		if !sleepCtx(ctx, every) {
			return
		}
		rs := f.Replicas()
		if len(rs) == 0 {
			continue
		}
		name := rs[0].Name
		stall := gapDraw(&r, c.StragglerMin, c.StragglerMax)
		if err := f.StopApplier(ctx, name); err != nil {
			if ctx.Err() != nil {
				return // the run ended, not a fault
			}
			st.FaultErrors.Add(1)
			log.Debug("lab: straggler stop", "node", name, "err", err)
			continue
		}
		st.Stalls.Add(1)
		sleepCtx(ctx, stall)
		// restart even when ctx ended, so the topology is left healthy
		if err := f.StartApplier(context.WithoutCancel(ctx), name); err != nil {
			st.FaultErrors.Add(1)
			log.Debug("lab: straggler start", "node", name, "err", err)
		}
	}
}

// heavy commits a heavy transaction every HeavyEvery.
func (c *ConditionSpec) heavy(ctx context.Context, f Faults, st *conditionStats, log *slog.Logger) {
	for {
		if !sleepCtx(ctx, c.HeavyEvery/2) {
			return
		}
		if hr, err := f.HeavyTransaction(ctx, c.HeavyRows); err != nil {
			if ctx.Err() != nil {
				return
			}
			st.FaultErrors.Add(1)
			log.Debug("lab: heavy transaction", "err", err)
		} else {
			st.HeavyTxns.Add(1)
			st.HeavyNanos.Add(int64(hr.Elapsed))
			st.heavyMu.Lock()
			st.heavyEnds = append(st.heavyEnds, time.Now())
			st.heavyMu.Unlock()
		}
		if !sleepCtx(ctx, c.HeavyEvery/2) {
			return
		}
	}
}

// setCommitOrder sets replica_preserve_commit_order on every replica
// (the applier stopped for the change, as MySQL requires).
func setCommitOrder(ctx context.Context, f Faults, on bool) error {
	v := "OFF"
	if on {
		v = "ON"
	}
	var errs []error
	for _, r := range f.Replicas() {
		c, err := dialNode(ctx, r.Addr(), r.User, r.Password)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.Name, err))
			continue
		}
		for _, q := range []string{"STOP REPLICA SQL_THREAD", "SET GLOBAL replica_preserve_commit_order = " + v, "START REPLICA SQL_THREAD"} {
			if _, err := c.Execute(ctx, q); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %w", r.Name, q, err))
				break
			}
		}
		c.Close()
	}
	return errors.Join(errs...)
}

// setSuperReadOnly sets super_read_only on the first replica: a locking
// read needs it OFF (read_only stays ON for every other account).
func setSuperReadOnly(ctx context.Context, f Faults, on bool) error {
	rs := f.Replicas()
	if len(rs) == 0 {
		return nil
	}
	c, err := dialNode(ctx, rs[0].Addr(), rs[0].User, rs[0].Password)
	if err != nil {
		return fmt.Errorf("%s: %w", rs[0].Name, err)
	}
	defer c.Close()
	v := "OFF"
	if on {
		v = "ON"
	}
	if _, err := c.Execute(ctx, "SET GLOBAL super_read_only = "+v); err != nil {
		return fmt.Errorf("%s: %w", rs[0].Name, err)
	}
	return nil
}

// rowLock holds hot row 0's lock on the first replica for RowLockHold
// every RowLockEvery (on average): its applier waits on the row, and
// transactions after the one it waits for commit around it only if the
// replica does not preserve commit order.
func (c *ConditionSpec) rowLock(ctx context.Context, f Faults, seed uint64, lockQuery string, st *conditionStats, log *slog.Logger) {
	r := newRNG(seed ^ 0x10c4)
	var conn *nodeConn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		if !sleepCtx(ctx, time.Duration(float64(c.RowLockEvery)*2*r.float())) {
			return
		}
		rs := f.Replicas()
		if len(rs) == 0 {
			continue
		}
		if conn == nil {
			var err error
			if conn, err = dialNode(ctx, rs[0].Addr(), rs[0].User, rs[0].Password); err != nil {
				if ctx.Err() != nil {
					return
				}
				st.FaultErrors.Add(1)
				log.Debug("lab: row lock dial", "node", rs[0].Name, "err", err)
				continue
			}
		}
		if err := holdLock(ctx, conn, lockQuery, c.RowLockHold); err != nil {
			conn.Close()
			conn = nil
			if ctx.Err() != nil {
				return
			}
			st.FaultErrors.Add(1)
			log.Debug("lab: row lock", "node", rs[0].Name, "err", err)
			continue
		}
		st.RowLocks.Add(1)
	}
}

// holdLock runs lockQuery in a transaction on c and holds it for hold.
func holdLock(ctx context.Context, c *nodeConn, lockQuery string, hold time.Duration) error {
	if _, err := c.Execute(ctx, "BEGIN"); err != nil {
		return err
	}
	if _, err := c.Execute(ctx, lockQuery); err != nil {
		return err
	}
	sleepCtx(ctx, hold)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := c.Execute(rctx, "ROLLBACK")
	return err
}

// heavyCommits is when each heavy transaction committed on the primary.
func (st *conditionStats) heavyCommits() []time.Time {
	st.heavyMu.Lock()
	defer st.heavyMu.Unlock()
	return append([]time.Time(nil), st.heavyEnds...)
}
