package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/lab"
)

// labFlags are the flags every `lab` experiment shares.
type labFlags struct {
	replicas    int
	engine      string
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
	wide        bool
	out         string
	history     string
	failOn      string
	noSim       bool
	simTrials   int
	noProgress  bool
	via         string
	proxies     int
	reconnect   int
	tokenScope  string
	positions   string
	watermark   string
	globalSrc   string
	fresh       bool
}

// register adds the flags; the workload flags' defaults are sc's (the
// experiment's own), or Config's when sc is nil.
func (f *labFlags) register(cmd *cobra.Command, sc *lab.Scenario) {
	cond, rate, dur, sessions, rpw := "identical", 200.0, 20*time.Second, 2000, 3
	if sc != nil {
		if sc.Condition != "" {
			cond = sc.Condition
		}
		if sc.WriteRate > 0 {
			rate = sc.WriteRate
		}
		if sc.Duration > 0 {
			dur = sc.Duration
		}
		if sc.Sessions > 0 {
			sessions = sc.Sessions
		}
		if sc.ReadsPerWrite > 0 {
			rpw = sc.ReadsPerWrite
		}
	}
	fl := cmd.Flags()
	if sc == nil || sc.Name != "gated" { // lab gated --engine is the seed harness
		fl.StringVar(&f.engine, "engine", "", "engine of the topology started for the run: mysql (default), mariadb (positions polled, watermark read after each read: docs/lab-mariadb.md) or postgres (every router through live.PGRouter: docs/lab-postgres.md); an attached topology runs its own")
	}
	fl.IntVar(&f.replicas, "replicas", 3, "replicas of the topology started for the run (when causallab up runs none)")
	fl.BoolVar(&f.fresh, "fresh", false, "start a topology for the run even when causallab up runs one")
	fl.StringVar(&f.backend, "backend", backendAuto, "how to run the topology started for the run: auto, docker or local (chrooted server processes); auto: "+autoBackendRule)
	fl.StringVar(&f.primaryDSN, "primary-dsn", "", "attach to your own primary (user:pw@tcp(host:port)/) instead of starting a topology")
	fl.StringSliceVar(&f.replicaDSNs, "replica-dsn", nil, "your own replicas' DSNs (with --primary-dsn; repeat or comma-separate)")
	fl.IntVar(&f.sessions, "sessions", sessions, "sessions S")
	fl.IntVar(&f.hotRows, "hot-rows", 8, "shared hot rows (monotonic-reads ground truth)")
	fl.Float64Var(&f.writeRate, "write-rate", rate, "offered writes/s (Poisson)")
	fl.DurationVar(&f.duration, "duration", dur, "how long writes are offered (the reads that follow are completed; scripted events scale with it)")
	fl.IntVar(&f.readsPerW, "reads-per-write", rpw, "reads after each write (closed loop, log-uniform gaps)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the offered workload")
	fl.IntVar(&f.workers, "workers", 24, "driver goroutines (each with a connection per node)")
	fl.DurationVar(&f.poll, "poll", 5*time.Millisecond, "replica position poll interval")
	fl.StringVar(&f.mode, "mode", "concurrent", "concurrent (routers share one live workload) or sequential (each alone)")
	fl.StringVar(&f.condition, "condition", cond, "lag condition: identical, straggler, heavy, apply-delay, staggered, row-lock, unordered-commit, or a '+' combination")
	fl.StringVar(&f.format, "format", "md", "output: md (the compact table, fits 80 columns), csv or json (every column)")
	fl.BoolVar(&f.wide, "wide", false, "md: every column and note (the compact table is what README shows)")
	fl.StringVar(&f.history, "history", "", "also write the run's history into this directory: every operation as JSON lines and as Elle's rw-register EDN (docs/lab-checks.md, \"Histories\")")
	fl.StringVar(&f.out, "out", "", "also write the tables in full (md, csv, json), the charts (SVG and PNG) and report.html into this directory")
	fl.StringVar(&f.failOn, "fail-on", "", "exit 3 when a rule holds, e.g. 'ryw>0,mr>0' or 'token-ryw-mr:ryw>0' (metrics: "+strings.Join(lab.FailMetricNames(), ", ")+")")
	fl.BoolVar(&f.noSim, "no-sim", false, "skip the simulator's prediction")
	fl.IntVar(&f.simTrials, "sim-trials", 4, "simulator trials averaged for the prediction")
	fl.BoolVar(&f.noProgress, "no-progress", false, "no progress bar even on a terminal")
	fl.StringVar(&f.globalSrc, "global-source", "primary-query", "where global routers take a read's target: primary-query (the primary's executed set per read) or view (the router's view of the primary, no round trip)")
	fl.StringVar(&f.positions, "positions", "", "GTID-token routers' positions: binlog (a binlogwatch stream per node; MySQL's default) or poll (every --poll, as causallab proxy does by default; MariaDB's)")
	fl.StringVar(&f.watermark, "watermark-source", "", "monotonic-reads watermark of the GTID-token routers: query (read after each replica read) or lazy (bounded by a poll only when a session moves; needs --positions poll; MySQL only); default lazy with poll on MySQL, else query")
	fl.IntVar(&f.proxies, "proxies", 1, "--via proxy: proxies per router, a session's statements dealt across them in turn")
	fl.IntVar(&f.reconnect, "reconnect-every", 0, "--via proxy: redial each connection after this many statements (0: never)")
	fl.StringVar(&f.tokenScope, "token-scope", "connection", "--via proxy: what a session carries: connection (its writes' token per read; monotonic reads per connection) or session (the signed session token: writes and what it was shown, across connections and proxies)")
	fl.StringVar(&f.via, "via", "router", "routing path: router (package router/live over binlogwatch positions) or proxy (causallab proxy in-process, tokens in comments); scalar-token routers always run through router/live")
}

