package mysqlwire

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWatchHealth(t *testing.T) {
	t.Run("unhealthy-once", func(t *testing.T) {
		var checks, cuts atomic.Int32
		got := make(chan struct{})
		stop := WatchHealth(func() bool { return checks.Add(1) < 3 }, func() {
			cuts.Add(1)
			close(got)
		})
		defer stop()
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("unhealthy never called")
		}
		time.Sleep(3 * WatchProbe)
		if c, n := checks.Load(), cuts.Load(); c != 3 || n != 1 {
			t.Fatalf("after the node turned unhealthy: %d checks, %d calls; want 3 and 1", c, n)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		var cuts atomic.Int32
		stop := WatchHealth(func() bool { return false }, func() { cuts.Add(1) })
		stop()
		time.Sleep(3 * WatchProbe)
		if n := cuts.Load(); n != 0 {
			t.Fatalf("unhealthy called %d times after stop", n)
		}
	})
}
