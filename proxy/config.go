package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
	"github.com/causallab/causallab/sessiontoken"
)

// User is an account clients log in to the proxy with (auth: mapped).
type User struct {
	// Name is the user name clients send.
	Name string `yaml:"name"`
	// Password is the user's password (plain text in the config file).
	Password string `yaml:"password"`
	// BackendUser and BackendPassword are the MySQL account this user's
	// sessions act as on every server; empty: each server's own account
	// (Backend.User, Backend.Password). Both or neither.
	BackendUser     string `yaml:"backend_user"`
	BackendPassword string `yaml:"backend_password"`
}

// Authentication modes (Config.Auth).
const (
	// AuthPassthrough: a client logs in with a MySQL account of the
	// servers; the proxy verifies it there and opens every backend
	// connection of the session as that account.
	AuthPassthrough = "passthrough"
	// AuthMapped: a client logs in as one of Config.Users; its sessions
	// act as that user's backend account.
	AuthMapped = "mapped"
)

// Backend is one MySQL server the proxy connects to.
type Backend struct {
	// Name labels the server in metrics and logs ("primary", "replica1").
	// Default: primary / replicaN.
	Name string `yaml:"name"`
	// Addr is host:port.
	Addr string `yaml:"addr"`
	// User and Password are the proxy's account on the server. They never
	// appear in logs or errors.
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Weight is a replica's hashing weight for policy affinity (its share
	// of consistent_read_ids, as ProxySQL's hostgroup weights),
	// 1..16777216. Default 1.
	Weight int `yaml:"weight"`
}

