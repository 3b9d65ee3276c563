package proxy

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/internal/procs"
	"github.com/causallab/causallab/internal/rawnet"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
	"github.com/causallab/causallab/sessiontoken"
)

// Server is a running proxy.
type Server struct {
	cfg      Config
	log      *slog.Logger
	m        *metrics
	mysqlSrv *server.Server
	// users are the configured accounts; decoy the credential unknown
	// users are checked against (loginHandler).
	users map[string]server.Credential
	decoy server.Credential
	// tokens signs and verifies session tokens (Config.TokenKeys; nil:
	// none configured).
	tokens *sessiontoken.Keyring
	// keys are the RSA key pair of caching_sha2_password's exchange
	// without TLS (passthroughAuth, COM_CHANGE_USER under passthrough).
	keys *clientKeys
	// tlsConf and tlsKey are the listener's TLS configuration and key
	// (loadTLS), kept to make the greeting again (greetAsPrimary).
	tlsConf *tls.Config
	tlsKey  *rsa.PrivateKey
	// src is the position source (Config.Source, pollers or binlog
	// streams); runSrc runs it when the proxy owns it.
	src    live.PositionSource[gtid.Set]
	runSrc func(context.Context)
	// rt is the live router (built by Listen): every read's decision,
	// wait, cap, epoch check, outcome metric and trace is its
	// LiveSession.QueryFunc; the proxy runs the read on the session's own
	// backend connection. Its metrics are registered on m.reg.
	rt     *live.Router[gtid.Set]
	policy router.Policy
	capCfg router.Cap

	// wmFault, set only by tests, fails a replica read's watermark after
	// its result reached the client (session.routeRelay): the fault a
	// replica that stops between its answer and the watermark's makes.
	wmFault atomic.Pointer[func(backend string) error]
	// skipIdlePeek, set only by tests, makes session.replica skip the idle
	// check: the race where the server closes a connection just after the
	// peek found it open (routeRelay sends such a read again).
	skipIdlePeek atomic.Bool
	// dropTracked, set only by tests, makes all-gtids reads ignore the
	// set their final OK carried (as a server that sent none), so the
	// query fallback runs (relayTracked).
	dropTracked atomic.Bool

	// topo is the current epoch's roles and their watermark readers
	// (failover.go); a promotion (Promote, under promoteMu) stores a new
	// one. fenced are the primaries of earlier epochs: never a candidate
	// again.
	topo      atomic.Pointer[topology]
	promoteMu sync.Mutex
	fenced    map[string]bool
	// wmStarted are the watermark readers (wmReader, never on a
	// session's connection) of every topology, started under wmCtx
	// (Serve's) and stopped when Serve ends (startWM).
	wmMu      sync.Mutex
	wmCtx     context.Context
	wmStarted []*wmReader

	// pools are the shared backend connection pools by backend name
	// (Config.Multiplex; nil when off), pm their metrics; run by Serve.
	pools map[string]*pool
	pm    *poolMetrics

	ln     net.Listener
	httpLn net.Listener
	// peerLn is this worker's socket for the other workers' KILL and
	// SHOW PROCESSLIST (Config.WorkerDir; nil without).
	peerLn net.Listener

	mu sync.Mutex
	// conns are the client connections being served, each with the
	// cancel of its session's context (nil until the session starts): at
	// the shutdown timeout both are ended.
	conns map[net.Conn]context.CancelFunc
	// handshakes are the connections still in their login, oldest
	// first (max_handshakes); sessions counts the logged-in ones
	// (max_connections); accounts counts those by the account (user
	// name) they logged in with (max_user_connections). fairness.go.
	handshakes list.List
	sessions   int
	accounts   map[string]int
	// totalBytes is max_total_session_bytes: every session's budget
	// draws from it.
	totalBytes *totalBudget
	wg         sync.WaitGroup
	// kills holds one token per KILL QUERY of an overrun wait in flight
	// (session.killWait), at most maxKills.
	kills chan struct{}
	// byID are the sessions by their id (session_admin.go: allocID,
	// the processlist, KILL), from the greeting on; nextID is the last id
	// given.
	byID map[uint32]*session
	// sessionsOpen is len(byID), read without mu (the pools' bound on
	// the connections they keep: poolConfig.sessions).
	sessionsOpen atomic.Int64
	nextID       uint32
	// privFault, set only by tests, answers session.hasPrivilege in
	// place of the server (account, privilege).
	privFault atomic.Pointer[func(account, priv string) bool]

	// ready is closed when the proxy starts serving (awaitReady): every
	// backend's position read once, or startup_timeout passed; readiness
	// is what /ready says meanwhile and after.
	ready     chan struct{}
	readiness atomic.Pointer[string]

	// meter counts client commands and their overlap (clientConn):
	// the signal of gomaxprocs: adaptive (Serve runs procs.Run on it).
	meter procs.Meter
}

