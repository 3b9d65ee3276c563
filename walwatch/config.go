package walwatch

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Standby is one watched standby.
type Standby struct {
	// Name is the standby's name for readers (the router's node name) and
	// in metrics and logs. Required, unique.
	Name string
	// ApplicationName is how the standby's WAL receiver names itself to
	// the primary (application_name in its primary_conninfo), which is the
	// row of pg_stat_replication that describes it. Default Name (compose
	// gives a standby cloned by pg_basebackup -R the default
	// "walreceiver", so compose's standbys are told apart by Slot). Unique.
	// Ignored when Slot is set.
	ApplicationName string
	// Slot is the physical replication slot the standby streams for
	// (primary_slot_name): when set, the row of pg_stat_replication whose
	// walsender holds this slot describes the standby. compose gives each
	// standby a slot named after the node. Unique.
	Slot string
}

// Config configures a Watcher.
type Config struct {
	// Name names the watcher in logs. Default "walwatch".
	Name string
	// Primary is the address (host:port) of the primary whose
	// pg_stat_replication is read. Required; Retarget changes it.
	Primary string
	// User and Password authenticate the one connection to the primary
	// (a role that may read pg_stat_replication's LSN columns: a superuser
	// or a member of pg_read_all_stats; others see NULLs, which read as
	// "no reply yet"). User is required.
	User, Password string
	// Database is the database connected to. Default "postgres".
	Database string
	// Standbys are the standbys to report on. At least one.
	Standbys []Standby
	// Interval is the time between two reads of pg_stat_replication.
	// Default 10ms; within [1ms, 1m].
	Interval time.Duration
	// RetryInterval is the time between attempts while the primary does not
	// answer (dial or query failed). Default max(Interval, 100ms).
	RetryInterval time.Duration
	// QueryTimeout is the deadline of each query (its network write and
	// read). Default 2s.
	QueryTimeout time.Duration
	// DialTimeout bounds one connection attempt. Default 2s.
	DialTimeout time.Duration
	// StaleAfter marks a standby unhealthy (HealthStale) when its last
	// status reply, by the primary's clock (now() - reply_time, which is
	// the standby's clock: skew counts), is older than this. It must
	// exceed the standbys' wal_receiver_status_interval (an idle standby
	// replies that often; PostgreSQL's default is 10s, compose's 1s).
	// Default 15s; negative disables.
	StaleAfter time.Duration
	// DownAfter marks every standby unhealthy (HealthPrimaryDown) in
	// Position when no read of pg_stat_replication succeeded for this long
	// (the primary hangs, or Run is not running). Default max(5 ×
	// Interval, 500ms): a loaded machine delays ticks.
	DownAfter time.Duration
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Logger receives state changes. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

func (c *Config) validate() error {
	if c.Name == "" {
		c.Name = "walwatch"
	}
	if c.Primary == "" {
		return errors.New("walwatch: config: no Primary address")
	}
	if c.User == "" {
		return errors.New("walwatch: config: no User")
	}
	if c.Database == "" {
		c.Database = "postgres"
	}
	if len(c.Standbys) == 0 {
		return errors.New("walwatch: config: no Standbys")
	}
	names, apps := map[string]bool{}, map[string]bool{}
	for i := range c.Standbys {
		s := &c.Standbys[i]
		if s.Name == "" {
			return fmt.Errorf("walwatch: config: standby %d has no Name", i)
		}
		if s.ApplicationName == "" {
			s.ApplicationName = s.Name
		}
		if names[s.Name] {
			return fmt.Errorf("walwatch: config: standby name %q listed twice", s.Name)
		}
		key := "app:" + s.ApplicationName
		if s.Slot != "" {
			key = "slot:" + s.Slot
		}
		if apps[key] {
			return fmt.Errorf("walwatch: config: standby %q: %s listed twice", s.Name, key)
		}
		names[s.Name], apps[key] = true, true
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Millisecond
	}
	if c.Interval < time.Millisecond || c.Interval > time.Minute {
		return fmt.Errorf("walwatch: config: Interval %v out of range [1ms, 1m]", c.Interval)
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = max(c.Interval, 100*time.Millisecond)
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 2 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.RetryInterval < 0 || c.QueryTimeout < 0 || c.DialTimeout < 0 {
		return errors.New("walwatch: config: negative RetryInterval, QueryTimeout or DialTimeout")
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 15 * time.Second
	}
	if c.DownAfter == 0 {
		c.DownAfter = max(5*c.Interval, 500*time.Millisecond)
	}
	if c.DownAfter < c.Interval {
		return fmt.Errorf("walwatch: config: DownAfter %v shorter than Interval %v", c.DownAfter, c.Interval)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}
