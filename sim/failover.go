package sim

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// The failover experiment has its own small model (docs/sim.md): replicas
// trail the primary by a fixed per-trial lag; the primary dies at T0; a
// replica is promoted after a pause and the log continues on a new timeline.
// It is generic over the token's position type, and every read decision is
// router.Decide's.

// The scalar token is gtid.LSN, an LSN-like position: one number, compared
// by value. The new timeline continues numbering where the promoted replica
// stopped, so a lost write's number is soon "contained" again.

// TimelinePos is a GTID-set-like position over two sources: transactions
// 1..Old of the old primary and 1..New of the promoted one. The new timeline
// never contains an old transaction the promoted replica lacked.
type TimelinePos struct{ Old, New uint64 }

// Contains is the subset test on both sources.
func (p TimelinePos) Contains(o TimelinePos) bool { return p.Old >= o.Old && p.New >= o.New }

// Union is the per-source maximum.
func (p TimelinePos) Union(o TimelinePos) TimelinePos {
	return TimelinePos{max(p.Old, o.Old), max(p.New, o.New)}
}

var _ gtid.Position[TimelinePos] = TimelinePos{}

// foWorld is one failover trial's drawn world, shared by every token kind.
type foWorld struct {
	oldCommits []float64 // commit times (s) on the old primary, before T0
	newCommits []float64 // commit times on the new primary, after T0+pause
	lags       []float64 // per replica, seconds
	promoted   int
	pstar      uint64 // old transactions the promoted replica had at T0
	reads      []foRead
}

type foRead struct {
	at    float64 // issue time (s)
	write uint64  // the session's last acknowledged write (old timeline)
}

const (
	foT0     = 8.0 // the primary dies (s)
	foPause  = 1.0 // promotion takes this long
	foEnd    = 16.0
	foStep   = 0.005 // wait re-check period (s)
	foStragL = 1.0   // the straggler's lag (s)
)

