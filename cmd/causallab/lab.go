package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/lab"
)

// labFlags are the flags every `lab` experiment shares.
type labFlags struct {
	replicas    int
	backend     string
	primaryDSN  string
	replicaDSNs []string
	sessions    int
	hotRows     int
	writeRate   float64
	duration    time.Duration
	readsPerW   int
	seed        uint64
	workers     int
	poll        time.Duration
	mode        string
	condition   string
	routers     string
	format      string
	out         string
	failOn      string
	noSim       bool
	simTrials   int
	noProgress  bool
	via         string
	fresh       bool
}

func (f *labFlags) register(cmd *cobra.Command, cond string, rate float64, dur time.Duration) {
	fl := cmd.Flags()
	fl.IntVar(&f.replicas, "replicas", 3, "replicas of the topology started for the run (when causallab up runs none)")
	fl.BoolVar(&f.fresh, "fresh", false, "start a topology for the run even when causallab up runs one")
	fl.StringVar(&f.backend, "backend", "local", "how to run MySQL: local (chrooted mysqld processes) or docker")
	fl.StringVar(&f.primaryDSN, "primary-dsn", "", "attach to your own primary (user:pw@tcp(host:port)/) instead of starting a topology")
	fl.StringSliceVar(&f.replicaDSNs, "replica-dsn", nil, "your own replicas' DSNs (with --primary-dsn; repeat or comma-separate)")
	fl.IntVar(&f.sessions, "sessions", 2000, "sessions S")
	fl.IntVar(&f.hotRows, "hot-rows", 8, "shared hot rows (monotonic-reads ground truth)")
	fl.Float64Var(&f.writeRate, "write-rate", rate, "offered writes/s (Poisson)")
	fl.DurationVar(&f.duration, "duration", dur, "how long writes are offered (the reads that follow are completed)")
	fl.IntVar(&f.readsPerW, "reads-per-write", 3, "reads after each write (closed loop, log-uniform gaps 15ms..4s)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the offered workload")
	fl.IntVar(&f.workers, "workers", 24, "driver goroutines (each with a connection per node)")
	fl.DurationVar(&f.poll, "poll", 5*time.Millisecond, "replica position poll interval")
	fl.StringVar(&f.mode, "mode", "concurrent", "concurrent (routers share one live workload) or sequential (each alone)")
	fl.StringVar(&f.condition, "condition", cond, "lag condition: identical, straggler, heavy, apply-delay, or a '+' combination")
	fl.StringVar(&f.format, "format", "md", "output: md, csv or json")
	fl.StringVar(&f.out, "out", "", "also write tables (md, csv, json), SVG charts and report.html into this directory")
	fl.StringVar(&f.failOn, "fail-on", "", "exit 3 when a rule holds, e.g. 'ryw>0,mr>0' or 'token-ryw-mr:ryw>0' (metrics: "+strings.Join(lab.FailMetricNames(), ", ")+")")
	fl.BoolVar(&f.noSim, "no-sim", false, "skip the simulator's prediction")
	fl.IntVar(&f.simTrials, "sim-trials", 4, "simulator trials averaged for the prediction")
	fl.BoolVar(&f.noProgress, "no-progress", false, "no progress bar even on a terminal")
	fl.StringVar(&f.via, "via", "router", "routing path: router (package router's live layer over binlogwatch positions) or proxy (causallab proxy in-process, tokens in comments); scalar-token routers always run through the LSN adapter")
}

// config builds the driver config from the flags.
func (f *labFlags) config() (lab.Config, []lab.FailRule, lab.Format, error) {
	var cfg lab.Config
	rules, err := lab.ParseFailOn(f.failOn)
	if err != nil {
		return cfg, nil, "", err
	}
	format, err := lab.ParseFormat(f.format)
	if err != nil {
		return cfg, nil, "", err
	}
	cond, err := lab.ParseCondition(f.condition)
	if err != nil {
		return cfg, nil, "", err
	}
	cfg = lab.Config{Sessions: f.sessions, HotRows: f.hotRows, WriteRate: f.writeRate, Duration: f.duration,
		ReadsPerWrite: f.readsPerW, Seed: f.seed, Workers: f.workers, PollInterval: f.poll,
		Mode: lab.Mode(f.mode), Condition: cond, Via: lab.Via(f.via)}
	if f.routers != "" {
		if cfg.Routers, err = lab.ParseRouters(f.routers); err != nil {
			return cfg, nil, "", err
		}
	}
	return cfg, rules, format, nil
}

