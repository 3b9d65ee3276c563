package compose

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBackend is a backend whose servers are nothing: it records down.
type fakeBackend struct{ downs int }

func (b *fakeBackend) start(context.Context) ([]Node, error)                { return nil, nil }
func (b *fakeBackend) kill(context.Context, string) error                   { return nil }
func (b *fakeBackend) restart(context.Context, string) error                { return nil }
func (b *fakeBackend) pause(context.Context, string) error                  { return nil }
func (b *fakeBackend) resume(context.Context, string) error                 { return nil }
func (b *fakeBackend) partition(context.Context, string) error              { return ErrNotSupported }
func (b *fakeBackend) heal(context.Context, string) error                   { return ErrNotSupported }
func (b *fakeBackend) down(context.Context) error                           { b.downs++; return nil }
func (b *fakeBackend) state() backendState                                  { return sampleState().Internal }
func (b *fakeBackend) condition(context.Context, string) (condition, error) { return condRunning, nil }
func (b *fakeBackend) offline(context.Context, string, string) error        { return nil }

// fakeTopology is a Topology over fakeBackend with the nodes of st.
func fakeTopology(st State) (*Topology, *fakeBackend) {
	be := &fakeBackend{}
	eng, err := engineFor(EngineMySQL)
	if err != nil {
		panic(err)
	}
	return &Topology{cfg: Config{Backend: st.Backend}, be: be, eng: eng, log: slog.Default(), dbs: map[string]*sql.DB{},
		nodes: append([]Node(nil), st.Nodes...), epoch: st.Epoch, pending: map[string]string{}}, be
}

// script is a launcher whose start answers errs in turn (then succeeds),
// whose build answers buildErr, and which counts the calls.
type script struct {
	starts, builds, attaches int
	errs                     []error
	buildErr, attachErr      error
	built                    []ImageOptions
	cfgs                     []Config
	topo                     *Topology
	be                       *fakeBackend
}

func (s *script) launcher() launcher {
	s.topo, s.be = fakeTopology(sampleState())
	return launcher{
		start: func(_ context.Context, cfg Config) (*Topology, error) {
			s.starts++
			s.cfgs = append(s.cfgs, cfg)
			if len(s.errs) > 0 {
				err := s.errs[0]
				s.errs = s.errs[1:]
				if err != nil {
					return nil, err
				}
			}
			return s.topo, nil
		},
		build: func(_ context.Context, o ImageOptions) (ImageInfo, error) {
			s.builds++
			s.built = append(s.built, o)
			return ImageInfo{}, s.buildErr
		},
		attach: func(_ context.Context, st State, _ *slog.Logger) (*Topology, error) {
			s.attaches++
			if s.attachErr != nil {
				return nil, s.attachErr
			}
			t, _ := fakeTopology(st)
			return t, nil
		},
	}
}

func TestLaunchBuildsOnceWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	errOther := errors.New("port exhausted")
	errBuild := errors.New("mmdebstrap failed")
	for _, c := range []struct {
		name             string
		cfg              Config
		errs             []error
		buildErr         error
		starts, builds   int
		wantErr          []error
		wantSkipImage    bool
		wantNotification bool
	}{
		{name: "root filesystem missing: build, start again", cfg: Config{Backend: BackendLocal},
			errs: []error{ErrNoRootFS}, starts: 2, builds: 1, wantSkipImage: true, wantNotification: true},
		{name: "image missing: build with the image", cfg: Config{Backend: BackendDocker},
			errs: []error{ErrNoImage}, starts: 2, builds: 1, wantNotification: true},
		{name: "MariaDB root filesystem missing: MariaDB's built", cfg: Config{Backend: BackendLocal, Engine: EngineMariaDB},
			errs: []error{ErrNoRootFS}, starts: 2, builds: 1, wantSkipImage: true, wantNotification: true},
		{name: "PostgreSQL image missing: PostgreSQL's built", cfg: Config{Backend: BackendDocker, Engine: EnginePostgres},
			errs: []error{ErrNoImage}, starts: 2, builds: 1, wantNotification: true},
		{name: "other error: no build", cfg: Config{Backend: BackendLocal},
			errs: []error{errOther}, starts: 1, wantErr: []error{errOther}},
		{name: "own root filesystem: no build", cfg: Config{Backend: BackendLocal, RootFS: "/mine"},
			errs: []error{ErrNoRootFS}, starts: 1, wantErr: []error{ErrNoRootFS}},
		{name: "host mysqld: no build", cfg: Config{Backend: BackendLocal, HostMysqld: true},
			errs: []error{ErrNoRootFS}, starts: 1, wantErr: []error{ErrNoRootFS}},
		{name: "own image: no build", cfg: Config{Backend: BackendDocker, Image: "mysql:9.7"},
			errs: []error{ErrNoImage}, starts: 1, wantErr: []error{ErrNoImage}},
		{name: "external: never builds", cfg: Config{Backend: BackendExternal},
			errs: []error{ErrNoRootFS}, starts: 1, wantErr: []error{ErrNoRootFS}},
		{name: "build fails: both errors, no second start", cfg: Config{Backend: BackendLocal},
			errs: []error{ErrNoRootFS}, buildErr: errBuild, starts: 1, builds: 1,
			wantErr: []error{ErrNoRootFS, errBuild}, wantSkipImage: true, wantNotification: true},
		{name: "second start fails: its error", cfg: Config{Backend: BackendLocal},
			errs: []error{ErrNoRootFS, errOther}, starts: 2, builds: 1,
			wantErr: []error{errOther}, wantSkipImage: true, wantNotification: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &script{errs: c.errs, buildErr: c.buildErr}
			var notes []string
			var progress bytes.Buffer
			topo, err := s.launcher().launch(ctx, c.cfg, BuildOptions{Progress: &progress, Notify: func(m string) { notes = append(notes, m) }})
			if s.starts != c.starts || s.builds != c.builds {
				t.Errorf("%d starts, %d builds; want %d, %d", s.starts, s.builds, c.starts, c.builds)
			}
			for _, w := range c.wantErr {
				if !errors.Is(err, w) {
					t.Errorf("error %v does not wrap %v", err, w)
				}
			}
			if len(c.wantErr) == 0 && (err != nil || topo == nil) {
				t.Errorf("launch = %v, %v", topo, err)
			}
			if len(c.wantErr) > 0 && topo != nil {
				t.Errorf("a topology with an error")
			}
			if c.builds > 0 {
				if s.built[0].SkipImage != c.wantSkipImage || s.built[0].Progress != &progress || s.built[0].Engine != c.cfg.Engine.orMySQL() {
					t.Errorf("build options %+v", s.built[0])
				}
			}
			if got := len(notes) > 0; got != c.wantNotification || (got && !strings.Contains(notes[0], "building the "+engineName(c.cfg.Engine)+" root filesystem")) {
				t.Errorf("notifications %q", notes)
			}
		})
	}
}

func writeState(t *testing.T, path string) {
	t.Helper()
	if err := WriteStateFile(path, sampleState()); err != nil {
		t.Fatal(err)
	}
}

func TestAttachFileErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := &script{}
	l := s.launcher()

	_, err := l.attachFile(ctx, filepath.Join(dir, "none.json"), nil)
	if !errors.Is(err, ErrNotRunning) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = l.attachFile(ctx, bad, nil)
	if !errors.Is(err, ErrStateFile) || errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("garbage file: %v", err)
	}
	if s.attaches != 0 {
		t.Errorf("attached %d times to nothing", s.attaches)
	}
	good := filepath.Join(dir, "good.json")
	writeState(t, good)
	errGone := errors.New("containers gone")
	s.attachErr = errGone
	_, err = l.attachFile(ctx, good, nil)
	if !errors.Is(err, ErrStateFile) || !errors.Is(err, errGone) || !strings.Contains(err.Error(), "local topology") {
		t.Errorf("attach fails: %v", err)
	}
	s.attachErr = nil
	topo, err := l.attachFile(ctx, good, nil)
	if err != nil || topo.Primary().Name != "replica1" {
		t.Errorf("attach = %v, %v", topo, err)
	}
}

