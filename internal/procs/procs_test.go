package procs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestControllerGrowsAtOnceShrinksSlowly(t *testing.T) {
	c, err := NewController(Config{Max: 4})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		w    Window
		want int
	}{
		{"one client at a time stays at one P", Window{Commands: 1000}, 1},
		{"a little overlap stays", Window{Commands: 1000, Overlapped: 249}, 1},
		{"too few commands say nothing", Window{Commands: 19, Overlapped: 19}, 1},
		{"a quarter overlapping grows to Max", Window{Commands: 1000, Overlapped: 250}, 4},
		{"quiet 1 of 4", Window{Commands: 1000, Overlapped: 49}, 4},
		{"quiet 2 of 4", Window{}, 4},
		{"overlap again resets the count", Window{Commands: 1000, Overlapped: 50}, 4},
		{"quiet 1 of 4 again", Window{Commands: 1000}, 4},
		{"quiet 2", Window{Commands: 5, Overlapped: 5}, 4},
		{"quiet 3", Window{Commands: 1000}, 4},
		{"quiet 4 shrinks to one P", Window{Commands: 1000}, 1},
		{"and stays while quiet", Window{Commands: 1000}, 1},
	}
	for _, s := range steps {
		if got := c.Observe(s.w); got != s.want {
			t.Fatalf("%s: Observe(%+v) = %d, want %d", s.name, s.w, got, s.want)
		}
		if c.Procs() != s.want {
			t.Fatalf("%s: Procs() = %d after Observe returned %d", s.name, c.Procs(), s.want)
		}
	}
}

