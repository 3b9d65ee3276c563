package compose

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	mnetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/network"
)

// ErrNoDocker is returned (wrapped) when no Docker engine answers.
var ErrNoDocker = errors.New("no Docker engine answers")

// ErrNoImage is returned (wrapped) when the engine's image is missing.
var ErrNoImage = errors.New("image not found")

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
	spec      *serverSpec
	cli       *testcontainers.DockerClient
	networkID string
	network   string
	servers   []*dockerServer
	// hostOverride, when set, is the only Docker host tried (tests).
	hostOverride string
	// topologyID tells this topology's containers from another's
	// (containerName): topologies run side by side, tests in parallel.
	topologyID string
}

// containerName is the name of node's container: causallab-<topology
// id>-<node>, e.g. causallab-3f9a1c2e-replica1.
func (b *dockerBackend) containerName(node string) string {
	return "causallab-" + b.topologyID + "-" + node
}

var _ backend = (*dockerBackend)(nil)

func newDockerBackend(cfg *Config) *dockerBackend {
	return &dockerBackend{cfg: cfg, spec: serverOf(cfg.Engine)}
}

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

// dockerCommand is the container command of replica i (0: the primary):
// copy the configuration in, run a pending offline script (pg_rewind,
// written by offline), initialize the data directory on first start (or,
// for a cloned replica, clone it from the primary), then run the server.
// It relies on no entrypoint, so any image holding the server and sh
// works (causallab/mysql, mysql:9.7).
func (b *dockerBackend) dockerCommand(i int) []string {
	sp := b.spec
	d := sp.dockerDir
	init := sp.dockerInit(b.cfg)
	if sp.cloned && i > 0 {
		init = sp.dockerClone(b.cfg, i)
	}
	args := sp.args(d)
	if sp == mysqlSpec {
		args[0] = "mysqld"
	}
	script := "set -e; mkdir -p " + d + "; cp /tmp/causallab-" + sp.configName + " " + d + "/" + sp.configName + "; " +
		"if [ -f " + d + "/offline.sh ]; then sh " + d + "/offline.sh; rm -f " + d + "/offline.sh; fi; " +
		init + "; exec " + strings.Join(args, " ")
	return []string{"sh", "-c", script}
}

