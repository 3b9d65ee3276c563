package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/causallab/causallab/internal/connpass"
	"github.com/causallab/causallab/proxy"
)

// workerFD is the descriptor a worker process finds its hand-off socket
// on (the first of exec.Cmd.ExtraFiles).
const workerFD = 3

// serveWorker runs one worker process of `causallab proxy --workers`: a
// whole proxy that serves the connections its supervisor hands it on
// descriptor workerFD instead of listening itself.
func serveWorker(cmd *cobra.Command, cfg proxy.Config, index int) error {
	addr, err := net.ResolveTCPAddr("tcp", cfg.Listen)
	if err != nil {
		return withExitCode(2, fmt.Errorf("worker %d: listen address: %w", index, err))
	}
	// Only a seqpacket Unix socket is taken (and closed after wrapping):
	// a worker started by hand may hold anything on the descriptor,
	// such as the runtime's own poller.
	if typ, err := syscall.GetsockoptInt(workerFD, syscall.SOL_SOCKET, syscall.SO_TYPE); err != nil || typ != syscall.SOCK_SEQPACKET {
		return withExitCode(2, fmt.Errorf("worker %d: descriptor %d is not a hand-off socket (a worker is started by `causallab proxy --workers`)", index, workerFD))
	}
	f := os.NewFile(workerFD, "hand-off socket")
	ln, err := connpass.FileListener(f, addr)
	f.Close()
	if err != nil {
		return fmt.Errorf("worker %d: %w (a worker is started by `causallab proxy --workers`)", index, err)
	}
	cfg.Listener = ln
	cfg.WorkerIndex = index
	cfg.Logger = slog.Default().With("worker", index)
	s, err := proxy.New(cfg)
	if err != nil {
		return withExitCode(2, err)
	}
	if err := s.Listen(cmd.Context()); err != nil {
		return err
	}
	cfg.Logger.Info("proxy worker serving", "listen", s.Addr(), "metrics", s.HTTPAddr())
	return s.Serve(cmd.Context())
}

// worker is one worker process as its supervisor sees it.
type worker struct {
	index int
	u     *net.UnixConn // the supervisor's end of the hand-off socket
	cmd   *exec.Cmd
	done  chan error // the process's exit (buffered, once)
}

