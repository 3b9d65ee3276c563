// Package procs adapts a process's GOMAXPROCS to how many client commands
// it runs at once: one P while commands arrive one at a time, Go's default
// while they overlap.
//
// Why: with more than one P, Go's scheduler wakes a second thread to look
// for work whenever a goroutine becomes runnable while a P is idle, and
// that thread finds nothing and sleeps again. For a proxy serving one
// client at a time that is a futex wake-up and two context switches per
// network event, about a fifth of the proxy's CPU per query on a two-core
// machine (docs/benchmarks-proxy.md, "Adaptive GOMAXPROCS"). With one P
// nothing is woken, but commands that arrive together wait for one
// another. The Controller is the decision (a deterministic function of
// the windows it is shown, tested without a clock); Run is its I/O: a
// ticker, the Meter's counters, runtime.GOMAXPROCS.
//
// GOMAXPROCS is the process's: one process runs at most one Run (the
// `causallab proxy` command does, for its one Server; an embedder of
// package proxy owns its process and decides).
package procs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

// Meter counts client commands and those that began while another was in
// flight. Begin and End bracket each command (not the wait for it); the
// zero value is ready. Safe for concurrent use.
type Meter struct {
	active     atomic.Int64
	commands   atomic.Uint64
	overlapped atomic.Uint64
}

// Begin records that a command began.
func (m *Meter) Begin() {
	m.commands.Add(1)
	if m.active.Add(1) > 1 {
		m.overlapped.Add(1)
	}
}

// End records that a command ended (one Begin before it).
func (m *Meter) End() { m.active.Add(-1) }

// Window is what a Meter counted over one sampling interval.
type Window struct {
	// Commands began in the window.
	Commands uint64
	// Overlapped of them began while another command was in flight.
	Overlapped uint64
}

// Read returns the counts since the Meter was made (subtract two reads for
// a window).
func (m *Meter) Read() Window {
	return Window{Commands: m.commands.Load(), Overlapped: m.overlapped.Load()}
}

// Sub is w minus an earlier reading.
func (w Window) Sub(earlier Window) Window {
	return Window{Commands: w.Commands - earlier.Commands, Overlapped: w.Overlapped - earlier.Overlapped}
}

// Config is the Controller's rule.
type Config struct {
	// Max is GOMAXPROCS while commands overlap: Go's own default for the
	// process (runtime.GOMAXPROCS(0) before anything changed it). At most
	// 1 means there is nothing to adapt.
	Max int
	// Interval is one window's length (Run's ticker). Default 250ms.
	Interval time.Duration
	// MinCommands: a window with fewer commands says nothing about
	// overlap and counts as quiet. Default 20.
	MinCommands uint64
	// GrowAt: at one P, one window in which at least this share of the
	// commands overlapped switches to Max. Default 0.25.
	GrowAt float64
	// ShrinkBelow and ShrinkAfter: at Max, ShrinkAfter windows in a row,
	// each quiet or with less than ShrinkBelow of its commands
	// overlapped, switch to one P. Defaults 0.05 and 4 (a second at the
	// default interval): growing is quick, shrinking slow, so a load
	// that comes and goes does not flap.
	ShrinkBelow float64
	ShrinkAfter int
	// CPUs returns how many CPUs the process may run on now (its CPU
	// affinity: `taskset -p` may change it after start), 0 when unknown;
	// Run reads it every window and never grows past it (Go stops
	// following such changes itself once GOMAXPROCS was set). Nil means
	// the process's affinity mask (sched_getaffinity; 0 off Linux).
	// Tests set it.
	CPUs func() int
}