// maxKills bounds the KILL QUERY connections of overrun waits at once.
const maxKills = 16

// New validates cfg and prepares a proxy; Serve runs it.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	kind, _ := policyKind(cfg.Policy)
	hashMode, _ := hashroute.ParseMode(cfg.HashMode) // validated
	tokens, _ := cfg.keyring()                       // validated
	s := &Server{
		cfg:        cfg,
		tokens:     tokens,
		log:        cfg.Logger,
		m:          newMetrics(),
		conns:      map[net.Conn]context.CancelFunc{},
		accounts:   map[string]int{},
		byID:       map[uint32]*session{},
		totalBytes: &totalBudget{limit: int64(cfg.MaxTotalSessionBytes)},
		kills:      make(chan struct{}, maxKills),
		ready:      make(chan struct{}),
		policy: router.Policy{
			Kind:       kind,
			HashMode:   hashMode,
			Window:     router.DefaultWindow,
			WaitBudget: cfg.WaitBudget,
			CheckEpoch: true,
		},
		capCfg: router.Cap{PerSecond: cfg.capShare(), Behavior: router.CapFailFast},
	}
	s.fenced = map[string]bool{}
	s.topo.Store(s.firstTopology())
	s.m.epoch.Set(float64(s.cfg.Epoch))
	s.cfg.classicEOF = s.m.primaryClassicEOF
	s.setReadiness("starting: not serving yet")
	switch {
	case cfg.Source != nil:
		s.src = cfg.Source
	case cfg.Positions == "binlog":
		src, run, err := newBinlogSource(&s.cfg, s.log)
		if err != nil {
			return nil, err
		}
		s.src, s.runSrc = src, run
	case cfg.Positions == "watchers":
		src, run, err := newWatcherSource(&s.cfg, s.log)
		if err != nil {
			return nil, err
		}
		if src.rest != nil {
			s.m.reg.MustRegister(src.rest)
		}
		s.src, s.runSrc = src, run
	default:
		p, err := newPollers(&s.cfg, s.log)
		if err != nil {
			return nil, err
		}
		s.m.reg.MustRegister(p)
		s.src, s.runSrc = p, p.Run
	}
	tlsConf, key, err := loadTLS(&cfg)
	if err != nil {
		return nil, err
	}
	if s.keys, err = newClientKeys(key); err != nil {
		return nil, err
	}
	s.tlsConf, s.tlsKey = tlsConf, key
	if err := s.greet(cfg.ServerVersion); err != nil {
		return nil, err
	}
	if s.users, s.decoy, err = newUsers(&s.cfg); err != nil {
		return nil, err
	}
	if cfg.WatermarkSource == "all-gtids" {
		s.log.Warn("proxy: watermark_source all-gtids is not sound: the OK packet's gtid_executed can lack a transaction the read saw (docs/router.md, \"The commit race\")")
	}
	return s, nil
}

