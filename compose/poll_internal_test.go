package compose

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPoll: poll returns at once when check is done or fails, expired()
// when the limit passes, and ctx.Err() when ctx ends; it calls check
// once more after each sleep, never before the first call.
func TestPoll(t *testing.T) {
	ctx := context.Background()
	expired := errors.New("expired")
	never := func() error { t.Fatal("expired called"); return nil }

	calls := 0
	if err := poll(ctx, time.Hour, time.Millisecond, func() (bool, error) { calls++; return calls == 3, nil }, never); err != nil || calls != 3 {
		t.Fatalf("done on the third call: err %v after %d calls", err, calls)
	}
	boom := errors.New("boom")
	calls = 0
	if err := poll(ctx, time.Hour, time.Millisecond, func() (bool, error) { calls++; return false, boom }, never); !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("failing check: err %v after %d calls", err, calls)
	}
	calls = 0
	if err := poll(ctx, 0, time.Millisecond, func() (bool, error) { calls++; return false, nil }, func() error { return expired }); !errors.Is(err, expired) || calls != 1 {
		t.Fatalf("zero limit: err %v after %d calls", err, calls)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	if err := poll(cctx, time.Hour, time.Hour, func() (bool, error) { calls++; return false, nil }, never); !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("ended ctx: err %v after %d calls", err, calls)
	}
}

// TestParallel: every item's error is kept; all items run.
func TestParallel(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	ran := make([]bool, 3)
	err := parallel([]int{0, 1, 2}, func(i int) error {
		ran[i] = true
		return []error{a, nil, b}[i]
	})
	if !errors.Is(err, a) || !errors.Is(err, b) || ran[0] != true || ran[1] != true || ran[2] != true {
		t.Fatalf("err %v, ran %v", err, ran)
	}
	if err := parallel([]int(nil), func(int) error { return a }); err != nil {
		t.Fatalf("no items: %v", err)
	}
}

// TestServerNames names a topology's servers primary first.
func TestServerNames(t *testing.T) {
	got := serverNames(2)
	if len(got) != 3 || got[0] != "primary" || got[1] != "replica1" || got[2] != "replica2" {
		t.Fatalf("serverNames(2) = %v", got)
	}
	if _, err := serverNamed([]*localServer{{name: "primary"}}, "nosuch"); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("serverNamed(nosuch) = %v, want ErrUnknownNode", err)
	}
}