// Config configures a proxy.
type Config struct {
	// classicEOF is set by New: counts primary connections whose server
	// did not offer CLIENT_DEPRECATE_EOF (dialBackend). Nil: not counted.
	classicEOF prometheus.Counter
	// Listen is the MySQL-protocol listen address. Default 127.0.0.1:6033.
	Listen string `yaml:"listen"`
	// HTTPListen serves /metrics and /healthz; empty disables it.
	HTTPListen string `yaml:"http_listen"`
	// Auth is how clients are identified (docs/proxy-sessions.md, "Identity"):
	// "passthrough" (each client logs in as its own MySQL account, verified
	// by the primary; its sessions act as that account; the default
	// without Users) or "mapped" (each client logs in as one of Users and
	// acts as that user's backend account; the default with Users).
	Auth string `yaml:"auth"`
	// Users are the accounts clients authenticate as under auth mapped
	// (at least one); none under passthrough.
	Users []User `yaml:"users"`
	// AuthMethod is the default authentication plugin offered to clients:
	// caching_sha2_password (default; needs TLS or the RSA key exchange,
	// both provided with a generated key) or mysql_native_password
	// (mapped only: passthrough needs the password, which only
	// caching_sha2_password's full authentication carries).
	AuthMethod string `yaml:"auth_method"`
	// TLSCert and TLSKey are PEM files for the listener; empty: a
	// self-signed certificate generated at start-up.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// ServerVersion is the version string announced to clients. Default:
	// the primary's own (SELECT VERSION() at start), or "8.4.0-causallab"
	// when the primary does not answer then.
	ServerVersion string `yaml:"server_version"`
	// versionFromPrimary: ServerVersion was not configured (validate).
	versionFromPrimary bool
	// Engine is the backends' engine: "mysql" (default: MySQL GTID sets)
	// or "mariadb" (MariaDB GTID positions: last_gtid session tracking,
	// gtid_current_pos, MASTER_GTID_WAIT; engine.go). Checked against the
	// primary's version at start; on mariadb, positions must be poll,
	// wait the function and watermark_source query (the default there).
	Engine string `yaml:"engine"`
	// Primary is the primary server.
	Primary Backend `yaml:"primary"`
	// Replicas are the replicas, in the configured (hashing) order.
	Replicas []Backend `yaml:"replicas"`
	// Policy names the routing rule (router.ParsePolicy names: any,
	// affinity, window, token-ryw, token-ryw-mr, token-wait, global).
	// Default token-wait. A client may choose another per session or per
	// statement (SET @causal_policy, /* causal_policy=... */).
	Policy string `yaml:"policy"`
	// GlobalSource is where a global (read-all-writes) read's target
	// comes from: "primary-query" (default: the primary's
	// @@GLOBAL.gtid_executed per read, sound) or "view" (the position
	// source's view of the primary and the proxy's own acknowledged
	// writes, no round trip; live.GlobalSource).
	GlobalSource string `yaml:"global_source"`
	// DeferErrorCode is the MySQL error code of a deferred read's error
	// (a policy with +defer: no replica held what the read needs within
	// its budget, the primary was not used; the message says when to
	// retry). Default 1105 (ER_UNKNOWN_ERROR, as the proxy's other
	// refusals), 1000..65535.
	DeferErrorCode uint16 `yaml:"defer_error_code"`
	// HashMode is policy affinity's hashing: full-list (default: index
	// the full configured list, reselect only when that server is down),
	// or, to reproduce their edge cases, available-only or
	// rebalance-override (hashroute.Mode).
	HashMode string `yaml:"hash_mode"`
	// WaitBudget is token-wait's longest wait for a replica before falling
	// back to the primary. Default router.DefaultWaitBudget.
	WaitBudget time.Duration `yaml:"wait_budget"`
	// FallbackPerSecond caps freshness fallbacks to the primary (token
	// bucket); 0 disables the cap. Above it reads fail with a retryable
	// error (CapFailFast).
	FallbackPerSecond float64 `yaml:"fallback_per_second"`
	// FleetMembers is how many proxies share fallback_per_second, the
	// same on each (a static count): each worker process of each proxy
	// enforces fallback_per_second / (fleet_members × workers)
	// (Config.capShare), so N proxies, or one proxy's N workers, do not
	// allow N times the cap. Default 1, 1..1024.
	FleetMembers int `yaml:"fleet_members"`
	// Epoch is the topology epoch tokens are issued in (bumped at every
	// failover); tokens of an older epoch are honoured only if the primary
	// holds their transactions. Default 1.
	Epoch uint64 `yaml:"epoch"`
	// Discover is how the proxy finds a promotion by itself (failover.go):
	// "roles" (default: every discover_interval it reads the primary's
	// read_only, and when the primary is read-only or does not answer,
	// each replica's read_only and replication source; the one writable
	// replica without a source is promoted) or "off" (only the admin API
	// promotes).
	Discover string `yaml:"discover"`
	// DiscoverInterval is how often discovery reads the roles. Default
	// 1s, in [10ms, 1m].
	DiscoverInterval time.Duration `yaml:"discover_interval"`
	// AdminToken is the bearer token of the admin API on http_listen
	// (POST /admin/promote?node=NAME); "" turns the API off. At least 16
	// characters.
	AdminToken string `yaml:"admin_token"`
	// Positions selects how the proxy learns what each backend executed,
	// when Source is nil: "poll" (default: a live.Poller[gtid.Set] per backend,
	// SELECT @@GLOBAL.gtid_executed every PollInterval) or "binlog" (a
	// binlogwatch stream per backend behind live.WatchSource; the backend
	// accounts then need REPLICATION SLAVE) or "watchers" (each backend
	// named in Watchers followed through its `causallab watch --proxysql`
	// server, shared by a fleet of proxies; the others polled).
	Positions string `yaml:"positions"`
	// Watchers maps backend names to the address of a server of the
	// binlog-reader protocol following that backend (`causallab watch
	// --proxysql name=addr`, binlogwatch.ProxySQLServer), for positions
	// watchers. At least one; each name a configured backend.
	Watchers map[string]string `yaml:"watchers"`
	// Wait is how a read waits for a replica to catch up (policy
	// token-wait): "wait-for-executed-gtid-set" (default: the function on
	// the session's replica connection, live.WaitGTIDFunction) or
	// "watcher" (the position source's WaitFor, live.WaitWatcher: no
	// statement on the replica; best with positions: binlog).
	Wait string `yaml:"wait"`
	// PollInterval is how often each server's gtid_executed is polled in
	// "poll" mode while some client needs a fresher view of it (see
	// PollIdleInterval; always, when that equals it). Default 5ms, at
	// least 1ms.
	PollInterval time.Duration `yaml:"poll_interval"`
	// PollIdleInterval is how often a server is polled in "poll" mode
	// while no client needs a fresher view of it (live.PollerConfig.
	// IdleInterval): a replica is polled every PollInterval after each
	// write whose GTID the proxy learns (until its view holds it, or the
	// poller's down-after passes), while a read finds no replica whose
	// view holds what it needs (a wait, a freshness fallback, a stale or
	// deferred read), while a watcher wait waits on it, and until its
	// first successful poll; a lazy-watermark bound asks for a poll at
	// once. The primary too, except with global_source view (its view is
	// global's target there: polled every PollInterval). Sound: a view
	// polled less often is older, never ahead of the server. Default
	// 100ms (PollInterval when that is longer); equal to PollInterval:
	// every server polled every PollInterval, as before. In
	// [PollInterval, 1m].
	PollIdleInterval time.Duration `yaml:"poll_idle_interval"`
	// Source, when set, is the position source for every backend (by
	// Backend.Name), run by the caller; Positions is then ignored.
	Source live.PositionSource[gtid.Set] `yaml:"-"`
	// MaxAllowedPacket bounds one client command (a packet with its
	// continuation packets), checked on the running length as it is read,
	// and one parameter's COM_STMT_SEND_LONG_DATA: a larger command is
	// answered with ER_NET_PACKET_TOO_LARGE (1153), read to its end
	// without being kept, and the connection closed, as MySQL does.
	// Default 64 MiB (MySQL's default), 1 KiB..1 GiB.
	MaxAllowedPacket int `yaml:"max_allowed_packet"`
	// MaxSessionBytes bounds what one session holds from its client
	// between statements: long data not yet executed, prepared statement
	// texts (with a per-statement estimate), remembered session
	// statements. Past it long data fails the statement's execution, a
	// prepare is refused, session statements stop being replayed (reads
	// then stay on the primary). Default 64 MiB.
	MaxSessionBytes int `yaml:"max_session_bytes"`
	// MaxTotalSessionBytes bounds what every session together holds from
	// its client between statements (what MaxSessionBytes bounds per
	// session): each session's bytes are drawn from it too, and a take
	// past it is refused as one past max_session_bytes, naming this key,
	// counted in client_errors_total{kind="total-session-bytes"}.
	// Without it 1,000 clients at max_session_bytes could make the proxy
	// hold 64 GiB. Default 1 GiB (16 sessions at the default
	// max_session_bytes), 1 KiB..1 TiB; each worker of --workers N has
	// its own.
	MaxTotalSessionBytes int `yaml:"max_total_session_bytes"`
	// MaxSessionPreparedStatements bounds the prepared statements one
	// session holds open: a COM_STMT_PREPARE past it is refused before it
	// reaches a server with ER_MAX_PREPARED_STMT_COUNT_REACHED (1461),
	// counted in client_errors_total{kind="prepared-statements"}. MySQL's
	// own bound, max_prepared_stmt_count (16,382 by default), is the
	// server's, across every session: without this one, one client
	// preparing in a loop takes all of it and every other client's
	// prepare fails. Default 1024 (above the statement caches drivers
	// are tuned to, as Connector/J's prepStmtCacheSize 250-500; 16
	// sessions at it reach MySQL's default), 1..4194304 (MySQL's
	// largest max_prepared_stmt_count).
	MaxSessionPreparedStatements int `yaml:"max_session_prepared_statements"`
	// MaxTokenBytes bounds the text of a causal token a client sends (in
	// a comment, min_gtid or SET @causal_token); a longer one is refused
	// with an error naming the limit (compact_tokens keeps the proxy's
	// own tokens short). Default 64 KiB.
	MaxTokenBytes int `yaml:"max_token_bytes"`
	// MaxConnections bounds logged-in client connections (from the
	// authentication's success: the session's primary connection is
	// dialled after it); while it is reached a new connection is refused
	// with ER_CON_COUNT_ERROR (1040) in place of the greeting and closed,
	// and a login that authenticates past it is answered 1040. Default
	// 1000. Connections still in their login are bounded apart
	// (MaxHandshakes).
	MaxConnections int `yaml:"max_connections"`
	// MaxHandshakes bounds the connections still in their login (the
	// greeting, TLS, authentication; a connection waiting for the
	// readiness gate included), apart from MaxConnections, so that
	// neither starves the other: clients stalling their login cannot
	// keep logged-in clients out, nor logged-in clients the logins. With
	// MaxHandshakes logins in progress a new connection closes the
	// oldest when it has been in progress for a second (a login takes
	// milliseconds; one trickling bytes takes until handshake_timeout),
	// counted in connections_total{outcome="handshake-evicted"}; else it
	// is refused with 1040 as past max_connections
	// (outcome="refused-max-handshakes"). Default max_connections (a
	// reconnect storm of max_connections clients is never refused),
	// 1..1048576.
	MaxHandshakes int `yaml:"max_handshakes"`
	// MaxUserConnections bounds the logged-in client connections of one
	// account (the user name the client logged in with, as MySQL's
	// max_user_connections): a login past it is refused with
	// ER_TOO_MANY_USER_CONNECTIONS (1203) and closed, counted in
	// connections_total{outcome="refused-max-user-connections"}; a
	// COM_CHANGE_USER to an account at its bound too. Default: with one
	// user, max_connections (nobody else to keep room for); with more,
	// three quarters of max_connections, so that one account cannot take
	// the last quarter every other account needs to log in.
	// 1..max_connections.
	MaxUserConnections int `yaml:"max_user_connections"`
	// HandshakeTimeout bounds the client's side of its login (TLS,
	// authentication); the session's primary connection, opened before
	// the login's OK, adds at most connect_timeout. Default 10s.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// StartupTimeout bounds the readiness gate: the proxy serves once its
	// position source has read every backend once, or when this passes
	// first (the backends not read are logged and counted in
	// causallab_proxy_startup_unread_total); a client connecting before
	// then gets its greeting then (docs/proxy-fleet.md, "Readiness"). Default 10s.
	StartupTimeout time.Duration `yaml:"startup_timeout"`
	// IdleTimeout disconnects a client idle between commands that long
	// (MySQL's wait_timeout; the client is told why, as MySQL tells it:
	// error 4031). Default 8h.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// IdleInTransactionTimeout disconnects a client idle between
	// commands that long while its session holds an open transaction
	// (the primary's SERVER_STATUS_IN_TRANS), when shorter than
	// IdleTimeout: the client is told why with 4031 as for IdleTimeout,
	// counted in client_errors_total{kind="idle-in-transaction-timeout"},
	// and the transaction is rolled back with the session's end (its
	// backend connection closed, or reset back into its pool). An
	// abandoned transaction otherwise holds its row locks (other
	// clients' lock waits fail after innodb_lock_wait_timeout) and,
	// with multiplex, a pooled connection, until idle_timeout (8h).
	// Default 15m (ProxySQL's mysql-max_transaction_idle_time is 4h);
	// idle_timeout or longer turns it off. 1ms..8760h.
	IdleInTransactionTimeout time.Duration `yaml:"idle_in_transaction_timeout"`
	// ClientReadTimeout bounds the wait for the rest of a command once
	// its first byte arrived (MySQL's net_read_timeout); the client is
	// then disconnected. Default 30s.
	ClientReadTimeout time.Duration `yaml:"client_read_timeout"`
	// ClientWriteTimeout bounds each write to a client that does not read
	// its results (MySQL's net_write_timeout); the client is then
	// disconnected. Default 60s.
	ClientWriteTimeout time.Duration `yaml:"client_write_timeout"`
	// MaxReplay bounds the session statements (SET, USE) remembered for
	// replay on a session's backend connections. Default 256.
	MaxReplay int `yaml:"max_replay"`
	// ShutdownTimeout bounds graceful shutdown: in-flight statements get
	// this long to finish. Default 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// ConnectTimeout bounds one backend connection attempt, its
	// handshake included. Default 5s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// BackendTimeout bounds every read and write on a backend connection
	// that makes no progress (the server sends nothing while it runs a
	// statement, so it must exceed the longest statement clients run, as
	// ProxySQL's default_query_timeout): past it the connection is cut and
	// the client told the connection was lost. Reads on a replica are also
	// watched against the position source's health until the replica
	// starts answering, and waits are bounded by their budget (docs/proxy.md,
	// Limits). Default 1h, 1s..8760h.
	BackendTimeout time.Duration `yaml:"backend_timeout"`
	// CompactTokens widens each session's token to every source's prefix
	// 1-max after each write (live.Config.CompactTokens): long-lived
	// client connections then carry one interval per source instead of one
	// per write. Sound for read-your-writes; free on replicas that apply in
	// commit order (replica_preserve_commit_order=ON). Default off.
	CompactTokens bool `yaml:"compact_tokens"`
	// TokenKeys sign and verify session tokens (the s1. form, package
	// sessiontoken): with keys, SELECT @causal_token returns a signed
	// token of the session's writes and of what its reads were shown,
	// which any proxy holding one of the keys takes back from SET
	// @causal_token, so read-your-writes and monotonic reads outlive a
	// connection and cross the proxies of a fleet. The first key signs,
	// every key verifies: a rotation puts the new key first and keeps
	// the previous one. Empty (default): no signed tokens; @causal_token
	// is the unsigned g1. form of the session's writes.
	TokenKeys []TokenKey `yaml:"token_keys"`
	// AcceptUnsignedTokens: unsigned tokens (g1., a bare GTID set, in
	// SET @causal_token, a comment or min_gtid) are taken. Default true
	// without token_keys, false with them (a fleet that signs refuses
	// what it cannot verify: an unsigned token could pin a session's
	// reads to the primary or make them wait).
	AcceptUnsignedTokens *bool `yaml:"accept_unsigned_tokens"`
	// TrackToken: a client that negotiated CLIENT_SESSION_TRACK finds
	// the session's token (what SELECT @causal_token returns) in the OK
	// packet of a statement after which it changed, as the tracked system
	// variable causal_token: a driver that reads session tracking carries
	// it without a round trip. Default true.
	TrackToken *bool `yaml:"track_token"`
	// StartToken is the token a new client session starts with:
	// "proxy-writes" (default: every write this proxy acknowledged to any
	// session in the current epoch, each source's prefix 1-max,
	// live.LiveSession.StartAfterAcked; under a read-your-writes policy a
	// new connection then sees what the application wrote on its other
	// connections, as on one MySQL server) or "none" (an empty token: a
	// new session reads what a replica has, until it writes or sets
	// @causal_token). docs/proxy.md, "Scope".
	StartToken string `yaml:"start_token"`
	// SocketIO is how client and backend sockets are read and written:
	// "raw" (default: raw system calls, internal/rawnet; on Linux, where
	// it spares the Go runtime a monitor-thread wake-up per system call
	// after idling) or "go" (Go's ordinary net.Conn calls).
	SocketIO string `yaml:"socket_io"`
	// WatermarkSource is how a monotonic-reads policy learns a replica's
	// position after a read (docs/proxy.md, "Watermarks"): "lazy" (the
	// default with positions poll and no Source: no statement after the
	// read; the session stays on its replica while it can and, before a
	// read that must go elsewhere, takes the bound from the poller's next
	// poll of that replica, live.WatermarkLazy; the poll reads
	// gtid_executed and the received set in one statement), "query" (the
	// default otherwise: gtid_executed joined with the replica's received set,
	// mysqlwire.WatermarkQuery, pipelined behind every replica read) or
	// "all-gtids" (NOT sound: the OK packet's set is gtid_executed alone,
	// which can lack a transaction the read saw, docs/router.md "The
	// commit race"; logged as a warning at start; replica connections negotiate
	// CLIENT_DEPRECATE_EOF and session_track_gtids=ALL_GTIDS, and an
	// autocommit read's own final OK packet carries the watermark; the
	// result framing is rewritten to classic EOF packets for the client;
	// reads whose OK carries no set, or ran in a transaction, read it
	// with the query afterwards, counted in
	// watermark_fallbacks_total{source="replica-query"}).
	WatermarkSource string `yaml:"watermark_source"`
	// Multiplex shares backend connections across client sessions: a
	// session borrows one from its node's pool (PoolSize, PoolWait) for
	// each command and gives it back after it unless its state pins it
	// (docs/proxy-sessions.md, "Multiplexing"). Default off: each session owns its
	// connections.
	Multiplex bool `yaml:"multiplex"`
	// PoolSize bounds each node's shared pool of backend connections
	// (pool.go: the connections client sessions borrow while nothing pins
	// one to them), idle, lent or being dialled. Default DefaultPoolSize,
	// 1..65536. It is the proxy's: `causallab proxy --workers N` gives
	// each worker its share (PoolShare).
	PoolSize int `yaml:"pool_size"`
	// PoolWait bounds how long a session waits for a pooled connection
	// when all PoolSize are lent; past it the statement fails with a
	// PoolError (counted in pool_acquire_failures_total{reason=
	// wait-timeout}). Default 2s, 1ms..1h.
	PoolWait time.Duration `yaml:"pool_wait"`
	// PoolMaxWaiters bounds the client acquisitions waiting in line for
	// one node's pooled connection; one more fails at once (PoolError
	// queue-full, counted in pool_acquire_failures_total{reason=
	// queue-full}). A KILL QUERY's acquisition is not bounded by it.
	// 0 means the default, MaxConnections (a session waits for one
	// pooled connection at a time, so by default nothing is refused);
	// 1..1048576 (docs/proxy-sessions.md, "Multiplexing": why).
	PoolMaxWaiters int `yaml:"pool_max_waiters"`
	// MaxPinnedShare bounds the share of each node's pool (PoolSize)
	// that sessions pinned by their state (a transaction, a temporary
	// table, LOCK TABLES, ...: docs/proxy-sessions.md, "Multiplexing") may hold:
	// a session whose state pins a pooled connection while that many are
	// pinned gets it as a connection of its own instead, its place in the
	// pool freed, counted in pool_pinned_own_total and
	// pool_connections{state="own"}; the connection is closed when the
	// pin ends. So clients of one account holding transactions open
	// cannot take every pooled connection and fail everyone else's
	// statements after pool_wait; each session still holds at most one
	// connection per node (max_connections, max_user_connections bound
	// them). Default 0.75 (48 of the default 64), in (0, 1]; each pool
	// lets at least one connection be pinned.
	MaxPinnedShare float64 `yaml:"max_pinned_share"`
	// OnRead, when set, is called for every routed read with where it
	// goes and why, before the read runs there (so before its answer
	// reaches the client; again if it is retried on another node). For
	// in-process embedders and tests: the lab attributes hashed sessions'
	// moves with it. It must not block.
	OnRead func(ReadRoute) `yaml:"-"`
	// Workers is how many worker processes `causallab proxy` runs: 1 (the
	// default) serves every client in its own process; N > 1 makes it a
	// supervisor that accepts clients on Listen and deals them out, in
	// turn, to N worker processes (each a whole proxy: its own router,
	// position pollers, its share of pool_size (PoolShare) and metrics;
	// docs/proxy-design.md, "Worker processes"). The Server itself ignores it.
	// 1..64.
	Workers int `yaml:"workers"`
	// WorkerIndex is this Server's index among Workers worker processes
	// (set by `causallab proxy --workers N` in each worker; default 0):
	// its sessions' ids are WorkerIndex+1, WorkerIndex+1+Workers, ...,
	// so no two workers give the same id. 0..Workers-1.
	WorkerIndex int `yaml:"-"`
	// WorkerDir is a directory only the proxy's own processes enter (set
	// by `causallab proxy --workers N`, mode 0700; "" in one process):
	// each worker answers its peers' KILL and SHOW PROCESSLIST on
	// <WorkerDir>/worker-<index>.sock (workerpeers.go), so a KILL reaches
	// a session another worker holds (the mysql client's Ctrl-C opens a
	// new connection, which may be dealt to another worker) and SHOW
	// PROCESSLIST lists every worker's sessions.
	WorkerDir string `yaml:"-"`
	// GOMAXPROCS is how the Server sets the process's GOMAXPROCS:
	// "adaptive" (one P while client commands arrive one at a time, Go's
	// default while they overlap: internal/procs; off when the
	// environment sets GOMAXPROCS, as in a --workers worker) or "fixed"
	// (Go's value, untouched). GOMAXPROCS is the process's: run at most one
	// adaptive Server per process. Default "fixed" for an embedder of
	// package proxy; `causallab proxy` defaults it to "adaptive"
	// (docs/proxy-design.md, "Adaptive GOMAXPROCS").
	GOMAXPROCS string `yaml:"gomaxprocs"`
	// Listener, when set, is where the Server accepts clients instead of
	// listening on Listen (a worker process's hand-off listener); Listen
	// is then only the address it reports.
	Listener net.Listener `yaml:"-"`
	// Logger receives the proxy's logs. Default slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// ReadRoute is one routed read's destination (Config.OnRead).
type ReadRoute struct {
	// Conn is the client connection's id (the MySQL connection id the
	// client was given at its handshake).
	Conn uint32
	// Node names the backend; Replica indexes Config.Replicas (-1: the
	// primary).
	Node    string
	Replica int
	// Reason is the router's reason, HashReason hashroute's (affinity).
	Reason     router.Reason
	HashReason hashroute.Reason
}

// LoadConfig reads a YAML config file. Unknown keys are an error.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	var c Config
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("proxy: config %s: %w", path, err)
	}
	return c, nil
}

