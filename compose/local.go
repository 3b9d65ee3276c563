package compose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoRootFS is returned (wrapped) when the local backend finds no
// server program (mysqld, mariadbd, postgres) in the root filesystem.
var ErrNoRootFS = errors.New("no root filesystem for the engine")

// ErrPortInUse is returned (wrapped) when a server could not bind its port.
var ErrPortInUse = errors.New("port in use")

// ErrNodeDown is returned (wrapped) by faults that need a running server.
var ErrNodeDown = errors.New("node is not running")

// localServer is one server process (mysqld, mariadbd, postgres) of the
// local backend.
type localServer struct {
	name     string
	serverID int
	port     int
	hostDir  string // the server's directory as this process sees it
	inDir    string // the same directory as mysqld sees it (inside the chroot)
	marker   string // in the server's command line: proves a pid is ours ("" = MySQL's)
	group    bool   // the server is a process family: signal its children too (PostgreSQL)
	family   []int  // the children last signalled (guarded by mu)

	mu   sync.Mutex
	pid  int           // 0: not running
	done chan struct{} // closed when the process we started has been reaped; nil for adopted pids
}

type localBackend struct {
	cfg      *Config
	spec     *serverSpec
	uid, gid int    // the server's account inside the chroot (0: root)
	chroot   string // "" when running the host's mysqld
	mysqld   string // path of mysqld (inside the chroot when chrooted)
	hostDir  string // topology directory, host view
	inDir    string // topology directory, mysqld view
	servers  []*localServer
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

func newLocalBackend(cfg *Config) *localBackend {
	return &localBackend{cfg: cfg, spec: serverOf(cfg.Engine)}
}

// serverOf is the process half of engine e (MySQL's for unknown names:
// Config.validate rejects those first).
func serverOf(e Engine) *serverSpec {
	eng, err := engineFor(e)
	if err != nil {
		return mysqlSpec
	}
	return eng.server()
}

// newServer makes the localServer named name.
func (b *localBackend) newServer(name string, serverID int, hostDir string) *localServer {
	s := &localServer{name: name, serverID: serverID, hostDir: hostDir, group: b.spec.group}
	s.inDir = b.inside(hostDir)
	if b.spec != mysqlSpec {
		s.marker = b.spec.marker(s.inDir)
	}
	return s
}

// locate finds the server program: in the root filesystem, or (MySQL
// with HostMysqld) on PATH.
func (b *localBackend) locate() error {
	if b.cfg.HostMysqld {
		p, err := exec.LookPath("mysqld")
		if err != nil {
			return fmt.Errorf("compose: HostMysqld set but no mysqld on PATH: %w", err)
		}
		b.mysqld = p
		return nil
	}
	if _, err := os.Stat(filepath.Join(b.cfg.RootFS, b.spec.program)); err != nil {
		return fmt.Errorf("compose: %w at %s: %s missing (build it with `causallab image --engine %s`)", ErrNoRootFS, b.cfg.RootFS, b.spec.program, b.cfg.Engine)
	}
	b.chroot = b.cfg.RootFS
	b.mysqld = b.spec.program
	if b.spec.user != "" {
		uid, gid, err := lookupUser(filepath.Join(b.chroot, "etc/passwd"), b.spec.user)
		if err != nil {
			return fmt.Errorf("compose: %w", err)
		}
		b.uid, b.gid = uid, gid
	}
	return nil
}

// lookupUser finds name's uid and gid in a passwd file.
func lookupUser(passwd, name string) (int, int, error) {
	data, err := os.ReadFile(passwd)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Split(l, ":")
		if len(f) >= 4 && f[0] == name {
			uid, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				return 0, 0, fmt.Errorf("bad passwd line for %s in %s", name, passwd)
			}
			return uid, gid, nil
		}
	}
	return 0, 0, fmt.Errorf("no user %s in %s", name, passwd)
}

