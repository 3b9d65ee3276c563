package compose

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrNoRootFS is returned (wrapped) when the local backend finds no mysqld.
var ErrNoRootFS = errors.New("no MySQL root filesystem")

// ErrPortInUse is returned (wrapped) when a server could not bind its port.
var ErrPortInUse = errors.New("port in use")

// ErrNodeDown is returned (wrapped) by faults that need a running server.
var ErrNodeDown = errors.New("node is not running")

// localServer is one mysqld process of the local backend.
type localServer struct {
	name     string
	serverID int
	port     int
	hostDir  string // the server's directory as this process sees it
	inDir    string // the same directory as mysqld sees it (inside the chroot)

	mu   sync.Mutex
	pid  int           // 0: not running
	done chan struct{} // closed when the process we started has been reaped; nil for adopted pids
}

type localBackend struct {
	cfg     *Config
	chroot  string // "" when running the host's mysqld
	mysqld  string // path of mysqld (inside the chroot when chrooted)
	hostDir string // topology directory, host view
	inDir   string // topology directory, mysqld view
	servers []*localServer
	// pickPort picks a port to try; nil means freePort (tests replace it).
	pickPort func() (int, error)

	portsMu sync.Mutex
	ports   map[int]bool // ports picked for this topology's servers
}

// reserve records port as picked by this topology; false when another of
// its servers picked it already (the kernel may hand a just-closed port
// out again to a parallel pick).
func (b *localBackend) reserve(port int) bool {
	b.portsMu.Lock()
	defer b.portsMu.Unlock()
	if b.ports == nil {
		b.ports = map[int]bool{}
	}
	if b.ports[port] {
		return false
	}
	b.ports[port] = true
	return true
}

var _ backend = (*localBackend)(nil)

func newLocalBackend(cfg *Config) *localBackend { return &localBackend{cfg: cfg} }

// locate finds mysqld: in the root filesystem, or on PATH.
func (b *localBackend) locate() error {
	if b.cfg.HostMysqld {
		p, err := exec.LookPath("mysqld")
		if err != nil {
			return fmt.Errorf("compose: HostMysqld set but no mysqld on PATH: %w", err)
		}
		b.mysqld = p
		return nil
	}
	if _, err := os.Stat(filepath.Join(b.cfg.RootFS, "usr/sbin/mysqld")); err != nil {
		return fmt.Errorf("compose: %w at %s (build it with `causallab image`)", ErrNoRootFS, b.cfg.RootFS)
	}
	b.chroot = b.cfg.RootFS
	b.mysqld = "/usr/sbin/mysqld"
	return nil
}

// tmpBase is where topology directories live, host view.
func (b *localBackend) tmpBase() string {
	if b.chroot != "" {
		return filepath.Join(b.chroot, "tmp")
	}
	return os.TempDir()
}

// inside maps a host path under the chroot to mysqld's view.
func (b *localBackend) inside(host string) string {
	if b.chroot == "" {
		return host
	}
	rel, _ := filepath.Rel(b.chroot, host)
	return "/" + filepath.ToSlash(rel)
}

func (b *localBackend) start(ctx context.Context) (nodes []Node, err error) {
	if err := b.locate(); err != nil {
		return nil, err
	}
	sweepStale(b.tmpBase(), b.cfg)
	dir, err := os.MkdirTemp(b.tmpBase(), "causallab-")
	if err != nil {
		return nil, fmt.Errorf("compose: topology directory: %w", err)
	}
	b.hostDir, b.inDir = dir, b.inside(dir)
	defer func() {
		if err != nil {
			err = errors.Join(err, b.down(context.WithoutCancel(ctx)))
		}
	}()
	owner := strconv.Itoa(os.Getpid())
	if b.cfg.Detach {
		owner += " detached"
	}
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(owner+"\n"), 0o644); err != nil {
		return nil, err
	}
	names := []string{"primary"}
	for i := 1; i <= b.cfg.Replicas; i++ {
		names = append(names, fmt.Sprintf("replica%d", i))
	}
	for i, name := range names {
		s := &localServer{name: name, serverID: i + 1, hostDir: filepath.Join(dir, name)}
		s.inDir = b.inside(s.hostDir)
		if err := os.MkdirAll(s.hostDir, 0o755); err != nil {
			return nil, err
		}
		b.servers = append(b.servers, s)
	}
	// Initialize one data directory and copy it: the copies get a fresh
	// server_uuid because auto.cnf is left out. The account is created by
	// the init file with sql_log_bin=0, so no server starts with GTIDs.
	first := b.servers[0]
	if err := b.writeCnf(first); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "init.sql"), []byte(initSQL(b.cfg)), 0o600); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := b.initialize(ctx, first); err != nil {
		return nil, err
	}
	b.cfg.Logger.Debug("compose: initialized data directory", "elapsed", time.Since(began))
	for _, s := range b.servers[1:] {
		if err := copyDir(filepath.Join(first.hostDir, "data"), filepath.Join(s.hostDir, "data"), "auto.cnf"); err != nil {
			return nil, fmt.Errorf("compose: copy data directory for %s: %w", s.name, err)
		}
	}
	errs := make([]error, len(b.servers))
	var wg sync.WaitGroup
	for i, s := range b.servers {
		wg.Go(func() { errs[i] = b.startFresh(ctx, s) })
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
		nodes = append(nodes, Node{Name: s.name, Role: role, Host: "127.0.0.1", Port: s.port,
			User: b.cfg.User, Password: b.cfg.Password, PeerHost: "127.0.0.1", PeerPort: s.port})
	}
	return nodes, nil
}