// greet makes the MySQL protocol server the clients log in to, its
// greeting announcing version.
func (s *Server) greet(version string) error {
	srv := server.NewServerWithAuth(version, mysql.DEFAULT_COLLATION_ID, s.cfg.AuthMethod, s.tlsKey, s.tlsConf,
		authProvider{DefaultAuthenticationProvider: &server.DefaultAuthenticationProvider{}, passthrough: s.cfg.Auth == AuthPassthrough, keys: s.keys})
	// MySQL offers LOCAL INFILE in its greeting (the server variable
	// local_infile decides later); the proxy relays the file
	// (relayLocalFile).
	if err := srv.SetCapability(mysql.CLIENT_LOCAL_FILES); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	s.mysqlSrv = srv
	return nil
}

// greetAsPrimary reads the primary's version (SELECT VERSION()) and
// checks Config.Engine against it (checkEngine: a mismatch is the
// error), then announces it when server_version is not configured, as a
// client connected to the primary sees it (mysql_get_server_info() then
// agrees with @@version). A primary that does not answer leaves the
// default, and the engine unchecked, logged.
func (s *Server) greetAsPrimary(ctx context.Context) error {
	b := &s.cfg.Primary
	vctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	d := &mysqlwire.Dialer{User: b.User, Password: b.Password, Timeout: s.cfg.ConnectTimeout, IOTimeout: s.cfg.ConnectTimeout, PlainIO: s.cfg.SocketIO != "raw"}
	c, err := d.Dial(vctx, b.Addr, false)
	var v string
	if err == nil {
		defer c.Close()
		var r *mysql.Result
		if r, err = mysqlwire.Exec(vctx, c, "SELECT VERSION()"); err == nil {
			v, err = r.GetString(0, 0)
		}
	}
	if err != nil || v == "" {
		s.log.Warn("proxy: the primary's version could not be read; the engine is not checked and the greeting announces the default", "engine", s.cfg.Engine, "version", s.cfg.ServerVersion, "err", err)
		return nil
	}
	if err := s.cfg.checkEngine(v); err != nil {
		return err
	}
	if !s.cfg.versionFromPrimary {
		return nil
	}
	return s.greet(strings.Clone(v))
}

// loadTLS loads the configured certificate or generates a self-signed one.
// The RSA key also serves caching_sha2_password's key exchange without TLS.
func loadTLS(cfg *Config) (*tls.Config, *rsa.PrivateKey, error) {
	var cert tls.Certificate
	var err error
	if cfg.TLSCert != "" {
		cert, err = tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, nil, fmt.Errorf("proxy: TLS key pair: %w", err)
		}
	} else {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1),
			Subject:      pkix.Name{CommonName: "causallab-proxy"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return nil, nil, err
		}
		cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	key, ok := cert.PrivateKey.(*rsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("proxy: the TLS key must be an RSA key (it also serves caching_sha2_password's RSA exchange)")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, key, nil
}

// newRouter builds the live router the sessions route through. It runs
// no statement of its own on the replicas (waits run on the session's
// connections, ReadOptions.Wait); on the primary it proves session
// tracking at start and re-reads gtid_executed before refusing a read,
// with the primary backend's account, from a pool of at most
// PrimaryPool connections.
func (s *Server) newRouter(ctx context.Context) error {
	wait := live.WaitGTIDFunction
	if s.cfg.Wait == live.WaitWatcher.String() {
		wait = live.WaitWatcher
	}
	reps := make([]live.Node, len(s.cfg.Replicas))
	for i, b := range s.cfg.Replicas {
		reps[i] = live.Node{Name: b.Name, Addr: b.Addr, Weight: b.Weight}
	}
	rt, err := live.New(ctx, live.Config[gtid.Set]{
		Primary:       live.Node{Name: s.cfg.Primary.Name, Addr: s.cfg.Primary.Addr},
		Replicas:      reps,
		User:          s.cfg.Primary.User,
		Password:      s.cfg.Primary.Password,
		Policy:        s.policy,
		Cap:           s.capCfg,
		Global:        s.cfg.globalSource(),
		Positions:     s.src,
		Wait:          wait,
		Watermark:     s.cfg.watermarkMode(),
		Epoch:         s.cfg.Epoch,
		DialTimeout:   s.cfg.ConnectTimeout,
		PrimaryPool:   routerPrimaryConns,
		PlainSocketIO: s.cfg.SocketIO == "go",
		CompactTokens: s.cfg.CompactTokens,
		Flavor:        s.cfg.flavor(),
		Registerer:    s.m.reg,
		Logger:        s.log,
	})
	if err != nil {
		return backendErr(&s.cfg.Primary, "router", err)
	}
	s.rt = rt
	return nil
}

