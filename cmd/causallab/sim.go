package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/sim"
)

// simFlags are the flags every `causallab sim` experiment shares.
type simFlags struct {
	seed       uint64
	trials     int
	replicas   int
	wps        float64
	world      string
	workload   string
	sessions   int
	duration   time.Duration
	poll       time.Duration
	window     time.Duration
	budget     time.Duration
	hashMode   string
	capPerSec  float64
	capBehave  string
	capExtra   time.Duration
	format     string
	wide       bool
	out        string
	noProgress bool
}

func (f *simFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.Uint64Var(&f.seed, "seed", 0, "random seed (default: the experiment's, 1, or 20260802 for the workorder Park-Miller stream); same seed and flags give byte-identical output")
	fs.IntVar(&f.trials, "trials", 0, "trials per point (default: the experiment's, 16)")
	fs.IntVar(&f.replicas, "replicas", 0, "replicas (default 5)")
	fs.Float64Var(&f.wps, "writes-per-sec", 0, "offered writes per second (default: the experiment's, 600)")
	fs.StringVar(&f.world, "world", "", "world: instant, identical, straggler, straggler+heavy (default)")
	fs.StringVar(&f.workload, "workload", "", "read pattern: chains (default: each write's reads are their own chain, the published demo's) or queue (one read queue per session, the earlier default)")
	fs.IntVar(&f.sessions, "sessions", 0, "sessions (default 800 under chains, 10000 under queue)")
	fs.DurationVar(&f.duration, "duration", 0, "offered writes per trial (default 16s)")
	fs.DurationVar(&f.poll, "poll", 0, "router view polled every this long (0: perfect view)")
	fs.DurationVar(&f.window, "window", 0, "window router's W (default 500ms)")
	fs.DurationVar(&f.budget, "budget", 0, "token-wait's budget B (default 400ms)")
	fs.StringVar(&f.hashMode, "hash-mode", "full-list", "affinity hashing: full-list, available-only, rebalance-override")
	fs.Float64Var(&f.capPerSec, "cap", 0, "primary fallbacks allowed per second (0: no cap)")
	fs.StringVar(&f.capBehave, "cap-behavior", "wait-longer", "above the cap: wait-longer, fail-fast, serve-stale, defer")
	fs.DurationVar(&f.capExtra, "cap-extra-wait", 200*time.Millisecond, "wait-longer's extra wait")
	fs.StringVar(&f.format, "format", "md", "output: md (wide tables in their compact view, fits 80 columns), csv or json (JSON lines, one object per row; every column)")
	fs.BoolVar(&f.wide, "wide", false, "md: every column and note")
	fs.StringVar(&f.out, "out", "", "also write every table in full (md, csv, json), the pictures (SVG and PNG), report.md and report.html under this folder")
	fs.BoolVar(&f.noProgress, "no-progress", false, "no progress bar even on a terminal")
}

// options builds the simulator's options from the flags and checks them
// all, as every experiment would, before anything runs (exit code 2).
func (f *simFlags) options() (sim.Options, sim.Format, error) {
	var o sim.Options
	format, err := sim.ParseFormat(f.format)
	if err != nil {
		return o, "", flagError("format", err)
	}
	mode, err := hashroute.ParseMode(f.hashMode)
	if err != nil {
		return o, "", flagError("hash-mode", err)
	}
	o.Base = sim.Config{Seed: f.seed, Trials: f.trials, Replicas: f.replicas, WritesPerSec: f.wps,
		Sessions: f.sessions, Duration: f.duration, Poll: f.poll}
	if f.world != "" {
		if o.Base.World, err = sim.ParseWorld(f.world); err != nil {
			return o, "", flagError("world", err)
		}
	}
	if f.workload != "" {
		if o.Base.Workload, err = sim.ParseWorkload(f.workload); err != nil {
			return o, "", flagError("workload", err)
		}
	}
	b, err := router.ParseCapBehavior(f.capBehave)
	if err != nil {
		return o, "", flagError("cap-behavior", err)
	}
	if f.capExtra < 0 || f.capExtra > router.MaxDuration {
		return o, "", usageErrorf("--cap-extra-wait %v: want 0..%v", f.capExtra, router.MaxDuration)
	}
	cp := router.Cap{PerSecond: f.capPerSec, Behavior: b, ExtraWait: f.capExtra}
	if err := cp.Validate(); err != nil {
		return o, "", flagError("cap", err)
	}
	if f.capPerSec != 0 {
		o.Base.Cap = cp
	}
	o.Window, o.WaitBudget, o.HashMode = f.window, f.budget, mode
	if err := o.Validate(); err != nil {
		return o, "", withExitCode(exitUsage, err)
	}
	return o, format, nil
}