// chown gives the server's account a directory tree (no-op for root).
func (b *localBackend) chown(dir string) error {
	if b.uid == 0 && b.gid == 0 {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, b.uid, b.gid)
	})
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
	for i, name := range serverNames(b.cfg.Replicas) {
		s := b.newServer(name, i+1, filepath.Join(dir, name))
		if err := os.MkdirAll(s.hostDir, 0o755); err != nil {
			return nil, err
		}
		b.servers = append(b.servers, s)
	}
	if err := b.chown(dir); err != nil {
		return nil, err
	}
	// Initialize one data directory and copy it: the copies get a fresh
	// server_uuid because auto.cnf is left out. The account is created by
	// the init file with sql_log_bin=0, so no server starts with GTIDs.
	// (PostgreSQL: the primary's is made by initdb, its standbys are
	// cloned from the running primary with pg_basebackup.)
	first := b.servers[0]
	if err := b.writeCnf(first); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := b.initialize(ctx, first); err != nil {
		return nil, err
	}
	b.cfg.Logger.Debug("compose: initialized data directory", "elapsed", time.Since(began))
	if !b.spec.cloned {
		for _, s := range b.servers[1:] {
			if err := copyDir(filepath.Join(first.hostDir, "data"), filepath.Join(s.hostDir, "data"), b.spec.skip...); err != nil {
				return nil, fmt.Errorf("compose: copy data directory for %s: %w", s.name, err)
			}
		}
	}
	err = startServers(b.servers, b.spec.cloned, func(s *localServer) error {
		var clone func() error
		if b.spec.cloned && s != first {
			clone = func() error { return b.clone(ctx, s, first) }
		}
		return b.startFresh(ctx, s, clone)
	})
	if err != nil {
		return nil, err
	}
	for i, s := range b.servers {
		nodes = append(nodes, b.cfg.startedNode(i, s.name, s.port, "127.0.0.1", s.port))
	}
	return nodes, nil
}

func (b *localBackend) writeCnf(s *localServer) error {
	path := filepath.Join(s.hostDir, b.spec.configName)
	if err := os.WriteFile(path, []byte(b.spec.config(b.cfg, s.serverID, s.serverID-1, s.port, s.inDir, "127.0.0.1")), 0o644); err != nil {
		return err
	}
	return os.Lchown(path, b.uid, b.gid)
}

// command is the server process of s (the engine's command line, extra
// appended), chrooted and run as the engine's account.
func (b *localBackend) command(s *localServer, extra ...string) *exec.Cmd {
	return b.process(append(b.spec.args(s.inDir), extra...))
}

// process is argv (argv[0] absolute inside the chroot, or the server
// program's name) as a process of this backend: chrooted, run as the
// engine's account, in its own process group (killed with us unless
// detached).
func (b *localBackend) process(argv []string) *exec.Cmd {
	path := argv[0]
	if !filepath.IsAbs(path) {
		path = b.mysqld
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Dir: "/"}
	attr := &syscall.SysProcAttr{Chroot: b.chroot}
	if b.uid != 0 || b.gid != 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(b.uid), Gid: uint32(b.gid), NoSetGroups: true}
	}
	if b.cfg.Detach {
		attr.Setsid = true
	} else {
		attr.Setpgid = true
		attr.Pdeathsig = syscall.SIGKILL
	}
	cmd.SysProcAttr = attr
	return cmd
}

// initialize makes the template data directory in s: the engine's files
// and commands (mysqld --initialize-insecure; mariadb-install-db; initdb).
func (b *localBackend) initialize(ctx context.Context, s *localServer) error {
	files, cmds := b.spec.initialize(b.cfg, b.inDir, s.inDir)
	for name, text := range files {
		path := filepath.Join(b.hostDir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return err
		}
		if err := os.Lchown(path, b.uid, b.gid); err != nil {
			return err
		}
	}
	for _, argv := range cmds {
		if err := b.runOnce(ctx, s, argv); err != nil {
			return err
		}
	}
	return nil
}

