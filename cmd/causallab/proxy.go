package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/causallab/causallab/proxy"
)

// proxyZeroDefaults are proxy's flags whose 0 would mean the default.
var proxyZeroDefaults = []defaultIfZero{{"epoch", "the --topology state file's, else 1"}, {"pool-size", "the config's pool_size, else 64"},
	{"workers", "the config's workers, else 1"}, {"startup-timeout", "the config's startup_timeout, else 10s"}}

// newProxyCmd is `causallab proxy`: the causal read router behind a
// MySQL-protocol listener.
func newProxyCmd() *cobra.Command {
	var (
		configPath, topologyPath   string
		listen, httpListen, policy string
		positions, wait, wmSource  string
		startToken                 string
		gomaxprocs                 string
		user, password             string
		epoch                      uint64
		startupTimeout             time.Duration
		multiplex                  bool
		workers, workerIndex       int
		workerDir                  string
		poolSize                   int
	)
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run a MySQL-protocol proxy that routes reads with causal tokens",
		Long: `proxy listens for MySQL clients, keeps writes, transactions and locking
statements on the primary and routes reads to replicas with the causal router.
Clients carry read-your-writes across connections with /* causal_token:<t> */
comments, ProxySQL's /*+ ;min_gtid=<gtids> */ or SET @causal_token = '<t>', and
read their session's token with SELECT @causal_token.

Configure it with a YAML file (--config), or point it at a running compose
topology (--topology, a JSON file listing the topology's nodes as compose
prints them). With neither it fronts the topology ` + "`causallab up`" + ` is running
(its state file, env CAUSALLAB_STATE), as every other command finds it.

Each client logs in with its own MySQL account of the servers and acts as
that account (auth passthrough; causallab up creates app/app); the node
accounts of the topology are the proxy's own and refused to clients. With
--user (and --password) instead, clients log in as that one proxy user,
which acts as the topology's node account (auth mapped; docs/proxy.md,
"Identity").

It listens where ProxySQL does, 127.0.0.1:6033 (metrics on :9033), and
stops with a clear error when another program holds either address, as
ProxySQL and MySQL Router do: --listen and --http move it (port 0: a free
port). The addresses it listens on are printed.

It follows a promotion without a restart: it discovers one itself (each
node's read_only and replication source, every discover_interval), or an
orchestrator tells it with POST /admin/promote?node=NAME on --http, with
the bearer token of admin_token (or env CAUSALLAB_PROXY_ADMIN_TOKEN).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseZero(cmd, proxyZeroDefaults); err != nil {
				return err
			}
			cfg, err := proxyConfig(cmd, configPath, topologyPath, workerIndex < 0)
			if err != nil {
				return err
			}
			if configPath == "" && (cmd.Flags().Changed("user") || cmd.Flags().Changed("password")) {
				cfg.Users, cfg.Auth = []proxy.User{{Name: user, Password: password}}, proxy.AuthMapped
			}
			if cmd.Flags().Changed("listen") || cfg.Listen == "" {
				cfg.Listen = listen
			}
			if cmd.Flags().Changed("http") || cfg.HTTPListen == "" {
				cfg.HTTPListen = httpListen
			}
			if cfg.AdminToken == "" {
				// Never a flag: a command line is visible to every user.
				cfg.AdminToken = os.Getenv("CAUSALLAB_PROXY_ADMIN_TOKEN")
			}
			if policy != "" {
				cfg.Policy = policy
			}
			if epoch != 0 {
				cfg.Epoch = epoch
			}
			if positions != "" {
				cfg.Positions = positions
			}
			if wait != "" {
				cfg.Wait = wait
			}
			if wmSource != "" {
				cfg.WatermarkSource = wmSource
			}
			if startToken != "" {
				cfg.StartToken = startToken
			}
			if cmd.Flags().Changed("startup-timeout") {
				cfg.StartupTimeout = startupTimeout
			}
			if cmd.Flags().Changed("multiplex") {
				cfg.Multiplex = multiplex
			}
			if cmd.Flags().Changed("workers") {
				cfg.Workers = workers
			}
			if cmd.Flags().Changed("pool-size") {
				cfg.PoolSize = poolSize
			}
			switch {
			case gomaxprocs != "":
				cfg.GOMAXPROCS = gomaxprocs
			case cfg.GOMAXPROCS == "":
				cfg.GOMAXPROCS = "adaptive" // the command owns its process
			}
			cfg.Logger = slog.Default()
			if workerIndex >= 0 {
				cfg.GOMAXPROCS = "fixed" // a worker runs on one P (runWorkers)
				cfg.WorkerDir = workerDir
				return serveWorker(cmd, cfg, workerIndex)
			}
			if err := checkPorts(cfg); err != nil {
				return err
			}
			if cfg.Workers > 1 {
				return runWorkers(cmd.Context(), cmd, cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			s, err := proxy.New(cfg)
			if err != nil {
				return withExitCode(2, err)
			}
			if err := s.Listen(cmd.Context()); err != nil {
				return portTaken(err, cfg)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "proxy listening on %s (metrics %s)\n", s.Addr(), s.HTTPAddr())
			return s.Serve(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML config file (see docs/proxy.md)")
	f.StringVar(&topologyPath, "topology", "", "JSON file of a running compose topology's nodes (default, without --config: the state file of the topology causallab up runs)")
	f.StringVar(&listen, "listen", "127.0.0.1:6033", "MySQL-protocol listen address")
	f.StringVar(&httpListen, "http", "127.0.0.1:9033", "HTTP address for /metrics, /healthz and /ready (empty: off)")
	f.StringVar(&policy, "policy", "", "routing policy (any, affinity, window, token-ryw, token-ryw-mr, token-wait)")
	f.StringVar(&user, "user", "app", "a mapped client user acting as the topology's node account (without --config; unset: each client logs in as its own MySQL account)")
	f.StringVar(&password, "password", "app", "the mapped client user's password (with --user)")
	f.Uint64Var(&epoch, "epoch", 0, "topology epoch tokens are issued in (default: the --topology state file's, as causallab status prints it; else 1)")
	f.StringVar(&positions, "positions", "", "position source: poll (default) or binlog (binlogwatch streams; needs REPLICATION SLAVE)")
	f.StringVar(&wait, "wait", "", "how token-wait waits: wait-for-executed-gtid-set (default) or watcher (the position source)")
	f.BoolVar(&multiplex, "multiplex", false, "share backend connections across client sessions (pool_size per node; docs/proxy-sessions.md, \"Multiplexing\")")
	f.StringVar(&wmSource, "watermark-source", "", "how monotonic reads bound what a replica read saw: lazy (default with --positions poll: the poller's next poll, taken only when the session moves), query (the default with binlog positions; the watermark query pipelined behind each read) or all-gtids (the read's own OK packet; not sound)")
	f.StringVar(&startToken, "start-token", "", "the token a new client session starts with: proxy-writes (default: every write this proxy acknowledged, so a new connection reads what the application wrote on others) or none")
	f.IntVar(&poolSize, "pool-size", 0, "with --multiplex: each node's pool of shared backend connections, the proxy's (--workers N: each worker pools its share; default: the config's pool_size, else 64)")
	f.IntVar(&workers, "workers", 0, "worker processes: N > 1 accepts clients here and deals them out in turn to N proxy processes of one CPU each (default: the config's workers, else 1; docs/proxy.md, \"Worker processes\")")
	f.StringVar(&gomaxprocs, "gomaxprocs", "", "adaptive (default: one P while client commands arrive one at a time, Go's default while they overlap; off when the environment sets GOMAXPROCS) or fixed (Go's value; docs/proxy.md, \"GOMAXPROCS\")")
	f.IntVar(&workerIndex, "worker-index", -1, "internal: run as worker N of a --workers supervisor")
	_ = f.MarkHidden("worker-index")
	f.StringVar(&workerDir, "worker-dir", "", "internal: the supervisor's directory of the workers' peer sockets")
	_ = f.MarkHidden("worker-dir")
	f.DurationVar(&startupTimeout, "startup-timeout", 0, "the readiness gate's bound: clients are served once every backend's position was read, or after this (default: the config's startup_timeout, else 10s)")
	return cmd
}

// proxyConfig reads the proxy's backends: --config, --topology, or with
// neither the state file of the topology `causallab up` runs (said on
// stderr when say). Nothing running there is a usage error naming both.
func proxyConfig(cmd *cobra.Command, configPath, topologyPath string, say bool) (proxy.Config, error) {
	switch {
	case configPath != "" && topologyPath != "":
		return proxy.Config{}, withExitCode(2, errors.New("give --config or --topology, not both"))
	case configPath != "":
		c, err := proxy.LoadConfig(configPath)
		return c, withExitCode(2, err)
	case topologyPath != "":
		c, err := proxy.ConfigFromTopology(topologyPath)
		return c, withExitCode(2, err)
	}
	state := defaultStatePath()
	if _, err := os.Stat(state); errors.Is(err, fs.ErrNotExist) {
		return proxy.Config{}, withExitCode(2, fmt.Errorf("no topology is running (no state file at %s): start one with `causallab up`, or give --config FILE or --topology FILE", state))
	}
	c, err := proxy.ConfigFromTopology(state)
	if err != nil {
		return c, withExitCode(2, err)
	}
	if say {
		reps := fmt.Sprintf("%d replicas", len(c.Replicas))
		if len(c.Replicas) == 1 {
			reps = "1 replica"
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "causallab proxy: fronting the topology causallab up runs (state %s: primary %s, %s)\n",
			state, c.Primary.Addr, reps)
	}
	return c, nil
}

// checkPorts refuses, before the backends are dialled, listen addresses
// another program holds (the defaults are fixed: ProxySQL's 6033, its
// admin's neighbour 9033 for metrics): the error says which flag moves
// it. Port 0 is any free port.
func checkPorts(cfg proxy.Config) error {
	http := []string{cfg.HTTPListen}
	if cfg.Workers > 1 && cfg.HTTPListen != "" {
		http = http[:0]
		for i := range cfg.Workers {
			a, err := workerHTTP(cfg.HTTPListen, i)
			if err != nil {
				return withExitCode(2, err)
			}
			http = append(http, a)
		}
	}
	if err := probeListen(cfg.Listen, "--listen"); err != nil {
		return err
	}
	for _, a := range http {
		if err := probeListen(a, "--http"); err != nil {
			return err
		}
	}
	return nil
}

// probeListen binds addr and lets it go: an address in use is an error
// naming flag.
func probeListen(addr, flag string) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return portTaken(fmt.Errorf("proxy: listen %s: %w", addr, err), proxy.Config{Listen: addr, HTTPListen: addr}, flag)
	}
	return ln.Close()
}

// portTaken says, for a listen error that is an address in use, which
// address and which flag moves it; other errors pass.
func portTaken(err error, cfg proxy.Config, flag ...string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	addr, fl := cfg.Listen, "--listen"
	switch {
	case len(flag) > 0:
		fl = flag[0]
	case strings.Contains(err.Error(), "http listen"):
		addr, fl = cfg.HTTPListen, "--http"
	}
	off := ""
	if fl == "--http" {
		off = `, or --http "" for none`
	}
	return fmt.Errorf("%s is in use (another causallab proxy, ProxySQL or MySQL Router?): give %s HOST:PORT, %s 127.0.0.1:0 for a free port (printed once listening)%s", addr, fl, fl, off)
}
