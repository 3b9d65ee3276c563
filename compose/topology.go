package compose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Role is what a node does in the topology.
type Role string

const (
	// RolePrimary is the writable source of the topology.
	RolePrimary Role = "primary"
	// RoleReplica replicates from the primary.
	RoleReplica Role = "replica"
	// RoleRetired is a former primary after Failover: fenced with
	// super_read_only and detached from the topology.
	RoleRetired Role = "retired"
)

// Node is one MySQL server of a topology. Node names are stable identities
// ("primary", "replica1", ...): after Failover the node named "replica2" may
// have RolePrimary.
type Node struct {
	// Name is the node's stable name: "primary", "replica1".."replica9".
	Name string `json:"name"`
	// Role is the node's role at the time the Node value was taken.
	Role Role `json:"role"`
	// Host and Port are where clients on this machine reach the server.
	Host string `json:"host"`
	Port int    `json:"port"`
	// User and Password are the account DSNs carry (all privileges,
	// replication included).
	User     string `json:"user"`
	Password string `json:"password"`
	// PeerHost and PeerPort are where the other servers of the topology reach
	// this one (a network alias and 3306 under docker; Host:Port otherwise).
	PeerHost string `json:"peer_host"`
	PeerPort int    `json:"peer_port"`
	// Engine is the node's database engine ("" is MySQL, as in state files
	// written before engines existed).
	Engine Engine `json:"engine,omitempty"`
}

// DSN returns the node's DSN for its engine's usual Go driver: for MySQL
// and MariaDB the go-sql-driver form user:password@tcp(host:port)/, for
// PostgreSQL a URL for pgx (postgres://user:password@host:port/postgres?sslmode=disable).
func (n Node) DSN() string {
	if n.Engine == EnginePostgres {
		return fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable", n.User, n.Password, n.Addr())
	}
	return fmt.Sprintf("%s:%s@tcp(%s)/", n.User, n.Password, n.Addr())
}

// Addr returns host:port as clients on this machine reach the node.
func (n Node) Addr() string { return net.JoinHostPort(n.Host, strconv.Itoa(n.Port)) }

// ErrUnknownNode is returned (wrapped) for a node name the topology lacks.
var ErrUnknownNode = errors.New("unknown node")

// ErrNotSupported is returned (wrapped) by faults a backend cannot inject,
// e.g. Kill on the external backend.
var ErrNotSupported = errors.New("not supported by this backend")

// backend is what differs between local, docker and external topologies:
// the process- and network-level life of servers. SQL-level work (wiring
// replication, status, SQL faults) is common and lives in Topology.
type backend interface {
	// start brings every server up, reachable over SQL with the configured
	// account, and returns the nodes (primary first). It cleans up after
	// itself when it fails.
	start(ctx context.Context) ([]Node, error)
	// kill stops a server without a clean shutdown; killing a dead server is
	// a no-op.
	kill(ctx context.Context, name string) error
	// restart starts a server again with its data (stopping it cleanly first
	// if it runs) and waits until it answers SQL.
	restart(ctx context.Context, name string) error
	// pause and resume freeze and thaw a server's process.
	pause(ctx context.Context, name string) error
	resume(ctx context.Context, name string) error
	// partition and heal cut a server off its peers' network and reconnect
	// it; ErrNotSupported means Topology falls back to IO-thread control.
	partition(ctx context.Context, name string) error
	heal(ctx context.Context, name string) error
	// down removes every server and everything start created.
	down(ctx context.Context) error
	// state returns what another process needs to find the servers again.
	state() backendState
	// condition says whether a server's process runs, is frozen or is
	// gone, without talking SQL to it (a paused server would not answer).
	condition(ctx context.Context, name string) (condition, error)
	// offline stops a server cleanly, runs a shell script in its
	// environment (its root filesystem, as its account) while it is
	// down, and starts it again (PostgreSQL's pg_rewind).
	offline(ctx context.Context, name, script string) error
}

// serverNames are the node names of a topology with replicas replicas:
// primary, replica1, replica2...
func serverNames(replicas int) []string {
	names := []string{"primary"}
	for i := 1; i <= replicas; i++ {
		names = append(names, fmt.Sprintf("replica%d", i))
	}
	return names
}

// startServers starts a backend's servers (primary first): all at once,
// or, when the replicas are cloned from the running primary, the primary
// before the others.
func startServers[S any](servers []S, cloned bool, start func(S) error) error {
	if cloned {
		if err := start(servers[0]); err != nil {
			return err
		}
		servers = servers[1:]
	}
	return parallel(servers, start)
}

