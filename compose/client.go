package compose

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// ClientOptions say where the engine's command-line client (mysql,
// mariadb, psql) connects and what else it gets.
type ClientOptions struct {
	// Node names the topology's node to connect to, with the topology's
	// account. Empty: Addr with User and Password.
	Node string
	// Addr is host:port of another server on this machine that speaks the
	// engine's protocol (causallab proxy), when Node is empty.
	Addr string
	// User and Password are Addr's account.
	User, Password string
	// TTY is set when the client's standard input is a terminal (the
	// docker backend then asks for one: docker exec -t).
	TTY bool
	// Args are the client's own arguments (e.g. -e 'SELECT 1'), appended.
	Args []string
}

// clientSpec is the engine's client: its program in the root filesystem
// (and image), how it names host, port, user and database, and the
// environment variable that carries the password (no password on the
// command line, where ps shows it and the client warns about it).
type clientSpec struct {
	program string
	args    func(host string, port int, user string) []string
	pwEnv   string
}

func clientOf(e Engine) clientSpec {
	mysqlArgs := func(host string, port int, user string) []string {
		return []string{"-h", host, "-P", strconv.Itoa(port), "-u", user}
	}
	switch e {
	case EngineMariaDB:
		// MariaDB 11's client verifies the server's certificate unless
		// told not to, and warns that it cannot (compose's servers have
		// self-signed ones).
		return clientSpec{program: "/usr/bin/mariadb", pwEnv: "MYSQL_PWD", args: func(host string, port int, user string) []string {
			return append(mysqlArgs(host, port, user), "--skip-ssl-verify-server-cert")
		}}
	case EnginePostgres:
		return clientSpec{program: pgBin + "/psql", pwEnv: "PGPASSWORD", args: func(host string, port int, user string) []string {
			return []string{"-h", host, "-p", strconv.Itoa(port), "-U", user, "-d", "postgres"}
		}}
	}
	return clientSpec{program: "/usr/bin/mysql", args: mysqlArgs, pwEnv: "MYSQL_PWD"}
}

// ClientCommand returns the command that runs the engine's command-line
// client from the topology's own servers' software, connected as o says:
//   - local backend: chrooted into the root filesystem the servers run
//     from (the client on PATH when they run the host's mysqld);
//   - docker backend: docker exec in the node's container, or for Addr a
//     throw-away container of the image on the host's network (docker
//     run --network host: the container reaches this machine's loopback);
//   - external backend: as LocalClientCommand.
//
// The caller wires its standard streams and runs it.
func (t *Topology) ClientCommand(o ClientOptions) (*exec.Cmd, error) {
	cs := clientOf(t.eng.kind())
	target, err := t.clientTarget(o)
	if err != nil {
		return nil, err
	}
	switch be := t.be.(type) {
	case *localBackend:
		if be.chroot == "" {
			return hostClient(cs, target, o.Args)
		}
		return chrootClient(be.chroot, cs, target, o.Args)
	case *dockerBackend:
		return t.dockerClient(be, cs, target, o)
	}
	return LocalClientCommand(t.eng.kind(), o)
}

// LocalClientCommand runs the engine's client from its default root
// filesystem (DefaultEngineRootFS, chrooted), or from PATH when that has
// none; o must give Addr (there is no topology to name a node of).
func LocalClientCommand(e Engine, o ClientOptions) (*exec.Cmd, error) {
	if o.Node != "" {
		return nil, fmt.Errorf("compose: client for node %s: no topology", o.Node)
	}
	cs := clientOf(e)
	target, err := addrTarget(o)
	if err != nil {
		return nil, err
	}
	rootfs := DefaultEngineRootFS(e)
	if _, err := os.Stat(filepath.Join(rootfs, cs.program)); err == nil {
		return chrootClient(rootfs, cs, target, o.Args)
	}
	return hostClient(cs, target, o.Args)
}

// clientTarget is where the client connects: a node (the name resolved
// now, as seen from this machine and from the node's own container) or
// o.Addr.
type clientTarget struct {
	host           string
	port           int
	user, password string
	node           string // "" for Addr
	peerPort       int    // the node's port inside its container
}

