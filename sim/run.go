package sim

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// job is one trial of one configuration under a list of routers: the
// workload is drawn once and replayed under each router.
type job struct {
	cfg   *Config
	trial int
	specs []RouterSpec
	out   []Result // len(specs), filled by the worker
	trace *Trace   // when non-nil, trace the first router's run
	lag   hist     // the trial's replica lag (the same under every router)
}

// Progress is told after each finished job (safe to call from any goroutine).
type Progress func(done, total int)

// runJobs runs jobs on GOMAXPROCS workers, each owning one engine. Results
// land in each job's own slot, so output order never depends on scheduling.
func runJobs(ctx context.Context, jobs []*job, progress Progress) error {
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := newEngine()
			var wl workload
			var m trialMetrics
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[w] = err
					return
				}
				j := jobs[i]
				wl.draw(j.cfg, j.trial)
				for k := range j.specs {
					e.reset(j.cfg, &wl, &j.specs[k], j.trial, &m)
					if k == 0 {
						e.trace = j.trace
					} else {
						e.trace = nil
					}
					if err := e.run(ctx); err != nil {
						errs[w] = err
						return
					}
					j.out[k] = e.result()
					if k == 0 {
						j.lag = m.lag
					}
				}
				d := int(done.Add(1))
				if progress != nil {
					progress(d, len(jobs))
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Run simulates cfg.Trials trials of cfg under every router of specs and
// returns results[router][trial]. Trials run in parallel; the results do not
// depend on the number of cores.
func Run(ctx context.Context, cfg Config, specs []RouterSpec, progress Progress) ([][]Result, error) {
	res, _, err := runTrials(ctx, cfg, specs, progress)
	return res, err
}

// runTrials is Run that also returns the replica lag pooled over every
// record of every trial.
func runTrials(ctx context.Context, cfg Config, specs []RouterSpec, progress Progress) ([][]Result, *hist, error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	jobs := make([]*job, cfg.Trials)
	for t := range jobs {
		jobs[t] = &job{cfg: &cfg, trial: t, specs: specs, out: make([]Result, len(specs))}
	}
	if err := runJobs(ctx, jobs, progress); err != nil {
		return nil, nil, err
	}
	res := make([][]Result, len(specs))
	for k := range specs {
		res[k] = make([]Result, cfg.Trials)
		for t, j := range jobs {
			res[k][t] = j.out[k]
		}
	}
	return res, poolLag(jobs), nil
}

// poolLag merges the trials' lag histograms: the distribution of every
// record's lag on every replica over all the jobs' trials.
func poolLag(jobs []*job) *hist {
	var p hist
	for _, j := range jobs {
		p.merge(&j.lag)
	}
	return &p
}

// TraceTrial runs one trial of cfg under spec and records it in detail.
func TraceTrial(ctx context.Context, cfg Config, spec RouterSpec, trial int) (*Trace, Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, Result{}, err
	}
	tr := &Trace{DurationMs: float64(cfg.Duration) / 1e6, Straggler: cfg.model().Straggler}
	j := &job{cfg: &cfg, trial: trial, specs: []RouterSpec{spec}, out: make([]Result, 1), trace: tr}
	if err := runJobs(ctx, []*job{j}, nil); err != nil {
		return nil, Result{}, err
	}
	return tr, j.out[0], nil
}

// Stat is a mean over trials with its sample standard deviation.
type Stat struct {
	Mean, SD float64
}

// stat summarises f over trials.
func stat(rs []Result, f func(*Result) float64) Stat {
	if len(rs) == 0 {
		return Stat{}
	}
	var sum float64
	for i := range rs {
		sum += f(&rs[i])
	}
	mean := sum / float64(len(rs))
	if len(rs) < 2 {
		return Stat{Mean: mean}
	}
	var ss float64
	for i := range rs {
		d := f(&rs[i]) - mean
		ss += d * d
	}
	return Stat{Mean: mean, SD: math.Sqrt(ss / float64(len(rs)-1))}
}