// startedNode is the node of the server a backend started as its i-th
// (0: the primary), reached by this process at 127.0.0.1:port and by its
// peers at peerHost:peerPort, with the configured account.
func (c *Config) startedNode(i int, name string, port int, peerHost string, peerPort int) Node {
	role := RoleReplica
	if i == 0 {
		role = RolePrimary
	}
	return Node{Name: name, Role: role, Host: "127.0.0.1", Port: port, User: c.User, Password: c.Password, PeerHost: peerHost, PeerPort: peerPort}
}

// serverNamed is the backend server of node name.
func serverNamed[S interface{ nodeName() string }](servers []S, name string) (S, error) {
	for _, s := range servers {
		if s.nodeName() == name {
			return s, nil
		}
	}
	var none S
	return none, fmt.Errorf("compose: %w %q", ErrUnknownNode, name)
}

// condition is a server's process state as its backend sees it.
type condition string

const (
	condRunning condition = "running"
	condPaused  condition = "paused"
	condDown    condition = "down"
)

// Topology is a running primary with its replicas. Its methods are safe for
// concurrent use; faults on one topology are serialized.
type Topology struct {
	cfg Config
	be  backend
	eng engine
	log *slog.Logger

	mu    sync.Mutex // guards nodes, epoch, dbs, stats, pending, injected, said
	nodes []Node     // primary first at start; names are stable
	epoch uint64
	dbs   map[string]*sql.DB // compose's own pools by node name; users' pools under name+"/user" when the accounts differ
	stats Stats
	// pending maps replicas that a failover could not repoint (paused,
	// down, unreachable) to why; Resume, Restart and Heal repoint them.
	pending map[string]string
	// injected maps nodes taken out on purpose (Kill, Pause, a network
	// Partition) to that fault, for FaultLogger; faultSeq numbers them.
	injected map[string]injectedFault
	faultSeq uint64
	said     map[faultSaid]bool

	faultMu sync.Mutex // serializes faults and Down
	closed  bool
}

// Stats counts the explicit fallbacks a topology took.
type Stats struct {
	// WeakPartitions counts Partition calls that stopped replication IO
	// threads instead of cutting the network (local backend).
	WeakPartitions int64 `json:"weak_partitions"`
	// FailoverUnreachableOldPrimary counts failovers whose old primary did
	// not answer: lost GTIDs were then computed against what the surviving
	// replicas had received instead of the old primary's gtid_executed.
	FailoverUnreachableOldPrimary int64 `json:"failover_unreachable_old_primary"`
	// ErrantOnRepoint counts replicas that, repointed after a failover
	// (at the failover, or later by Resume, Restart or Heal), had executed
	// transactions the new primary lacks: they diverge from it by those
	// GTIDs, which are part of the failover's loss.
	ErrantOnRepoint int64 `json:"errant_on_repoint,omitempty"`
	// RewindOnRepoint counts PostgreSQL standbys that, repointed after a
	// failover, held WAL past the new timeline's switch point and were
	// rewound with pg_rewind (that WAL is part of the failover's loss).
	RewindOnRepoint int64 `json:"rewind_on_repoint,omitempty"`
}

// Start starts (or, for the external backend, attaches to) a topology and
// wires replication: every replica replicates from the primary with GTID
// auto-position. On error nothing is left running.
func Start(ctx context.Context, cfg Config) (*Topology, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	eng, err := engineFor(cfg.Engine)
	if err != nil {
		return nil, err
	}
	var be backend
	switch cfg.Backend {
	case BackendLocal:
		be = newLocalBackend(&cfg)
	case BackendDocker:
		be = newDockerBackend(&cfg)
	case BackendExternal:
		be = newExternalBackend(&cfg)
	}
	t := &Topology{cfg: cfg, be: be, eng: eng, log: cfg.Logger, dbs: map[string]*sql.DB{}, pending: map[string]string{}, epoch: FirstEpoch}
	began := time.Now()
	nodes, err := be.start(ctx)
	if err != nil {
		return nil, err
	}
	for i := range nodes {
		if eng.kind() != EngineMySQL {
			nodes[i].Engine = eng.kind()
		}
	}
	t.nodes = nodes
	if cfg.Backend != BackendExternal {
		if err := eng.wire(ctx, t); err != nil {
			derr := t.Down(context.WithoutCancel(ctx))
			return nil, errors.Join(fmt.Errorf("compose: wiring replication: %w", err), derr)
		}
	}
	t.log.Debug("compose: topology up", "engine", eng.kind(), "backend", cfg.Backend, "replicas", cfg.Replicas, "elapsed", time.Since(began))
	return t, nil
}

// Backend returns the backend the topology runs on.
func (t *Topology) Backend() Backend { return t.cfg.Backend }

