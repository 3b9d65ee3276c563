package compose

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseFault(t *testing.T) {
	for _, c := range []struct {
		args []string
		want Fault
	}{
		{[]string{"kill", "replica1"}, Fault{Kind: FaultKill, Node: "replica1"}},
		{[]string{"stop-applier", "replica2"}, Fault{Kind: FaultStopApplier, Node: "replica2"}},
		{[]string{"apply-delay", "replica2", "3"}, Fault{Kind: FaultApplyDelay, Node: "replica2", Delay: 3 * time.Second}},
		{[]string{"apply-delay", "replica2", "0"}, Fault{Kind: FaultApplyDelay, Node: "replica2"}},
		{[]string{"heavy", "1000"}, Fault{Kind: FaultHeavy, Rows: 1000}},
		{[]string{"failover", "replica2"}, Fault{Kind: FaultFailover, Node: "replica2"}},
	} {
		got, err := ParseFault(c.args)
		if err != nil || got != c.want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "bad fault: no kind"},
		{[]string{"bogus", "replica1"}, `bad fault: unknown kind "bogus"`},
		{[]string{"kill"}, "kill takes 1 argument(s) (<node>), got 0"},
		{[]string{"kill", "a", "b"}, "got 2"},
		{[]string{"apply-delay", "replica1"}, "takes 2 argument(s)"},
		{[]string{"apply-delay", "replica1", "1.5"}, "whole non-negative seconds"},
		{[]string{"apply-delay", "replica1", "-1"}, "whole non-negative seconds"},
		{[]string{"heavy", "many"}, "positive row count"},
		{[]string{"heavy", "0"}, "positive row count"},
	} {
		_, err := ParseFault(c.args)
		if !errors.Is(err, ErrBadFault) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFault(%q): error %v, want ErrBadFault saying %q", c.args, err, c.want)
		}
	}
}

func TestFaultKindsAndUndo(t *testing.T) {
	usage := FaultUsage()
	for _, k := range FaultKinds() {
		if !k.Valid() || !strings.Contains(usage, "\n  "+string(k)+" ") {
			t.Errorf("%s: valid %v, in the usage: %v", k, k.Valid(), strings.Contains(usage, string(k)))
		}
		if u := k.Undoes(); u != "" && !u.Valid() {
			t.Errorf("%s is undone by %q, not a kind", k, u)
		}
	}
	if FaultKind("stall").Valid() || FaultKind("").Valid() {
		t.Error("unknown kinds valid")
	}
	for k, want := range map[FaultKind]FaultKind{FaultKill: FaultRestart, FaultPause: FaultResume,
		FaultStopApplier: FaultStartApplier, FaultStopReceiver: FaultStartReceiver, FaultPartition: FaultHeal, FaultApplyDelay: FaultApplyDelay,
		FaultHeavy: "", FaultFailover: "", FaultRestart: ""} {
		if got := k.Undoes(); got != want {
			t.Errorf("%s.Undoes() = %q, want %q", k, got, want)
		}
	}
	u, ok := Fault{Kind: FaultApplyDelay, Node: "replica1", Delay: time.Second}.Undo()
	if !ok || u != (Fault{Kind: FaultApplyDelay, Node: "replica1"}) {
		t.Errorf("apply-delay's undo: %+v, %v", u, ok)
	}
	if _, ok := (Fault{Kind: FaultHeavy, Rows: 5}).Undo(); ok {
		t.Error("heavy has an undo")
	}
}

// recorder is an Injector that records the calls it gets.
type recorder struct{ calls []string }

func (r *recorder) rec(f string, a ...any) error {
	r.calls = append(r.calls, fmt.Sprintf(f, a...))
	return nil
}
func (r *recorder) Kill(_ context.Context, n string) error        { return r.rec("Kill %s", n) }
func (r *recorder) Restart(_ context.Context, n string) error     { return r.rec("Restart %s", n) }
func (r *recorder) Pause(_ context.Context, n string) error       { return r.rec("Pause %s", n) }
func (r *recorder) Resume(_ context.Context, n string) error      { return r.rec("Resume %s", n) }
func (r *recorder) StopApplier(_ context.Context, n string) error { return r.rec("StopApplier %s", n) }
func (r *recorder) StopReceiver(_ context.Context, n string) error {
	return r.rec("StopReceiver %s", n)
}
func (r *recorder) StartReceiver(_ context.Context, n string) error {
	return r.rec("StartReceiver %s", n)
}
func (r *recorder) StartApplier(_ context.Context, n string) error {
	return r.rec("StartApplier %s", n)
}
func (r *recorder) SetApplyDelay(_ context.Context, n string, d time.Duration) error {
	return r.rec("SetApplyDelay %s %v", n, d)
}
func (r *recorder) Partition(_ context.Context, n string) (PartitionMode, error) {
	return PartitionIOThread, r.rec("Partition %s", n)
}
func (r *recorder) Heal(_ context.Context, n string) error { return r.rec("Heal %s", n) }
func (r *recorder) HeavyTransaction(_ context.Context, rows int) (HeavyResult, error) {
	return HeavyResult{Rows: int64(rows)}, r.rec("HeavyTransaction %d", rows)
}
func (r *recorder) Failover(_ context.Context, n string) (FailoverResult, error) {
	return FailoverResult{NewPrimary: n}, r.rec("Failover %s", n)
}

// TestInjectDispatches: every kind reaches its method with its arguments,
// and the results come back.
func TestInjectDispatches(t *testing.T) {
	ctx := context.Background()
	want := map[FaultKind]string{
		FaultKill: "Kill r", FaultRestart: "Restart r", FaultPause: "Pause r", FaultResume: "Resume r",
		FaultStopApplier: "StopApplier r", FaultStartApplier: "StartApplier r",
		FaultStopReceiver: "StopReceiver r", FaultStartReceiver: "StartReceiver r", FaultApplyDelay: "SetApplyDelay r 2s",
		FaultPartition: "Partition r", FaultHeal: "Heal r", FaultHeavy: "HeavyTransaction 7", FaultFailover: "Failover r",
	}
	for _, k := range FaultKinds() {
		r := &recorder{}
		res, err := Inject(ctx, r, Fault{Kind: k, Node: "r", Delay: 2 * time.Second, Rows: 7})
		if err != nil || len(r.calls) != 1 || r.calls[0] != want[k] {
			t.Errorf("%s: calls %q, %v; want %q", k, r.calls, err, want[k])
		}
		switch k {
		case FaultPartition:
			if res.Partition != PartitionIOThread {
				t.Errorf("partition result %+v", res)
			}
		case FaultHeavy:
			if res.Heavy.Rows != 7 {
				t.Errorf("heavy result %+v", res)
			}
		case FaultFailover:
			if res.Failover.NewPrimary != "r" {
				t.Errorf("failover result %+v", res)
			}
		}
	}
	if _, err := Inject(ctx, &recorder{}, Fault{Kind: "stall", Node: "r"}); !errors.Is(err, ErrBadFault) {
		t.Errorf("unknown kind: %v", err)
	}
}