func (t *Topology) clientTarget(o ClientOptions) (clientTarget, error) {
	if o.Node == "" {
		return addrTarget(o)
	}
	n, err := t.Node(o.Node)
	if err != nil {
		return clientTarget{}, err
	}
	return clientTarget{host: n.Host, port: n.Port, user: n.User, password: n.Password, node: n.Name, peerPort: n.PeerPort}, nil
}

func addrTarget(o ClientOptions) (clientTarget, error) {
	host, p, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return clientTarget{}, fmt.Errorf("compose: client address %q: %w", o.Addr, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil || port == 0 {
		return clientTarget{}, fmt.Errorf("compose: client address %q: bad port", o.Addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return clientTarget{host: host, port: int(port), user: o.User, password: o.Password}, nil
}

// chrootClient runs the client chrooted into rootfs, as root, with a clean
// environment (the root filesystem's PATH and HOME; the caller's TERM).
func chrootClient(rootfs string, cs clientSpec, tg clientTarget, args []string) (*exec.Cmd, error) {
	if _, err := os.Stat(filepath.Join(rootfs, cs.program)); err != nil {
		return nil, fmt.Errorf("compose: no client %s in the root filesystem %s: %w", cs.program, rootfs, err)
	}
	argv := append(append([]string{cs.program}, cs.args(tg.host, tg.port, tg.user)...), args...)
	cmd := &exec.Cmd{Path: cs.program, Args: argv, Dir: "/",
		Env:         []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/root", cs.pwEnv + "=" + tg.password},
		SysProcAttr: &syscall.SysProcAttr{Chroot: rootfs}}
	if term := os.Getenv("TERM"); term != "" {
		cmd.Env = append(cmd.Env, "TERM="+term)
	}
	return cmd, nil
}

// hostClient runs the client found on PATH (the host-mysqld topology, or
// no root filesystem).
func hostClient(cs clientSpec, tg clientTarget, args []string) (*exec.Cmd, error) {
	path, err := exec.LookPath(filepath.Base(cs.program))
	if err != nil && cs.program == "/usr/bin/mariadb" {
		path, err = exec.LookPath("mysql")
	}
	if err != nil {
		return nil, fmt.Errorf("compose: no %s client: no root filesystem holds one and %w (build one with `causallab image`)", filepath.Base(cs.program), err)
	}
	cmd := exec.Command(path, append(cs.args(tg.host, tg.port, tg.user), args...)...)
	cmd.Env = append(os.Environ(), cs.pwEnv+"="+tg.password)
	return cmd, nil
}

// dockerClient runs the client with the docker command: docker exec in
// the node's container (connecting to its server inside), or docker run of
// the topology's image on the host's network for an address.
func (t *Topology) dockerClient(be *dockerBackend, cs clientSpec, tg clientTarget, o ClientOptions) (*exec.Cmd, error) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		return nil, fmt.Errorf("compose: the docker backend's client runs with the docker command: %w", err)
	}
	flags := []string{"-i"}
	if o.TTY {
		flags = append(flags, "-t")
	}
	// The password travels in the docker command's environment: -e NAME
	// without a value copies it from there (not shown by ps).
	flags = append(flags, "-e", cs.pwEnv)
	var argv []string
	if tg.node != "" {
		s, err := be.server(tg.node)
		if err != nil {
			return nil, err
		}
		if s.id == "" {
			return nil, errors.New("compose: node " + tg.node + " has no container")
		}
		argv = append(append(append([]string{"exec"}, flags...), s.id, cs.program), cs.args("127.0.0.1", tg.peerPort, tg.user)...)
	} else {
		argv = append(append(append([]string{"run", "--rm", "--network", "host"}, flags...), "--entrypoint", cs.program, t.cfg.Image), cs.args(tg.host, tg.port, tg.user)...)
	}
	cmd := exec.Command(docker, append(argv, o.Args...)...)
	cmd.Env = append(os.Environ(), cs.pwEnv+"="+tg.password)
	return cmd, nil
}
