package compose

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/moby/moby/api/types/container"
	mnetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/network"
)

// ErrNoDocker is returned (wrapped) when no Docker engine answers.
var ErrNoDocker = errors.New("no Docker engine answers")

// ErrNoImage is returned (wrapped) when the MySQL image is missing.
var ErrNoImage = errors.New("MySQL image not found")

// dockerDir is the server's directory inside its container.
const dockerDir = "/var/lib/causallab"

// dockerServer is one container.
type dockerServer struct {
	name     string
	serverID int
	hostPort int
	id       string // container ID
}

// dockerBackend runs one container per server (testcontainers-go) on one
// user-defined network; each container has its node name as network alias.
type dockerBackend struct {
	cfg       *Config
	cli       *testcontainers.DockerClient
	networkID string
	network   string
	servers   []*dockerServer
	// hostOverride, when set, is the only Docker host tried (tests).
	hostOverride string
}

var _ backend = (*dockerBackend)(nil)

func newDockerBackend(cfg *Config) *dockerBackend { return &dockerBackend{cfg: cfg} }

func (b *dockerBackend) client(ctx context.Context) (*testcontainers.DockerClient, error) {
	if b.cli != nil {
		return b.cli, nil
	}
	if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
		// The reaper image cannot be pulled on machines without a registry;
		// compose removes what it creates itself.
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	var opts []client.Opt
	if b.hostOverride != "" {
		opts = append(opts, client.WithHost(b.hostOverride))
	}
	cli, err := testcontainers.NewDockerClientWithOpts(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("compose: %w (%v); use --backend local (Config.Backend = local) instead", ErrNoDocker, err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return nil, fmt.Errorf("compose: %w (%v); use --backend local (Config.Backend = local) instead", ErrNoDocker, err)
	}
	b.cli = cli
	return cli, nil
}

// dockerCommand is the container command: initialize the data directory
// on first start, then run mysqld. It relies on no entrypoint, so any
// image holding mysqld and sh works (causallab/mysql, mysql:9.7).
func dockerCommand() []string {
	cnf := "--defaults-file=" + dockerDir + "/my.cnf --user=root"
	script := "set -e; mkdir -p " + dockerDir + "; cp /tmp/causallab-my.cnf " + dockerDir + "/my.cnf; " +
		"if [ ! -d " + dockerDir + "/data/mysql ]; then mysqld " + cnf + " --initialize-insecure --init-file=/tmp/causallab-init.sql; fi; " +
		"exec mysqld " + cnf
	return []string{"sh", "-c", script}
}

func (b *dockerBackend) start(ctx context.Context) (nodes []Node, err error) {
	cli, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	if _, ierr := cli.ImageInspect(ctx, b.cfg.Image); ierr != nil && strings.HasPrefix(b.cfg.Image, "causallab/") {
		return nil, fmt.Errorf("compose: %w: %s (build it with `causallab image`)", ErrNoImage, b.cfg.Image)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.down(context.WithoutCancel(ctx)))
		}
	}()
	nw, err := network.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("compose: create Docker network: %w", err)
	}
	b.networkID, b.network = nw.ID, nw.Name
	names := []string{"primary"}
	for i := 1; i <= b.cfg.Replicas; i++ {
		names = append(names, fmt.Sprintf("replica%d", i))
	}
	// The data template is made while the containers are created; each
	// container's pre-start hook waits for it.
	tpl := &dataTemplate{done: make(chan struct{})}
	go func() {
		defer close(tpl.done)
		began := time.Now()
		tpl.tar, tpl.err = b.template(ctx)
		b.cfg.Logger.Debug("compose: docker data template", "bytes", len(tpl.tar), "elapsed", time.Since(began), "err", tpl.err)
	}()
	defer func() { <-tpl.done }()
	var mu sync.Mutex
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		s := &dockerServer{name: name, serverID: i + 1}
		b.servers = append(b.servers, s)
		wg.Go(func() {
			errs[i] = b.run(ctx, nw, s, &mu, tpl)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, s := range b.servers {
		role := RoleReplica
		if i == 0 {
			role = RolePrimary
		}
		nodes = append(nodes, Node{Name: s.name, Role: role, Host: "127.0.0.1", Port: s.hostPort,
			User: b.cfg.User, Password: b.cfg.Password, PeerHost: s.name, PeerPort: 3306})
	}
	return nodes, nil
}

// run creates and starts the container of s, retrying with another host
// port when the one picked is taken meanwhile.
// dataTemplate is an initialized data directory being made (see template).
type dataTemplate struct {
	done chan struct{} // closed when tar and err are set
	tar  []byte        // nil: containers initialize themselves
	err  error
}

func (b *dockerBackend) run(ctx context.Context, nw *testcontainers.DockerNetwork, s *dockerServer, mu *sync.Mutex, tpl *dataTemplate) error {
	// Copy the initialized data directory in before mysqld starts: the
	// command then skips --initialize.
	hooks := []testcontainers.ContainerLifecycleHooks{{PreStarts: []testcontainers.ContainerHook{
		func(ctx context.Context, c testcontainers.Container) error {
			select {
			case <-tpl.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			if tpl.err != nil || tpl.tar == nil {
				return tpl.err
			}
			_, err := b.cli.CopyToContainer(ctx, c.GetContainerID(), client.CopyToContainerOptions{DestinationPath: "/var/lib", Content: bytes.NewReader(tpl.tar)})
			if err != nil {
				return fmt.Errorf("copy data directory into %s: %w", s.name, err)
			}
			return nil
		},
	}}}
	init := initSQL(b.cfg)
	// mysqld logs to stderr, so the container log holds the error log.
	cnf := strings.Replace(b.cfg.myCnf(s.serverID, 3306, dockerDir, "0.0.0.0"), "log-error="+dockerDir+"/error.log\n", "", 1)
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		c, err := testcontainers.Run(ctx, b.cfg.Image,
			// The entrypoint itself is our command, so an image's own
			// entrypoint (mysql:9.7's docker-entrypoint.sh) never runs.
			testcontainers.WithEntrypoint(dockerCommand()...),
			testcontainers.WithExposedPorts("3306/tcp"),
			testcontainers.WithLabels(map[string]string{"causallab.node": s.name}),
			testcontainers.WithLogger(TestcontainersLogger(b.cfg.Logger)),
			testcontainers.WithAdditionalLifecycleHooks(hooks...),
			testcontainers.WithFiles(
				testcontainers.ContainerFile{Reader: strings.NewReader(cnf), ContainerFilePath: "/tmp/causallab-my.cnf", FileMode: 0o644},
				testcontainers.ContainerFile{Reader: strings.NewReader(init), ContainerFilePath: "/tmp/causallab-init.sql", FileMode: 0o644},
			),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = mnetwork.PortMap{
					mnetwork.MustParsePort("3306/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}},
				}
			}),
			network.WithNetwork([]string{s.name}, nw),
		)
		if c != nil {
			mu.Lock()
			s.id = c.GetContainerID()
			mu.Unlock()
		}
		if err == nil {
			s.hostPort = port
			// Health is checked by SQL with the account, from this process
			// (testcontainers' wait.ForSQL did not see the server here).
			werr := waitSQL(ctx, b.cfg.Logger, s.name, b.cfg.User, b.cfg.Password, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), b.cfg.StartTimeout, func() bool {
				st, err := b.containerState(ctx, s)
				return err == nil && !st.Running
			})
			if werr != nil {
				werr = fmt.Errorf("%w; container log: %s", werr, containerErrors(ctx, c))
			}
			return werr
		}
		lastErr = fmt.Errorf("compose: start container for %s: %w", s.name, err)
		if !strings.Contains(err.Error(), "already allocated") && !strings.Contains(err.Error(), "address already in use") {
			return lastErr
		}
		if s.id != "" {
			_, _ = b.cli.ContainerRemove(context.WithoutCancel(ctx), s.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			s.id = ""
		}
	}
	return fmt.Errorf("%w: %w", ErrPortInUse, lastErr)
}

