package compose

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Engine names the database engine a topology runs.
type Engine string

const (
	// EngineMySQL is MySQL 9.7: GTID sets, SOURCE_AUTO_POSITION replicas.
	EngineMySQL Engine = "mysql"
	// EngineMariaDB is MariaDB 11.8: domain-server-seq GTIDs, replicas
	// with MASTER_USE_GTID=slave_pos.
	EngineMariaDB Engine = "mariadb"
	// EnginePostgres is PostgreSQL 18: a primary and streaming standbys
	// (pg_basebackup, physical replication slots), positions are LSNs.
	EnginePostgres Engine = "postgres"
)

// Engines lists every engine compose runs, MySQL first.
func Engines() []Engine { return []Engine{EngineMySQL, EngineMariaDB, EnginePostgres} }

// engine is everything that differs between MySQL, MariaDB and
// PostgreSQL, behind one interface so that Topology, faults and status stay
// engine-neutral orchestration (locks, roles, backends, bookkeeping) and
// each engine's SQL lives in its own file (engine_mysql.go,
// engine_mariadb.go, engine_postgres.go). Its first half is what the
// local and docker backends run (server()); the rest is the SQL that
// Topology sends. One value per topology; implementations hold no state
// (everything lives on the servers or in Topology).
type engine interface {
	// kind names the engine.
	kind() Engine
	// server describes the server processes for the backends.
	server() *serverSpec
	// openDB returns a pool to n with the given account.
	openDB(n Node, user, password string, log *slog.Logger) (*sql.DB, error)
	// adminUser is the account compose's own connections use ("" means the
	// user's account: Config.User).
	adminUser(cfg *Config) string

	// wire makes every replica replicate from the primary after start.
	wire(ctx context.Context, t *Topology) error
	// source says where replica n replicates from.
	source(ctx context.Context, t *Topology, n Node) (replSource, error)
	// repoint makes replica r replicate from primary p, keeping its apply
	// delay, and returns what r has that p lacks (part of a failover's
	// loss; "" when nothing).
	repoint(ctx context.Context, t *Topology, r, p Node) (string, error)
	// fence makes a retired former primary read-only again.
	fence(ctx context.Context, t *Topology, n Node) error
	// restarted restores what a restart of n loses (MariaDB's read_only,
	// which it cannot persist).
	restarted(ctx context.Context, t *Topology, n Node) error
	// setApplier stops or starts replica n's applier.
	setApplier(ctx context.Context, t *Topology, n Node, run bool) error
	// checkApplyDelay rejects a delay the engine cannot express.
	checkApplyDelay(d time.Duration) error
	// setApplyDelay sets replica n's apply delay, keeping its applier's
	// running state.
	setApplyDelay(ctx context.Context, t *Topology, n Node, d time.Duration) error
	// setReceiver stops or starts replica n's receiving of changes (the
	// local backend's stand-in for a partition).
	setReceiver(ctx context.Context, t *Topology, n Node, run bool) error
	// heavy runs one large transaction of rows rows on primary p.
	heavy(ctx context.Context, t *Topology, p Node, rows int) (HeavyResult, error)
	// failover promotes cand: see failoverPlan.
	promote(ctx context.Context, t *Topology, f *failoverPlan) error
	// waitReplicated waits until every replica has what the primary has.
	waitReplicated(ctx context.Context, t *Topology, timeout time.Duration) error
	// status fills ns (Node and PendingRepoint already set).
	status(ctx context.Context, t *Topology, ns *NodeStatus)
}

// replSource is where a replica replicates from.
type replSource struct {
	configured bool // false: not a replica (a primary, or never wired)
	host       string
	port       int
}

// failoverPlan is what Topology's Failover hands the engine: the old
// primary, the candidate, the other running replicas, and the result to
// fill (OldPrimaryReachable, LostGTIDs or LostWAL, NewTimeline).
type failoverPlan struct {
	old, cand Node
	others    []Node // running replicas other than cand (repointed later by Topology)
	res       *FailoverResult
	// unreachable is called when the old primary does not answer (it
	// counts Stats.FailoverUnreachableOldPrimary).
	unreachable func(err error)
}