// DefaultPoolSize is pool_size's default.
const DefaultPoolSize = 64

// PoolShare is worker i's share of pool_size among n workers: pool_size
// divided by n, one more for the first pool_size mod n workers, so that
// the shares add up to pool_size (0 for an unset pool_size: the default).
// An error names a pool_size smaller than n (a worker's pool needs at
// least one connection per node).
func PoolShare(poolSize, n, i int) (int, error) {
	if poolSize == 0 {
		poolSize = DefaultPoolSize
	}
	if poolSize < n {
		return 0, fmt.Errorf("proxy: pool_size %d is smaller than workers %d: each worker takes a share of pool_size, at least one connection per node", poolSize, n)
	}
	share := poolSize / n
	if i < poolSize%n {
		share++
	}
	return share, nil
}

// capShare is the fallbacks per second this Server allows: its share of
// fallback_per_second across the fleet's proxies and its own proxy's
// worker processes (0: no cap).
func (c *Config) capShare() float64 {
	return c.FallbackPerSecond / float64(max(c.FleetMembers, 1)*max(c.Workers, 1))
}

// TokenKey is one session-token signing key (Config.TokenKeys).
type TokenKey struct {
	// ID names the key in the tokens it signs: 1 to 32 of [a-z0-9_-].
	ID string `yaml:"id"`
	// Secret is the HMAC-SHA256 key, at least 32 bytes; the same on
	// every proxy of the fleet.
	Secret string `yaml:"secret"`
}