func (b *dockerBackend) start(ctx context.Context) (nodes []Node, err error) {
	cli, err := b.client(ctx)
	if err != nil {
		return nil, err
	}
	if _, ierr := cli.ImageInspect(ctx, b.cfg.Image); ierr != nil && strings.HasPrefix(b.cfg.Image, "causallab/") {
		return nil, fmt.Errorf("compose: %w: %s (build it with `causallab image --engine %s`)", ErrNoImage, b.cfg.Image, b.cfg.Engine)
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
	var id [4]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	b.topologyID = hex.EncodeToString(id[:])
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
	for i, name := range serverNames(b.cfg.Replicas) {
		b.servers = append(b.servers, &dockerServer{name: name, serverID: i + 1})
	}
	// Cloned replicas clone the running primary (pg_basebackup).
	if err := startServers(b.servers, b.spec.cloned, func(s *dockerServer) error { return b.run(ctx, nw, s, &mu, tpl) }); err != nil {
		return nil, err
	}
	for i, s := range b.servers {
		nodes = append(nodes, b.cfg.startedNode(i, s.name, s.hostPort, s.name, b.spec.peerPort))
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
			if b.spec.cloned && s.serverID > 1 {
				return nil // cloned from the primary instead
			}
			_, err := b.cli.CopyToContainer(ctx, c.GetContainerID(), client.CopyToContainerOptions{DestinationPath: filepath.Dir(b.spec.dockerDir), Content: bytes.NewReader(tpl.tar)})
			if err != nil {
				return fmt.Errorf("copy data directory into %s: %w", s.name, err)
			}
			return nil
		},
	}}}
	sp := b.spec
	initFiles, _ := sp.initialize(b.cfg, "/tmp", sp.dockerDir)
	// The server logs to stderr, so the container log holds the error log.
	cnf := strings.Replace(sp.config(b.cfg, s.serverID, s.serverID-1, sp.peerPort, sp.dockerDir, "0.0.0.0"), "log-error="+sp.dockerDir+"/error.log\n", "", 1)
	files := []testcontainers.ContainerFile{{Reader: strings.NewReader(cnf), ContainerFilePath: "/tmp/causallab-" + sp.configName, FileMode: 0o644}}
	if init, ok := initFiles["init.sql"]; ok {
		files = append(files, testcontainers.ContainerFile{Reader: strings.NewReader(init), ContainerFilePath: "/tmp/causallab-init.sql", FileMode: 0o644})
	}
	exposed := fmt.Sprintf("%d/tcp", sp.peerPort)
	env := map[string]string{"CAUSALLAB_DIR": sp.dockerDir}
	if sp != mysqlSpec {
		env["CAUSALLAB_PASSWORD"] = b.cfg.Password
		env["PRIMARY_HOST"], env["PRIMARY_PORT"] = "primary", strconv.Itoa(sp.peerPort)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		c, err := testcontainers.Run(ctx, b.cfg.Image,
			// The entrypoint itself is our command, so an image's own
			// entrypoint (mysql:9.7's docker-entrypoint.sh) never runs.
			testcontainers.WithEntrypoint(b.dockerCommand(s.serverID-1)...),
			testcontainers.WithExposedPorts(exposed),
			testcontainers.WithName(b.containerName(s.name)),
			testcontainers.WithLabels(map[string]string{"causallab.node": s.name, "causallab.topology": b.topologyID}),
			testcontainers.WithLogger(TestcontainersLogger(b.cfg.Logger)),
			testcontainers.WithAdditionalLifecycleHooks(hooks...),
			testcontainers.WithFiles(files...),
			testcontainers.WithEnv(env),
			testcontainers.WithConfigModifier(func(cc *container.Config) {
				if sp.user != "" {
					cc.User = sp.user
				}
				if sp.stopSignal != syscall.SIGTERM {
					cc.StopSignal = "SIGINT"
				}
			}),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = mnetwork.PortMap{
					mnetwork.MustParsePort(exposed): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}},
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
			werr := b.waitSQL(ctx, s, port)
			if werr != nil {
				werr = fmt.Errorf("%w; container log: %s", werr, b.containerErrors(ctx, s.id))
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

func (s *dockerServer) nodeName() string { return s.name }

func (b *dockerBackend) server(name string) (*dockerServer, error) {
	return serverNamed(b.servers, name)
}

// serverState is the server of node name and its container's state.
func (b *dockerBackend) serverState(ctx context.Context, name string) (*dockerServer, *container.State, error) {
	s, err := b.server(name)
	if err != nil {
		return nil, nil, err
	}
	st, err := b.containerState(ctx, s)
	return s, st, err
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
	s, st, err := b.serverState(ctx, name)
	if err != nil {
		return err
	}
	if !st.Running {
		return nil // killing a dead node is a no-op
	}
	if _, err := b.cli.ContainerKill(ctx, s.id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("compose: kill %s: %w", name, err)
	}
	// The signal is sent; return once the container (mysqld) has exited.
	return poll(ctx, 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		st, err := b.containerState(ctx, s)
		return err == nil && !st.Running, err
	}, func() error { return fmt.Errorf("compose: kill %s: container still running after 10s", name) })
}

func (b *dockerBackend) restart(ctx context.Context, name string) error {
	s, st, err := b.serverState(ctx, name)
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
	if err := b.waitSQL(ctx, s, s.hostPort); err != nil {
		return fmt.Errorf("%w; container log: %s", err, b.containerErrors(ctx, s.id))
	}
	return nil
}

// offline writes script into the container as offline.sh, which the
// container command runs before the server starts, and restarts the
// container.
func (b *dockerBackend) offline(ctx context.Context, name, script string) error {
	s, err := b.server(name)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	uid, gid := b.uidGid()
	if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(b.spec.dockerDir) + "/offline.sh", Mode: 0o755, Size: int64(len(script)), Uid: uid, Gid: gid}); err != nil {
		return err
	}
	if _, err := tw.Write([]byte(script)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if _, err := b.cli.CopyToContainer(ctx, s.id, client.CopyToContainerOptions{DestinationPath: filepath.Dir(b.spec.dockerDir), Content: &buf}); err != nil {
		return fmt.Errorf("compose: offline script into %s: %w", name, err)
	}
	return b.restart(ctx, name)
}

