package lab

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
)

// stallFaults is a Faults whose StopApplier either blocks until its
// context ends (block) or fails at once; it records the calls.
type stallFaults struct {
	block bool
	mu    sync.Mutex
	stops int
	start int
}

var _ Faults = (*stallFaults)(nil)

func (f *stallFaults) Primary() compose.Node    { return compose.Node{Name: "primary"} }
func (f *stallFaults) Replicas() []compose.Node { return []compose.Node{{Name: "replica1"}} }
func (f *stallFaults) Epoch() uint64            { return 1 }
func (f *stallFaults) StopApplier(ctx context.Context, _ string) error {
	f.mu.Lock()
	f.stops++
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return errors.New("stop replica: refused")
}
func (f *stallFaults) StartApplier(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.start++
	return nil
}
func (f *stallFaults) SetApplyDelay(context.Context, string, time.Duration) error { return nil }
func (f *stallFaults) HeavyTransaction(context.Context, int) (compose.HeavyResult, error) {
	return compose.HeavyResult{}, nil
}

// TestStraggleCountsFaults: a StopApplier cut short by the end of the run
// is not a fault error (the run ended); one that fails while the run goes
// on is, and neither counts a stall.
func TestStraggleCountsFaults(t *testing.T) {
	cond := ConditionSpec{Names: []string{CondStraggler}, StragglerEvery: 10 * time.Millisecond, StragglerMin: time.Millisecond, StragglerMax: time.Millisecond}
	if err := cond.validate(); err != nil {
		t.Fatal(err)
	}
	for _, block := range []bool{true, false} {
		f := &stallFaults{block: block}
		var st conditionStats
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { cond.run(ctx, f, 1, "", &st, slog.New(slog.DiscardHandler)); close(done) }()
		// wait until the straggler has tried to stop the applier
		for {
			f.mu.Lock()
			n := f.stops
			f.mu.Unlock()
			if n > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		switch {
		case st.Stalls.Load() != 0:
			t.Errorf("block=%v: %d stalls counted for failed stops", block, st.Stalls.Load())
		case block && st.FaultErrors.Load() != 0:
			t.Errorf("a stop cut short by the run's end counted %d fault errors", st.FaultErrors.Load())
		case !block && st.FaultErrors.Load() == 0:
			t.Errorf("a refused stop counted no fault error")
		}
	}
}
