package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
	// Events are scripted faults played during the measurement (failover,
	// a replica going down, drift, chaos); they need a Disrupter topology.
	Events []Event
}

// ParseCondition parses "identical", "straggler", "heavy", "apply-delay",
// "staggered" or a '+' combination.
func ParseCondition(s string) (ConditionSpec, error) {
	var c ConditionSpec
	for _, f := range strings.Split(strings.ToLower(strings.TrimSpace(s)), "+") {
		f = strings.TrimSpace(f)
		switch f {
		case CondIdentical, CondStraggler, CondHeavy, CondApplyDelay, CondStaggered:
			if !slices.Contains(c.Names, f) {
				c.Names = append(c.Names, f)
			}
		default:
			return ConditionSpec{}, fmt.Errorf("lab: unknown condition %q (want identical, straggler, heavy, apply-delay, staggered, or a '+' combination)", f)
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
	if c.has(CondApplyDelay) && c.has(CondStaggered) {
		return errors.New("lab: conditions apply-delay and staggered both set SOURCE_DELAY: pick one")
	}
	switch {
	case c.StragglerEvery < 10*time.Millisecond || c.StragglerMin <= 0 || c.StragglerMax < c.StragglerMin:
		return fmt.Errorf("lab: straggler every %v, stalls [%v, %v] make no sense", c.StragglerEvery, c.StragglerMin, c.StragglerMax)
	case c.HeavyEvery < 100*time.Millisecond || c.HeavyRows < 1:
		return fmt.Errorf("lab: heavy every %v of %d rows makes no sense", c.HeavyEvery, c.HeavyRows)
	case c.ApplyDelay < 0 || c.ApplyDelay%time.Second != 0:
		return fmt.Errorf("lab: apply delay %v is not a whole, positive number of seconds (MySQL's SOURCE_DELAY unit)", c.ApplyDelay)
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
	FaultErrors atomic.Int64 // fault calls that failed (each logged once at debug)
}

// setUp applies standing conditions (apply delay, staggered delays)
// before the measurement.
func (c *ConditionSpec) setUp(ctx context.Context, f Faults) error {
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
	return errors.Join(errs...)
}

// run drives the periodic conditions until ctx ends.
func (c *ConditionSpec) run(ctx context.Context, f Faults, seed uint64, st *conditionStats, log *slog.Logger) {
	done := make(chan struct{}, 2)
	n := 0
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
		}
		if !sleepCtx(ctx, c.HeavyEvery/2) {
			return
		}
	}
}