func committedBy(c []float64, t float64) uint64 {
	lo, hi := 0, len(c)
	for lo < hi {
		m := (lo + hi) / 2
		if c[m] <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return uint64(lo)
}

func drawFailover(cfg *Config, trial int, promote int) *foWorld {
	r := trialRand(cfg.Seed, trial, 4)
	w := &foWorld{lags: make([]float64, cfg.Replicas)}
	for i := range w.lags {
		w.lags[i] = 0.005 + r.Float64()*0.145
	}
	w.lags[0] = foStragL
	rate := cfg.WritesPerSec
	rtt := cfg.RTT.Seconds()
	lgMin, lgMax := math.Log(cfg.GapMin.Seconds()), math.Log(cfg.GapMax.Seconds())
	for t := r.ExpFloat64() / rate; t < foT0; t += r.ExpFloat64() / rate {
		w.oldCommits = append(w.oldCommits, t)
		ack := t + rtt/2
		gap := math.Exp(lgMin + r.Float64()*(lgMax-lgMin))
		at := ack + gap
		if ack < foT0 && at >= foT0 {
			// Its read comes after the crash; the client retries until the
			// promotion is done.
			w.reads = append(w.reads, foRead{at: max(at, foT0+foPause), write: uint64(len(w.oldCommits))})
		}
	}
	for t := foT0 + foPause + r.ExpFloat64()/rate; t < foEnd; t += r.ExpFloat64() / rate {
		w.newCommits = append(w.newCommits, t)
	}
	w.promoted = promote
	if promote < 0 {
		for i := range w.lags {
			if w.promoted < 0 || w.lags[i] < w.lags[w.promoted] {
				w.promoted = i
			}
		}
	}
	w.pstar = committedBy(w.oldCommits, foT0-w.lags[w.promoted])
	return w
}

// state is replica i's (old, new) applied counts at t > T0; the promoted
// replica is the new primary.
func (w *foWorld) state(i int, t float64) (uint64, uint64) {
	if i == w.promoted {
		return w.pstar, committedBy(w.newCommits, t)
	}
	old := min(w.pstar, committedBy(w.oldCommits, t-w.lags[i]))
	return old, committedBy(w.newCommits, t-w.lags[i])
}

// foCounts are one token kind's outcomes in one trial.
type foCounts struct {
	reads, lost, silent, timedOut, failedFast, served, reanchored int64
}

func runFailover[P gtid.Position[P]](w *foWorld, pol router.Policy, mk func(old, new uint64) P, nr int) foCounts {
	var c foCounts
	view := router.View[P]{Replicas: make([]router.Replica[P], 0, nr), PrimaryKnown: true, Epoch: 1}
	idx := make([]int, 0, nr)
	var bucket router.Bucket
	for _, rd := range w.reads {
		c.reads++
		if rd.write > w.pstar {
			c.lost++
		}
		ses := router.Session[P]{Token: mk(rd.write, 0), HasToken: true, Epoch: 0}
		t, waited := rd.at, 0.0
		for {
			view.Replicas, idx = view.Replicas[:0], idx[:0]
			po, pn := w.state(w.promoted, t)
			view.Primary = mk(po, pn)
			for i := range nr {
				if i == w.promoted {
					continue
				}
				o, n := w.state(i, t)
				a := mk(o, n)
				view.Replicas = append(view.Replicas, router.Replica[P]{Applied: a, Up: true, Behind: int64(po+pn) - int64(o+n)})
				idx = append(idx, i)
			}
			in := router.Input[P]{Policy: &pol, Session: &ses, View: &view, Now: time.Duration(t * float64(time.Second)),
				Waited: time.Duration(waited * float64(time.Second))}
			d := router.Decide(&in, &bucket)
			if d.Reanchor {
				c.reanchored++
				ses.Reanchor(view.Epoch)
			}
			var hasOld uint64
			switch d.Action {
			case router.ActWait:
				step := min(foStep, d.WaitFor.Seconds())
				t += step
				waited += step
				continue
			case router.ActFail:
				if d.Reason == router.ReasonWriteLost {
					c.failedFast++
				} else {
					c.timedOut++
				}
			case router.ActPrimary:
				hasOld = po
			default:
				hasOld, _ = w.state(idx[d.Replica], t)
			}
			if d.Action != router.ActFail {
				c.served++
				if hasOld < rd.write {
					c.silent++
				}
			}
			break
		}
	}
	return c
}

// Failover is the `failover` experiment.
func Failover(ctx context.Context, o Options) (*Report, error) {
	cfg := o.base(16)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Replicas < 2 {
		return nil, fmt.Errorf("sim failover: needs at least 2 replicas, have %d", cfg.Replicas)
	}
	pol := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: o.budget()}
	epol := pol
	epol.CheckEpoch = true
	kinds := []string{"scalar position (LSN-like)", "GTID set", "GTID set + epoch"}
	promos := []struct {
		name string
		idx  int
	}{{"most advanced", -1}, {"the straggler (r0)", 0}}
	counts := make([][]foCounts, len(promos)*len(kinds))
	for i := range counts {
		counts[i] = make([]foCounts, cfg.Trials)
	}
	for trial := range cfg.Trials {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for p, pr := range promos {
			w := drawFailover(&cfg, trial, pr.idx)
			counts[p*3+0][trial] = runFailover(w, pol, func(o, n uint64) gtid.LSN { return gtid.LSN(o + n) }, cfg.Replicas)
			counts[p*3+1][trial] = runFailover(w, pol, func(o, n uint64) TimelinePos { return TimelinePos{o, n} }, cfg.Replicas)
			counts[p*3+2][trial] = runFailover(w, epol, func(o, n uint64) TimelinePos { return TimelinePos{o, n} }, cfg.Replicas)
		}
		if o.Progress != nil {
			o.Progress(trial+1, cfg.Trials)
		}
	}
	t := &Table{Name: "failover", Title: "Failover: what each token does with a write the new timeline lost", Columns: []Column{
		{"promoted", "promoted", 0}, {"token", "token", 0}, {"reads", "reads after failover", 0}, {"lost_write_reads", "reads whose write was lost", 1},
		{"silent", "served without own write", 1}, {"timed_out", "timed out", 1}, {"failed_fast", "failed fast", 1}, {"reanchored", "re-anchored", 1}}}
	t.Brief = []BriefColumn{{Key: "promoted"}, {Key: "token"}, {Key: "silent", Header: "missed own write"},
		{Key: "timed_out"}, {Key: "failed_fast"}, {Key: "reanchored"}}
	for p, pr := range promos {
		for k, name := range kinds {
			cs := counts[p*3+k]
			f := func(g func(*foCounts) int64) Stat {
				rs := make([]Result, len(cs))
				for i := range cs {
					rs[i].Events = g(&cs[i])
				}
				return stat(rs, func(r *Result) float64 { return float64(r.Events) })
			}
			t.Rows = append(t.Rows, []Cell{L(pr.name), L(name), S(f(func(c *foCounts) int64 { return c.reads })),
				S(f(func(c *foCounts) int64 { return c.lost })), S(f(func(c *foCounts) int64 { return c.silent })),
				S(f(func(c *foCounts) int64 { return c.timedOut })), S(f(func(c *foCounts) int64 { return c.failedFast })),
				S(f(func(c *foCounts) int64 { return c.reanchored }))})
		}
	}
	t.Notes = []string{
		fmt.Sprintf("Setup: seed %d, %d trials, %g writes/s, %d replicas; the primary dies at %.0f s, promotion takes %.0f s; replica lags fixed per trial, uniform 5–150 ms, the straggler r0 %.0f s. Router token-wait(%v); counts per trial, mean ± SD.",
			cfg.Seed, cfg.Trials, cfg.WritesPerSec, cfg.Replicas, foT0, foPause, foStragL, o.budget()),
		"Reads counted: each session whose write was acknowledged before the crash and whose next read comes after it. A scalar token is satisfied by the new timeline's numbers; a GTID-set token naming the old source never is (the read waits its budget, then times out); the epoch token detects the timeline change at once and fails fast, or re-anchors when the new primary holds the write.",
	}
	return &Report{Tables: []*Table{t}}, nil
}