// options builds the scenario options from the flags (the workload flags
// given on the command line override the scenario's own values) and checks
// every flag that needs no topology: a bad one is a usage error before
// anything starts.
func (f *labFlags) options(cmd *cobra.Command) (lab.ScenarioOptions, []lab.FailRule, lab.Format, error) {
	var o lab.ScenarioOptions
	rules, err := lab.ParseFailOn(f.failOn)
	if err != nil {
		return o, nil, "", flagError("fail-on", err)
	}
	format, err := f.formatAndBackend()
	if err != nil {
		return o, nil, "", err
	}
	if f.primaryDSN != "" {
		for _, dsn := range append([]string{f.primaryDSN}, f.replicaDSNs...) {
			if _, err := mysql.ParseDSN(dsn); err != nil {
				return o, nil, "", usageErrorf("DSN %q: %v", dsn, err)
			}
		}
	} else if len(f.replicaDSNs) > 0 {
		return o, nil, "", usageErrorf("--replica-dsn needs --primary-dsn")
	}
	if err := (compose.Config{Replicas: f.replicas, Backend: compose.BackendLocal}).Validate(); err != nil {
		return o, nil, "", flagError("replicas", err)
	}
	if f.simTrials < 1 || f.simTrials > 1000 {
		return o, nil, "", usageErrorf("--sim-trials %d: want 1..1000", f.simTrials)
	}
	if f.out != "" {
		if st, err := os.Stat(f.out); err == nil && !st.IsDir() {
			return o, nil, "", usageErrorf("--out %s: not a directory", f.out)
		}
	}
	gsrc, err := lab.ParseGlobalSource(f.globalSrc)
	if err != nil {
		return o, nil, "", flagError("global-source", err)
	}
	cfg := lab.Config{HotRows: f.hotRows, Seed: f.seed, Workers: f.workers, PollInterval: f.poll,
		Mode: lab.Mode(f.mode), Via: lab.Via(f.via), GlobalSource: gsrc,
		Proxies: f.proxies, ReconnectEvery: f.reconnect, TokenScope: lab.TokenScope(f.tokenScope),
		RecordHistory: f.history != "",
		Positions:     lab.Positions(f.positions), WatermarkSource: lab.WatermarkSource(f.watermark)}
	changed := cmd.Flags().Changed
	if changed("condition") {
		if cfg.Condition, err = lab.ParseCondition(f.condition); err != nil {
			return o, nil, "", flagError("condition", err)
		}
	}
	if changed("sessions") {
		cfg.Sessions = f.sessions
	}
	if changed("write-rate") {
		cfg.WriteRate = f.writeRate
	}
	if changed("duration") {
		cfg.Duration = f.duration
	}
	if changed("reads-per-write") {
		cfg.ReadsPerWrite = f.readsPerW
	}
	if f.routers != "" {
		if cfg.Routers, err = lab.ParseRouters(f.routers); err != nil {
			return o, nil, "", flagError("routers", err)
		}
	}
	o = lab.ScenarioOptions{Config: cfg, NoPredict: f.noSim, Predict: lab.PredictOptions{Trials: f.simTrials}}
	return o, rules, format, nil
}