// Router is the live router the sessions route through (nil before
// Listen). An embedder may route its own reads through it: they share the
// proxy's view, in-flight counts and metrics.
func (s *Server) Router() *live.Router[gtid.Set] { return s.rt }

// Listen builds the router and opens the listeners (so Addr is known
// before Serve).
func (s *Server) Listen(ctx context.Context) error {
	if s.rt == nil {
		if err := s.greetAsPrimary(ctx); err != nil {
			return err
		}
		if err := s.newRouter(ctx); err != nil {
			return err
		}
	}
	var lc net.ListenConfig
	ln := s.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = lc.Listen(ctx, "tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("proxy: listen: %w", err)
		}
	}
	s.ln = ln
	if s.cfg.HTTPListen != "" {
		hl, err := lc.Listen(ctx, "tcp", s.cfg.HTTPListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("proxy: http listen: %w", err)
		}
		s.httpLn = hl
	}
	if err := s.listenPeers(ctx); err != nil {
		ln.Close()
		if s.httpLn != nil {
			s.httpLn.Close()
		}
		return err
	}
	return nil
}

// Addr is the MySQL listener's address (after Listen).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// HTTPAddr is the metrics listener's address, or "".
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// Serve accepts clients until ctx ends, then shuts down gracefully: the
// listener closes, idle clients are disconnected, statements in flight get
// ShutdownTimeout to finish. It calls Listen if that was not done.
func (s *Server) Serve(ctx context.Context) error {
	if s.ln == nil {
		if err := s.Listen(ctx); err != nil {
			return err
		}
	}
	pctx, stopPolls := context.WithCancel(ctx)
	defer stopPolls()
	var pollWG sync.WaitGroup
	s.runBackground(pctx, &pollWG)
	// The pools outlive the sessions (closed after they end, below).
	poolCtx, stopPools := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPools()
	s.wmMu.Lock()
	s.wmCtx = poolCtx
	for _, w := range s.wmStarted {
		w.start(poolCtx)
	}
	s.wmMu.Unlock()
	if s.cfg.Multiplex {
		if err := s.startPools(poolCtx); err != nil {
			return err
		}
	}
	var hs *http.Server
	if s.httpLn != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", s.healthz)
		mux.HandleFunc("/ready", s.readyz)
		mux.HandleFunc("/admin/promote", s.adminPromote)
		hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(s.httpLn) }()
	}
	if s.peerLn != nil {
		go s.servePeers()
	}
	go func() {
		<-ctx.Done()
		s.ln.Close()
		if s.peerLn != nil {
			s.peerLn.Close()
		}
	}()
	var acceptErr error
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				acceptErr = fmt.Errorf("proxy: accept: %w", err)
				break
			}
			// Out of file descriptors, or a connection reset before it
			// was accepted: back off and keep accepting, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.m.connections.WithLabelValues("accept-error").Inc()
			s.log.Warn("accept failed; retrying", "err", err.Error(), "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			continue
		}
		delay = 0
		if s.cfg.SocketIO == "raw" {
			c = rawnet.Wrap(c)
		}
		slot, refused := s.admit(c, time.Now())
		if refused != "" {
			s.refuseConn(c, refused)
			continue
		}
		s.wg.Add(1)
		go s.serveConn(ctx, slot)
	}
	// Graceful shutdown: wake idle readers; a statement in flight finishes
	// (only the read side gets the deadline) and its session then ends.
	s.mu.Lock()
	for c := range s.conns {
		_ = c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	finished := make(chan struct{})
	go func() { s.wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(s.cfg.ShutdownTimeout):
		s.mu.Lock()
		n := len(s.conns)
		for c, cancel := range s.conns {
			c.Close()
			if cancel != nil {
				cancel()
			}
		}
		s.mu.Unlock()
		s.log.Warn("shutdown timeout: closed sessions with statements in flight", "sessions", n)
		<-finished
	}
	stopPools()
	for _, p := range s.pools {
		<-p.done
	}
	s.wmMu.Lock()
	for _, w := range s.wmStarted {
		w.stop()
	}
	s.wmMu.Unlock()
	stopPolls()
	pollWG.Wait()
	s.rt.Close()
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = hs.Shutdown(sctx)
		cancel()
	}
	return acceptErr
}

