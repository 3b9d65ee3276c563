package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/sim"
)

// defaultStatePath is where `up` records the running topology.
func defaultStatePath() string {
	if p := os.Getenv("CAUSALLAB_STATE"); p != "" {
		return p
	}
	return filepath.Join(compose.DefaultCacheDir(), "topology.json")
}

// oneLine flattens joined errors into one line.
func oneLine(err error) error {
	if err == nil {
		return nil
	}
	s := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	return &lineError{msg: s, err: err}
}

type lineError struct {
	msg string
	err error
}

func (e *lineError) Error() string { return e.msg }
func (e *lineError) Unwrap() error { return e.err }

// newComposeCmds returns the topology commands: up, status, down, fault, image.
func newComposeCmds() []*cobra.Command {
	statePath := defaultStatePath()
	// testcontainers-go prints a banner and progress through its default
	// logger; send it to slog (debug) so that -v shows it.
	tclog.SetDefault(compose.TestcontainersLogger(nil))
	return []*cobra.Command{newUpCmd(&statePath), newStatusCmd(&statePath), newDownCmd(&statePath), newFaultCmd(&statePath), newImageCmd()}
}

func addStateFlag(cmd *cobra.Command, statePath *string) {
	cmd.Flags().StringVar(statePath, "state", *statePath, "state file of the running topology (env CAUSALLAB_STATE)")
}