// TestcontainersLogger adapts a slog.Logger (debug level) to the logger
// testcontainers-go prints its progress with. A nil l means slog.Default()
// at the time of each line.
func TestcontainersLogger(l *slog.Logger) tclog.Logger { return tcLogger{l} }

type tcLogger struct{ l *slog.Logger }

func (t tcLogger) Printf(format string, v ...any) {
	l := t.l
	if l == nil {
		l = slog.Default()
	}
	l.Debug("compose: testcontainers: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (b *dockerBackend) server(name string) (*dockerServer, error) {
	for _, s := range b.servers {
		if s.name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("compose: %w %q", ErrUnknownNode, name)
}

func (b *dockerBackend) containerState(ctx context.Context, s *dockerServer) (*container.State, error) {
	cli, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	res, err := cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("compose: inspect container of %s: %w", s.name, err)
	}
	if res.Container.State == nil {
		return nil, fmt.Errorf("compose: container of %s has no state", s.name)
	}
	return res.Container.State, nil
}

func (b *dockerBackend) kill(ctx context.Context, name string) error {
	s, err := b.server(name)
	if err != nil {
		return err
	}
	st, err := b.containerState(ctx, s)
	if err != nil {
		return err
	}
	if !st.Running {
		return nil // killing a dead node is a no-op
	}
	if _, err := b.cli.ContainerKill(ctx, s.id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("compose: kill %s: %w", name, err)
	}
	return nil
}

func (b *dockerBackend) restart(ctx context.Context, name string) error {
	s, err := b.server(name)
	if err != nil {
		return err
	}
	st, err := b.containerState(ctx, s)
	if err != nil {
		return err
	}
	if st.Paused {
		if _, err := b.cli.ContainerUnpause(ctx, s.id, client.ContainerUnpauseOptions{}); err != nil {
			return fmt.Errorf("compose: unpause %s before restart: %w", name, err)
		}
	}
	if st.Running {
		timeout := 30
		if _, err := b.cli.ContainerStop(ctx, s.id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
			return fmt.Errorf("compose: stop %s: %w", name, err)
		}
	}
	if _, err := b.cli.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("compose: start %s: %w", name, err)
	}
	return waitSQL(ctx, b.cfg.Logger, name, b.cfg.User, b.cfg.Password, net.JoinHostPort("127.0.0.1", strconv.Itoa(s.hostPort)), b.cfg.StartTimeout, func() bool {
		st, err := b.containerState(ctx, s)
		return err == nil && !st.Running
	})
}

