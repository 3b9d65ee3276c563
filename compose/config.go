package compose

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Backend names how the servers of a topology are run.
type Backend string

const (
	// BackendLocal runs mysqld processes on this machine, chrooted into the
	// MySQL root filesystem (or a mysqld found on PATH).
	BackendLocal Backend = "local"
	// BackendDocker runs one container per server with testcontainers-go.
	BackendDocker Backend = "docker"
	// BackendExternal attaches to servers that someone else runs.
	BackendExternal Backend = "external"
)

// MaxReplicas is the largest replica count a topology may have.
const MaxReplicas = 9

// DefaultReplicas is the replica count used when Config.Replicas is 0 and
// Config.PrimaryOnly is false.
const DefaultReplicas = 3

// Default credentials of the account compose creates on every server it starts.
const (
	DefaultUser     = "causallab"
	DefaultPassword = "causallab"
)

// The least-privilege application account compose creates on every
// MySQL server besides its own (DefaultUser): what clients of `causallab
// proxy` log in as (docs/proxy-sessions.md, "Identity"). Its grants: AppPrivileges
// on every schema but mysql and sys (partial revokes, partial_revokes=ON
// in every server's my.cnf); no administrative privilege (SUPER, FILE,
// PROCESS, CONNECTION_ADMIN, CREATE USER, SHUTDOWN, RELOAD, REPLICATION
// *, SYSTEM_VARIABLES_ADMIN, ...).
const (
	AppUser       = "app"
	AppPassword   = "app"
	AppPrivileges = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, CREATE TEMPORARY TABLES, LOCK TABLES, " +
		"EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, EVENT, TRIGGER, REFERENCES"
)

// ReplicaOptions are settings of one replica.
type ReplicaOptions struct {
	// ApplyDelay is the replica's apply delay from start-up on: MySQL's
	// SOURCE_DELAY and MariaDB's MASTER_DELAY take whole seconds,
	// PostgreSQL's recovery_min_apply_delay whole milliseconds; other
	// values are rejected.
	ApplyDelay time.Duration
}

// ExternalConfig names servers that the external backend attaches to.
type ExternalConfig struct {
	// PrimaryDSN is the go-sql-driver DSN of the primary
	// (user:password@tcp(host:port)/). Required for the external backend.
	PrimaryDSN string
	// ReplicaDSNs are the DSNs of the replicas, in order replica1, replica2...
	ReplicaDSNs []string
}

// Config describes a topology to start. The zero value plus validate() is a
// local topology of one primary and DefaultReplicas replicas.
type Config struct {
	// Engine is the database engine: EngineMySQL (the default),
	// EngineMariaDB or EnginePostgres. The external backend is MySQL only.
	Engine Engine
	// Replicas is the number of replicas, 0..MaxReplicas. Zero means
	// DefaultReplicas unless PrimaryOnly is set.
	Replicas int
	// PrimaryOnly starts a lone primary (Replicas must then be 0).
	PrimaryOnly bool
	// Backend selects how servers run. Default: BackendLocal.
	Backend Backend
	// RootFS is the root filesystem holding the engine's server for the
	// local backend. Default: DefaultEngineRootFS(Engine): for MySQL
	// $CAUSALLAB_ROOTFS, else ~/.cache/causallab/mysql-rootfs (built by
	// `causallab image`); mariadb-rootfs and postgres-rootfs beside it.
	RootFS string
	// HostMysqld makes the local backend run the mysqld found on PATH instead
	// of chrooting into RootFS.
	HostMysqld bool
	// Image is the Docker image for the docker backend. Any image holding
	// mysqld works (the command is explicit, no entrypoint is used).
	// Default: causallab/<engine>:<version recorded in RootFS>, else
	// causallab/mysql:9.7.4, causallab/mariadb:11.8.9,
	// causallab/postgres:18.6.
	Image string
	// MyCnf holds extra server settings (name -> value) applied to every
	// server; they override compose's defaults of the same name: [mysqld]
	// lines for MySQL and MariaDB, postgresql.conf lines for PostgreSQL
	// (values written as given: quote strings yourself).
	MyCnf map[string]string
	// ReplicaOptions holds per-replica settings: ReplicaOptions[i] is for
	// replica i+1. It may be shorter than Replicas.
	ReplicaOptions []ReplicaOptions
	// External names the servers to attach to (external backend only).
	External ExternalConfig
	// User and Password are the account compose creates (local, docker) and
	// that DSNs carry. Defaults: DefaultUser, DefaultPassword. For the
	// external backend they are taken from the DSNs.
	User, Password string
	// StartTimeout bounds how long one server may take to answer SQL after
	// its process starts (and a replica to connect to its source).
	// Default: 60s.
	StartTimeout time.Duration
	// Detach keeps local servers running after this process exits (the CLI's
	// `up`). When false they are killed if this process dies.
	Detach bool
	// Logger receives progress at debug level. Default: slog.Default().
	Logger *slog.Logger
}