// workerHTTP is worker i's metrics address: http's port plus i (port 0
// stays 0: each worker takes a free port), "" when http is off.
func workerHTTP(http string, i int) (string, error) {
	if http == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(http)
	if err != nil {
		return "", fmt.Errorf("http address %q: %w", http, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p+i > 65535 {
		return "", fmt.Errorf("http address %q: port %q leaves no room for worker %d", http, port, i)
	}
	if p == 0 {
		return http, nil
	}
	return net.JoinHostPort(host, strconv.Itoa(p+i)), nil
}

// workerArgs is the command line of worker i: the flags the supervisor
// was given (so that it reads the same config; --workers too: worker i
// of N gives its sessions the ids i+1, i+1+N, ...), with its index, the
// supervisor's listen address, its own metrics address, the directory of
// the workers' peer sockets (proxy.Config.WorkerDir) and (poolSize > 0,
// multiplexing) its share of the pool size.
func workerArgs(flags *pflag.FlagSet, i int, listen, http, dir string, poolSize int) []string {
	args := []string{"proxy"}
	flags.Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "worker-index", "worker-dir", "listen", "http", "pool-size":
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	args = append(args, "--worker-index="+strconv.Itoa(i), "--listen="+listen, "--http="+http, "--worker-dir="+dir)
	if poolSize > 0 {
		args = append(args, "--pool-size="+strconv.Itoa(poolSize))
	}
	return args
}

// runWorkers is `causallab proxy` with cfg.Workers > 1: it listens on
// cfg.Listen, starts the worker processes (each with GOMAXPROCS 1 unless
// the environment sets GOMAXPROCS), and deals accepted connections out
// to them in turn. It returns when ctx ends (after stopping the workers:
// SIGTERM, then each gets the shutdown timeout) or, with an error naming
// it, when a worker exits first; the other workers are stopped then too.
func runWorkers(ctx context.Context, cmd *cobra.Command, cfg proxy.Config, stdout, stderr io.Writer) error {
	// Check the config the workers will read before starting any.
	if _, err := proxy.New(cfg); err != nil {
		return withExitCode(2, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("proxy: workers: %w", err)
	}
	// The workers write to the same streams as the supervisor: a stream
	// that is not a file (a test's buffer) is copied from each worker by
	// its own goroutine, so every write to it takes one lock.
	stdout, stderr = serialized(stdout), serialized(stderr)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy: listen: %w", err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	// The workers' peer sockets (KILL and SHOW PROCESSLIST across
	// workers): a directory of the supervisor's, mode 0700.
	dir, err := os.MkdirTemp("", "causallab-proxy-")
	if err != nil {
		return fmt.Errorf("proxy: workers: %w", err)
	}
	defer os.RemoveAll(dir)
	env := os.Environ()
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		env = append(env, "GOMAXPROCS=1")
	}
	workers := make([]*worker, 0, cfg.Workers)
	stop := func(sig os.Signal) {
		for _, w := range workers {
			_ = w.cmd.Process.Signal(sig)
		}
	}
	// Workers left running after an early return are killed.
	defer func() {
		for _, w := range workers {
			select {
			case <-w.done:
			default:
				_ = w.cmd.Process.Kill()
				<-w.done
			}
			w.u.Close()
		}
	}()
	var metrics []string
	for i := range cfg.Workers {
		http, err := workerHTTP(cfg.HTTPListen, i)
		if err != nil {
			return withExitCode(2, err)
		}
		// pool_size is the proxy's: each worker pools its share.
		var pool int
		if cfg.Multiplex {
			if pool, err = proxy.PoolShare(cfg.PoolSize, cfg.Workers, i); err != nil {
				return withExitCode(2, err)
			}
		}
		u, f, err := connpass.Pair()
		if err != nil {
			return err
		}
		c := exec.Command(exe, workerArgs(cmd.Flags(), i, addr, http, dir, pool)...)
		c.ExtraFiles = []*os.File{f} // descriptor workerFD
		c.Env = env
		c.Stdout, c.Stderr = stdout, stderr
		// A worker dies with its supervisor.
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		err = c.Start()
		f.Close()
		if err != nil {
			u.Close()
			return fmt.Errorf("proxy: start worker %d: %w", i, err)
		}
		w := &worker{index: i, u: u, cmd: c, done: make(chan error, 1)}
		go func() { w.done <- c.Wait() }()
		workers = append(workers, w)
		if http != "" {
			metrics = append(metrics, http)
		}
	}
	shown := "off"
	if len(metrics) > 0 {
		shown = strings.Join(metrics, ", ")
	}
	fmt.Fprintf(stdout, "proxy listening on %s (%d workers, metrics %s)\n", addr, len(workers), shown)

	accepted := make(chan error, 1)
	go func() { accepted <- dealOut(ln, workers) }()
	exited := make(chan *worker, len(workers))
	for _, w := range workers {
		go func() {
			err := <-w.done
			w.done <- err // keep it for the deferred wait
			exited <- w
		}()
	}
	var first *worker
	select {
	case <-ctx.Done():
	case first = <-exited:
	case err := <-accepted:
		stop(syscall.SIGTERM)
		return fmt.Errorf("proxy: accept: %w", err)
	}
	ln.Close()
	stop(syscall.SIGTERM)
	grace := time.NewTimer(shutdownBound(cfg))
	defer grace.Stop()
	for range len(workers) - btoi(first != nil) {
		select {
		case <-exited:
		case <-grace.C:
			stop(os.Kill)
		}
	}
	if first != nil {
		err := <-first.done
		first.done <- err
		return fmt.Errorf("proxy: worker %d exited (%v); the others were stopped", first.index, errOrExit(err))
	}
	return nil
}

// dealOut accepts connections on ln and hands them to the workers in
// turn until ln is closed (nil) or accepting fails for good.
func dealOut(ln net.Listener, workers []*worker) error {
	var delay time.Duration
	for n := 0; ; {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of descriptors or a reset before accept: back off as
			// the proxy's own accept loop does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			slog.Warn("proxy: accept failed; retrying", "err", err.Error(), "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		w := workers[n%len(workers)]
		n++
		if err := connpass.Send(w.u, tc); err != nil {
			// The worker is gone (its exit stops the proxy): the client
			// sees its connection closed.
			slog.Warn("proxy: hand-off to a worker failed", "worker", w.index, "err", err.Error())
		}
	}
}

// shutdownBound is how long stopped workers get before they are killed.
func shutdownBound(cfg proxy.Config) time.Duration {
	return max(cfg.ShutdownTimeout, 10*time.Second) + 10*time.Second
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// errOrExit describes a worker's exit.
func errOrExit(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serialized is w itself when it is a file (a worker then writes to the
// descriptor directly), else w behind a lock.
func serialized(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return lockedWriter{mu: &sync.Mutex{}, w: w}
}