// check checks scs under o, the --fail-on rules against their routers and
// the nodes the flags name, and makes --out: all before anything starts.
func (f *labFlags) check(scs []*lab.Scenario, o lab.ScenarioOptions, rules []lab.FailRule) error {
	for _, sc := range scs {
		if err := sc.Check(o); err != nil {
			return withExitCode(exitUsage, err)
		}
	}
	// lab hash runs three folders: a rule applies to every run that has
	// its router, and is a typo only if none has it.
	if err := lab.CheckFailOnAll(scs, o, rules); err != nil {
		return flagError("fail-on", err)
	}
	if err := f.checkNodes(o); err != nil {
		return err
	}
	if f.out != "" { // last: made only when every check passed
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return flagError("out", err)
		}
	}
	return nil
}

// checkNodes checks the nodes --promote and --down name against the
// topology open will start (an attached one is checked by the run).
func (f *labFlags) checkNodes(o lab.ScenarioOptions) error {
	if !f.startsTopology() {
		return nil
	}
	for kind, node := range o.Nodes {
		if node == "" {
			continue
		}
		ok := false
		for i := 1; i <= f.replicas; i++ {
			ok = ok || node == fmt.Sprintf("replica%d", i)
		}
		if !ok {
			flag := map[lab.EventKind]string{lab.EvFailover: "promote", lab.EvKill: "down"}[kind]
			return usageErrorf("--%s %s: the topology started for the run has replicas replica1..replica%d (--replicas)", flag, node, f.replicas)
		}
	}
	return nil
}

// startsTopology reports whether open will start a topology (no
// --primary-dsn, and --fresh or no `causallab up` topology running).
func (f *labFlags) startsTopology() bool {
	if f.primaryDSN != "" {
		return false
	}
	return f.fresh || compose.CheckNoneRunning(defaultStatePath()) == nil
}

// open attaches to the topology the flags describe: --primary-dsn, or the
// one `causallab up` is running (its state file), or else one started for
// the run (compose.Open; closing it removes only what was started here) on
// the backend --backend names (auto: chosen and printed as `up` does).
func (f *labFlags) open(ctx context.Context, errw io.Writer, rep *reporter) (*compose.Opened, error) {
	backend := compose.Backend(f.backend)
	if f.backend == backendAuto {
		backend = "" // attaching: the topology's own
		if f.startsTopology() {
			var es []compose.Engine
			if f.engine != "" {
				es = append(es, compose.Engine(f.engine))
			}
			b, why := compose.ChooseBackend(ctx, "", es...)
			rep.Line(fmt.Sprintf("backend %s (auto: %s)", b, why))
			backend = b
		}
	}
	o := compose.OpenOptions{StatePath: defaultStatePath(), Fresh: f.fresh,
		Config: compose.Config{Engine: compose.Engine(f.engine), Replicas: f.replicas, Backend: backend},
		Build:  rep.buildOptions()}
	if f.primaryDSN != "" {
		o.Config = compose.Config{Backend: compose.BackendExternal,
			External: compose.ExternalConfig{PrimaryDSN: f.primaryDSN, ReplicaDSNs: f.replicaDSNs}}
	}
	topo, err := compose.Open(ctx, o)
	if errors.Is(err, compose.ErrStateFile) {
		return nil, fmt.Errorf("%w (run `causallab down`, or pass --fresh)", err)
	}
	if err == nil && f.engine != "" && topo.Engine() != compose.Engine(f.engine) {
		// An attached topology runs its own engine: --engine is not
		// dropped silently.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return nil, errors.Join(usageErrorf("--engine %s, but the topology runs %s (pass --fresh to start a %s one, or `causallab down` first)",
			f.engine, topo.Engine(), f.engine), topo.Close(cctx))
	}
	return topo, err
}