// progress shows the simulation as one phase on rep: a bar of trials on a
// terminal, a log line otherwise.
func simProgress(rep *reporter) sim.Progress {
	rep.Phase("simulation", 0)
	return func(done, total int) { rep.SetOf(int64(done), int64(total), fmt.Sprintf("%d/%d trials", done, total)) }
}

func newSimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim <experiment>",
		Short: "Run the deterministic simulator's experiments",
		Long: `sim runs one experiment of the deterministic simulator and prints its table.
The same seed and flags give byte-identical output. "sim all --out DIR" runs
every experiment and writes the tables, the pictures (SVG and PNG) and a report
(report.md and report.html). On a terminal (md) wide tables print in their
compact view; --wide prints every column.`,
	}
	for _, e := range sim.Experiments() {
		f := &simFlags{}
		sub := &cobra.Command{
			Use:   e.Name,
			Short: e.Short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if err := refuseZero(cmd, simZeroDefaults); err != nil {
					return err
				}
				o, format, err := f.options()
				if err != nil {
					return err
				}
				pr := newReporter(cmd.ErrOrStderr(), "sim "+e.Name, f.noProgress)
				o.Progress = simProgress(pr)
				rep, err := e.Run(cmd.Context(), o)
				if err != nil {
					pr.Done()
					return err
				}
				f.writing(pr)
				defer pr.Done()
				return emit(cmd.OutOrStdout(), f.out, format, f.wide, rep)
			},
		}
		f.register(sub)
		cmd.AddCommand(sub)
	}
	f := &simFlags{}
	all := &cobra.Command{
		Use:   "all",
		Short: "every experiment (with --out: tables, pictures, report)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseZero(cmd, simZeroDefaults); err != nil {
				return err
			}
			o, format, err := f.options()
			if err != nil {
				return err
			}
			pr := newReporter(cmd.ErrOrStderr(), "sim all", f.noProgress)
			o.Progress = simProgress(pr)
			reps, err := sim.All(cmd.Context(), o)
			if err != nil {
				pr.Done()
				return err
			}
			f.writing(pr)
			defer pr.Done()
			w := cmd.OutOrStdout()
			for _, rep := range reps {
				if err := emit(w, f.out, format, f.wide, rep); err != nil {
					return err
				}
			}
			if f.out != "" {
				return sim.WriteReport(f.out, reps)
			}
			return nil
		},
	}
	f.register(all)
	cmd.AddCommand(all)
	return cmd
}

// writing begins the phase that writes --out (the pictures take seconds),
// or ends the simulation's without one.
func (f *simFlags) writing(pr *reporter) {
	if f.out == "" {
		pr.Done()
		return
	}
	pr.Phase("writing tables and pictures", 0, "dir", f.out)
}

// emit prints rep's tables (in markdown their compact view unless wide)
// and, with out set, writes them in full and their pictures.
func emit(w io.Writer, out string, format sim.Format, wide bool, rep *sim.Report) error {
	for _, t := range rep.Tables {
		if format == sim.FormatMarkdown && !wide {
			t = t.Compact()
		}
		if err := t.Write(w, format); err != nil {
			return err
		}
	}
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, t := range rep.Tables {
		for _, ff := range []sim.Format{sim.FormatMarkdown, sim.FormatCSV, sim.FormatJSON} {
			ext := map[sim.Format]string{sim.FormatMarkdown: "md", sim.FormatCSV: "csv", sim.FormatJSON: "jsonl"}[ff]
			fh, err := os.Create(filepath.Join(out, t.Name+"."+ext))
			if err != nil {
				return err
			}
			err = t.Write(fh, ff)
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("sim: writing %s: %w", fh.Name(), err)
			}
		}
	}
	_, err := sim.WritePlots(out, rep.Plots)
	return err
}