// serverSpec is the process half of an engine: what the local and docker
// backends run and how they know it is up.
type serverSpec struct {
	// program is the server binary inside the root filesystem (and image).
	program string
	// versionFile names the file in the root filesystem holding the
	// version ensure-engine.sh found (".causallab-mysql-version").
	versionFile string
	// imageRepo is the Docker repository of the image ensure-engine.sh
	// imports, defaultVersion the tag used when no version is recorded.
	imageRepo, defaultVersion string
	// rootfsDir is the root filesystem's directory name under the cache.
	rootfsDir string
	// user is the account (in the root filesystem's /etc/passwd) the
	// server runs as; "" means root.
	user string
	// peerPort is the port servers listen on inside containers.
	peerPort int
	// configName is the server's configuration file in its directory.
	configName string
	// config renders the configuration of server serverID (replica index
	// i, 0 for the primary) listening on port, whose directory (as the
	// server sees it) is dir ("" never happens: docker passes its own);
	// bind is the listen address.
	config func(cfg *Config, serverID, i, port int, dir, bind string) string
	// args is the server's command line (args[0] the program) for the
	// server directory dir.
	args func(dir string) []string
	// marker is the part of the server's command line that proves the
	// process is the one of directory dir (guards pids against reuse).
	marker func(dir string) string
	// stopSignal shuts the server down cleanly (SIGTERM; PostgreSQL's
	// smart shutdown would wait for compose's pooled connections, so it
	// gets SIGINT, the fast shutdown).
	stopSignal syscall.Signal
	// group: the server is a process group (PostgreSQL's postmaster and
	// its children): signals go to the whole group.
	group bool
	// logToStderr: the server logs to stderr, which the local backend
	// writes to error.log in its directory.
	logToStderr bool
	// errorLine picks the error lines of a server log.
	errorLine func(line string) bool
	// initialize returns the commands that make the template data
	// directory of the first server (dir) in topology directory topoDir,
	// with the account; files are written first (path relative to dir's
	// topology directory -> contents).
	initialize func(cfg *Config, topoDir, dir string) (files map[string]string, cmds [][]string)
	// skip names files of the template data directory the other servers
	// must not get (MySQL's auto.cnf: each server makes its own uuid).
	skip []string
	// cloned: replicas are not copies of the template but cloned from the
	// running primary (pg_basebackup), by clone.
	cloned bool
	// clone returns the command that makes replica i's data directory in
	// dir from primary (reached at host:port).
	clone func(cfg *Config, i int, dir, host string, port int) []string
	// env is the environment of initialize, clone and offline commands.
	env func(cfg *Config) []string
	// ready reports whether the server at addr answers SQL, and its data
	// directory (to prove it is ours).
	ready func(ctx context.Context, cfg *Config, addr string) (datadir string, err error)
	// dockerDir is the server's directory inside its container.
	dockerDir string
	// dockerInit is the shell command that initializes a container's data
	// directory when no template was copied in (primary, or every server
	// for engines without cloning); dockerClone the one a cloned replica
	// runs (with PRIMARY_HOST, PRIMARY_PORT set).
	dockerInit  func(cfg *Config) string
	dockerClone func(cfg *Config, i int) string
}

// engineFor returns the engine named e.
func engineFor(e Engine) (engine, error) {
	switch e {
	case EngineMySQL, "":
		return mysqlEngine{mysqlFamily{flavorMySQL}}, nil
	case EngineMariaDB:
		return mariadbEngine{mysqlFamily{flavorMariaDB}}, nil
	case EnginePostgres:
		return postgresEngine{}, nil
	}
	return nil, fmt.Errorf("compose: unknown engine %q (want mysql, mariadb or postgres)", e)
}

// DefaultEngineRootFS is the root filesystem the local backend uses for
// engine e when Config.RootFS is empty: DefaultRootFS() for MySQL,
// <cache>/mariadb-rootfs and <cache>/postgres-rootfs for the others.
func DefaultEngineRootFS(e Engine) string {
	eng, err := engineFor(e)
	if err != nil || eng.kind() == EngineMySQL {
		return DefaultRootFS()
	}
	return filepath.Join(DefaultCacheDir(), eng.server().rootfsDir)
}

// DefaultEngineImage is the image the docker backend uses for engine e
// when Config.Image is empty: causallab/<engine>:<version recorded in
// rootfs>.
func DefaultEngineImage(e Engine, rootfs string) string {
	eng, err := engineFor(e)
	if err != nil || eng.kind() == EngineMySQL {
		return DefaultImage(rootfs)
	}
	sp := eng.server()
	v := sp.defaultVersion
	if b, err := os.ReadFile(filepath.Join(rootfs, sp.versionFile)); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			v = s
		}
	}
	return sp.imageRepo + ":" + v
}

// errorLines returns the last n error lines of a server log's text.
func (sp *serverSpec) errorLines(text string, n int) []string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if sp.errorLine(l) {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return keep
}

// bracketError is MySQL's and MariaDB's error-log test.
func bracketError(l string) bool { return strings.Contains(l, "[ERROR]") }