// topology attaches to the topology the flags describe: --primary-dsn, or
// the one `causallab up` is running (its state file), or else one started
// for the run. The returned stop removes only what was started here (and
// writes an attached topology's state back, since faults change roles and
// epochs).
func (f *labFlags) topology(ctx context.Context, errw io.Writer) (*compose.Topology, func(), error) {
	cfg := compose.Config{Replicas: f.replicas, Backend: compose.Backend(f.backend)}
	if f.primaryDSN == "" && !f.fresh {
		path := defaultStatePath()
		st, err := compose.ReadStateFile(path)
		switch {
		case err == nil:
			topo, aerr := compose.Attach(ctx, st, nil)
			if aerr != nil {
				return nil, nil, fmt.Errorf("the topology recorded in %s: %w (run `causallab down`, or pass --fresh)", path, aerr)
			}
			fmt.Fprintf(errw, "causallab lab: using the running %s topology (state %s: primary %s, %d replicas)\n",
				st.Backend, path, topo.Primary().Addr(), len(topo.Replicas()))
			return topo, func() {
				if err := compose.WriteStateFile(path, topo.State()); err != nil {
					fmt.Fprintln(errw, "causallab lab: updating the state file:", err)
				}
			}, nil
		case !errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("state file %s: %w (run `causallab down`, or pass --fresh)", path, err)
		}
	}
	if f.primaryDSN != "" {
		cfg = compose.Config{Backend: compose.BackendExternal,
			External: compose.ExternalConfig{PrimaryDSN: f.primaryDSN, ReplicaDSNs: f.replicaDSNs}}
	} else {
		fmt.Fprintf(errw, "causallab lab: starting MySQL (%s backend, 1 primary + %d replicas)...\n", f.backend, f.replicas)
	}
	began := time.Now()
	topo, err := compose.Start(ctx, cfg)
	if f.primaryDSN == "" && (errors.Is(err, compose.ErrNoRootFS) || errors.Is(err, compose.ErrNoImage)) {
		// A fresh machine: build the MySQL root filesystem (and the image for
		// the docker backend) once, as `causallab up` does, then start again.
		fmt.Fprintln(errw, "causallab lab: building the MySQL root filesystem first (causallab image; cached, once)")
		if _, ierr := compose.EnsureImage(ctx, compose.ImageOptions{Progress: errw, SkipImage: cfg.Backend != compose.BackendDocker}); ierr != nil {
			return nil, nil, ierr
		}
		topo, err = compose.Start(ctx, cfg)
	}
	if err != nil {
		return nil, nil, err
	}
	if f.primaryDSN == "" {
		fmt.Fprintf(errw, "causallab lab: topology up in %.1fs\n", time.Since(began).Seconds())
	}
	stop := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := topo.Down(dctx); err != nil {
			fmt.Fprintln(errw, "causallab lab: removing the topology:", err)
		}
	}
	return topo, stop, nil
}

// progress returns a Progress callback drawing a bar on a terminal, and a
// finish func.
func (f *labFlags) progress(label string) (func(lab.Progress), func()) {
	if f.noProgress || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil, func() {}
	}
	var bar *progressbar.ProgressBar
	cb := func(p lab.Progress) {
		if bar == nil {
			bar = progressbar.NewOptions64(int64(max(p.Total, time.Second)/time.Millisecond),
				progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription(label),
				progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetPredictTime(true),
				progressbar.OptionClearOnFinish())
		}
		bar.Describe(fmt.Sprintf("%s  reads %d  RYW %d  MR %d", label, p.Reads, p.RYW, p.MR))
		_ = bar.Set64(min(int64(p.Elapsed/time.Millisecond), bar.GetMax64()))
	}
	return cb, func() {
		if bar != nil {
			_ = bar.Finish()
		}
	}
}

// emit prints the results, writes --out and applies --fail-on.
func (f *labFlags) emit(cmd *cobra.Command, results []*lab.Result, format lab.Format, rules []lab.FailRule) error {
	for _, r := range results {
		if err := lab.Write(cmd.OutOrStdout(), r, format); err != nil {
			return err
		}
	}
	if f.out != "" {
		if err := lab.WriteOut(f.out, results); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "causallab lab: wrote %s/report.html\n", f.out)
	}
	var fails []string
	for _, r := range results {
		fails = append(fails, lab.Failures(r, rules)...)
	}
	if len(fails) > 0 {
		return withExitCode(3, fmt.Errorf("--fail-on: %d rule(s) hold:\n  %s", len(fails), strings.Join(fails, "\n  ")))
	}
	return nil
}

func newLabCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run the experiments on real MySQL, beside the simulator's prediction",
		Long: `lab measures on a real MySQL primary and replicas what the simulator predicts:
how often each router showed a session a world without its own write (RYW) or
one older than it had seen (MR), counted from the rows the database returned.
Without --primary-dsn it uses the topology ` + "`causallab up`" + ` is running (its state
file) or, when none runs, starts a local topology for the run and removes it after.`,
	}
	cmd.AddCommand(newLabRoutersCmd(), newLabGatedCmd(), newLabFailoverCmd(), newLabHashCmd(), newLabChaosCmd(), newLabScenarioCmd())
	return cmd
}

func newLabRoutersCmd() *cobra.Command {
	var f labFlags
	cmd := &cobra.Command{
		Use:   "routers",
		Short: "The six routers under one live workload, with the simulator's prediction beside each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, rules, format, err := f.config()
			if err != nil {
				return err
			}
			topo, stop, err := f.topology(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer stop()
			prog, finish := f.progress("lab routers")
			cfg.Progress = prog
			res, err := lab.Routers(cmd.Context(), topo, lab.RoutersOptions{Config: cfg, NoPredict: f.noSim,
				Predict: lab.PredictOptions{Trials: f.simTrials}})
			finish()
			if err != nil {
				return err
			}
			return f.emit(cmd, []*lab.Result{res}, format, rules)
		},
	}
	f.register(cmd, "straggler+heavy", 200, 20*time.Second)
	cmd.Flags().StringVar(&f.routers, "routers", "", "comma-separated routers (default: the six; e.g. any,token-ryw-mr,token-wait(200ms))")
	return cmd
}

// labRun is the common body of the experiment commands.
func labRun(cmd *cobra.Command, f *labFlags, label string, run func(ctx context.Context, topo *compose.Topology, cfg lab.Config) ([]*lab.Result, error)) error {
	cfg, rules, format, err := f.config()
	if err != nil {
		return err
	}
	if !cmd.Flags().Changed("condition") {
		cfg.Condition = lab.ConditionSpec{} // the experiment's own default
	}
	topo, stop, err := f.topology(cmd.Context(), cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer stop()
	prog, finish := f.progress(label)
	cfg.Progress = prog
	results, err := run(cmd.Context(), topo, cfg)
	finish()
	if err != nil {
		return err
	}
	return f.emit(cmd, results, format, rules)
}

func newLabGatedCmd() *cobra.Command {
	var f labFlags
	cmd := &cobra.Command{
		Use:   "gated",
		Short: "Naive replica reads against GTID-gated reads under a standing lag",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labRun(cmd, &f, "lab gated", func(ctx context.Context, topo *compose.Topology, cfg lab.Config) ([]*lab.Result, error) {
				if !cmd.Flags().Changed("reads-per-write") {
					cfg.ReadsPerWrite = 0 // the experiment's default (1)
				}
				r, err := lab.Gated(ctx, topo, lab.GatedOptions{Config: cfg, NoPredict: f.noSim, Predict: lab.PredictOptions{Trials: f.simTrials}})
				return []*lab.Result{r}, err
			})
		},
	}
	f.register(cmd, "apply-delay", 200, 15*time.Second)
	return cmd
}

func newLabFailoverCmd() *cobra.Command {
	var f labFlags
	var candidate string
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Kill the primary while replicas lag: scalar vs GTID-set vs epoch tokens",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labRun(cmd, &f, "lab failover", func(ctx context.Context, topo *compose.Topology, cfg lab.Config) ([]*lab.Result, error) {
				r, err := lab.Failover(ctx, topo, lab.FailoverOptions{Config: cfg, Candidate: candidate, NoPredict: f.noSim, SimTrials: f.simTrials})
				return []*lab.Result{r}, err
			})
		},
	}
	f.register(cmd, "apply-delay", 200, 16*time.Second)
	cmd.Flags().StringVar(&candidate, "promote", "", "replica to promote (default: the first)")
	return cmd
}