// progress returns a lab Progress callback that shows each phase of a
// scenario's run on rep.
func progress(rep *reporter) func(lab.Progress) {
	return func(p lab.Progress) {
		counts := fmt.Sprintf("reads %d RYW %d MR %d", p.Reads, p.RYW, p.MR)
		switch p.Phase {
		case lab.PhaseWorkload:
			rep.Phase(string(p.Phase), int64(max(p.Total, time.Second)/time.Millisecond), "writes_offered_for", p.Total)
			rep.Set(int64(p.Elapsed/time.Millisecond), counts)
		case lab.PhaseDrain:
			rep.Phase(string(p.Phase), 0, "reads", p.Reads, "ryw", p.RYW, "mr", p.MR)
			rep.Set(0, counts)
		default:
			rep.Phase(string(p.Phase), 0)
		}
	}
}

// emit prints the results, writes --out and applies --fail-on.
func (f *labFlags) emit(cmd *cobra.Command, results []*lab.Result, format lab.Format, rules []lab.FailRule) error {
	if err := writeResults(cmd.OutOrStdout(), results, format, f.wide); err != nil {
		return err
	}
	if f.out != "" {
		rep := newReporter(cmd.ErrOrStderr(), "lab", f.noProgress)
		rep.Phase("writing the report", 0, "dir", f.out)
		err := lab.WriteOut(f.out, results)
		rep.Done()
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "causallab lab: wrote %s/report.html\n", f.out)
	}
	if f.history != "" {
		if err := lab.WriteHistory(f.history, results); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "causallab lab: wrote the history into %s\n", f.history)
	}
	fails := lab.FailuresAll(results, rules)
	if len(fails) > 0 {
		return withExitCode(3, fmt.Errorf("--fail-on: %d rule(s) hold:\n  %s", len(fails), strings.Join(fails, "\n  ")))
	}
	return nil
}

// writeResults prints a lab run's results: hashing runs as one compact
// summary, others each as its table; in markdown their compact views (80
// columns) unless wide.
func writeResults(out io.Writer, results []*lab.Result, format lab.Format, wide bool) error {
	if allHash(results) && !wide {
		return lab.WriteHash(out, results, format)
	}
	for _, r := range results {
		if err := lab.Write(out, r, format, wide); err != nil {
			return err
		}
	}
	return nil
}

// allHash reports whether results are hashing runs only (one compact
// table for all of them).
func allHash(results []*lab.Result) bool {
	for _, r := range results {
		if !lab.IsHashRun(r) {
			return false
		}
	}
	return len(results) > 0
}

// experiments are the experiments `lab` names, with their help: each is
// one built-in scenario, or several run on one topology (folders).
var experiments = []struct {
	name, short string
	folders     []string
}{
	{"routers", "The routers under one live workload, beside the simulator's", nil},
	{"gated", "Naive replica reads against gated reads under a standing lag", nil},
	{"failover", "Kill the primary under lag: scalar vs GTID-set vs epoch tokens", nil},
	{"hash", "Hashing's edge cases: a replica down, flapping, load drift", []string{"hash-down", "hash-flap", "hash-drift"}},
	{"chaos", "Random faults and a failover: expect zero violations", nil},
}

func newLabCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run the experiments on real servers, beside the simulator's",
		Long: `lab measures on a real MySQL primary and replicas what the simulator predicts:
how often each router showed a session a world without its own write (RYW) or
one older than it had seen (MR), counted from the rows the database returned.
Each experiment is a built-in scenario folder (lab/scenarios, embedded in the
binary); ` + "`lab scenario`" + ` runs any folder, yours included.
Without --primary-dsn it uses the topology ` + "`causallab up`" + ` is running (its
state file) or, when none runs, starts one for the run (--backend) and
removes it after. Every flag is checked before anything starts.`,
	}
	for _, x := range experiments {
		cmd.AddCommand(newLabExperimentCmd(x.name, x.short, x.folders))
	}
	cmd.AddCommand(newLabScenarioCmd())
	return cmd
}

