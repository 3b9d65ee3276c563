package compose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Finding a topology again, or starting one: what `causallab up` and every
// command that needs a topology (lab, status, fault, down) share.

// ErrNotRunning is returned (wrapped, with fs.ErrNotExist) by AttachFile
// when no state file records a topology.
var ErrNotRunning = errors.New("no topology is running")

// ErrRunning is returned (wrapped) by Up when the state file already
// exists: one topology per state file.
var ErrRunning = errors.New("a topology is already running")

// ErrStateFile is returned (wrapped) when a state file exists but cannot be
// read, or the topology it records cannot be attached.
var ErrStateFile = errors.New("state file")

// BuildOptions say what to report while Launch builds a missing root
// filesystem or image.
type BuildOptions struct {
	// Progress receives the build script's progress lines; nil drops them.
	Progress io.Writer
	// Notify, when set, receives one line per phase (building, starting,
	// attached, up), without a trailing newline.
	Notify func(msg string)
}

func (b BuildOptions) notify(format string, args ...any) {
	if b.Notify != nil {
		b.Notify(fmt.Sprintf(format, args...))
	}
}

// launcher holds the operations Launch, Up and Open are made of, so that
// their error paths are testable without MySQL.
type launcher struct {
	start     func(context.Context, Config) (*Topology, error)
	build     func(context.Context, ImageOptions) (ImageInfo, error)
	attach    func(context.Context, State, *slog.Logger) (*Topology, error)
	installed func(context.Context, Engine, Backend) error
}

func realLauncher() launcher {
	return launcher{start: Start, build: EnsureImage, attach: Attach, installed: Installed}
}

// Launch starts cfg as Start does. When that fails for want of the MySQL
// root filesystem (ErrNoRootFS) or Docker image (ErrNoImage), and cfg names
// no root filesystem, image or host mysqld of its own, it builds them once
// with EnsureImage (the image only for the docker backend) and starts
// again. The external backend never builds anything. The build is the
// engine's (Config.Engine).
func Launch(ctx context.Context, cfg Config, b BuildOptions) (*Topology, error) {
	return realLauncher().launch(ctx, cfg, b)
}

// buildable reports whether a Start error is one a build fixes, for cfg.
func buildable(cfg Config, err error) bool {
	if cfg.Backend == BackendExternal {
		return false
	}
	return (errors.Is(err, ErrNoRootFS) && cfg.RootFS == "" && !cfg.HostMysqld) ||
		(errors.Is(err, ErrNoImage) && cfg.Image == "")
}

func (l launcher) launch(ctx context.Context, cfg Config, b BuildOptions) (*Topology, error) {
	topo, err := l.start(ctx, cfg)
	if err == nil || !buildable(cfg, err) {
		return topo, err
	}
	docker := cfg.Backend == BackendDocker
	engine := cfg.Engine
	if engine == "" {
		engine = EngineMySQL
	}
	what := "root filesystem"
	if docker {
		what += " and image"
	}
	b.notify("building the %s %s first (causallab image; cached, once)", engineName(engine), what)
	if _, berr := l.build(ctx, ImageOptions{Engine: engine, Progress: b.Progress, SkipImage: !docker}); berr != nil {
		return nil, fmt.Errorf("%w; building it failed: %w", err, berr)
	}
	b.notify("starting %s on the %s just built...", engineName(engine), what)
	return l.start(ctx, cfg)
}

// EnsureEngine makes engine e startable on backend be, as Launch does for
// the topology it starts: when Installed finds its root filesystem (or,
// for docker, its image) missing, it builds them once with EnsureImage
// (b.Notify says so first; b.Progress gets the build's lines) and checks
// again. What a build cannot fix (no Docker engine answers) is returned
// as Installed says it. For the commands that start topologies with
// Start (lab failover --engines, lab gated --engine).
func EnsureEngine(ctx context.Context, e Engine, be Backend, b BuildOptions) error {
	return realLauncher().ensureEngine(ctx, e, be, b)
}