// validateTokens: token_keys and accept_unsigned_tokens (the keyring is
// built in New).
func (c *Config) validateTokens() error {
	if _, err := c.keyring(); err != nil {
		return fmt.Errorf("proxy: token_keys: %w", err)
	}
	if c.AcceptUnsignedTokens == nil {
		accept := len(c.TokenKeys) == 0
		c.AcceptUnsignedTokens = &accept
	}
	if c.TrackToken == nil {
		track := true
		c.TrackToken = &track
	}
	return nil
}

// keyring is the session-token keyring of token_keys (nil: none).
func (c *Config) keyring() (*sessiontoken.Keyring, error) {
	if len(c.TokenKeys) == 0 {
		return nil, nil
	}
	keys := make([]sessiontoken.Key, len(c.TokenKeys))
	for i, k := range c.TokenKeys {
		keys[i] = sessiontoken.Key{ID: k.ID, Secret: []byte(k.Secret)}
	}
	return sessiontoken.NewKeyring(keys...)
}

// validate fills defaults and rejects nonsense, one concern at a time in
// this order (the first nonsense found is the error).
func (c *Config) validate() error {
	for _, check := range []func() error{
		c.validateListener,
		c.validateUsers,
		c.validateHandshake,
		c.validateBackends,
		c.validateRouting,
		c.validatePositions,
		c.validateEngine,
		c.validateSizes,
		c.validateClientTimeouts,
		c.validatePool,
		c.validateReplay,
		c.validateServerTimeouts,
		c.validateRuntime,
		c.validateWatermark,
		c.validateTokens,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// validateListener: listen and workers.
func (c *Config) validateListener() error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:6033"
	}
	if c.Workers == 0 {
		c.Workers = 1
	}
	if c.Workers < 1 || c.Workers > 64 {
		return fmt.Errorf("proxy: workers %d out of range [1, 64]", c.Workers)
	}
	if c.WorkerIndex < 0 || c.WorkerIndex >= c.Workers {
		return fmt.Errorf("proxy: worker index %d out of range [0, %d)", c.WorkerIndex, c.Workers)
	}
	return nil
}