// runScenarios checks every flag, then runs scs, each on the topology it
// declares (lab.RunScenarios: a fresh one after a scenario that failed
// over), prints every finished scenario's results and returns the
// expectations that failed. A scenario's error is returned after the
// others' results are printed (exit 1, before expectations and --fail-on).
func (f *labFlags) runScenarios(cmd *cobra.Command, scs []*lab.Scenario, o lab.ScenarioOptions, format lab.Format, rules []lab.FailRule) ([]string, error) {
	if err := f.check(scs, o, rules); err != nil {
		return nil, err
	}
	ctx, errw := cmd.Context(), cmd.ErrOrStderr()
	outs, closeErr := lab.RunScenarios(ctx, &cliTopologies{f: f, errw: errw}, scs, o, func(sc *lab.Scenario, so *lab.ScenarioOptions) func() {
		rep := newReporter(errw, "lab "+sc.Name, f.noProgress)
		so.Config.Progress = progress(rep)
		return rep.Done
	})
	results, failed, runErr := lab.CollectScenarios(outs)
	var emitErr error
	if len(results) > 0 {
		emitErr = f.emit(cmd, results, format, rules)
	}
	if err := errors.Join(runErr, closeErr); err != nil {
		return failed, err
	}
	return failed, emitErr
}

// cliTopologies opens the topologies the flags describe (lab.TopologySource).
type cliTopologies struct {
	f    *labFlags
	errw io.Writer
}

func (s *cliTopologies) Open(ctx context.Context) (lab.Topology, error) {
	rep := newReporter(s.errw, "lab", s.f.noProgress)
	topo, err := s.f.open(ctx, s.errw, rep)
	rep.Done()
	if err != nil {
		return nil, err
	}
	return topo, nil
}

func (s *cliTopologies) Close(ctx context.Context, t lab.Topology) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return t.(*compose.Opened).Close(cctx)
}