// validate fills defaults and rejects nonsense.
func (c *Config) validate() error {
	if c.Interval == 0 {
		c.Interval = 250 * time.Millisecond
	}
	if c.MinCommands == 0 {
		c.MinCommands = 20
	}
	if c.GrowAt == 0 {
		c.GrowAt = 0.25
	}
	if c.ShrinkBelow == 0 {
		c.ShrinkBelow = 0.05
	}
	if c.ShrinkAfter == 0 {
		c.ShrinkAfter = 4
	}
	if c.CPUs == nil {
		c.CPUs = affinityCPUs
	}
	switch {
	case c.Max < 1:
		return fmt.Errorf("procs: max %d: must be at least 1", c.Max)
	case c.Interval < time.Millisecond:
		return fmt.Errorf("procs: interval %v: must be at least 1ms", c.Interval)
	case !(c.GrowAt > 0 && c.GrowAt <= 1):
		return fmt.Errorf("procs: grow_at %v: must be in (0, 1]", c.GrowAt)
	case !(c.ShrinkBelow > 0 && c.ShrinkBelow <= c.GrowAt):
		return fmt.Errorf("procs: shrink_below %v: must be in (0, grow_at %v]", c.ShrinkBelow, c.GrowAt)
	case c.ShrinkAfter < 1:
		return fmt.Errorf("procs: shrink_after %d: must be at least 1", c.ShrinkAfter)
	}
	return nil
}

// Controller decides GOMAXPROCS from successive windows. It starts at one
// P. Not safe for concurrent use (Run owns it).
//
// Invariant: Procs() is 1 unless grown, and then the smaller of Max and
// the limit (SetLimit), never below 1.
type Controller struct {
	cfg   Config
	limit int  // SetLimit's bound on Max (0: none)
	grown bool // commands overlapped: run on Max
	quiet int  // consecutive quiet windows while grown
}

// NewController returns a Controller at one P.
func NewController(cfg Config) (*Controller, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg}, nil
}

// max is Max under the limit.
func (c *Controller) max() int {
	if c.limit > 0 && c.limit < c.cfg.Max {
		return c.limit
	}
	return c.cfg.Max
}

// Procs is the Controller's current decision.
func (c *Controller) Procs() int {
	if c.grown {
		return c.max()
	}
	return 1
}

// SetLimit bounds Max by the CPUs the process may run on now (0:
// unknown, no bound) and returns the decision under it.
func (c *Controller) SetLimit(cpus int) int {
	c.limit = max(cpus, 0)
	return c.Procs()
}

// Observe takes one window and returns the GOMAXPROCS to run with next.
func (c *Controller) Observe(w Window) int {
	share := 0.0
	if w.Commands >= c.cfg.MinCommands {
		share = float64(w.Overlapped) / float64(w.Commands)
	}
	switch {
	case !c.grown && share >= c.cfg.GrowAt:
		c.grown, c.quiet = true, 0
	case c.grown && share < c.cfg.ShrinkBelow:
		c.quiet++
		if c.quiet >= c.cfg.ShrinkAfter {
			c.grown, c.quiet = false, 0
		}
	case c.grown:
		c.quiet = 0
	}
	return c.Procs()
}

// Observer is told of every change Run makes (metrics); nil is allowed.
type Observer func(from, to int)

// ErrEnvironment is Run's answer when the environment fixes GOMAXPROCS:
// the user's value is kept.
var ErrEnvironment = errors.New("procs: GOMAXPROCS is set by the environment; it is kept")

// Run adapts GOMAXPROCS to m's windows until ctx ends, then restores the
// value it found. It starts at one P. It returns ErrEnvironment at once
// when the GOMAXPROCS environment variable is set, and nil when ctx ends.
func Run(ctx context.Context, cfg Config, m *Meter, log *slog.Logger, changed Observer) error {
	if v, ok := os.LookupEnv("GOMAXPROCS"); ok && v != "" {
		return ErrEnvironment
	}
	c, err := NewController(cfg)
	if err != nil {
		return err
	}
	if c.cfg.Max <= 1 {
		<-ctx.Done()
		return nil
	}
	orig := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(orig)
	if changed != nil && orig != 1 {
		changed(orig, 1)
	}
	log.Debug("gomaxprocs adaptive", "max", c.cfg.Max, "procs", 1)
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	cur, last := 1, m.Read()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := m.Read()
		c.SetLimit(c.cfg.CPUs())
		to := c.Observe(now.Sub(last))
		last = now
		if to != cur {
			runtime.GOMAXPROCS(to)
			if changed != nil {
				changed(cur, to)
			}
			log.Debug("gomaxprocs changed", "from", cur, "to", to)
			cur = to
		}
	}
}