func newUpCmd(statePath *string) *cobra.Command {
	var (
		replicas   int
		backend    string
		image      string
		rootfs     string
		settings   []string
		jsonOut    bool
		wide       bool
		hostMysqld bool
		engine     string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a primary and replicas (MySQL, MariaDB, PostgreSQL)",
		Long: `up starts one primary and --replicas replicas of --engine (MySQL 9.7 wired
with GTID auto-position, MariaDB 11.8 with MASTER_USE_GTID=slave_pos,
PostgreSQL 18 streaming standbys with replication slots), records the
topology in a state file so that status, fault and down find it, and prints
each node's DSN and status. Only one topology runs per state file. The
engine's root filesystem / image is built first if missing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			eng := compose.Engine(engine)
			if !slices.Contains(compose.Engines(), eng) {
				return usageErrorf("--engine %q: want one of %v", engine, compose.Engines())
			}
			switch backend {
			case backendAuto, string(compose.BackendDocker), string(compose.BackendLocal):
			default:
				return withExitCode(2, fmt.Errorf("unknown --backend %q (want auto, docker or local)", backend))
			}
			if replicas < 0 || replicas > compose.MaxReplicas {
				return withExitCode(2, fmt.Errorf("impossible replica count %d (want 0..%d)", replicas, compose.MaxReplicas))
			}
			var myCnf map[string]string
			for _, s := range settings {
				k, v, ok := strings.Cut(s, "=")
				if !ok {
					return withExitCode(2, fmt.Errorf("--set %q: want name=value", s))
				}
				if myCnf == nil {
					myCnf = map[string]string{}
				}
				myCnf[k] = v
			}
			if err := compose.CheckNoneRunning(*statePath); err != nil { // before probing Docker
				return withExitCode(2, oneLine(fmt.Errorf("%w; run `causallab down` first", err)))
			}
			rep := newReporter(cmd.ErrOrStderr(), "up", false)
			if backend == backendAuto {
				b, why := compose.ChooseBackend(ctx, image, eng)
				rep.Line(fmt.Sprintf("backend %s (auto: %s)", b, why))
				backend = string(b)
			}
			cfg := compose.Config{Engine: eng, Replicas: replicas, PrimaryOnly: replicas == 0, Backend: compose.Backend(backend),
				Image: image, RootFS: rootfs, HostMysqld: hostMysqld, MyCnf: myCnf, Detach: true, Logger: slog.Default()}
			began := time.Now()
			rep.Phase("topology start", 0, "backend", cfg.Backend, "replicas", replicas)
			topo, err := compose.Up(ctx, *statePath, cfg, rep.buildOptions())
			rep.Done()
			if errors.Is(err, compose.ErrRunning) {
				return withExitCode(2, oneLine(fmt.Errorf("%w; run `causallab down` first", err)))
			}
			if err != nil {
				return oneLine(err)
			}
			elapsed := time.Since(began)
			slog.Debug("topology up", "elapsed", elapsed)
			fmt.Fprintf(cmd.ErrOrStderr(), "causallab up: %s topology up in %.1fs (state: %s)\n", cfg.Backend, elapsed.Seconds(), *statePath)
			return printStatus(cmd.OutOrStdout(), topo, topo.Status(ctx), jsonOut, wide)
		},
	}
	cmd.Flags().IntVar(&replicas, "replicas", compose.DefaultReplicas, fmt.Sprintf("number of replicas (0..%d; 0: a primary alone)", compose.MaxReplicas))
	cmd.Flags().StringVar(&backend, "backend", backendAuto, "auto, docker or local (server processes chrooted into the root filesystem); auto: "+autoBackendRule)
	cmd.Flags().StringVar(&image, "image", "", "Docker image holding mysqld (default causallab/mysql:<version>; e.g. mysql:9.7)")
	cmd.Flags().StringVar(&rootfs, "rootfs", "", "MySQL root filesystem for --backend local (default "+compose.DefaultRootFS()+"; env CAUSALLAB_ROOTFS, CAUSALLAB_CACHE)")
	cmd.Flags().BoolVar(&hostMysqld, "host-mysqld", false, "with --backend local, run the mysqld on PATH instead of the root filesystem")
	cmd.Flags().StringArrayVar(&settings, "set", nil, "extra my.cnf (postgresql.conf) setting name=value for every server (repeatable)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the status as JSON")
	cmd.Flags().BoolVar(&wide, "wide", false, "one row per node with every column (DSN, GTIDs, last error)")
	cmd.Flags().StringVar(&engine, "engine", string(compose.EngineMySQL), "engine: mysql (9.7), mariadb (11.8) or postgres (18)")
	addStateFlag(cmd, statePath)
	return cmd
}

// backendAuto is the default --backend of up and lab: compose.ChooseBackend
// picks docker or local, and the command prints which and why.
const backendAuto = "auto"

// autoBackendRule is compose.ChooseBackend's rule, as --help says it.
const autoBackendRule = "local when running as root (chroot), else docker when a Docker engine answers"

// attach opens the topology recorded in the state file.
func attach(ctx context.Context, statePath string) (*compose.Topology, error) {
	topo, err := compose.AttachFile(ctx, statePath, slog.Default())
	if errors.Is(err, compose.ErrNotRunning) {
		return nil, withExitCode(2, fmt.Errorf("%w; start one with `causallab up`", err))
	}
	return topo, oneLine(err)
}

func printStatus(w io.Writer, topo *compose.Topology, sts []compose.NodeStatus, jsonOut, wide bool) error {
	return writeStatus(w, statusHead{topo.Backend(), topo.Epoch(), topo.Stats()}, sts, jsonOut, wide)
}

// statusHead is what status prints above its nodes.
type statusHead struct {
	backend compose.Backend
	epoch   uint64
	stats   compose.Stats
}

// writeStatus prints the nodes' status: JSON, one row per node with every
// column (wide), or by default a table that fits 80 columns (addresses for
// DSNs) with each node's DSN, GTIDs and last error on lines of their own
// below it.
func writeStatus(w io.Writer, h statusHead, sts []compose.NodeStatus, jsonOut, wide bool) error {
	if jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Backend compose.Backend      `json:"backend"`
			Epoch   uint64               `json:"epoch"`
			Nodes   []compose.NodeStatus `json:"nodes"`
			Stats   compose.Stats        `json:"stats"`
		}{h.backend, h.epoch, sts, h.stats})
	}
	fmt.Fprintf(w, "backend %s, epoch %d\n", h.backend, h.epoch)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "NODE\tROLE\tHEALTH\tIO\tSQL\tBEHIND\tDSN\tGTID_EXECUTED\tLAST_ERROR")
	} else {
		fmt.Fprintln(tw, "NODE\tROLE\tHEALTH\tIO\tSQL\tBEHIND\tADDRESS")
	}
	var details []string
	for _, s := range sts {
		behind := "-"
		if s.SecondsBehind >= 0 {
			behind = strconv.Itoa(s.SecondsBehind)
		}
		gtids := strings.ReplaceAll(s.GTIDExecuted, "\n", "")
		lastErr := strings.ReplaceAll(s.LastError, "\n", " ")
		if s.PendingRepoint != "" {
			lastErr = strings.TrimSpace("repoint pending (" + strings.ReplaceAll(s.PendingRepoint, "\n", " ") + ") " + lastErr)
		}
		row := []string{s.Node.Name, string(s.Node.Role), string(s.Health), dash(s.IORunning), dash(s.SQLRunning), behind}
		if wide {
			row = append(row, s.Node.DSN(), dash(gtids), dash(lastErr))
		} else {
			row = append(row, s.Node.Addr())
			details = append(details, statusDetails(s.Node.Name, gtids, lastErr)...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if wide || len(sts) == 0 {
		return nil
	}
	// Each node's DSN on a line of its own: a PostgreSQL URL is 71
	// columns, a node name 8 at most.
	fmt.Fprintln(w)
	dw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, s := range sts {
		fmt.Fprintf(dw, "%s\t%s\n", s.Node.Name, s.Node.DSN())
	}
	if err := dw.Flush(); err != nil {
		return err
	}
	for _, d := range details {
		fmt.Fprintln(w, d)
	}
	return nil
}

// statusDetails are node's executed GTIDs and last error, each folded to
// termWidth (a GTID set at its commas).
func statusDetails(node, gtids, lastErr string) []string {
	var out []string
	if gtids != "" {
		out = append(out, hanging(node+" gtid_executed: "+strings.ReplaceAll(gtids, ",", ", "))...)
	}
	if lastErr != "" {
		out = append(out, hanging(node+" last error: "+lastErr)...)
	}
	return out
}

// hanging folds s to termWidth, its continuation lines indented.
func hanging(s string) []string {
	lines := sim.Wrap(s, termWidth)
	if len(lines) > 1 {
		rest := sim.Wrap(strings.Join(lines[1:], " "), termWidth-4)
		lines = lines[:1]
		for _, l := range rest {
			lines = append(lines, "    "+l)
		}
	}
	return lines
}

func dash(v string) string {
	if v == "" {
		return "-"
	}
	return v
}

func newStatusCmd(statePath *string) *cobra.Command {
	var jsonOut, wide bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each node's role, health, replication, lag, GTIDs, last error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topo, err := attach(cmd.Context(), *statePath)
			if err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), topo, topo.Status(cmd.Context()), jsonOut, wide)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the status as JSON")
	cmd.Flags().BoolVar(&wide, "wide", false, "one row per node with every column (DSN, GTIDs, last error)")
	addStateFlag(cmd, statePath)
	return cmd
}

func newDownCmd(statePath *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove the running topology (processes or containers, data)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topo, err := attach(cmd.Context(), *statePath)
			if err != nil {
				return err
			}
			began := time.Now()
			rep := newReporter(cmd.ErrOrStderr(), "down", false)
			rep.Phase("topology down", 0, "backend", topo.Backend())
			err = topo.Down(cmd.Context())
			rep.Done()
			if err != nil {
				return oneLine(fmt.Errorf("down: %w (state file %s kept)", err, *statePath))
			}
			if err := os.Remove(*statePath); err != nil {
				return oneLine(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "causallab down: topology removed in %.1fs\n", time.Since(began).Seconds())
			return nil
		},
	}
	addStateFlag(cmd, statePath)
	return cmd
}

func newFaultCmd(statePath *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fault <kind> <node|rows> [args]",
		Short: "Inject a fault into the running topology",
		Long:  "fault injects one fault into the topology recorded by `causallab up`.\n\n" + compose.FaultUsage(),
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := compose.ParseFault(args)
			if err != nil {
				return withExitCode(2, fmt.Errorf("%w\n%s", err, compose.FaultUsage()))
			}
			ctx := cmd.Context()
			topo, err := attach(ctx, *statePath)
			if err != nil {
				return err
			}
			if f.Node != "" { // before the phase: a typo is a usage error, not a fault run
				if _, err := topo.Node(f.Node); err != nil {
					return withExitCode(exitUsage, oneLine(err))
				}
			}
			// A failover, a restart or a heavy transaction takes seconds:
			// a phase of its own (a bar on a terminal, a log line otherwise).
			rep := newReporter(cmd.ErrOrStderr(), "fault", false)
			if slowFaults[f.Kind] {
				rep.Phase(faultPhase(f), 0, "kind", f.Kind, "node", f.Node)
			}
			res, ferr := compose.Inject(ctx, topo, f)
			rep.Done()
			printFault(cmd.OutOrStdout(), f, res, ferr)
			// Save what changed (pids, roles, epoch), even on error.
			serr := compose.WriteStateFile(*statePath, topo.State())
			if ferr != nil {
				if errors.Is(ferr, compose.ErrUnknownNode) || errors.Is(ferr, compose.ErrWrongRole) {
					return withExitCode(2, oneLine(ferr))
				}
				return oneLine(ferr)
			}
			return oneLine(serr)
		},
	}
	addStateFlag(cmd, statePath)
	return cmd
}

// slowFaults are the faults that take seconds (they wait for servers to
// stop, start, catch up or commit): each shows its phase.
var slowFaults = map[compose.FaultKind]bool{compose.FaultFailover: true, compose.FaultRestart: true,
	compose.FaultResume: true, compose.FaultHeavy: true}

// faultPhase names the phase a fault runs as ("failover replica1").
func faultPhase(f compose.Fault) string {
	if f.Node == "" {
		return string(f.Kind)
	}
	return string(f.Kind) + " " + f.Node
}

// faultDone says what a fault without a report of its own did.
var faultDone = map[compose.FaultKind]string{
	compose.FaultKill:          "killed %s",
	compose.FaultRestart:       "restarted %s",
	compose.FaultPause:         "paused %s",
	compose.FaultResume:        "resumed %s",
	compose.FaultStopApplier:   "stopped the applier (SQL thread) of %s",
	compose.FaultStartApplier:  "started the applier (SQL thread) of %s",
	compose.FaultStopReceiver:  "stopped the receiver (IO thread, WAL receiver) of %s",
	compose.FaultStartReceiver: "started the receiver (IO thread, WAL receiver) of %s",
	compose.FaultHeal:          "healed %s",
}

// printFault prints what a fault did, and the fault that undoes it, each
// line folded to termWidth.
func printFault(w io.Writer, f compose.Fault, res compose.FaultResult, err error) {
	var out bytes.Buffer
	writeFault(&out, f, res, err)
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if l != "" || out.Len() > 0 {
			for _, h := range hanging(l) {
				fmt.Fprintln(w, h)
			}
		}
	}
}

// writeFault is printFault's text, one line per fact.
func writeFault(out io.Writer, f compose.Fault, res compose.FaultResult, err error) {
	if err == nil {
		if msg, ok := faultDone[f.Kind]; ok {
			fmt.Fprintf(out, msg+"\n", f.Node)
		}
		if f.Kind == compose.FaultApplyDelay {
			if f.Delay == 0 {
				fmt.Fprintf(out, "removed the apply delay of %s\n", f.Node)
			} else {
				fmt.Fprintf(out, "%s applies each transaction %ds after its source committed it (SOURCE_DELAY)\n", f.Node, int(f.Delay/time.Second))
			}
		}
		if u, ok := f.Undo(); ok && !(f.Kind == compose.FaultApplyDelay && f.Delay == 0) {
			fmt.Fprintf(out, "undo: causallab fault %s\n", u)
		}
	}
	switch f.Kind {
	case compose.FaultPartition:
		if err == nil {
			fmt.Fprintf(out, "partitioned %s (%s)\n", f.Node, res.Partition)
			if res.Partition == compose.PartitionIOThread {
				fmt.Fprintln(out, "note: local backend: replication IO threads stopped; clients still reach the node (weaker than a network partition)")
			}
		}
	case compose.FaultHeavy:
		if err == nil {
			fmt.Fprintf(out, "inserted %d rows in %.2fs on the primary as %s\n", res.Heavy.Rows, res.Heavy.Elapsed.Seconds(), res.Heavy.GTIDs)
		}
	case compose.FaultFailover:
		fr := res.Failover
		if fr.NewPrimary == "" {
			return
		}
		lost := fr.LostGTIDs
		if lost == "" {
			lost = "(none)"
		}
		fmt.Fprintf(out, "new primary %s (epoch %d), old primary %s retired\nlost GTIDs: %s\n", fr.NewPrimary, fr.Epoch, fr.OldPrimary, lost)
		if !fr.OldPrimaryReachable {
			fmt.Fprintln(out, "note: the old primary did not answer; lost GTIDs are computed against what the replicas had received (a lower bound)")
		}
		for _, n := range sortedKeys(fr.Deferred) {
			fmt.Fprintf(out, "deferred %s (%s): still replicating from %s; `fault resume` or `fault restart` repoints it to %s\n", n, fr.Deferred[n], fr.OldPrimary, fr.NewPrimary)
		}
		for _, n := range sortedKeys(fr.Errant) {
			fmt.Fprintf(out, "errant %s: holds %s, which the new primary lacks (lost at failover)\n", n, fr.Errant[n])
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func newImageCmd() *cobra.Command {
	var skipImage bool
	var engine string
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build (once, cached) an engine's root filesystem and Docker image",
		Long: `image builds the MySQL 9.7 root filesystem (or --engine's: MariaDB 11.8,
PostgreSQL 18) with mmdebstrap (installing it if missing) under
` + compose.DefaultCacheDir() + ` (env CAUSALLAB_CACHE), and imports it as the
Docker image causallab/<engine>:<version> when a Docker engine answers. It runs
the same script as make deps and CI (scripts/ensure-engine.sh), embedded in
the binary; a second run only reports what is cached. Commands that start a
topology build what they need themselves, on first use.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e := compose.Engine(engine)
			if !slices.Contains(compose.Engines(), e) {
				return usageErrorf("--engine %q: want one of %v", engine, compose.Engines())
			}
			rep := newReporter(cmd.ErrOrStderr(), "image", false)
			rep.Phase("image build", 0, "engine", e)
			info, err := compose.EnsureImage(cmd.Context(), compose.ImageOptions{Engine: e, SkipImage: skipImage, Progress: &lastLine{r: rep}})
			rep.Done()
			if err != nil {
				return oneLine(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rootfs=%s\nimage=%s\nversion=%s\n", info.RootFS, info.Image, info.Version)
			return nil
		},
	}
	cmd.Flags().BoolVar(&skipImage, "no-docker", false, "build only the root filesystem (for --backend local)")
	cmd.Flags().StringVar(&engine, "engine", string(compose.EngineMySQL), "engine: mysql (9.7), mariadb (11.8) or postgres (18)")
	return cmd
}