// validateUsers: the auth mode (default: mapped with users, else
// passthrough); under mapped at least one user, each named, no name
// twice; under passthrough none.
func (c *Config) validateUsers() error {
	if c.Auth == "" {
		c.Auth = AuthPassthrough
		if len(c.Users) > 0 {
			c.Auth = AuthMapped
		}
	}
	switch c.Auth {
	case AuthPassthrough:
		if len(c.Users) > 0 {
			return errors.New("proxy: auth passthrough takes no users (clients log in with their own MySQL accounts)")
		}
		return nil
	case AuthMapped:
	default:
		return fmt.Errorf("proxy: auth %q (want passthrough or mapped)", c.Auth)
	}
	if len(c.Users) == 0 {
		return errors.New("proxy: auth mapped needs users")
	}
	seen := map[string]bool{}
	for _, u := range c.Users {
		if u.Name == "" {
			return errors.New("proxy: a user has no name")
		}
		if seen[u.Name] {
			return fmt.Errorf("proxy: user %q configured twice", u.Name)
		}
		if (u.BackendUser == "") != (u.BackendPassword == "") {
			return fmt.Errorf("proxy: user %q: backend_user and backend_password go together", u.Name)
		}
		seen[u.Name] = true
	}
	return nil
}

// validateHandshake: what the proxy offers a client at login
// (auth_method, tls_cert and tls_key, server_version).
func (c *Config) validateHandshake() error {
	switch c.AuthMethod {
	case "":
		c.AuthMethod = mysql.AUTH_CACHING_SHA2_PASSWORD
	case mysql.AUTH_CACHING_SHA2_PASSWORD, mysql.AUTH_NATIVE_PASSWORD:
	default:
		return fmt.Errorf("proxy: auth_method %q (want caching_sha2_password or mysql_native_password)", c.AuthMethod)
	}
	if c.Auth == AuthPassthrough && c.AuthMethod != mysql.AUTH_CACHING_SHA2_PASSWORD {
		return fmt.Errorf("proxy: auth passthrough needs auth_method caching_sha2_password (its full authentication carries the password the servers verify), not %s", c.AuthMethod)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("proxy: tls_cert and tls_key go together")
	}
	if c.ServerVersion == "" {
		c.ServerVersion, c.versionFromPrimary = "8.4.0-causallab", true
	}
	return nil
}