// runBackground starts Serve's background work under ctx, in wg: the
// position source, the readiness gate, the client watch, discovery and
// adaptive GOMAXPROCS.
func (s *Server) runBackground(ctx context.Context, wg *sync.WaitGroup) {
	if s.runSrc != nil {
		wg.Go(func() { s.runSrc(ctx) })
	}
	// The gate's first word is said before Serve goes on (the gate's
	// goroutine may not have run when /ready is first asked).
	s.setReadiness("starting: no position read yet from " + strings.Join(s.nodeNames(), ", "))
	wg.Go(func() { s.awaitReady(ctx) })
	wg.Go(func() { s.watchClients(ctx) })
	if s.cfg.Discover == "roles" {
		wg.Go(func() { s.discover(ctx) })
	}
	if s.cfg.GOMAXPROCS == "adaptive" {
		wg.Go(func() { s.adaptProcs(ctx) })
	}
}

// openSessions is the number of client sessions open now.
func (s *Server) openSessions() int { return int(s.sessionsOpen.Load()) }

// startPools starts one pool per backend (Config.Multiplex): the
// primary's, then each replica's, whose health is its position source's.
func (s *Server) startPools(ctx context.Context) error {
	s.pm = newPoolMetrics(s.m.reg)
	s.pools = map[string]*pool{}
	p, err := newBackendPool(ctx, &s.cfg.Primary, &s.cfg, nil, false, s.pm, s.openSessions)
	if err != nil {
		return err
	}
	s.pools[s.cfg.Primary.Name] = p
	for i := range s.cfg.Replicas {
		b := &s.cfg.Replicas[i]
		healthy := func() bool {
			_, ok := s.src.Position(b.Name)
			return ok
		}
		p, err := newBackendPool(ctx, b, &s.cfg, healthy, s.cfg.WatermarkSource == "all-gtids", s.pm, s.openSessions)
		if err != nil {
			return err
		}
		s.pools[b.Name] = p
	}
	return nil
}

// readyPoll is how often awaitReady asks the position source.
const readyPoll = 5 * time.Millisecond

// nodeNames are the backends' names, the primary's first.
func (s *Server) nodeNames() []string {
	names := []string{s.cfg.Primary.Name}
	for _, r := range s.cfg.Replicas {
		names = append(names, r.Name)
	}
	return names
}

// awaitReady is the readiness gate, in the manner of Envoy's start-up
// (its listeners accept only after one health-check round of every host,
// each wait bounded by initial_fetch_timeout): it opens (closes s.ready)
// once the position source has reported every configured backend healthy
// at least once, so that no read is decided without positions; or when
// startup_timeout passes first: then each backend not read is logged and
// counted (startup_unread_total{backend}) and the proxy serves without
// it, as it serves with a backend that goes down later. It gives up when
// ctx ends (Serve's shutdown).
func (s *Server) awaitReady(ctx context.Context) {
	t0 := time.Now()
	names := s.nodeNames()
	read := make([]bool, len(names))
	bound := time.NewTimer(s.cfg.StartupTimeout)
	defer bound.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		var unread []string
		for i, n := range names {
			if !read[i] {
				_, read[i] = s.src.Position(n)
			}
			if !read[i] {
				unread = append(unread, n)
			}
		}
		if len(unread) == 0 {
			s.openGate("ready")
			s.log.Info("proxy: ready: every backend's position read", "after", time.Since(t0).Round(time.Millisecond))
			return
		}
		if msg := "starting: no position read yet from " + strings.Join(unread, ", "); msg != *s.readiness.Load() {
			s.setReadiness(msg)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			continue
		case <-bound.C:
		}
		for _, n := range unread {
			s.m.startupUnread.WithLabelValues(n).Inc()
		}
		s.openGate(fmt.Sprintf("ready: startup_timeout %v passed with no position read from %s", s.cfg.StartupTimeout, strings.Join(unread, ", ")))
		s.log.Warn("proxy: startup_timeout passed before every backend's position was read; serving without them",
			"startup_timeout", s.cfg.StartupTimeout, "unread", unread)
		return
	}
}