// newLabExperimentCmd is `lab NAME`: the built-in scenario NAME, with the
// flags its events take. Its expectations are printed in the notes; the
// exit code follows --fail-on only (`lab scenario NAME` exits 3 when an
// expectation fails).
func newLabExperimentCmd(name, short string, folders []string) *cobra.Command {
	var f labFlags
	var promote, down string
	var driftLoad int
	var weights []int
	var every time.Duration
	var engines string
	var gf gatedEngineFlags
	if folders == nil {
		folders = []string{name}
	}
	var scs []*lab.Scenario
	var loadErr error
	for _, n := range folders {
		sc, err := lab.BuiltinScenario(n)
		if err != nil {
			loadErr = err
			break
		}
		scs = append(scs, sc)
	}
	var sc *lab.Scenario // the first: its workload gives the flags' defaults
	if len(scs) > 0 {
		sc = scs[0]
	}
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if loadErr != nil {
				return loadErr
			}
			if err := refuseZero(cmd, labZeroDefaults, gatedZeroDefaults); err != nil {
				return err
			}
			switch {
			case name == "failover" && useEngines(cmd):
				return runEngineFailover(cmd, &f, engines)
			case name == "gated" && gf.engine != "":
				return runGatedEngine(cmd, &f, &gf)
			case name == "gated":
				for _, n := range gatedEngineOnly {
					if cmd.Flags().Changed(n) {
						return usageErrorf("--%s is a flag of the seed harness: it needs --engine", n)
					}
				}
			}
			o, rules, format, err := f.options(cmd)
			if err != nil {
				return err
			}
			o.Nodes = map[lab.EventKind]string{lab.EvFailover: promote, lab.EvKill: down}
			o.DriftLoad, o.ChaosEvery = driftLoad, every
			o.Config.Weights = weights
			_, err = f.runScenarios(cmd, scs, o, format, rules)
			return err
		},
	}
	if len(scs) == 1 {
		cmd.Long = strings.TrimSpace(sc.Description) + "\n\nThis is the built-in scenario " + name + "; `causallab lab scenario " + name +
			"`\nruns the same and exits 3 when one of its expectations fails."
	} else if len(scs) > 1 {
		var b strings.Builder
		for _, s := range scs {
			fmt.Fprintf(&b, "%s: %s\n\n", s.Name, strings.TrimSpace(s.Description))
		}
		cmd.Long = b.String() + fold("These are the built-in scenarios "+strings.Join(folders, ", ")+", run on one topology; `causallab lab scenario "+
			strings.Join(folders, " ")+"` runs the same and exits 3 when one of their expectations fails.", termWidth)
	}
	switch name {
	case "failover":
		cmd.Long = `By default lab failover compares MySQL (built on first use, as every lab
command builds it) with MariaDB and PostgreSQL when they are built here
(--engines auto; one line names those skipped and the command that builds
them; --engines mysql,mariadb,postgres builds every one first): one fresh
topology each, every native token through a real failover, one table with
a row per engine x token. Given a flag only the scenario below takes
(--fail-on, --routers, --via, --promote, --out, ...) and no --engines, it
runs that MySQL scenario instead.

` + cmd.Long
	case "gated":
		cmd.Long += `

With --engine postgres|mysql|mariadb it reproduces the published seed
harness instead: a fresh topology of a primary and one delayed replica
(250 ms recovery_min_apply_delay on PostgreSQL), 300 users, one seeded
stream of 3,788 reads through a naive and an LSN- or GTID-gated router,
then the stale share by the wait D after a write (docs/results-gated.md).`
	}
	f.register(cmd, sc)
	fl := cmd.Flags()
	fl.StringVar(&f.routers, "routers", "", "comma-separated routers instead of the scenario's (e.g. any,token-ryw-mr,token-wait(200ms))")
	switch name {
	case "failover":
		fl.StringVar(&promote, "promote", "", "replica to promote (default: the first)")
		fl.StringVar(&engines, "engines", enginesAuto, "engines to compare, one fresh topology each (comma-separated: mysql,mariadb,postgres, each built first when missing; auto: MySQL and the others built here, those skipped named): every native token per engine through a real failover; honours "+
			strings.Join(prefixed(engineFailoverFlags), ", ")+"; any other lab flag (--fail-on, --routers, --via, --promote, --out, ...) without --engines runs the single-engine MySQL scenario instead (as lab scenario failover)")
	case "gated":
		gf.register(cmd)
	case "hash":
		fl.StringVar(&down, "down", "", "replica that goes down and flaps (default: the first, the freshest)")
		fl.IntVar(&driftLoad, "drift-load", 40, "outside reads in flight added on the first replica during the drift")
		fl.IntSliceVar(&weights, "weights", nil, "replicas' hashing weights in order, e.g. 2,1,1 (as ProxySQL's hostgroup weights; default 1 each)")
	case "chaos":
		fl.DurationVar(&every, "every", 3*time.Second, "mean time between faults")
	}
	return cmd
}

func newLabScenarioCmd() *cobra.Command {
	var f labFlags
	var root string
	cmd := &cobra.Command{
		Use:   "scenario <name|dir>...",
		Short: "Run scenario folders; exit 3 when an expectation fails",
		Long: `scenario runs data-folder scenarios: a directory holding scenario.yaml, or the
name of a folder under --scenarios (default: the built-in scenarios, embedded in
the binary). "all" runs every folder there. Workload flags given on the command
line override the scenarios' own values. A failed expectation sets exit code 3,
like --fail-on.

` + fold("Built-in: "+strings.Join(builtinNames(), ", ")+".", termWidth),
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseZero(cmd, labZeroDefaults); err != nil {
				return err
			}
			catalog := lab.Builtin()
			if root != "" {
				if st, err := os.Stat(root); err != nil || !st.IsDir() {
					return withExitCode(2, fmt.Errorf("--scenarios %s: not a folder of scenario folders", root))
				}
				catalog = os.DirFS(root)
			}
			scs, err := lab.ResolveScenarios(catalog, args...)
			if err != nil {
				return withExitCode(2, err)
			}
			o, rules, format, err := f.options(cmd)
			if err != nil {
				return err
			}
			failed, err := f.runScenarios(cmd, scs, o, format, rules)
			if err != nil {
				return err
			}
			if len(failed) > 0 {
				return withExitCode(3, fmt.Errorf("%d expectation(s) failed:\n  %s", len(failed), strings.Join(failed, "\n  ")))
			}
			return nil
		},
	}
	f.register(cmd, nil)
	cmd.Flags().StringVar(&root, "scenarios", "", "folder of scenario folders (default: the built-in ones)")
	cmd.Flags().StringVar(&f.routers, "routers", "", "comma-separated routers instead of each scenario's")
	return cmd
}