func (b *localBackend) writeCnf(s *localServer) error {
	return os.WriteFile(filepath.Join(s.hostDir, "my.cnf"), []byte(b.cfg.myCnf(s.serverID, s.port, s.inDir, "127.0.0.1")), 0o644)
}

func (b *localBackend) command(s *localServer, extra ...string) *exec.Cmd {
	args := append([]string{"mysqld", "--defaults-file=" + s.inDir + "/my.cnf", "--user=root"}, extra...)
	cmd := &exec.Cmd{Path: b.mysqld, Args: args, Dir: "/"}
	attr := &syscall.SysProcAttr{Chroot: b.chroot}
	if b.cfg.Detach {
		attr.Setsid = true
	} else {
		attr.Setpgid = true
		attr.Pdeathsig = syscall.SIGKILL
	}
	cmd.SysProcAttr = attr
	return cmd
}

func (b *localBackend) initialize(ctx context.Context, s *localServer) error {
	cmd := b.command(s, "--initialize-insecure", "--init-file="+b.inDir+"/init.sql")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("compose: start mysqld --initialize: %w", err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			return fmt.Errorf("compose: mysqld --initialize failed (%v): %s", err, errorLogTail(s.hostDir, 5))
		}
		return nil
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-waitErr
		return fmt.Errorf("compose: mysqld --initialize: %w", ctx.Err())
	}
}