// uidGid is the server account's ids in the local root filesystem (the
// image's), 0 for root.
func (b *dockerBackend) uidGid() (int, int) {
	if b.spec.user == "" {
		return 0, 0
	}
	uid, gid, err := lookupUser(filepath.Join(b.cfg.RootFS, "etc/passwd"), b.spec.user)
	if err != nil {
		return 0, 0
	}
	return uid, gid
}

// waitSQL waits until the server of s (host port port) answers SQL with
// the account, or its container stops.
func (b *dockerBackend) waitSQL(ctx context.Context, s *dockerServer, port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	name, limit := s.name, b.cfg.StartTimeout
	var last error
	err := poll(ctx, limit, 50*time.Millisecond, func() (bool, error) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, last = b.spec.ready(pctx, b.cfg, addr)
		cancel()
		if last == nil {
			return true, nil
		}
		if st, err := b.containerState(ctx, s); err == nil && !st.Running {
			return false, fmt.Errorf("compose: %s exited during start-up: %v", name, last)
		}
		return false, nil
	}, func() error { return fmt.Errorf("compose: %s did not answer SQL within %v: %v", name, limit, last) })
	if err != nil && err == ctx.Err() {
		return fmt.Errorf("compose: waiting for %s: %w", name, err)
	}
	return err
}

func (b *dockerBackend) running(ctx context.Context, name string) (*dockerServer, error) {
	s, st, err := b.serverState(ctx, name)
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
	_, st, err := b.serverState(ctx, name)
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

// containerErrors returns the last error lines of a container's log (the
// server logs to stderr there).
func (b *dockerBackend) containerErrors(ctx context.Context, id string) string {
	if b.cli == nil || id == "" {
		return "(no container)"
	}
	rc, err := b.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "200"})
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer rc.Close()
	data, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
	keep := b.spec.errorLines(string(data), 4)
	if len(keep) == 0 {
		return "(no error line)"
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
	if b.cfg.Image != DefaultEngineImage(b.cfg.Engine, b.cfg.RootFS) {
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
	base := filepath.Base(b.spec.dockerDir)
	srv := lb.newServer(base, 1, filepath.Join(dir, base))
	if err := os.MkdirAll(srv.hostDir, 0o755); err != nil {
		return nil, err
	}
	if err := lb.chown(dir); err != nil {
		return nil, err
	}
	if err := lb.writeCnf(srv); err != nil {
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
	if lb.uid != 0 || lb.gid != 0 {
		// The server's own account must own its directory too.
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: base + "/", Mode: 0o755, Uid: lb.uid, Gid: lb.gid}); err != nil {
			return nil, err
		}
	}
	err = filepath.WalkDir(filepath.Join(root, "data"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if slices.Contains(b.spec.skip, d.Name()) || d.Name() == "ibtmp1" || d.Name() == "postmaster.pid" || !(d.IsDir() || d.Type().IsRegular()) {
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
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = lb.uid, lb.gid, "", ""
		if lb.uid == 0 && lb.gid == 0 {
			hdr.Uname, hdr.Gname = "root", "root"
		}
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