func builtinNames() []string {
	names, _ := lab.ScenarioNames(lab.Builtin())
	return names
}

// enginesAuto is --engines' default: every engine this machine has.
const enginesAuto = "auto"

// engineFailoverFlags are the flags `lab failover --engines` honours.
var engineFailoverFlags = []string{"engines", "sessions", "duration", "seed", "backend", "format", "wide", "no-sim", "sim-trials", "no-progress", "history"}

// gatedEngineOnly are the flags only `lab gated --engine` takes;
// gatedEngineFlagsAll every flag it honours.
var (
	gatedEngineOnly     = []string{"engine", "apply-delay", "reads", "trials", "sweep-max", "sweep-step", "op-gap"}
	gatedEngineFlagsAll = append([]string{"sessions", "seed", "backend", "format", "wide", "out", "no-progress", "history"}, gatedEngineOnly...)
)

func prefixed(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "--" + n
	}
	return out
}

// changedOutside returns the flags set on cmd's command line that are not
// in allowed, as --name.
func changedOutside(cmd *cobra.Command, allowed []string) []string {
	var out []string
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if !slices.Contains(allowed, fl.Name) {
			out = append(out, "--"+fl.Name)
		}
	})
	return out
}

// useEngines says whether `lab failover` runs the engine comparison
// (--engines given, or no flag only the MySQL scenario takes) or the
// single-engine MySQL scenario (such a flag given without --engines).
func useEngines(cmd *cobra.Command) bool {
	return cmd.Flags().Changed("engines") || len(changedOutside(cmd, engineFailoverFlags)) == 0
}

// gatedEngineFlags are `lab gated --engine`'s own flags.
type gatedEngineFlags struct {
	engine              string
	applyDelay          time.Duration
	reads, trials       int
	sweepMax, sweepStep time.Duration
	opGap               time.Duration
}

func (g *gatedEngineFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&g.engine, "engine", "", "reproduce the published seed harness on a fresh topology of this engine instead (mysql, mariadb or postgres): "+
		"one replica with --apply-delay, --sessions users (default 300), one seeded stream of --reads reads through a naive and a gated router, then the D-sweep; honours "+
		strings.Join(prefixed(gatedEngineFlagsAll[:len(gatedEngineFlagsAll)-len(gatedEngineOnly)]), ", "))
	fl.DurationVar(&g.applyDelay, "apply-delay", 0, "with --engine: the replica's apply delay (default 250ms on postgres, which takes milliseconds; 1s on mysql and mariadb, which take whole seconds)")
	fl.IntVar(&g.reads, "reads", 3788, "with --engine: reads in the stream")
	fl.IntVar(&g.trials, "trials", 300, "with --engine: write-wait-read trials at each D of the sweep (0: no sweep)")
	fl.DurationVar(&g.sweepMax, "sweep-max", 0, "with --engine: the sweep's largest D (default twice the apply delay on postgres, three times on mysql and mariadb)")
	fl.DurationVar(&g.sweepStep, "sweep-step", 0, "with --engine: the sweep's step (default --sweep-max/20)")
	fl.DurationVar(&g.opGap, "op-gap", 2*time.Millisecond, "with --engine: mean pause (exponential) before each step of the stream")
}