// validateBackends: the primary and the replicas, every node's name
// unique.
func (c *Config) validateBackends() error {
	if c.Primary.Addr == "" {
		return errors.New("proxy: primary.addr is required")
	}
	if c.Primary.Name == "" {
		c.Primary.Name = "primary"
	}
	if len(c.Replicas) > 64 {
		return fmt.Errorf("proxy: %d replicas (at most 64)", len(c.Replicas))
	}
	names := map[string]bool{c.Primary.Name: true}
	for i := range c.Replicas {
		if err := validateReplica(&c.Replicas[i], i, names); err != nil {
			return err
		}
	}
	return nil
}

// validateReplica fills and checks r, the config's replica i (0-based);
// names holds the node names taken before it, and takes its own.
func validateReplica(r *Backend, i int, names map[string]bool) error {
	if r.Addr == "" {
		return fmt.Errorf("proxy: replica %d has no addr", i+1)
	}
	if r.Name == "" {
		r.Name = fmt.Sprintf("replica%d", i+1)
	}
	if names[r.Name] {
		return fmt.Errorf("proxy: backend name %q used twice", r.Name)
	}
	if r.Weight == 0 {
		r.Weight = 1
	}
	if r.Weight < 1 || r.Weight > hashroute.MaxWeight {
		return fmt.Errorf("proxy: replica %s: weight %d out of range 1..%d", r.Name, r.Weight, hashroute.MaxWeight)
	}
	names[r.Name] = true
	return nil
}