// waitSQL waits until addr answers SQL with the account, or exited says
// the server is gone.
func waitSQL(ctx context.Context, log *slog.Logger, name, user, password, addr string, limit time.Duration, exited func() bool) error {
	mc := mysql.NewConfig()
	mc.User, mc.Passwd, mc.Net, mc.Addr = user, password, "tcp", addr
	mc.Timeout = time.Second
	mc.Logger = driverLogger{log}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	deadline := time.Now().Add(limit)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if exited() {
			return fmt.Errorf("compose: %s exited during start-up: %v", name, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("compose: %s did not answer SQL within %v: %v", name, limit, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("compose: waiting for %s: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (b *dockerBackend) running(ctx context.Context, name string) (*dockerServer, error) {
	s, err := b.server(name)
	if err != nil {
		return nil, err
	}
	st, err := b.containerState(ctx, s)
	if err != nil {
		return nil, err
	}
	if !st.Running {
		return nil, fmt.Errorf("compose: %s: %w", name, ErrNodeDown)
	}
	return s, nil
}

func (b *dockerBackend) pause(ctx context.Context, name string) error {
	return b.onRunning(ctx, name, "pause", func(id string) error {
		_, err := b.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
		return err
	})
}

func (b *dockerBackend) resume(ctx context.Context, name string) error {
	return b.onRunning(ctx, name, "resume", func(id string) error {
		_, err := b.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
		return err
	})
}

// onRunning runs op on the running container of node name; op's error is
// returned as "compose: <verb> <name>: ...".
func (b *dockerBackend) onRunning(ctx context.Context, name, verb string, op func(id string) error) error {
	s, err := b.running(ctx, name)
	if err != nil {
		return err
	}
	if err := op(s.id); err != nil {
		return fmt.Errorf("compose: %s %s: %w", verb, name, err)
	}
	return nil
}

func (b *dockerBackend) condition(ctx context.Context, name string) (condition, error) {
	s, err := b.server(name)
	if err != nil {
		return "", err
	}
	st, err := b.containerState(ctx, s)
	if err != nil {
		return "", err
	}
	switch {
	case st.Paused:
		return condPaused, nil
	case !st.Running:
		return condDown, nil
	}
	return condRunning, nil
}

func (b *dockerBackend) partition(ctx context.Context, name string) error {
	s, err := b.running(ctx, name)
	if err != nil {
		return err
	}
	if _, err := b.cli.NetworkDisconnect(ctx, b.networkID, client.NetworkDisconnectOptions{Container: s.id, Force: true}); err != nil {
		return fmt.Errorf("compose: disconnect %s from %s: %w", name, b.network, err)
	}
	return nil
}

func (b *dockerBackend) heal(ctx context.Context, name string) error {
	s, err := b.running(ctx, name)
	if err != nil {
		return err
	}
	if _, err := b.cli.NetworkConnect(ctx, b.networkID, client.NetworkConnectOptions{Container: s.id,
		EndpointConfig: &mnetwork.EndpointSettings{Aliases: []string{s.name}}}); err != nil {
		return fmt.Errorf("compose: connect %s to %s: %w", name, b.network, err)
	}
	return nil
}

// down force-removes every container (data is thrown away, so no clean
// shutdown) and the network.
func (b *dockerBackend) down(ctx context.Context) error {
	if b.cli == nil {
		return nil
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, s := range b.servers {
		if s.id == "" {
			continue
		}
		wg.Go(func() {
			_, err := b.cli.ContainerRemove(ctx, s.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !strings.Contains(err.Error(), "No such container") {
				mu.Lock()
				errs = append(errs, fmt.Errorf("compose: remove container of %s: %w", s.name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if b.networkID != "" {
		if _, err := b.cli.NetworkRemove(ctx, b.networkID, client.NetworkRemoveOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
			errs = append(errs, fmt.Errorf("compose: remove network %s: %w", b.network, err))
		}
	}
	return errors.Join(errs...)
}

func (b *dockerBackend) state() backendState {
	st := &dockerState{NetworkID: b.networkID, Network: b.network}
	for _, s := range b.servers {
		st.Servers = append(st.Servers, dockerServerState{Name: s.name, ServerID: s.serverID, HostPort: s.hostPort, ID: s.id})
	}
	return backendState{Docker: st}
}

// containerErrors returns the last [ERROR] lines of a container's log
// (mysqld logs to stderr there).
func containerErrors(ctx context.Context, c *testcontainers.DockerContainer) string {
	rc, err := c.Logs(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer rc.Close()
	data, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	var keep []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "[ERROR]") {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	if len(keep) == 0 {
		return "(no [ERROR] line)"
	}
	if len(keep) > 4 {
		keep = keep[len(keep)-4:]
	}
	return strings.Join(keep, " | ")
}

// template returns a tar of an initialized data directory (entries
// causallab/data/..., auto.cnf left out so each server makes its own
// server_uuid) when the image is the one built from the local root
// filesystem: initializing once on the host (about 2 s) is much faster than
// initializing in every container. For any other image it returns nil and
// each container initializes itself (slower, same result).
func (b *dockerBackend) template(ctx context.Context) ([]byte, error) {
	if b.cfg.Image != DefaultImage(b.cfg.RootFS) {
		b.cfg.Logger.Debug("compose: image not built from the local root filesystem; containers initialize themselves", "image", b.cfg.Image)
		return nil, nil
	}
	cfg := *b.cfg
	cfg.Detach = false
	lb := newLocalBackend(&cfg)
	if err := lb.locate(); err != nil || lb.chroot == "" {
		return nil, nil
	}
	dir, err := os.MkdirTemp(lb.tmpBase(), "causallab-")
	if err != nil {
		return nil, fmt.Errorf("compose: template directory: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	lb.hostDir, lb.inDir = dir, lb.inside(dir)
	srv := &localServer{name: "causallab", serverID: 1, hostDir: filepath.Join(dir, "causallab")}
	srv.inDir = lb.inside(srv.hostDir)
	if err := os.MkdirAll(srv.hostDir, 0o755); err != nil {
		return nil, err
	}
	if err := lb.writeCnf(srv); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "init.sql"), []byte(initSQL(b.cfg)), 0o600); err != nil {
		return nil, err
	}
	if err := lb.initialize(ctx, srv); err != nil {
		return nil, err
	}
	// gzip: the files are mostly zeros (preallocated redo, undo, system
	// tablespace), and the Docker engine unpacks gzip archives itself.
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	root := srv.hostDir
	err = filepath.WalkDir(filepath.Join(root, "data"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == "auto.cnf" || d.Name() == "ibtmp1" || !(d.IsDir() || d.Type().IsRegular()) {
			return nil // server_uuid must be new; the temporary tablespace is recreated
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(root), p)
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("compose: tar the data template: %w", err)
	}
	return buf.Bytes(), nil
}

// DockerProbe is what ProbeDocker found.
type DockerProbe struct {
	// Engine is true when a Docker engine answered.
	Engine bool
	// Image is true when the image is present in that engine.
	Image bool
	// Buildable is true when the image is missing but is compose's own
	// (causallab/*), which `causallab image` builds from the root filesystem.
	Buildable bool
	// Reason says, in a few words, why Docker is not usable ("" when it is).
	Reason string
}

// Usable reports whether the docker backend can run: an engine answers and
// the image exists or can be built.
func (p DockerProbe) Usable() bool { return p.Engine && (p.Image || p.Buildable) }

// ProbeDocker asks the Docker engine (within ctx) whether it answers and
// holds image ("" means the default image of the default root filesystem).
// It changes nothing.
func ProbeDocker(ctx context.Context, image string) DockerProbe {
	return probeDocker(ctx, image, "")
}

// probeDocker is ProbeDocker against host ("" means the environment's).
func probeDocker(ctx context.Context, image, host string) DockerProbe {
	if image == "" {
		image = DefaultImage(DefaultRootFS())
	}
	b := &dockerBackend{cfg: &Config{}, hostOverride: host}
	cli, err := b.client(ctx)
	if err != nil {
		return DockerProbe{Reason: "no Docker engine answers"}
	}
	defer cli.Close()
	p := DockerProbe{Engine: true}
	if _, err := cli.ImageInspect(ctx, image); err == nil {
		p.Image = true
		return p
	}
	p.Buildable = strings.HasPrefix(image, "causallab/")
	if !p.Buildable {
		p.Reason = "image " + image + " is not in the Docker engine"
	}
	return p
}