func (s *Server) setReadiness(msg string) { s.readiness.Store(&msg) }

// openGate records what /ready says and lets waiting clients in.
func (s *Server) openGate(msg string) {
	s.setReadiness(msg)
	s.m.ready.Set(1)
	close(s.ready)
}

// waitReady holds a connection accepted before the proxy is ready until it
// is (startup_timeout at most): its greeting comes then; counted as
// connections_total{outcome="waited-for-ready"}. False: the proxy is
// shutting down first (the connection is closed).
func (s *Server) waitReady(ctx context.Context) bool {
	select {
	case <-s.ready:
		return true
	default:
	}
	s.m.connections.WithLabelValues("waited-for-ready").Inc()
	select {
	case <-s.ready:
		return true
	case <-ctx.Done():
		return false
	}
}

// readyz answers /ready: 200 once the proxy serves (the body says whether
// every backend's position was read), 503 before.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-s.ready: // its message was stored first
		fmt.Fprintln(w, *s.readiness.Load())
	default:
		http.Error(w, *s.readiness.Load(), http.StatusServiceUnavailable)
	}
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	t := s.topo.Load()
	if _, up := s.src.Position(t.primary.Name); !up {
		http.Error(w, "primary unreachable", http.StatusServiceUnavailable)
		return
	}
	n := 0
	for _, r := range t.replicas {
		if _, up := s.src.Position(r.Name); up {
			n++
		}
	}
	fmt.Fprintf(w, "ok primary=up replicas_up=%d/%d epoch=%d\n", n, len(t.replicas), t.epoch)
}

// refuseConn answers a connection past max_connections or max_handshakes
// (why, admit) as MySQL answers one past max_connections (an
// ER_CON_COUNT_ERROR packet in place of the greeting) and closes it.
func (s *Server) refuseConn(c net.Conn, why string) {
	s.m.connections.WithLabelValues(why).Inc()
	msg := s.tooManyConnections(why)
	// Before the greeting nothing is negotiated: no SQLSTATE marker (the
	// client would read "#08004" as the message's start), as MySQL sends it.
	code := uint16(mysql.ER_CON_COUNT_ERROR)
	p := append([]byte{mysql.ERR_HEADER, byte(code), byte(code >> 8)}, msg...)
	n := len(p)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second)) // a fresh socket's buffer takes it at once
	_, _ = c.Write(append([]byte{byte(n), byte(n >> 8), byte(n >> 16), 0}, p...))
	_ = c.Close()
}