func newLabHashCmd() *cobra.Command {
	var f labFlags
	var down string
	var load int
	cmd := &cobra.Command{
		Use:   "hash",
		Short: "Hashing edge cases on real servers: a replica goes down; load drift under rebalance-override",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labRun(cmd, &f, "lab hash", func(ctx context.Context, topo *compose.Topology, cfg lab.Config) ([]*lab.Result, error) {
				return lab.Hash(ctx, topo, lab.HashOptions{Config: cfg, Down: down, DriftLoad: load, NoPredict: f.noSim})
			})
		},
	}
	f.register(cmd, "straggler", 200, 15*time.Second)
	cmd.Flags().StringVar(&down, "down", "", "replica that goes down (default: the second)")
	cmd.Flags().IntVar(&load, "drift-load", 40, "outside reads in flight added on the first replica during the drift")
	return cmd
}

func newLabChaosCmd() *cobra.Command {
	var f labFlags
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Random faults and one failover under token-ryw-mr+epoch: expect zero violations, every read accounted for",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return labRun(cmd, &f, "lab chaos", func(ctx context.Context, topo *compose.Topology, cfg lab.Config) ([]*lab.Result, error) {
				// --routers was already parsed into cfg.Routers by labFlags.parse.
				r, err := lab.Chaos(ctx, topo, lab.ChaosOptions{Config: cfg, Every: every})
				return []*lab.Result{r}, err
			})
		},
	}
	f.register(cmd, "identical", 200, 60*time.Second)
	cmd.Flags().DurationVar(&every, "every", 3*time.Second, "mean time between faults")
	cmd.Flags().StringVar(&f.routers, "routers", "", "routers (default token-ryw-mr+epoch)")
	return cmd
}

func newLabScenarioCmd() *cobra.Command {
	var f labFlags
	var root string
	cmd := &cobra.Command{
		Use:   "scenario <name|dir>...",
		Short: "Run scenario folders (scenario.yaml: condition, events, routers, expected results); exit 3 when an expectation fails",
		Long: `scenario runs data-folder scenarios: a directory holding scenario.yaml, or the
name of a folder under --scenarios (default lab/scenarios). "all" runs every
folder there. A failed expectation sets exit code 3, like --fail-on.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var dirs []string
			for _, a := range args {
				switch {
				case a == "all":
					ds, err := lab.ScenarioDirs(root)
					if err != nil {
						return err
					}
					dirs = append(dirs, ds...)
				case fileExists(filepath.Join(a, lab.ScenarioFile)):
					dirs = append(dirs, a)
				default:
					dirs = append(dirs, filepath.Join(root, a))
				}
			}
			var scs []*lab.Scenario
			for _, d := range dirs {
				sc, err := lab.LoadScenario(d)
				if err != nil {
					return err
				}
				scs = append(scs, sc)
			}
			cfg, rules, format, err := f.config()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("duration") {
				cfg.Duration = 0 // the scenario's own
			}
			if !cmd.Flags().Changed("sessions") {
				cfg.Sessions = 0
			}
			if !cmd.Flags().Changed("write-rate") {
				cfg.WriteRate = 0
			}
			if !cmd.Flags().Changed("reads-per-write") {
				cfg.ReadsPerWrite = 0
			}
			topo, stop, err := f.topology(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer stop()
			var results []*lab.Result
			var failed []string
			for _, sc := range scs {
				prog, finish := f.progress("lab scenario " + sc.Name)
				cfg.Progress = prog
				res, fails, err := lab.RunScenario(cmd.Context(), topo, sc, lab.ScenarioOptions{Config: cfg})
				finish()
				if err != nil {
					return err
				}
				for _, x := range fails {
					failed = append(failed, sc.Name+": "+x)
				}
				if len(fails) == 0 {
					res.Notes = append(res.Notes, "scenario "+sc.Name+": every expectation held")
				}
				res.Notes = append(res.Notes, fails...)
				results = append(results, res)
			}
			if err := f.emit(cmd, results, format, rules); err != nil {
				return err
			}
			if len(failed) > 0 {
				return withExitCode(3, fmt.Errorf("%d expectation(s) failed:\n  %s", len(failed), strings.Join(failed, "\n  ")))
			}
			return nil
		},
	}
	f.register(cmd, "identical", 200, 20*time.Second)
	cmd.Flags().StringVar(&root, "scenarios", "lab/scenarios", "folder of scenario folders")
	return cmd
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