// runOnce runs argv to its end (bounded by ctx) with the engine's
// environment, failing with its output's (or the error log's) last lines.
func (b *localBackend) runOnce(ctx context.Context, s *localServer, argv []string, env ...string) error {
	cmd := b.process(argv)
	if b.spec.env != nil {
		cmd.Env = b.spec.env(b.cfg)
	}
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	name := filepath.Base(argv[0])
	if len(argv) > 1 && name == filepath.Base(b.mysqld) {
		name += " " + argv[len(argv)-1]
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("compose: start %s: %w", name, err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			tail := b.errorLogTail(s.hostDir, 5)
			if lines := b.spec.errorLines(out.String(), 5); len(lines) > 0 {
				tail = strings.Join(lines, " | ")
			} else if o := strings.TrimSpace(out.String()); o != "" && b.spec != mysqlSpec {
				tail = lastLines(o, 3)
			}
			return fmt.Errorf("compose: %s failed (%v): %s", name, err, tail)
		}
		return nil
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-waitErr
		return fmt.Errorf("compose: %s: %w", name, ctx.Err())
	}
}

// lastLines returns the last n lines of s joined by " | ".
func lastLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

// clone makes replica s's data directory from the running primary
// (pg_basebackup).
func (b *localBackend) clone(ctx context.Context, s, primary *localServer) error {
	return b.runOnce(ctx, s, b.spec.clone(b.cfg, s.serverID-1, s.inDir, "127.0.0.1", primary.port))
}