// runGatedEngine is `lab gated --engine`: lab.RunGatedEngine on a fresh
// topology, its two tables (and --out: the tables, the result and the
// D-sweep's picture).
func runGatedEngine(cmd *cobra.Command, f *labFlags, g *gatedEngineFlags) error {
	if bad := changedOutside(cmd, gatedEngineFlagsAll); len(bad) > 0 {
		return usageErrorf("--engine runs the seed harness, which does not take %s (it takes %s)", strings.Join(bad, ", "), strings.Join(prefixed(gatedEngineFlagsAll), ", "))
	}
	format, err := f.formatAndBackend()
	if err != nil {
		return err
	}
	if f.out != "" {
		if st, err := os.Stat(f.out); err == nil && !st.IsDir() {
			return usageErrorf("--out %s: not a directory", f.out)
		}
	}
	cfg := lab.GatedEngineConfig{Engine: compose.Engine(g.engine), Backend: compose.BackendLocal, ApplyDelay: g.applyDelay, Reads: g.reads,
		Trials: g.trials, SweepMax: g.sweepMax, SweepStep: g.sweepStep, OpGap: g.opGap, Seed: f.seed, RecordHistory: f.history != ""}
	switch {
	case g.trials < 0:
		return usageErrorf("--trials %d: want 0 (no sweep) or more", g.trials)
	case g.trials == 0:
		cfg.Trials = -1
	}
	if g.opGap < 0 {
		return usageErrorf("--op-gap %v: want 0 (no pause) or more", g.opGap)
	}
	if g.opGap == 0 {
		cfg.OpGap = -1
	}
	if cmd.Flags().Changed("sessions") {
		cfg.Users = f.sessions
	}
	if err := cfg.Validate(); err != nil {
		return withExitCode(exitUsage, err)
	}
	ctx, errw := cmd.Context(), cmd.ErrOrStderr()
	rep := newReporter(errw, "lab gated", f.noProgress)
	cfg.Backend = compose.Backend(f.backend)
	if f.backend == backendAuto {
		b, why := compose.ChooseBackend(ctx, "", cfg.Engine)
		rep.Line(fmt.Sprintf("backend %s (auto: %s)", b, why))
		cfg.Backend = b
	}
	if err := compose.EnsureEngine(ctx, cfg.Engine, cfg.Backend, rep.buildOptions()); err != nil {
		rep.Done()
		return oneLine(err)
	}
	cfg.Progress = func(phase string) { rep.Line(fmt.Sprintf("%s: %s", cfg.Engine, phase)) }
	res, err := lab.RunGatedEngine(ctx, cfg)
	rep.Done()
	if err != nil {
		return oneLine(err)
	}
	if err := writeGatedEngine(cmd.OutOrStdout(), res, format, f.wide); err != nil {
		return err
	}
	if f.out != "" {
		if err := lab.WriteGatedEngineOut(f.out, res); err != nil {
			return err
		}
		fmt.Fprintf(errw, "causallab lab gated: wrote %s\n", f.out)
	}
	if f.history != "" {
		for _, h := range []struct {
			name string
			h    lab.EngineHistory
		}{{"gated-" + string(res.Engine), res.History}, {"gated-" + string(res.Engine) + "-sweep", res.SweepHistory}} {
			if len(h.h.Ops) == 0 {
				continue // no sweep (--trials 0)
			}
			if err := lab.WriteHistoryFiles(f.history, h.name, h.h.Ops, h.h.Sessions, h.h.HotRows); err != nil {
				return oneLine(err)
			}
		}
		fmt.Fprintf(errw, "causallab lab: wrote the history into %s\n", f.history)
	}
	return nil
}

// writeGatedEngine prints lab gated --engine's two tables, in markdown
// their compact views (80 columns) unless wide.
func writeGatedEngine(out io.Writer, res *lab.GatedEngineResult, format lab.Format, wide bool) error {
	ts := lab.GatedEngineTables(res)
	if err := writeTables(out, ts[:1], format, wide, false); err != nil {
		return err
	}
	return writeTables(out, ts[1:], format, wide, true)
}

// formatAndBackend checks the lab flags every experiment takes: --format
// (parsed) and --backend (auto, docker or local).
func (f *labFlags) formatAndBackend() (lab.Format, error) {
	format, err := lab.ParseFormat(f.format)
	if err != nil {
		return format, flagError("format", err)
	}
	switch f.backend {
	case backendAuto, string(compose.BackendDocker), string(compose.BackendLocal):
	default:
		return format, usageErrorf("--backend %q: want auto, docker or local", f.backend)
	}
	return format, nil
}