func (s *Server) serveConn(ctx context.Context, slot *connSlot) {
	defer s.wg.Done()
	c := slot.c
	defer func() {
		s.leave(slot)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	defer func() {
		// The last line: nothing a client sends may end the process. The
		// session's backend connections close with it (deferred below).
		if r := recover(); r != nil {
			s.m.connections.WithLabelValues("panic").Inc()
			s.log.Error("session panicked; its connection is closed", "remote", c.RemoteAddr().String(),
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	if !s.waitReady(ctx) {
		return
	}
	// The session's context ends with the session (the client went, or
	// the shutdown timeout closed it), never at the shutdown signal alone:
	// statements in flight are not cut then.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	s.mu.Lock()
	s.conns[c] = cancel
	s.mu.Unlock()
	sess := newSession(sctx, s)
	sess.slot = slot
	sess.run.end = s.endFunc(c, cancel)
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			sess.sock = rc // watchClients
		}
	}
	sess.id = s.allocID(sess)
	defer s.dropID(sess.id)
	defer sess.close()
	defer sess.park(true) // before close: borrowed connections go back reset
	cc, ok := s.login(ctx, c, sess)
	if !ok {
		return
	}
	if s.cfg.GOMAXPROCS == "adaptive" {
		cc.meter = &s.meter // its only reader (no cost to a fixed proxy)
	}
	defer cc.finished()
	sess.cc = cc
	if ctx.Err() != nil {
		_ = c.SetReadDeadline(time.Now())
	}
	s.m.connections.WithLabelValues("accepted").Inc()
	s.m.active.Inc()
	defer s.m.active.Dec()
	sess.park(false) // the login's primary connection (multiplex)
	for {
		if err := sess.handleNextCommand(); err != nil || sess.closeAfter {
			break
		}
		if sess.holdsPooled() {
			// The answer first: a parked primary connection is reset
			// (a round trip) before it goes back.
			if err := sess.flush(); err != nil {
				break
			}
			sess.park(false)
		}
	}
	_ = cc.Flush() // the last response (e.g. the error before closeAfter)
	s.m.connections.WithLabelValues("closed").Inc()
}

// login runs the handshake and authentication on c with go-mysql's server
// (the greeting, TLS, the authentication exchange; loginHandler opens the
// session's primary connection) within handshake_timeout, and returns the
// client connection the session's commands are read from. False: the
// login failed (counted; go-mysql answered the client).
func (s *Server) login(ctx context.Context, c net.Conn, sess *session) (*clientConn, bool) {
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	hc := &handshakeConn{Conn: c, id: sess.id, sess: sess}
	login := &loginHandler{srv: s, sess: sess, hc: hc}
	gc, err := s.mysqlSrv.NewCustomizedConn(hc, login, handshakeHandler{sess})
	if err != nil {
		outcome := "auth-failed"
		if login.backendFailed && !login.denied {
			outcome = "backend-failed"
		}
		if sess.slot.evicted.Load() {
			outcome = "" // counted at eviction
		}
		if !login.refused && outcome != "" {
			s.m.connections.WithLabelValues(outcome).Inc()
		}
		s.log.Debug("client login failed", "remote", c.RemoteAddr().String(), "outcome", outcome, "err", err.Error())
		return nil, false
	}
	_ = c.SetDeadline(time.Time{})
	hc.through = true
	under := gc.Conn.Conn // TLS over hc, or hc itself
	if under == net.Conn(hc) {
		under = c
	}
	if tc, ok := under.(*tls.Conn); ok {
		st := tc.ConnectionState()
		sess.tls = &st
	}
	if sess.caps&mysql.CLIENT_COMPRESS != 0 {
		under = newCompressedConn(under) // begins after the login's OK
		sess.compressed = true
	}
	return newClientConn(under, sess.caps, sess.stmts, gateLimits{
		maxPacket: s.cfg.MaxAllowedPacket,
		idle:      s.cfg.IdleTimeout,
		idleTx:    s.cfg.IdleInTransactionTimeout,
		read:      s.cfg.ClientReadTimeout,
		write:     s.cfg.ClientWriteTimeout,
	}, ctx.Done(), sess.countClientError), true
}

// adaptProcs runs gomaxprocs: adaptive until ctx ends (Config.GOMAXPROCS,
// internal/procs): one P while client commands come one at a time, Go's
// default while they overlap; the value found is restored at the end.
func (s *Server) adaptProcs(ctx context.Context) {
	err := procs.Run(ctx, procs.Config{Max: runtime.GOMAXPROCS(0)}, &s.meter, s.log, func(from, to int) {
		if to > from {
			s.m.procsChanges.WithLabelValues("grow").Inc()
		} else {
			s.m.procsChanges.WithLabelValues("shrink").Inc()
		}
	})
	if err != nil {
		s.log.Info("gomaxprocs adaptive is off", "reason", err.Error(), "gomaxprocs", runtime.GOMAXPROCS(0))
	}
}