// validateRouting: how reads are routed (policy and its per-session
// choice, hash_mode, wait_budget, fallback_per_second, epoch).
func (c *Config) validateRouting() error {
	if c.Policy == "" {
		c.Policy = router.PolicyTokenWait.String()
	}
	if _, err := policyKind(c.Policy); err != nil {
		return err
	}
	if err := c.validatePolicySelect(); err != nil {
		return err
	}
	if _, err := hashroute.ParseMode(c.HashMode); err != nil {
		return fmt.Errorf("proxy: hash_mode: %w", err)
	}
	if c.WaitBudget == 0 {
		c.WaitBudget = router.DefaultWaitBudget
	}
	if c.WaitBudget < 0 || c.WaitBudget > router.MaxDuration {
		return fmt.Errorf("proxy: wait_budget %v out of range", c.WaitBudget)
	}
	if c.FallbackPerSecond < 0 {
		return fmt.Errorf("proxy: negative fallback_per_second %v", c.FallbackPerSecond)
	}
	if err := defaultInt("fleet_members", &c.FleetMembers, 1, 1, 1024); err != nil {
		return err
	}
	if c.Epoch == 0 {
		c.Epoch = 1
	}
	return c.validateFailover()
}

// validateWatchers: watchers is set exactly when positions is
// watchers, and names configured backends.
func (c *Config) validateWatchers() error {
	if c.Positions != "watchers" {
		if len(c.Watchers) > 0 {
			return fmt.Errorf("proxy: watchers given, but positions is %q (want watchers)", c.Positions)
		}
		return nil
	}
	if len(c.Watchers) == 0 {
		return errors.New("proxy: positions watchers needs watchers (backend name: address of its causallab watch --proxysql)")
	}
	for name, addr := range c.Watchers {
		known := name == c.Primary.Name || slices.ContainsFunc(c.Replicas, func(b Backend) bool { return b.Name == name })
		if !known {
			return fmt.Errorf("proxy: watchers: %q is not a backend name", name)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("proxy: watchers: %s: %w", name, err)
		}
	}
	return nil
}

// validateFailover: how a promotion is followed (discover,
// discover_interval, admin_token).
func (c *Config) validateFailover() error {
	if err := oneOf("discover", &c.Discover, "roles", "off"); err != nil {
		return err
	}
	if c.DiscoverInterval == 0 {
		c.DiscoverInterval = time.Second
	}
	if c.DiscoverInterval < 10*time.Millisecond || c.DiscoverInterval > time.Minute {
		return fmt.Errorf("proxy: discover_interval %v out of range [10ms, 1m]", c.DiscoverInterval)
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		return fmt.Errorf("proxy: admin_token is %d characters, want at least 16", len(c.AdminToken))
	}
	return nil
}

// validatePositions: how the replicas' positions are learnt and waited
// for (positions, wait, poll_interval, poll_idle_interval).
func (c *Config) validatePositions() error {
	if err := oneOf("positions", &c.Positions, "poll", "binlog", "watchers"); err != nil {
		return err
	}
	if err := c.validateWatchers(); err != nil {
		return err
	}
	if err := oneOf("wait", &c.Wait, live.WaitGTIDFunction.String(), live.WaitWatcher.String()); err != nil {
		return err
	}
	if c.PollInterval == 0 {
		c.PollInterval = 5 * time.Millisecond
	}
	if c.PollInterval < time.Millisecond || c.PollInterval > time.Minute {
		return fmt.Errorf("proxy: poll_interval %v out of range", c.PollInterval)
	}
	if c.PollIdleInterval == 0 {
		c.PollIdleInterval = max(DefaultPollIdleInterval, c.PollInterval)
	}
	if c.PollIdleInterval < c.PollInterval || c.PollIdleInterval > time.Minute {
		return fmt.Errorf("proxy: poll_idle_interval %v out of range [poll_interval %v, 1m] (equal to poll_interval: always poll every poll_interval)", c.PollIdleInterval, c.PollInterval)
	}
	return nil
}

// validateSizes: the bounds on packets, sessions, tokens and
// connections.
func (c *Config) validateSizes() error {
	if c.MaxAllowedPacket == 0 {
		c.MaxAllowedPacket = 64 << 20
	}
	if c.MaxAllowedPacket < 1024 || c.MaxAllowedPacket > 1<<30 {
		return fmt.Errorf("proxy: max_allowed_packet %d out of range (1KiB..1GiB)", c.MaxAllowedPacket)
	}
	if err := defaultInt("max_session_bytes", &c.MaxSessionBytes, 64<<20, 1<<10, 1<<40); err != nil {
		return err
	}
	if err := defaultInt("max_total_session_bytes", &c.MaxTotalSessionBytes, 1<<30, 1<<10, 1<<40); err != nil {
		return err
	}
	if err := defaultInt("max_session_prepared_statements", &c.MaxSessionPreparedStatements, 1024, 1, 4194304); err != nil {
		return err
	}
	if err := defaultInt("max_token_bytes", &c.MaxTokenBytes, 64<<10, 64, 1<<30); err != nil {
		return err
	}
	if err := defaultInt("max_connections", &c.MaxConnections, 1000, 1, 1<<20); err != nil {
		return err
	}
	if err := defaultInt("max_handshakes", &c.MaxHandshakes, c.MaxConnections, 1, 1<<20); err != nil {
		return err
	}
	perUser := c.MaxConnections
	if len(c.Users) > 1 || c.Auth == AuthPassthrough {
		perUser = max(1, c.MaxConnections*3/4)
	}
	return defaultInt("max_user_connections", &c.MaxUserConnections, perUser, 1, c.MaxConnections)
}