func TestOpenAttachesOrStarts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	running := filepath.Join(dir, "running.json")
	writeState(t, running)
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("attaches to the recorded topology; Close writes its state back", func(t *testing.T) {
		s := &script{}
		var notes []string
		o, err := s.launcher().open(ctx, OpenOptions{StatePath: running, Build: BuildOptions{Notify: func(m string) { notes = append(notes, m) }}})
		if err != nil || !o.Attached || s.starts != 0 || o.StatePath != running {
			t.Fatalf("open = %+v, %v (%d starts)", o, err, s.starts)
		}
		if len(notes) != 1 || !strings.Contains(notes[0], "using the running local topology") {
			t.Errorf("notifications %q", notes)
		}
		o.mu.Lock()
		o.epoch = 7 // as a failover would
		o.mu.Unlock()
		if err := o.Close(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := ReadStateFile(running)
		if err != nil || st.Epoch != 7 {
			t.Errorf("state after Close: epoch %d, %v", st.Epoch, err)
		}
	})
	t.Run("no state file: starts; Close removes", func(t *testing.T) {
		s := &script{}
		var notes []string
		o, err := s.launcher().open(ctx, OpenOptions{StatePath: filepath.Join(dir, "none.json"), Config: Config{Replicas: 2},
			Build: BuildOptions{Notify: func(m string) { notes = append(notes, m) }}})
		if err != nil || o.Attached || s.starts != 1 || s.attaches != 0 {
			t.Fatalf("open = %+v, %v", o, err)
		}
		if len(notes) != 2 || notes[0] != "starting MySQL (local backend, 1 primary + 2 replicas)..." || !strings.HasPrefix(notes[1], "topology up in ") {
			t.Errorf("notifications %q", notes)
		}
		if err := o.Close(ctx); err != nil || s.be.downs != 1 {
			t.Errorf("Close: %v, %d downs", err, s.be.downs)
		}
	})
	t.Run("unreadable state file: refuses, starts nothing", func(t *testing.T) {
		s := &script{}
		_, err := s.launcher().open(ctx, OpenOptions{StatePath: bad})
		if !errors.Is(err, ErrStateFile) || s.starts != 0 {
			t.Errorf("open: %v, %d starts", err, s.starts)
		}
	})
	t.Run("attach fails: refuses, starts nothing", func(t *testing.T) {
		s := &script{attachErr: errors.New("pid gone")}
		_, err := s.launcher().open(ctx, OpenOptions{StatePath: running})
		if !errors.Is(err, ErrStateFile) || s.starts != 0 {
			t.Errorf("open: %v, %d starts", err, s.starts)
		}
	})
	t.Run("fresh and external never attach", func(t *testing.T) {
		for _, o := range []OpenOptions{
			{StatePath: running, Fresh: true},
			{StatePath: running, Config: Config{Backend: BackendExternal}},
		} {
			s := &script{}
			got, err := s.launcher().open(ctx, o)
			if err != nil || got.Attached || s.attaches != 0 || s.starts != 1 {
				t.Errorf("%+v: open = %+v, %v (%d attaches)", o, got, err, s.attaches)
			}
		}
	})
	t.Run("start fails: the error, nothing to close", func(t *testing.T) {
		s := &script{errs: []error{ErrNoRootFS}, buildErr: errors.New("no network")}
		o, err := s.launcher().open(ctx, OpenOptions{})
		if o != nil || !errors.Is(err, ErrNoRootFS) {
			t.Errorf("open = %+v, %v", o, err)
		}
	})
}

func TestUpRecordsOrRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	running := filepath.Join(dir, "running.json")
	writeState(t, running)
	s := &script{}
	if _, err := s.launcher().up(ctx, running, Config{}, BuildOptions{}); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "127.0.0.1:4001") || s.starts != 0 {
		t.Errorf("up over a running topology: %v (%d starts)", err, s.starts)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.launcher().up(ctx, bad, Config{}, BuildOptions{}); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "cannot be read") || s.starts != 0 {
		t.Errorf("up over an unreadable state file: %v", err)
	}

	fresh := filepath.Join(dir, "fresh.json")
	s = &script{}
	topo, err := s.launcher().up(ctx, fresh, Config{}, BuildOptions{})
	if err != nil || topo != s.topo {
		t.Fatalf("up = %v, %v", topo, err)
	}
	if st, err := ReadStateFile(fresh); err != nil || primaryAddr(st) != "127.0.0.1:4001" {
		t.Errorf("recorded state %+v, %v", st, err)
	}

	// The state cannot be written (its temporary file's name is taken by a
	// folder): the topology is removed again and no state file is left.
	blocked := filepath.Join(dir, "blocked.json")
	if err := os.MkdirAll(filepath.Join(blocked+".tmp", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	s = &script{}
	if _, err := s.launcher().up(ctx, blocked, Config{}, BuildOptions{}); err == nil || s.be.downs != 1 {
		t.Errorf("unwritable state: %v, %d downs", err, s.be.downs)
	}
	if _, err := os.Stat(blocked); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an unwritable state left a state file: %v", err)
	}
	errOther := errors.New("no ports")
	s = &script{errs: []error{errOther}}
	if _, err := s.launcher().up(ctx, filepath.Join(dir, "other.json"), Config{}, BuildOptions{}); !errors.Is(err, errOther) {
		t.Errorf("start error: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "other.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed up left a state file: %v", err)
	}
}

// TestChooseBackend: auto picks local whenever it can chroot (root), else
// docker exactly when the probe finds a usable engine, and always says why.
func TestChooseBackend(t *testing.T) {
	for _, c := range []struct {
		root  bool
		probe DockerProbe
		want  Backend
	}{
		{true, DockerProbe{Engine: true, Image: true}, BackendLocal},
		{true, DockerProbe{Reason: "no Docker engine answers"}, BackendLocal},
		{false, DockerProbe{Engine: true, Image: true}, BackendDocker},
		{false, DockerProbe{Engine: true, Buildable: true}, BackendDocker},
		{false, DockerProbe{Engine: true, Reason: "image mysql:9.7 is missing"}, BackendLocal},
		{false, DockerProbe{Reason: "no Docker engine answers"}, BackendLocal},
	} {
		b, why := chooseBackend(c.root, c.probe)
		if b != c.want || why == "" {
			t.Errorf("chooseBackend(root=%v, %+v) = %s (%q), want %s", c.root, c.probe, b, why, c.want)
		}
	}
	for _, c := range []struct {
		engines []Engine
		want    string
	}{
		{nil, "root: mysqld processes"},
		{[]Engine{EngineMariaDB}, "root: mariadbd processes"},
		{[]Engine{EnginePostgres}, "root: postgres processes"},
		{Engines(), "root: mysqld, mariadbd and postgres processes"},
	} {
		if _, why := chooseBackend(true, DockerProbe{}, c.engines...); !strings.Contains(why, c.want) {
			t.Errorf("chooseBackend(root, %v): %q, want %q in it", c.engines, why, c.want)
		}
	}
	b, why := ChooseBackend(context.Background(), "")
	if os.Geteuid() == 0 && b != BackendLocal {
		t.Fatalf("as root ChooseBackend = %s (%q)", b, why)
	}
	t.Logf("auto picks %s here: %s", b, why)
}

func (e Engine) orMySQL() Engine {
	if e == "" {
		return EngineMySQL
	}
	return e
}

// TestEnsureEngineBuildsWhatIsMissing: EnsureEngine builds the engine's
// root filesystem (and image, for docker) only when Installed finds it
// missing, says so first, checks again, and leaves what no build fixes
// (no Docker engine, another error) alone.
func TestEnsureEngineBuildsWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	errBuild := errors.New("mmdebstrap failed")
	errOther := errors.New("backend vm cannot start engines")
	noDocker := fmt.Errorf("%w: %w", ErrNoImage, ErrNoDocker)
	for _, c := range []struct {
		name          string
		backend       Backend
		installed     []error // what Installed says, call by call
		buildErr      error
		builds        int
		wantErr       []error
		wantSkipImage bool
	}{
		{name: "there: nothing built", backend: BackendLocal, installed: []error{nil}},
		{name: "root filesystem missing: built", backend: BackendLocal, installed: []error{ErrNoRootFS, nil}, builds: 1, wantSkipImage: true},
		{name: "image missing: built with the image", backend: BackendDocker, installed: []error{ErrNoImage, nil}, builds: 1},
		{name: "no Docker engine: no build", backend: BackendDocker, installed: []error{noDocker}, wantErr: []error{ErrNoDocker}},
		{name: "other error: no build", backend: BackendLocal, installed: []error{errOther}, wantErr: []error{errOther}},
		{name: "build fails: says the command", backend: BackendLocal, installed: []error{ErrNoRootFS}, buildErr: errBuild, builds: 1,
			wantErr: []error{errBuild}, wantSkipImage: true},
		{name: "still missing after the build", backend: BackendLocal, installed: []error{ErrNoRootFS, ErrNoRootFS}, builds: 1,
			wantErr: []error{ErrNoRootFS}, wantSkipImage: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &script{buildErr: c.buildErr}
			l := s.launcher()
			calls := 0
			l.installed = func(_ context.Context, e Engine, b Backend) error {
				if e != EnginePostgres || b != c.backend {
					t.Errorf("Installed(%s, %s)", e, b)
				}
				err := c.installed[min(calls, len(c.installed)-1)]
				calls++
				return err
			}
			var notes []string
			err := l.ensureEngine(ctx, EnginePostgres, c.backend, BuildOptions{Notify: func(m string) { notes = append(notes, m) }})
			for _, w := range c.wantErr {
				if !errors.Is(err, w) {
					t.Errorf("err %v, want %v", err, w)
				}
			}
			if len(c.wantErr) == 0 && err != nil {
				t.Errorf("err %v", err)
			}
			if s.builds != c.builds {
				t.Fatalf("%d builds, want %d", s.builds, c.builds)
			}
			if c.builds == 0 {
				return
			}
			if o := s.built[0]; o.Engine != EnginePostgres || o.SkipImage != c.wantSkipImage {
				t.Errorf("built %+v", o)
			}
			if len(notes) != 1 || !strings.Contains(notes[0], "building the PostgreSQL root filesystem") || !strings.Contains(notes[0], "causallab image --engine postgres") {
				t.Errorf("notes %q", notes)
			}
			if c.buildErr != nil && !strings.Contains(err.Error(), "run `causallab image --engine postgres`") {
				t.Errorf("build error %q does not say the command", err)
			}
		})
	}
}