// startFresh picks a free port and starts s, retrying with another port
// when another program takes the port first. clone, when not nil, makes
// the server's data directory once its configuration is written.
func (b *localBackend) startFresh(ctx context.Context, s *localServer, clone func() error) error {
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
		if clone != nil {
			if err = clone(); err != nil {
				return err
			}
			clone = nil
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

// run starts the server s and waits until it answers SQL.
func (b *localBackend) run(ctx context.Context, s *localServer) error {
	cmd := b.command(s)
	if b.spec.logToStderr {
		f, err := os.OpenFile(filepath.Join(s.hostDir, "error.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close() // the server has its own descriptor once started
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("compose: start %s for %s: %w", filepath.Base(b.mysqld), s.name, err)
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
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	deadline := time.Now().Add(b.cfg.StartTimeout)
	var lastErr error
	for {
		select {
		case <-done:
			tail := b.errorLogTail(s.hostDir, 6)
			if strings.Contains(tail, "Address already in use") || strings.Contains(tail, "Do you already have another mysqld server running on port") {
				return fmt.Errorf("compose: %s: %w: 127.0.0.1:%d", s.name, ErrPortInUse, s.port)
			}
			return fmt.Errorf("compose: %s for %s exited during start-up: %s", filepath.Base(b.mysqld), s.name, tail)
		case <-ctx.Done():
			return fmt.Errorf("compose: waiting for %s: %w", s.name, ctx.Err())
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		var datadir string
		datadir, lastErr = b.spec.ready(pctx, b.cfg, addr)
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
				_ = s.signal(pid, syscall.SIGKILL)
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
func (b *localBackend) errorLogTail(dir string, n int) string {
	data, err := os.ReadFile(filepath.Join(dir, "error.log"))
	if err != nil {
		return "(no error log: " + err.Error() + ")"
	}
	keep := b.spec.errorLines(string(data), n)
	if len(keep) == 0 {
		return "(no error line in error.log)"
	}
	return strings.Join(keep, " | ")
}

// signal sends sig to the server's process and, for a server that is a
// process family (PostgreSQL's postmaster, whose children each call
// setsid(), so no process group holds them), to its children: listed
// before and after the postmaster is signalled (a stopped postmaster
// forks no more; a killed one's children are soon reparented), and kept
// for waitExit.
func (s *localServer) signal(pid int, sig syscall.Signal) error {
	if !s.group {
		return syscall.Kill(pid, sig)
	}
	kids := childrenOf(pid)
	err := syscall.Kill(pid, sig)
	for _, c := range childrenOf(pid) {
		if !slices.Contains(kids, c) {
			kids = append(kids, c)
		}
	}
	for _, c := range kids {
		_ = syscall.Kill(c, sig)
	}
	s.mu.Lock()
	s.family = kids
	s.mu.Unlock()
	return err
}

// childrenOf lists the live processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil || c == pid {
			continue
		}
		if pp, ok := procParent(c); ok && pp == pid {
			out = append(out, c)
		}
	}
	return out
}

// procParent returns the parent of a live (non-zombie) pid.
func procParent(pid int) (int, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return 0, false
	}
	f := strings.Fields(string(stat[i+2:]))
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// ours reports whether pid is this server's live process.
func (s *localServer) ours(pid int) bool {
	if s.marker == "" {
		return pidIsOurs(pid, s.inDir)
	}
	return pidMatches(pid, s.marker)
}

func (s *localServer) nodeName() string { return s.name }

func (b *localBackend) server(name string) (*localServer, error) { return serverNamed(b.servers, name) }

// alive reports the pid of s if its process runs.
func (s *localServer) alive() (int, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid == 0 {
		return 0, nil
	}
	if s.done == nil && !s.ours(s.pid) {
		s.pid = 0
		return 0, nil
	}
	return s.pid, s.done
}

// pidIsOurs reports whether pid is a live mysqld started with a defaults
// file under dir (guards adopted pids against reuse).
func pidIsOurs(pid int, dir string) bool { return pidMatches(pid, "--defaults-file="+dir+"/") }

// pidMatches reports whether pid is a live process whose command line
// holds marker.
func pidMatches(pid int, marker string) bool {
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
	return bytes.Contains(cmdline, []byte(marker))
}

// waitExit waits until the process of s has exited, then removes the
// socket lock file that names it (MySQL's and MariaDB's mysql.sock.lock):
// mysqld refuses to start while the pid in that file exists (kill(pid, 0)),
// and an exited process nobody reaps yet (a zombie) exists.
func (s *localServer) waitExit(ctx context.Context, pid int, done chan struct{}, limit time.Duration) error {
	if err := s.awaitExit(ctx, pid, done, limit); err != nil {
		return err
	}
	lock := filepath.Join(s.hostDir, "mysql.sock.lock")
	if b, err := os.ReadFile(lock); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
		_ = os.Remove(lock)
	}
	return nil
}

// exited reports whether the adopted process pid of s has exited: it is
// gone, a zombie, or the pid is another program's now. While a killed
// process's threads still exit its command line already reads empty, so an
// empty command line is not an exit (ours, which reads it so, is not).
func (s *localServer) exited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
		return true
	}
	marker := s.marker
	if marker == "" {
		marker = "--defaults-file=" + s.inDir + "/"
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && len(cmdline) > 0 && !bytes.Contains(cmdline, []byte(marker))
}

func (s *localServer) awaitExit(ctx context.Context, pid int, done chan struct{}, limit time.Duration) error {
	timeout := time.After(limit)
	for {
		if done != nil {
			select {
			case <-done:
				if err := s.waitFamilyGone(ctx, timeout); err != nil {
					return fmt.Errorf("compose: %s (pid %d): %w", s.name, pid, err)
				}
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-timeout:
				return fmt.Errorf("compose: %s (pid %d) still running after %v", s.name, pid, limit)
			}
		}
		if s.exited(pid) {
			if err := s.waitFamilyGone(ctx, timeout); err != nil {
				return fmt.Errorf("compose: %s (pid %d): %w", s.name, pid, err)
			}
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
	if err := s.signal(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("compose: kill %s: %w", name, err)
	}
	return s.waitExit(ctx, pid, done, 10*time.Second)
}

func (b *localBackend) restart(ctx context.Context, name string) error {
	s, err := b.server(name)
	if err != nil {
		return err
	}
	if err := b.stop(ctx, s); err != nil {
		return err
	}
	return b.run(ctx, s)
}

// stop shuts s down cleanly (the engine's stop signal; SIGKILL after 30 s).
func (b *localBackend) stop(ctx context.Context, s *localServer) error {
	if pid, done := s.alive(); pid != 0 {
		_ = s.signal(pid, b.spec.stopSignal)
		_ = s.signal(pid, syscall.SIGCONT) // a paused server must wake to shut down
		if err := s.waitExit(ctx, pid, done, 30*time.Second); err != nil {
			_ = s.signal(pid, syscall.SIGKILL)
			if err := s.waitExit(ctx, pid, done, 10*time.Second); err != nil {
				return err
			}
		}
	}
	return nil
}

// offline stops the server cleanly, runs script (sh -c, as the server's
// account, with the engine's environment) and starts the server again.
func (b *localBackend) offline(ctx context.Context, name, script string) error {
	s, err := b.server(name)
	if err != nil {
		return err
	}
	if err := b.stop(ctx, s); err != nil {
		return err
	}
	if err := b.runOnce(ctx, s, []string{"/bin/sh", "-c", script}, "CAUSALLAB_DIR="+s.inDir); err != nil {
		return err
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
	if err := s.signal(pid, sig); err != nil {
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
	pids := []int{pid}
	if s.group {
		pids = append(pids, childrenOf(pid)...)
	}
	for _, p := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
		if err != nil {
			if p == pid {
				return false
			}
			continue // the process exited
		}
		for _, t := range tasks {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", p, t.Name()))
			if err != nil {
				continue // the thread exited
			}
			i := bytes.LastIndexByte(stat, ')')
			if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
				return false
			}
		}
	}
	return true
}

// waitFamilyGone waits until the children last signalled are gone: a
// dead postmaster's children follow it within moments, and a new
// postmaster refuses to start while they hold its shared memory.
func (s *localServer) waitFamilyGone(ctx context.Context, limit <-chan time.Time) error {
	s.mu.Lock()
	kids := s.family
	s.mu.Unlock()
	for _, c := range kids {
		for processAlive(c) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-limit:
				return fmt.Errorf("child process %d still running", c)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
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
	var c condition
	return poll(ctx, 5*time.Second, time.Millisecond, func() (bool, error) {
		var err error
		c, err = b.condition(ctx, name)
		return err == nil && done(c), err
	}, func() error { return fmt.Errorf("compose: %s: process state still %q after 5s", name, c) })
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
		if d.Name() == "mysqld.pid" || d.Name() == "server.pid" {
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

// copyDir copies a directory tree of regular files, leaving out files named
// in skip.
func copyDir(src, dst string, skip ...string) error {
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
		if slices.Contains(skip, d.Name()) || !d.Type().IsRegular() {
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

// initSQL creates the accounts, outside the binary log, at --initialize
// (the data directory every server starts from): compose's own, with
// every privilege, and the application account AppUser (unless compose's
// own has its name), with AppPrivileges on every schema but mysql and
// sys.
func initSQL(cfg *Config) string {
	sql := fmt.Sprintf("SET sql_log_bin=0;\nCREATE USER '%[1]s'@'%%' IDENTIFIED BY '%[2]s';\nGRANT ALL PRIVILEGES ON *.* TO '%[1]s'@'%%' WITH GRANT OPTION;\n", cfg.User, cfg.Password)
	if cfg.User != AppUser {
		sql += fmt.Sprintf("CREATE USER '%[1]s'@'%%' IDENTIFIED BY '%[2]s';\nGRANT %[3]s ON *.* TO '%[1]s'@'%%';\n"+
			"REVOKE %[3]s ON mysql.* FROM '%[1]s'@'%%';\nREVOKE %[3]s ON sys.* FROM '%[1]s'@'%%';\n", AppUser, AppPassword, AppPrivileges)
	}
	return sql
}