func (l launcher) ensureEngine(ctx context.Context, e Engine, be Backend, b BuildOptions) error {
	err := l.installed(ctx, e, be)
	if err == nil || errors.Is(err, ErrNoDocker) || !(errors.Is(err, ErrNoRootFS) || errors.Is(err, ErrNoImage)) {
		return err // there, or not something a build fixes
	}
	docker := be == BackendDocker
	what := "root filesystem"
	if docker {
		what += " and image"
	}
	b.notify("building the %s %s first (causallab image --engine %s; cached, once)", engineName(e), what, e)
	if _, berr := l.build(ctx, ImageOptions{Engine: e, Progress: b.Progress, SkipImage: !docker}); berr != nil {
		return fmt.Errorf("compose: building the %s %s failed (run `causallab image --engine %s` to see why): %w", engineName(e), what, e, berr)
	}
	return l.installed(ctx, e, be)
}

// AttachFile attaches to the topology recorded in the state file at path.
// With no file it returns an error wrapping ErrNotRunning and
// fs.ErrNotExist; an unreadable file or a topology that cannot be attached
// gives one wrapping ErrStateFile.
func AttachFile(ctx context.Context, path string, logger *slog.Logger) (*Topology, error) {
	return realLauncher().attachFile(ctx, path, logger)
}

func (l launcher) attachFile(ctx context.Context, path string, logger *slog.Logger) (*Topology, error) {
	st, err := ReadStateFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (no state file at %s): %w", ErrNotRunning, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrStateFile, path, err)
	}
	topo, err := l.attach(ctx, st, logger)
	if err != nil {
		return nil, fmt.Errorf("%w %s: the %s topology it records: %w", ErrStateFile, path, st.Backend, err)
	}
	return topo, nil
}

// Up starts cfg with Launch and records it in the state file at path (so
// that AttachFile finds it). It refuses with ErrRunning when path exists,
// and removes the topology again when the state cannot be written.
func Up(ctx context.Context, path string, cfg Config, b BuildOptions) (*Topology, error) {
	return realLauncher().up(ctx, path, cfg, b)
}

