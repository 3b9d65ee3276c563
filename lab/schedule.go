package lab

import (
	"math"
	"time"
)

// rng is SplitMix64: tiny, fast, seedable; the schedule and gaps come from
// it so a seed fixes the whole offered workload.
type rng struct{ s uint64 }

func newRNG(seed uint64) rng { return rng{seed} }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// float returns a uniform draw in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// scheduledWrite is one offered write.
type scheduledWrite struct {
	// At is the write's offered time since the start of the run.
	At time.Duration
	// Session is the writing session.
	Session int
	// Hot is the hot row the write bumps.
	Hot int
	// A scripted run's entries (Config.script) say more: Read makes the
	// entry a read of Session at At (no write); a write's Reads are the
	// reads that follow it, each Gap after the one before (the first
	// after the write's acknowledgement), instead of ReadsPerWrite reads
	// after log-uniform gaps.
	Scripted bool
	Read     bool
	Reads    int
	Gap      time.Duration
}

// writeSchedule draws the open-loop write stream: Poisson arrivals at rate
// writes/s for dur, each write of a uniform session and a uniform hot row.
// It depends only on its arguments (a seed gives one stream).
func writeSchedule(seed uint64, rate float64, dur time.Duration, sessions, hot int) []scheduledWrite {
	r := newRNG(seed)
	out := make([]scheduledWrite, 0, int(rate*dur.Seconds()*1.1)+1)
	t := 0.0
	end := dur.Seconds()
	for {
		u := r.float()
		t += -math.Log(1-u) / rate
		if t >= end {
			return out
		}
		out = append(out, scheduledWrite{
			At:      time.Duration(t * float64(time.Second)),
			Session: int(r.next() % uint64(sessions)),
			Hot:     int(r.next() % uint64(hot)),
		})
	}
}

// gapDraw draws a log-uniform gap in [lo, hi].
func gapDraw(r *rng, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	l, h := math.Log(float64(lo)), math.Log(float64(hi))
	return time.Duration(math.Exp(l + r.float()*(h-l)))
}

// readsAfter is how many reads follow w: its own under a script, else
// perWrite.
func (w scheduledWrite) readsAfter(perWrite int) int {
	if w.Scripted {
		return w.Reads
	}
	return perWrite
}