// startFresh picks a free port and starts s, retrying with another port
// when another program takes the port first.
func (b *localBackend) startFresh(ctx context.Context, s *localServer) error {
	var err error
	pick := b.pickPort
	if pick == nil {
		pick = freePort
	}
	for attempt := 0; attempt < 3; attempt++ {
		s.port, err = pick()
		if err != nil {
			return err
		}
		if !b.reserve(s.port) {
			err = fmt.Errorf("compose: %s: %w: 127.0.0.1:%d (picked twice)", s.name, ErrPortInUse, s.port)
			continue
		}
		// A port taken already fails here at once; one taken between this
		// check and mysqld's bind is found in the error log below.
		if l, lerr := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))); lerr != nil {
			err = fmt.Errorf("compose: %s: %w: 127.0.0.1:%d", s.name, ErrPortInUse, s.port)
			continue
		} else {
			l.Close()
		}
		if err = b.writeCnf(s); err != nil {
			return err
		}
		err = b.run(ctx, s)
		if !errors.Is(err, ErrPortInUse) {
			return err
		}
		b.cfg.Logger.Debug("compose: port taken, retrying", "node", s.name, "port", s.port)
	}
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("compose: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run starts mysqld for s and waits until it answers SQL.
func (b *localBackend) run(ctx context.Context, s *localServer) error {
	cmd := b.command(s)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("compose: start mysqld for %s: %w", s.name, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.pid, s.done = cmd.Process.Pid, done
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		s.mu.Lock()
		if s.done == done {
			s.pid = 0
		}
		s.mu.Unlock()
		close(done)
	}()
	return b.waitReady(ctx, s, done)
}

func (b *localBackend) waitReady(ctx context.Context, s *localServer, done chan struct{}) error {
	mc := mysql.NewConfig()
	mc.User, mc.Passwd, mc.Net, mc.Addr = b.cfg.User, b.cfg.Password, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	mc.Timeout = time.Second
	mc.Logger = driverLogger{b.cfg.Logger}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	deadline := time.Now().Add(b.cfg.StartTimeout)
	var lastErr error
	for {
		select {
		case <-done:
			tail := errorLogTail(s.hostDir, 6)
			if strings.Contains(tail, "Address already in use") || strings.Contains(tail, "Do you already have another mysqld server running on port") {
				return fmt.Errorf("compose: %s: %w: 127.0.0.1:%d", s.name, ErrPortInUse, s.port)
			}
			return fmt.Errorf("compose: mysqld for %s exited during start-up: %s", s.name, tail)
		case <-ctx.Done():
			return fmt.Errorf("compose: waiting for %s: %w", s.name, ctx.Err())
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		var datadir string
		lastErr = db.QueryRowContext(pctx, "SELECT @@datadir").Scan(&datadir)
		cancel()
		if lastErr == nil {
			// The port was free when picked, but another program's mysqld
			// (same account: another causallab topology) may have bound it
			// before ours: only our data directory proves it is ours.
			if strings.Contains(datadir, "/"+filepath.Base(filepath.Dir(s.hostDir))+"/"+s.name+"/") {
				return nil
			}
			b.cfg.Logger.Debug("compose: another server answers on our port", "node", s.name, "port", s.port, "datadir", datadir)
			s.mu.Lock()
			pid := s.pid
			s.mu.Unlock()
			if pid != 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			select {
			case <-done:
			case <-ctx.Done():
				return fmt.Errorf("compose: waiting for %s: %w", s.name, ctx.Err())
			}
			return fmt.Errorf("compose: %s: %w: 127.0.0.1:%d (another server answers there)", s.name, ErrPortInUse, s.port)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("compose: %s did not answer SQL within %v: %v", s.name, b.cfg.StartTimeout, lastErr)
		}
		select {
		case <-done:
		case <-ctx.Done():
		case <-time.After(30 * time.Millisecond):
		}
	}
}

// errorLogTail returns the last n error lines of a server's error log.
func errorLogTail(dir string, n int) string {
	data, err := os.ReadFile(filepath.Join(dir, "error.log"))
	if err != nil {
		return "(no error log: " + err.Error() + ")"
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.Contains(l, "[ERROR]") {
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return "(no [ERROR] line in error.log)"
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, " | ")
}

func (b *localBackend) server(name string) (*localServer, error) {
	for _, s := range b.servers {
		if s.name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("compose: %w %q", ErrUnknownNode, name)
}

// alive reports the pid of s if its process runs.
func (s *localServer) alive() (int, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 {
		return 0, nil
	}
	if s.done == nil && !pidIsOurs(s.pid, s.inDir) {
		s.pid = 0
		return 0, nil
	}
	return s.pid, s.done
}

// pidIsOurs reports whether pid is a live mysqld started with a defaults
// file under dir (guards adopted pids against reuse).
func pidIsOurs(pid int, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		// A zombie (state Z) is dead for our purposes.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	return bytes.Contains(cmdline, []byte("--defaults-file="+dir+"/"))
}

// waitExit waits until the process of s is gone.
func (s *localServer) waitExit(ctx context.Context, pid int, done chan struct{}, limit time.Duration) error {
	timeout := time.After(limit)
	for {
		if done != nil {
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-timeout:
				return fmt.Errorf("compose: %s (pid %d) still running after %v", s.name, pid, limit)
			}
		}
		if !pidIsOurs(pid, s.inDir) {
			s.mu.Lock()
			if s.pid == pid {
				s.pid = 0
			}
			s.mu.Unlock()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("compose: %s (pid %d) still running after %v", s.name, pid, limit)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (b *localBackend) kill(ctx context.Context, name string) error {
	s, err := b.server(name)
	if err != nil {
		return err
	}
	pid, done := s.alive()
	if pid == 0 {
		return nil // killing a dead node is a no-op
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("compose: kill %s: %w", name, err)
	}
	return s.waitExit(ctx, pid, done, 10*time.Second)
}

func (b *localBackend) restart(ctx context.Context, name string) error {
	s, err := b.server(name)
	if err != nil {
		return err
	}
	if pid, done := s.alive(); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		_ = syscall.Kill(pid, syscall.SIGCONT) // a paused server must wake to shut down
		if err := s.waitExit(ctx, pid, done, 30*time.Second); err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if err := s.waitExit(ctx, pid, done, 10*time.Second); err != nil {
				return err
			}
		}
	}
	return b.run(ctx, s)
}

func (b *localBackend) signal(name string, sig syscall.Signal) error {
	s, err := b.server(name)
	if err != nil {
		return err
	}
	pid, _ := s.alive()
	if pid == 0 {
		return fmt.Errorf("compose: %s: %w", name, ErrNodeDown)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("compose: signal %v to %s: %w", sig, name, err)
	}
	return nil
}

// pause stops the node's process and returns once the kernel reports it
// stopped: signal delivery is asynchronous, and a multi-threaded mysqld can
// still answer a query for a moment after SIGSTOP is sent.
func (b *localBackend) pause(ctx context.Context, name string) error {
	if err := b.signal(name, syscall.SIGSTOP); err != nil {
		return err
	}
	return b.awaitCondition(ctx, name, func(c condition) bool {
		return c == condDown || (c == condPaused && b.allThreadsStopped(name))
	})
}

// allThreadsStopped reports whether every thread of the node's process is
// stopped (the main thread can stop before the others have).
func (b *localBackend) allThreadsStopped(name string) bool {
	s, err := b.server(name)
	if err != nil {
		return false
	}
	pid, _ := s.alive()
	if pid == 0 {
		return false
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, t := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
			return false
		}
	}
	return true
}

// resume continues the node's process and returns once it is no longer
// reported stopped.
func (b *localBackend) resume(ctx context.Context, name string) error {
	if err := b.signal(name, syscall.SIGCONT); err != nil {
		return err
	}
	return b.awaitCondition(ctx, name, func(c condition) bool { return c != condPaused })
}

// awaitCondition polls the node's process state until done holds, for at
// most 5 s.
func (b *localBackend) awaitCondition(ctx context.Context, name string, done func(condition) bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := b.condition(ctx, name)
		if err != nil {
			return err
		}
		if done(c) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("compose: %s: process state still %q after 5s", name, c)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (b *localBackend) condition(_ context.Context, name string) (condition, error) {
	s, err := b.server(name)
	if err != nil {
		return "", err
	}
	pid, _ := s.alive()
	if pid == 0 {
		return condDown, nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return condDown, nil
	}
	// The state letter follows the command name's closing parenthesis;
	// T (and t, traced) is a stopped process: SIGSTOP.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't') {
		return condPaused, nil
	}
	return condRunning, nil
}

func (b *localBackend) partition(context.Context, string) error { return ErrNotSupported }
func (b *localBackend) heal(context.Context, string) error      { return ErrNotSupported }

func (b *localBackend) down(ctx context.Context) error {
	var errs []error
	for _, s := range b.servers {
		if pid, _ := s.alive(); pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		if err := b.kill(ctx, s.name); err != nil {
			errs = append(errs, err)
		}
	}
	if b.hostDir != "" && len(errs) == 0 {
		if err := os.RemoveAll(b.hostDir); err != nil {
			errs = append(errs, fmt.Errorf("compose: remove %s: %w", b.hostDir, err))
		}
	}
	return errors.Join(errs...)
}

// sweepStale removes topology directories left by processes that died
// without Down (a test binary killed by its timeout): directories whose
// owner is gone, that are not detached, and that hold no live mysqld.
func sweepStale(base string, cfg *Config) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "causallab-") {
			continue
		}
		dir := filepath.Join(base, e.Name())
		owner, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue // being created, or not ours
		}
		f := strings.Fields(string(owner))
		if len(f) == 0 || len(f) > 1 { // detached topologies belong to the CLI
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || processAlive(pid) {
			continue
		}
		if liveMysqldUnder(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err == nil {
			cfg.Logger.Debug("compose: removed stale topology directory", "dir", dir)
		}
	}
}

func liveMysqldUnder(dir string) bool {
	found := false
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipDir
		}
		if d.Name() == "mysqld.pid" {
			if b, err := os.ReadFile(p); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && processAlive(pid) {
					found = true
				}
			}
		}
		if d.IsDir() && d.Name() == "data" {
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

// processAlive reports whether pid names a process that is not a zombie
// (an orphan whose reaper does not reap stays a zombie).
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// copyDir copies a directory tree of regular files, leaving out files named skip.
func copyDir(src, dst, skip string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			return os.MkdirAll(target, info.Mode().Perm())
		}
		if d.Name() == skip || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// initSQL creates the account, outside the binary log, at --initialize.
func initSQL(cfg *Config) string {
	return fmt.Sprintf("SET sql_log_bin=0;\nCREATE USER '%[1]s'@'%%' IDENTIFIED BY '%[2]s';\nGRANT ALL PRIVILEGES ON *.* TO '%[1]s'@'%%' WITH GRANT OPTION;\n", cfg.User, cfg.Password)
}