// Engine returns the topology's database engine.
func (t *Topology) Engine() Engine { return t.eng.kind() }

// Primary returns the current primary.
func (t *Topology) Primary() Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.nodes {
		if n.Role == RolePrimary {
			return n
		}
	}
	return Node{}
}

// Replicas returns the current replicas in name order.
func (t *Topology) Replicas() []Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Node
	for _, n := range t.nodes {
		if n.Role == RoleReplica {
			out = append(out, n)
		}
	}
	return out
}

// Nodes returns every node (retired ones included), primary-at-start first.
func (t *Topology) Nodes() []Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Node(nil), t.nodes...)
}

// Node returns the node with the given name.
func (t *Topology) Node(name string) (Node, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	names := make([]string, len(t.nodes))
	for i, n := range t.nodes {
		names[i] = n.Name
	}
	return Node{}, fmt.Errorf("compose: %w %q (have %v)", ErrUnknownNode, name, names)
}

// FirstEpoch is a topology's epoch when it starts; every failover adds
// one. It is the proxy's and the router's first epoch too (a token of
// epoch 0 is the empty token, gtid.Token.IsZero), so the epoch `causallab
// status` prints is the one tokens carry.
const FirstEpoch = 1

// Epoch returns the topology epoch: FirstEpoch at start, +1 at every
// failover.
func (t *Topology) Epoch() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch
}

// Stats returns the counts of explicit fallbacks taken so far.
func (t *Topology) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// DB returns a pooled connection to the named node with the node's
// account (owned by the topology, closed by Down; do not Close it). For
// PostgreSQL it is a pgx (database/sql) pool.
func (t *Topology) DB(name string) (*sql.DB, error) {
	n, err := t.Node(name)
	if err != nil {
		return nil, err
	}
	if admin := t.eng.adminUser(&t.cfg); admin != "" {
		return t.pool(n, n.Name+"/user", n.User)
	}
	return t.db(n)
}

// db returns compose's own pool to n (the admin account where the engine
// has one).
func (t *Topology) db(n Node) (*sql.DB, error) {
	user := t.eng.adminUser(&t.cfg)
	if user == "" {
		user = n.User
	}
	return t.pool(n, n.Name, user)
}

func (t *Topology) pool(n Node, key, user string) (*sql.DB, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if db, ok := t.dbs[key]; ok {
		return db, nil
	}
	db, err := t.eng.openDB(n, user, n.Password, t.log)
	if err != nil {
		return nil, fmt.Errorf("compose: connector for %s: %w", n.Name, err)
	}
	db.SetMaxIdleConns(2)
	db.SetConnMaxIdleTime(30 * time.Second)
	t.dbs[key] = db
	return db, nil
}

// closeDBs closes every pooled connection (servers may be gone).
func (t *Topology) closeDBs() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, db := range t.dbs {
		_ = db.Close()
		delete(t.dbs, k)
	}
}

// Down removes the topology: servers, containers, networks, directories.
// For the external backend it only closes connections. Down twice is a
// no-op.
func (t *Topology) Down(ctx context.Context) error {
	t.faultMu.Lock()
	defer t.faultMu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	t.closeDBs()
	return t.be.down(ctx)
}

// exec runs statements on a node, in order, on one connection.
func (t *Topology) exec(ctx context.Context, n Node, stmts ...string) error {
	db, err := t.db(n)
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("compose: connect to %s: %w", n.Name, err)
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("compose: %s on %s: %w", s, n.Name, err)
		}
	}
	return nil
}

// queryRow runs a one-row query on a node and scans it into dest.
func (t *Topology) queryRow(ctx context.Context, n Node, q string, dest ...any) error {
	db, err := t.db(n)
	if err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, q).Scan(dest...); err != nil {
		return fmt.Errorf("compose: %s on %s: %w", firstLine(q), n.Name, err)
	}
	return nil
}

// firstLine is q up to its first line break.
func firstLine(q string) string {
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		return q[:i] + " ..."
	}
	return q
}

// queryString runs a one-value query on a node.
func (t *Topology) queryString(ctx context.Context, n Node, q string, args ...any) (string, error) {
	db, err := t.db(n)
	if err != nil {
		return "", err
	}
	var s sql.NullString
	if err := db.QueryRowContext(ctx, q, args...).Scan(&s); err != nil {
		return "", fmt.Errorf("compose: %s on %s: %w", q, n.Name, err)
	}
	return s.String, nil
}

// driverLogger routes go-sql-driver's own log lines (bad idle connections,
// EOFs while a server starts) to slog at debug level.
type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) { l.log.Debug("compose: mysql driver: " + fmt.Sprint(v...)) }