// CheckNoneRunning returns nil when no state file exists at path, and
// otherwise the error Up would refuse with (wrapping ErrRunning, or
// ErrStateFile when path cannot be looked at).
func CheckNoneRunning(path string) error {
	if _, err := os.Stat(path); err == nil {
		st, rerr := ReadStateFile(path)
		if rerr != nil {
			return fmt.Errorf("%w: a state file exists at %s but cannot be read (%v)", ErrRunning, path, rerr)
		}
		return fmt.Errorf("%w: %s, primary %s (state file %s)", ErrRunning, st.Backend, primaryAddr(st), path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w %s: %w", ErrStateFile, path, err)
	}
	return nil
}

func (l launcher) up(ctx context.Context, path string, cfg Config, b BuildOptions) (*Topology, error) {
	if err := CheckNoneRunning(path); err != nil {
		return nil, err
	}
	topo, err := l.launch(ctx, cfg, b)
	if err != nil {
		return nil, err
	}
	if err := WriteStateFile(path, topo.State()); err != nil {
		derr := topo.Down(context.WithoutCancel(ctx))
		return nil, errors.Join(fmt.Errorf("compose: write state file: %w", err), derr)
	}
	return topo, nil
}

func primaryAddr(st State) string {
	for _, n := range st.Nodes {
		if n.Role == RolePrimary {
			return n.Addr()
		}
	}
	return "none"
}

// Display is e as people write it (MySQL, MariaDB, PostgreSQL; "":
// MySQL, the default).
func (e Engine) Display() string { return engineName(e) }

// engineName is e as people write it (MySQL, MariaDB, PostgreSQL).
func engineName(e Engine) string {
	switch e {
	case "", EngineMySQL:
		return "MySQL"
	case EngineMariaDB:
		return "MariaDB"
	case EnginePostgres:
		return "PostgreSQL"
	}
	return string(e)
}

// serverPrograms names the server programs of engines as a list
// ("mysqld", "mariadbd and postgres"); none: MySQL's.
func serverPrograms(engines []Engine) string {
	if len(engines) == 0 {
		engines = []Engine{EngineMySQL}
	}
	var names []string
	for _, e := range engines {
		name := string(e)
		if eng, err := engineFor(e); err == nil {
			name = filepath.Base(eng.server().program)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// OpenOptions say how Open finds or starts a topology.
type OpenOptions struct {
	// StatePath is the state file of a running topology (`causallab up`'s);
	// empty: never attach.
	StatePath string
	// Fresh starts a topology even when StatePath records one.
	Fresh bool
	// Config is the topology started when none is attached (the external
	// backend attaches to the servers it names instead).
	Config Config
	// Build says what to report while starting.
	Build BuildOptions
}

// Opened is a topology Open found or started.
type Opened struct {
	*Topology
	// Attached is true when the topology was found through the state file:
	// Close leaves it running and writes its state back (faults change
	// roles and the epoch). Otherwise Open started it and Close removes it.
	Attached bool
	// StatePath is the state file it was found through ("" when started).
	StatePath string
}

// Open attaches to the topology recorded at o.StatePath or, when there is
// none (or o.Fresh), starts o.Config with Launch. Close undoes what Open
// did and nothing more.
func Open(ctx context.Context, o OpenOptions) (*Opened, error) {
	return realLauncher().open(ctx, o)
}

func (l launcher) open(ctx context.Context, o OpenOptions) (*Opened, error) {
	cfg := o.Config
	if o.StatePath != "" && !o.Fresh && cfg.Backend != BackendExternal {
		topo, err := l.attachFile(ctx, o.StatePath, cfg.Logger)
		switch {
		case err == nil:
			o.Build.notify("using the running %s topology (state %s: primary %s, %d replicas)",
				topo.Backend(), o.StatePath, topo.Primary().Addr(), len(topo.Replicas()))
			return &Opened{Topology: topo, Attached: true, StatePath: o.StatePath}, nil
		case !errors.Is(err, ErrNotRunning):
			return nil, err
		}
	}
	external := cfg.Backend == BackendExternal
	if !external {
		backend := cfg.Backend
		if backend == "" {
			backend = BackendLocal
		}
		reps := cfg.Replicas
		if reps == 0 && !cfg.PrimaryOnly {
			reps = DefaultReplicas
		}
		o.Build.notify("starting %s (%s backend, 1 primary + %d replicas)...", engineName(cfg.Engine), backend, reps)
	}
	began := time.Now()
	topo, err := l.launch(ctx, cfg, o.Build)
	if err != nil {
		return nil, err
	}
	if !external {
		o.Build.notify("topology up in %.1fs", time.Since(began).Seconds())
	}
	return &Opened{Topology: topo}, nil
}

// Close undoes Open: an attached topology's state is written back to its
// state file; a started one is removed (Down).
func (o *Opened) Close(ctx context.Context) error {
	if o.Attached {
		if err := WriteStateFile(o.StatePath, o.State()); err != nil {
			return fmt.Errorf("compose: updating the state file: %w", err)
		}
		return nil
	}
	return o.Down(ctx)
}

// ChooseBackend is `--backend auto`: local processes when this process
// can chroot into the root filesystem (it runs as root), else docker when
// a Docker engine answers (within 5 s) and the image exists or is
// compose's own (built by `causallab image`); it says why. Local comes
// first because it is the faster and more faithful lab: a topology starts
// in about 5 s against 8 s in containers, and a killed replica answers again
// within a second where a container took about 14 s on a loaded two-core
// machine (long enough to turn lab hash's flapping replica into one long
// outage, docs/results-hash.md). engines are the engines the topology
// runs (none: MySQL), whose server programs the reason names.
func ChooseBackend(ctx context.Context, image string, engines ...Engine) (Backend, string) {
	if os.Geteuid() == 0 {
		return chooseBackend(true, DockerProbe{}, engines...)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return chooseBackend(false, ProbeDocker(pctx, image), engines...)
}

// chooseBackend is ChooseBackend's rule: root chroots; otherwise the probe
// decides.
func chooseBackend(root bool, p DockerProbe, engines ...Engine) (Backend, string) {
	switch {
	case root:
		return BackendLocal, "running as root: " + serverPrograms(engines) + " processes chrooted into the root filesystem (the faster backend; --backend docker for containers)"
	case p.Usable() && p.Image:
		return BackendDocker, "not root (no chroot); a Docker engine answers and holds the image"
	case p.Usable():
		return BackendDocker, "not root (no chroot); a Docker engine answers; the image will be built"
	}
	return BackendLocal, "not root and " + p.Reason + ": the local backend will need root"
}