func TestControllerMaxOneNeverGrows(t *testing.T) {
	c, err := NewController(Config{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := c.Observe(Window{Commands: 100, Overlapped: 100}); got != 1 {
			t.Fatalf("Max 1 grew to %d", got)
		}
	}
}

// TestControllerLimit: the CPUs the process may run on bound Max while
// grown (and at once); without a limit (0) Max holds again; a limit of
// one keeps one P whatever the overlap.
func TestControllerLimit(t *testing.T) {
	c, err := NewController(Config{Max: 8})
	if err != nil {
		t.Fatal(err)
	}
	overlap := Window{Commands: 100, Overlapped: 100}
	if got := c.SetLimit(4); got != 1 {
		t.Fatalf("a limit before growing: %d, want 1", got)
	}
	if got := c.Observe(overlap); got != 4 {
		t.Fatalf("grown under a limit of 4: %d", got)
	}
	if got := c.SetLimit(2); got != 2 {
		t.Fatalf("the limit lowered while grown: %d, want 2", got)
	}
	if got := c.SetLimit(0); got != 8 {
		t.Fatalf("the limit unknown again: %d, want Max 8", got)
	}
	if got := c.SetLimit(16); got != 8 {
		t.Fatalf("a limit above Max: %d, want 8", got)
	}
	c.SetLimit(1)
	for range 3 {
		if got := c.Observe(overlap); got != 1 {
			t.Fatalf("one CPU allowed: %d Ps", got)
		}
	}
}

func TestAffinityCPUs(t *testing.T) {
	n := affinityCPUs()
	if runtime.GOOS == "linux" && (n < 1 || n > runtime.NumCPU()) {
		t.Fatalf("affinityCPUs = %d, want 1..%d on Linux", n, runtime.NumCPU())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "max 0"},
		{Config{Max: 2, Interval: time.Microsecond}, "interval"},
		{Config{Max: 2, GrowAt: 1.5}, "grow_at 1.5"},
		{Config{Max: 2, GrowAt: 0.1, ShrinkBelow: 0.2}, "shrink_below 0.2"},
		{Config{Max: 2, ShrinkAfter: -1}, "shrink_after -1"},
	} {
		_, err := NewController(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewController(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	c := Config{Max: 2}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if c.Interval != 250*time.Millisecond || c.MinCommands != 20 || c.GrowAt != 0.25 || c.ShrinkBelow != 0.05 || c.ShrinkAfter != 4 || c.CPUs == nil {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestMeterCountsOverlap(t *testing.T) {
	var m Meter
	m.Begin() // alone
	m.End()
	m.Begin() // alone
	m.Begin() // while the one before runs
	m.Begin() // while two run
	m.End()
	m.End()
	m.End()
	if got := m.Read(); got != (Window{Commands: 4, Overlapped: 2}) {
		t.Fatalf("Read = %+v, want 4 commands, 2 overlapped", got)
	}
	before := m.Read()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				m.Begin()
				m.End()
			}
		})
	}
	wg.Wait()
	if w := m.Read().Sub(before); w.Commands != 8000 || w.Overlapped > w.Commands {
		t.Fatalf("window %+v, want 8000 commands and at most as many overlapped", w)
	}
	if a := m.active.Load(); a != 0 {
		t.Fatalf("%d commands still active after every End", a)
	}
}

// waitProcs polls runtime.GOMAXPROCS until it is want (Run's ticker is
// short) or fails after a generous bound.
func waitProcs(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for runtime.GOMAXPROCS(0) != want {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS stayed %d, want %d", runtime.GOMAXPROCS(0), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRunFollowsTheMeterAndRestores(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // empty: not set
	orig := runtime.GOMAXPROCS(0)
	const max = 3
	var m Meter
	var cpus atomic.Int32 // the affinity Run sees: 0 unknown
	var mu sync.Mutex
	var changes [][2]int
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Max: max, Interval: 2 * time.Millisecond, ShrinkAfter: 2, CPUs: func() int { return int(cpus.Load()) }}, &m,
			slog.New(slog.NewTextHandler(io.Discard, nil)), func(from, to int) {
				mu.Lock()
				changes = append(changes, [2]int{from, to})
				mu.Unlock()
			})
	}()
	waitProcs(t, 1) // Run starts at one P

	// Two clients' commands overlapping until the controller grows.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for range 20 { // MinCommands in every window, however long a sleep lasts
				m.Begin()
				m.Begin()
				m.End()
				m.End()
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	waitProcs(t, max)
	// Pinned to one CPU while grown (taskset -p): one P, though the
	// commands still overlap; unpinned: Max again.
	cpus.Store(1)
	waitProcs(t, 1)
	cpus.Store(0)
	waitProcs(t, max)
	close(stop)
	wg.Wait()
	waitProcs(t, 1) // quiet windows: back to one P

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil at ctx's end", err)
	}
	if got := runtime.GOMAXPROCS(0); got != orig {
		t.Fatalf("GOMAXPROCS %d after Run, want the %d it found", got, orig)
	}
	mu.Lock()
	defer mu.Unlock()
	// The first change leaves Go's value; then grows and shrinks alternate
	// (a stall of the load goroutine on a loaded machine may shrink and
	// grow again before the test sees max), ending with a shrink.
	got := changes
	if orig != 1 {
		if len(got) == 0 || got[0] != [2]int{orig, 1} {
			t.Fatalf("changes %v, want the first from %d to 1", changes, orig)
		}
		got = got[1:]
	}
	if len(got) < 2 || len(got)%2 != 0 {
		t.Fatalf("changes %v, want grows and shrinks in pairs", changes)
	}
	for i, c := range got {
		if want := [2]int{1, max}; i%2 == 1 {
			if want = [2]int{max, 1}; c != want {
				t.Fatalf("changes %v: #%d is %v, want %v", changes, i, c, want)
			}
		} else if c != want {
			t.Fatalf("changes %v: #%d is %v, want %v", changes, i, c, want)
		}
	}
}

func TestRunKeepsTheEnvironmentsValue(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2")
	orig := runtime.GOMAXPROCS(0)
	err := Run(context.Background(), Config{Max: 4}, &Meter{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if !errors.Is(err, ErrEnvironment) {
		t.Fatalf("Run = %v, want ErrEnvironment", err)
	}
	if runtime.GOMAXPROCS(0) != orig {
		t.Fatalf("GOMAXPROCS changed to %d", runtime.GOMAXPROCS(0))
	}
}

func TestRunRejectsABadConfig(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	err := Run(context.Background(), Config{Max: 2, GrowAt: 2}, &Meter{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err == nil || !strings.Contains(err.Error(), "grow_at") {
		t.Fatalf("Run = %v, want the config error", err)
	}
}