var cnfName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]*$`)

// DefaultCacheDir is where `causallab image` keeps the root filesystem:
// $CAUSALLAB_CACHE, else ~/.cache/causallab.
func DefaultCacheDir() string {
	if d := os.Getenv("CAUSALLAB_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "causallab-cache")
	}
	return filepath.Join(home, ".cache", "causallab")
}

// DefaultRootFS is the root filesystem path the local backend uses when
// Config.RootFS is empty.
func DefaultRootFS() string {
	if d := os.Getenv("CAUSALLAB_ROOTFS"); d != "" {
		return d
	}
	return filepath.Join(DefaultCacheDir(), "mysql-rootfs")
}

// DefaultImage is the image the docker backend uses when Config.Image is
// empty: causallab/mysql tagged with the version recorded in rootfs.
func DefaultImage(rootfs string) string {
	v := "9.7.4"
	if b, err := os.ReadFile(filepath.Join(rootfs, ".causallab-mysql-version")); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			v = s
		}
	}
	return "causallab/mysql:" + v
}

// validate fills defaults and rejects nonsense.
func (c *Config) validate() error {
	if c.Engine == "" {
		c.Engine = EngineMySQL
	}
	eng, err := engineFor(c.Engine)
	if err != nil {
		return err
	}
	if c.Engine != EngineMySQL && c.Backend == BackendExternal {
		return fmt.Errorf("compose: the external backend attaches to MySQL only, not %s", c.Engine)
	}
	if c.Engine != EngineMySQL && c.HostMysqld {
		return fmt.Errorf("compose: HostMysqld runs MySQL, not %s", c.Engine)
	}
	switch c.Backend {
	case "":
		c.Backend = BackendLocal
	case BackendLocal, BackendDocker, BackendExternal:
	default:
		return fmt.Errorf("compose: unknown backend %q (want local, docker or external)", c.Backend)
	}
	if c.Backend == BackendExternal {
		if c.External.PrimaryDSN == "" {
			return errors.New("compose: external backend needs External.PrimaryDSN")
		}
		if c.Replicas != 0 && c.Replicas != len(c.External.ReplicaDSNs) {
			return fmt.Errorf("compose: Replicas=%d but %d replica DSNs given", c.Replicas, len(c.External.ReplicaDSNs))
		}
		c.Replicas = len(c.External.ReplicaDSNs)
		c.PrimaryOnly = c.Replicas == 0
	} else if len(c.External.ReplicaDSNs) > 0 || c.External.PrimaryDSN != "" {
		return fmt.Errorf("compose: External DSNs given but backend is %s", c.Backend)
	}
	if c.Replicas < 0 || c.Replicas > MaxReplicas {
		return fmt.Errorf("compose: impossible replica count %d (want 0..%d)", c.Replicas, MaxReplicas)
	}
	if c.PrimaryOnly && c.Replicas != 0 {
		return fmt.Errorf("compose: PrimaryOnly with Replicas=%d", c.Replicas)
	}
	if c.Replicas == 0 && !c.PrimaryOnly {
		c.Replicas = DefaultReplicas
	}
	if len(c.ReplicaOptions) > c.Replicas {
		return fmt.Errorf("compose: %d ReplicaOptions for %d replicas", len(c.ReplicaOptions), c.Replicas)
	}
	for i, o := range c.ReplicaOptions {
		if err := eng.checkApplyDelay(o.ApplyDelay); err != nil {
			return fmt.Errorf("compose: replica%d %w", i+1, err)
		}
	}
	for k, v := range c.MyCnf {
		if !cnfName.MatchString(k) {
			return fmt.Errorf("compose: bad my.cnf setting name %q", k)
		}
		if strings.ContainsAny(v, "\n\r") {
			return fmt.Errorf("compose: my.cnf setting %s has a line break in its value", k)
		}
	}
	if c.User == "" {
		c.User = DefaultUser
	}
	if c.Password == "" {
		c.Password = DefaultPassword
	}
	if strings.ContainsAny(c.User+c.Password, "'\\@:/") {
		return errors.New("compose: user and password must not contain quotes, backslashes, '@', ':' or '/'")
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.StartTimeout < 0 {
		return fmt.Errorf("compose: negative StartTimeout %v", c.StartTimeout)
	}
	if c.RootFS == "" {
		c.RootFS = DefaultEngineRootFS(c.Engine)
	}
	if c.Image == "" {
		c.Image = DefaultEngineImage(c.Engine, c.RootFS)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// applyDelay returns the start-up apply delay of replica i (1-based).
func (c *Config) applyDelay(i int) time.Duration {
	if i-1 < len(c.ReplicaOptions) {
		return c.ReplicaOptions[i-1].ApplyDelay
	}
	return 0
}

// myCnf renders the [mysqld] section of server serverID. dir is the
// server's directory as mysqld sees it ("" for docker: default paths).
func (c *Config) myCnf(serverID, port int, dir string, bind string) string {
	set := mysqlFamilyCnf(serverID, port, dir, bind)
	for k, v := range map[string]string{
		"gtid-mode":                "ON",
		"enforce-gtid-consistency": "ON",
		"secure-file-priv":         `""`,
		"mysqlx":                   "OFF",
		"innodb_redo_log_capacity": "32M",
		"innodb_flush_method":      "nosync",
		"log_error_verbosity":      "2",
		// The app account's grants revoke on mysql and sys (initSQL).
		"partial_revokes": "ON",
	} {
		set[k] = v
	}
	return renderSettings("[mysqld]\n", "=", set, c.MyCnf)
}

// Validate reports what Start would refuse in c (a command line is checked
// with it before anything starts). c is not changed: defaults are filled
// into a copy.
func (c Config) Validate() error { return c.validate() }
