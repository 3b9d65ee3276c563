package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/causallab/causallab/compose"
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
		hostMysqld bool
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a MySQL topology (primary + replicas) and print its DSNs and status",
		Long: `up starts one MySQL primary and --replicas replicas wired with GTID
auto-position, records the topology in a state file so that status, fault and
down find it, and prints each node's DSN and status. Only one topology runs per
state file. The MySQL root filesystem / image is built first if missing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if _, err := os.Stat(*statePath); err == nil {
				st, rerr := compose.ReadStateFile(*statePath)
				if rerr != nil {
					return withExitCode(2, oneLine(fmt.Errorf("a state file exists at %s but cannot be read (%v); remove it or run `causallab down`", *statePath, rerr)))
				}
				return withExitCode(2, fmt.Errorf("a %s topology is already running (primary %s, state file %s); run `causallab down` first", st.Backend, primaryOf(st).Addr(), *statePath))
			}
			switch backend {
			case backendAuto, string(compose.BackendDocker), string(compose.BackendLocal):
			default:
				return withExitCode(2, fmt.Errorf("unknown --backend %q (want auto, docker or local)", backend))
			}
			if backend == backendAuto {
				b, why := chooseBackend(ctx, image)
				fmt.Fprintf(cmd.ErrOrStderr(), "causallab: backend %s (auto: %s)\n", b, why)
				backend = string(b)
			}
			cfg := compose.Config{Replicas: replicas, PrimaryOnly: replicas == 0, Backend: compose.Backend(backend),
				Image: image, RootFS: rootfs, HostMysqld: hostMysqld, Detach: true, Logger: slog.Default()}
			if replicas < 0 || replicas > compose.MaxReplicas {
				return withExitCode(2, fmt.Errorf("impossible replica count %d (want 0..%d)", replicas, compose.MaxReplicas))
			}
			for _, s := range settings {
				k, v, ok := strings.Cut(s, "=")
				if !ok {
					return withExitCode(2, fmt.Errorf("--set %q: want name=value", s))
				}
				if cfg.MyCnf == nil {
					cfg.MyCnf = map[string]string{}
				}
				cfg.MyCnf[k] = v
			}
			began := time.Now()
			topo, err := compose.Start(ctx, cfg)
			if (errors.Is(err, compose.ErrNoRootFS) && rootfs == "" && !hostMysqld) || (errors.Is(err, compose.ErrNoImage) && image == "") {
				fmt.Fprintln(cmd.ErrOrStderr(), "causallab: building the MySQL root filesystem / image first (causallab image)")
				if _, ierr := compose.EnsureImage(ctx, compose.ImageOptions{Progress: cmd.ErrOrStderr(), SkipImage: cfg.Backend != compose.BackendDocker}); ierr != nil {
					return oneLine(ierr)
				}
				topo, err = compose.Start(ctx, cfg)
			}
			if err != nil {
				return oneLine(err)
			}
			elapsed := time.Since(began)
			if err := compose.WriteStateFile(*statePath, topo.State()); err != nil {
				derr := topo.Down(context.WithoutCancel(ctx))
				return oneLine(errors.Join(fmt.Errorf("write state file: %w", err), derr))
			}
			slog.Debug("topology up", "elapsed", elapsed)
			fmt.Fprintf(cmd.ErrOrStderr(), "causallab: %s topology up in %.1fs (state: %s)\n", cfg.Backend, elapsed.Seconds(), *statePath)
			return printStatus(cmd.OutOrStdout(), topo, topo.Status(ctx), jsonOut)
		},
	}
	cmd.Flags().IntVar(&replicas, "replicas", compose.DefaultReplicas, fmt.Sprintf("number of replicas (0..%d)", compose.MaxReplicas))
	cmd.Flags().StringVar(&backend, "backend", backendAuto, "auto, docker or local (mysqld processes chrooted into the root filesystem); auto: docker when an engine answers and the image exists or can be built, else local")
	cmd.Flags().StringVar(&image, "image", "", "Docker image holding mysqld (default causallab/mysql:<version>; e.g. mysql:9.7)")
	cmd.Flags().StringVar(&rootfs, "rootfs", "", "MySQL root filesystem for --backend local (default ~/.cache/causallab/mysql-rootfs)")
	cmd.Flags().BoolVar(&hostMysqld, "host-mysqld", false, "with --backend local, run the mysqld on PATH instead of the root filesystem")
	cmd.Flags().StringArrayVar(&settings, "set", nil, "extra my.cnf setting name=value for every server (repeatable)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the status as JSON")
	addStateFlag(cmd, statePath)
	return cmd
}

// backendAuto is up's default --backend: pick docker or local.
const backendAuto = "auto"

// chooseBackend picks docker when a Docker engine answers (within 5 s) and
// the image exists or is compose's own (built by `causallab image`), else
// local; it says why.
func chooseBackend(ctx context.Context, image string) (compose.Backend, string) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p := compose.ProbeDocker(pctx, image)
	switch {
	case p.Usable() && p.Image:
		return compose.BackendDocker, "a Docker engine answers and holds the image"
	case p.Usable():
		return compose.BackendDocker, "a Docker engine answers; the image will be built"
	}
	return compose.BackendLocal, p.Reason
}

func primaryOf(st compose.State) compose.Node {
	for _, n := range st.Nodes {
		if n.Role == compose.RolePrimary {
			return n
		}
	}
	return compose.Node{}
}

// attach opens the topology recorded in the state file.
func attach(ctx context.Context, statePath string) (*compose.Topology, error) {
	st, err := compose.ReadStateFile(statePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, withExitCode(2, fmt.Errorf("no topology is running (no state file at %s); start one with `causallab up`", statePath))
	}
	if err != nil {
		return nil, oneLine(err)
	}
	topo, err := compose.Attach(ctx, st, slog.Default())
	if err != nil {
		return nil, oneLine(err)
	}
	return topo, nil
}

func printStatus(w io.Writer, topo *compose.Topology, sts []compose.NodeStatus, jsonOut bool) error {
	if jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Backend compose.Backend      `json:"backend"`
			Epoch   int64                `json:"epoch"`
			Nodes   []compose.NodeStatus `json:"nodes"`
			Stats   compose.Stats        `json:"stats"`
		}{topo.Backend(), topo.Epoch(), sts, topo.Stats()})
	}
	fmt.Fprintf(w, "backend %s, epoch %d\n", topo.Backend(), topo.Epoch())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tHEALTH\tIO\tSQL\tBEHIND\tDSN\tGTID_EXECUTED\tLAST_ERROR")
	for _, s := range sts {
		behind := "-"
		if s.SecondsBehind >= 0 {
			behind = strconv.Itoa(s.SecondsBehind)
		}
		dash := func(v string) string {
			if v == "" {
				return "-"
			}
			return v
		}
		lastErr := strings.ReplaceAll(s.LastError, "\n", " ")
		if s.PendingRepoint != "" {
			lastErr = strings.TrimSpace("repoint pending (" + strings.ReplaceAll(s.PendingRepoint, "\n", " ") + ") " + lastErr)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Node.Name, s.Node.Role, s.Health, dash(s.IORunning), dash(s.SQLRunning),
			behind, s.Node.DSN(), dash(strings.ReplaceAll(s.GTIDExecuted, "\n", "")), dash(lastErr))
	}
	return tw.Flush()
}

func newStatusCmd(statePath *string) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each node's role, health, replication threads, lag, GTIDs and last error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topo, err := attach(cmd.Context(), *statePath)
			if err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), topo, topo.Status(cmd.Context()), jsonOut)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the status as JSON")
	addStateFlag(cmd, statePath)
	return cmd
}

func newDownCmd(statePath *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove the running topology (processes or containers, data, network)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topo, err := attach(cmd.Context(), *statePath)
			if err != nil {
				return err
			}
			began := time.Now()
			if err := topo.Down(cmd.Context()); err != nil {
				return oneLine(fmt.Errorf("down: %w (state file %s kept)", err, *statePath))
			}
			if err := os.Remove(*statePath); err != nil {
				return oneLine(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "causallab: topology removed in %.1fs\n", time.Since(began).Seconds())
			return nil
		},
	}
	addStateFlag(cmd, statePath)
	return cmd
}

// faultKinds documents the fault subcommand's kinds.
const faultKinds = `Kinds:
  kill <node>                 stop without a clean shutdown (a dead node: no-op)
  restart <node>              start again with the data kept
  pause <node>, resume <node> freeze / thaw the process (SIGSTOP, docker pause)
  stop-applier <replica>      stop the replica's SQL thread
  start-applier <replica>     start it again
  apply-delay <replica> <s>   set SOURCE_DELAY to s whole seconds (0 removes it)
  partition <node>            cut the node off (docker: network; local: IO threads, weaker)
  heal <node>                 undo partition
  heavy <rows>                one INSERT ... SELECT of <rows> rows on the primary
  failover <replica>          promote the replica; prints lost GTIDs and the new epoch`

func newFaultCmd(statePath *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fault <kind> <node|rows> [args]",
		Short: "Inject a fault into the running topology",
		Long:  "fault injects one fault into the topology recorded by `causallab up`.\n\n" + faultKinds,
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, target := args[0], args[1]
			want := 2
			if kind == "apply-delay" {
				want = 3
			}
			if len(args) != want {
				return withExitCode(2, fmt.Errorf("fault %s takes %d argument(s), got %d\n%s", kind, want-1, len(args)-1, faultKinds))
			}
			if !validFault(kind) {
				return withExitCode(2, fmt.Errorf("unknown fault kind %q\n%s", kind, faultKinds))
			}
			ctx := cmd.Context()
			topo, err := attach(ctx, *statePath)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if ferr := runFault(ctx, out, topo, kind, target, args[2:]); ferr != nil {
				// Save what changed (pids, roles, epoch) even on error.
				_ = compose.WriteStateFile(*statePath, topo.State())
				if errors.Is(ferr, compose.ErrUnknownNode) || errors.Is(ferr, compose.ErrWrongRole) || errors.Is(ferr, errBadArg) {
					return withExitCode(2, oneLine(ferr))
				}
				return oneLine(ferr)
			}
			return oneLine(compose.WriteStateFile(*statePath, topo.State()))
		},
	}
	addStateFlag(cmd, statePath)
	return cmd
}

var errBadArg = errors.New("bad argument")

func validFault(kind string) bool {
	switch kind {
	case "kill", "restart", "pause", "resume", "stop-applier", "start-applier", "apply-delay", "partition", "heal", "heavy", "failover":
		return true
	}
	return false
}

func runFault(ctx context.Context, out io.Writer, topo *compose.Topology, kind, node string, rest []string) error {
	switch kind {
	case "kill":
		return topo.Kill(ctx, node)
	case "restart":
		return topo.Restart(ctx, node)
	case "pause":
		return topo.Pause(ctx, node)
	case "resume":
		return topo.Resume(ctx, node)
	case "stop-applier":
		return topo.StopApplier(ctx, node)
	case "start-applier":
		return topo.StartApplier(ctx, node)
	case "apply-delay":
		secs, err := strconv.Atoi(rest[0])
		if err != nil || secs < 0 {
			return fmt.Errorf("apply-delay %q: want whole non-negative seconds: %w", rest[0], errBadArg)
		}
		return topo.SetApplyDelay(ctx, node, time.Duration(secs)*time.Second)
	case "partition":
		mode, err := topo.Partition(ctx, node)
		if err == nil {
			fmt.Fprintf(out, "partitioned %s (%s)\n", node, mode)
			if mode == compose.PartitionIOThread {
				fmt.Fprintln(out, "note: local backend: replication IO threads stopped; clients still reach the node (weaker than a network partition)")
			}
		}
		return err
	case "heal":
		return topo.Heal(ctx, node)
	case "heavy":
		rows, err := strconv.Atoi(node)
		if err != nil {
			return fmt.Errorf("heavy %q: want a row count: %w", node, errBadArg)
		}
		res, err := topo.HeavyTransaction(ctx, rows)
		if err == nil {
			fmt.Fprintf(out, "inserted %d rows in %.2fs on the primary as %s\n", res.Rows, res.Elapsed.Seconds(), res.GTIDs)
		}
		return err
	case "failover":
		res, err := topo.Failover(ctx, node)
		if res.NewPrimary != "" {
			lost := res.LostGTIDs
			if lost == "" {
				lost = "(none)"
			}
			fmt.Fprintf(out, "new primary %s (epoch %d), old primary %s retired\nlost GTIDs: %s\n", res.NewPrimary, res.Epoch, res.OldPrimary, lost)
			if !res.OldPrimaryReachable {
				fmt.Fprintln(out, "note: the old primary did not answer; lost GTIDs are computed against what the replicas had received (a lower bound)")
			}
			for _, n := range sortedKeys(res.Deferred) {
				fmt.Fprintf(out, "deferred %s (%s): still replicating from %s; `fault resume` or `fault restart` repoints it to %s\n", n, res.Deferred[n], res.OldPrimary, res.NewPrimary)
			}
			for _, n := range sortedKeys(res.Errant) {
				fmt.Fprintf(out, "errant %s: holds %s, which the new primary lacks (lost at failover)\n", n, res.Errant[n])
			}
		}
		return err
	}
	return fmt.Errorf("unknown fault kind %q: %w", kind, errBadArg)
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
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build (once, cached) the MySQL root filesystem and, when Docker answers, the Docker image",
		Long: `image builds the MySQL 9.7 root filesystem with mmdebstrap (installing it if
missing) under ~/.cache/causallab (or $CAUSALLAB_CACHE), and imports it as the
Docker image causallab/mysql:<version> when a Docker engine answers. It runs the
same script as make deps and CI (scripts/ensure-mysql.sh), embedded in the
binary; a second run only reports what is cached.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, err := compose.EnsureImage(cmd.Context(), compose.ImageOptions{SkipImage: skipImage, Progress: cmd.ErrOrStderr()})
			if err != nil {
				return oneLine(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rootfs=%s\nimage=%s\nversion=%s\n", info.RootFS, info.Image, info.Version)
			return nil
		},
	}
	cmd.Flags().BoolVar(&skipImage, "no-docker", false, "build only the root filesystem (for --backend local)")
	return cmd
}
