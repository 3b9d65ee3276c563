package sim

import (
	"math"
	"math/rand/v2"
)

// workload is a trial's offered load, drawn once and replayed under every
// router. Arrays are indexed by write; gaps by write*ReadsPerWrite+k.
type workload struct {
	send    []usec  // client send time of write i (Poisson arrivals)
	session []int32 // session of write i
	heavy   []bool  // write i is a heavy record (used only in heavy worlds)
	next    []int32 // next write of the same session, -1 if none
	first   []int32 // first write of each session, -1 if none
	gaps    []usec  // think time before each read
	rpw     int     // reads per write
	tail    []int32 // scratch: last write seen per session while linking
}

// Stream ids of a trial's independent PCG streams.
const (
	streamWorkload = 1
	streamWorld    = 2
	streamRouter   = 3
	streamPhase    = 5 // one draw per seed (trial 0): the heavy schedule's base phase
)

// weyl is the golden-ratio step of the heavy schedule's phase sequence.
var weyl = (math.Sqrt(5) - 1) / 2

// heavyPhase is trial's phase of the heavy-record schedule, in [0, 1): a
// golden-ratio (Weyl) sequence frac(u + trial×0.618…) from one uniform draw u
// per seed. Each trial's phase is uniform on its own, and any run of
// consecutive trials spreads its phases evenly, so a mean over a few trials
// does not hinge on where one or two heavy records happened to land (a
// trial at 600 writes/s holds about one).
func heavyPhase(seed uint64, trial int) float64 {
	u := trialRand(seed, 0, streamPhase).Float64()
	_, f := math.Modf(u + float64(trial)*weyl)
	return f
}

func trialRand(seed uint64, trial, stream int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, uint64(trial)<<8|uint64(stream)))
}

// draw fills w for trial of cfg, reusing w's arrays. Draw order per write:
// (after one heavy-schedule phase) inter-arrival time, session, then the
// read gaps in order.
func (w *workload) draw(cfg *Config, trial int) {
	r := trialRand(cfg.Seed, trial, streamWorkload)
	m := cfg.model()
	w.rpw = cfg.ReadsPerWrite
	w.send, w.session, w.heavy, w.next, w.gaps = w.send[:0], w.session[:0], w.heavy[:0], w.next[:0], w.gaps[:0]
	end := dur(cfg.Duration)
	lgMin, lgMax := math.Log(float64(dur(cfg.GapMin))), math.Log(float64(dur(cfg.GapMax)))
	mean := 1e6 / cfg.WritesPerSec
	// Heavy records: write i is heavy when floor(phase + (i+1)×rate) steps
	// past floor(phase + i×rate): a regular schedule from the trial's phase.
	phase := heavyPhase(cfg.Seed, trial)
	// Time-scheduled heavy records (HeavyShare): the next scheduled time.
	heavyAt, heavyEvery := math.Inf(1), 0.0
	if m.HeavyShare > 0 {
		if c := float64(m.heavyCost(cfg.WritesPerSec)); c > 0 {
			heavyEvery = c / m.HeavyShare
			heavyAt = phase * heavyEvery
		}
	}
	t := 0.0
	for cfg.WritesPerSec > 0 {
		t += r.ExpFloat64() * mean
		if usec(t) >= end {
			break
		}
		w.send = append(w.send, usec(t))
		w.session = append(w.session, int32(r.IntN(cfg.Sessions)))
		i := float64(len(w.heavy))
		heavy := m.HeavyProb > 0 && math.Floor(phase+(i+1)*m.HeavyProb) > math.Floor(phase+i*m.HeavyProb)
		if t >= heavyAt {
			heavy = true
			for heavyAt <= t {
				heavyAt += heavyEvery
			}
		}
		w.heavy = append(w.heavy, heavy)
		for range w.rpw {
			w.gaps = append(w.gaps, usec(math.Exp(lgMin+r.Float64()*(lgMax-lgMin))))
		}
		w.next = append(w.next, -1)
	}
	if cap(w.first) < cfg.Sessions {
		w.first = make([]int32, cfg.Sessions)
	}
	w.first = w.first[:cfg.Sessions]
	for i := range w.first {
		w.first[i] = -1
	}
	if cap(w.tail) < cfg.Sessions {
		w.tail = make([]int32, cfg.Sessions)
	}
	tail := w.tail[:cfg.Sessions]
	for i, s := range w.session {
		if w.first[s] < 0 {
			w.first[s] = int32(i)
		} else {
			w.next[tail[s]] = int32(i)
		}
		tail[s] = int32(i)
	}
}

func (w *workload) writes() int { return len(w.send) }