// validateClientTimeouts: the timeouts of a client's connection.
func (c *Config) validateClientTimeouts() error {
	for _, d := range []struct {
		key string
		v   *time.Duration
		def time.Duration
	}{
		{"handshake_timeout", &c.HandshakeTimeout, 10 * time.Second},
		{"startup_timeout", &c.StartupTimeout, 10 * time.Second},
		{"idle_timeout", &c.IdleTimeout, 8 * time.Hour},
		{"idle_in_transaction_timeout", &c.IdleInTransactionTimeout, 15 * time.Minute},
		{"client_read_timeout", &c.ClientReadTimeout, 30 * time.Second},
		{"client_write_timeout", &c.ClientWriteTimeout, 60 * time.Second},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < time.Millisecond || *d.v > 365*24*time.Hour {
			return fmt.Errorf("proxy: %s %v out of range (1ms..8760h)", d.key, *d.v)
		}
	}
	return nil
}

// validatePool: the pools of backend connections (pool_size, pool_wait,
// max_pinned_share, pool_max_waiters, whose default is max_connections:
// validateSizes filled it).
func (c *Config) validatePool() error {
	if err := defaultInt("pool_size", &c.PoolSize, DefaultPoolSize, 1, 1<<16); err != nil {
		return err
	}
	if c.PoolWait == 0 {
		c.PoolWait = 2 * time.Second
	}
	if c.PoolWait < time.Millisecond || c.PoolWait > time.Hour {
		return fmt.Errorf("proxy: pool_wait %v out of range (1ms..1h)", c.PoolWait)
	}
	if c.MaxPinnedShare == 0 {
		c.MaxPinnedShare = 0.75
	}
	if !(c.MaxPinnedShare > 0 && c.MaxPinnedShare <= 1) {
		return fmt.Errorf("proxy: max_pinned_share %v out of range (0, 1]", c.MaxPinnedShare)
	}
	return defaultInt("pool_max_waiters", &c.PoolMaxWaiters, c.MaxConnections, 1, 1<<20)
}

// maxPinned is how many of a node's pooled connections pinned sessions
// may hold: max_pinned_share of pool_size, at least one.
func (c *Config) maxPinned() int {
	return max(1, int(float64(c.PoolSize)*c.MaxPinnedShare))
}

// validateReplay: max_replay.
func (c *Config) validateReplay() error {
	if c.MaxReplay == 0 {
		c.MaxReplay = 256
	}
	if c.MaxReplay < 0 {
		return fmt.Errorf("proxy: negative max_replay %d", c.MaxReplay)
	}
	return nil
}

// validateServerTimeouts: the timeouts of shutdown and of the backends'
// connections.
func (c *Config) validateServerTimeouts() error {
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.BackendTimeout == 0 {
		c.BackendTimeout = time.Hour
	}
	if c.BackendTimeout < time.Second || c.BackendTimeout > 365*24*time.Hour {
		return fmt.Errorf("proxy: backend_timeout %v out of range (1s..8760h)", c.BackendTimeout)
	}
	if c.ShutdownTimeout < 0 || c.ConnectTimeout < 0 {
		return errors.New("proxy: negative timeout")
	}
	return nil
}

// validateRuntime: how the process does its I/O and sets GOMAXPROCS.
func (c *Config) validateRuntime() error {
	if err := oneOf("socket_io", &c.SocketIO, "raw", "go"); err != nil {
		return err
	}
	return oneOf("gomaxprocs", &c.GOMAXPROCS, "fixed", "adaptive")
}

// The Config.StartToken values.
const (
	StartTokenProxyWrites = "proxy-writes"
	StartTokenNone        = "none"
)

// validateWatermark: start_token, and watermark_source, whose default follows positions
// (validatePositions filled it) and Source.
func (c *Config) validateWatermark() error {
	if c.WatermarkSource == "" {
		c.WatermarkSource = "query"
		if c.Source == nil && c.Positions == "poll" {
			c.WatermarkSource = "lazy"
		}
	}
	if err := oneOf("start_token", &c.StartToken, StartTokenProxyWrites, StartTokenNone); err != nil {
		return err
	}
	if err := oneOf("watermark_source", &c.WatermarkSource, "lazy", "query", "all-gtids"); err != nil {
		return err
	}
	if c.WatermarkSource == "lazy" && c.Source == nil && c.Positions != "poll" {
		return fmt.Errorf("proxy: watermark_source lazy needs positions poll (the poller bounds reads; a binlog stream cannot), not %q", c.Positions)
	}
	return nil
}

// defaultInt fills a zero *v with def and rejects a value outside
// [lo, hi], naming the config key.
func defaultInt(key string, v *int, def, lo, hi int) error {
	if *v == 0 {
		*v = def
	}
	if *v < lo || *v > hi {
		return fmt.Errorf("proxy: %s %d out of range (%d..%d)", key, *v, lo, hi)
	}
	return nil
}

// watermarkMode is the router's watermark mode for WatermarkSource: lazy
// bounds reads after the fact (live.WatermarkLazy); query and all-gtids
// have the relay return the watermark after each read.
func (c *Config) watermarkMode() live.WatermarkMode {
	if c.WatermarkSource == "lazy" {
		return live.WatermarkLazy
	}
	return live.WatermarkAfterRead
}

// oneOf fills an empty *v with the first allowed value (the default) and
// rejects a value that is none of them, naming the config key.
func oneOf(key string, v *string, allowed ...string) error {
	if *v == "" {
		*v = allowed[0]
		return nil
	}
	if slices.Contains(allowed, *v) {
		return nil
	}
	return fmt.Errorf("proxy: %s %q (want %s)", key, *v, strings.Join(allowed, " or "))
}

func policyKind(name string) (router.PolicyKind, error) {
	for _, k := range router.PolicyKinds() {
		if k.String() == name {
			return k, nil
		}
	}
	return 0, fmt.Errorf("proxy: unknown policy %q (want one of %v)", name, router.PolicyKinds())
}
