package walwatch

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a watcher's Prometheus collectors (labelled by watcher and
// standby) and the same counts for Stats.
type metrics struct {
	ticks, tickErrors, timelineSwitches *prometheus.CounterVec // watcher
	reconnects                          *prometheus.CounterVec // watcher, standby
	regressions                         *prometheus.CounterVec // watcher, standby, cause
	health                              *prometheus.GaugeVec   // watcher, standby

	nTicks, nTickErrors, nTimelineSwitches, nReconnects, nRegressions, nPublishes atomic.Uint64
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "causallab", Subsystem: "walwatch", Name: name, Help: help},
			append([]string{"watcher"}, labels...))
	}
	m := &metrics{
		ticks:            c("ticks_total", "Reads of pg_stat_replication that succeeded."),
		tickErrors:       c("tick_errors_total", "Reads of pg_stat_replication that failed (dial, query or parse)."),
		timelineSwitches: c("timeline_switches_total", "Times the watched primary's timeline changed (every session dropped)."),
		reconnects:       c("reconnects_total", "New walsender sessions of a standby that had a position.", "standby"),
		regressions: c("regressions_total",
			"Replay LSNs below the published one, by cause: session (same walsender: unexpected) or reconnect (a new session starts lower).",
			"standby", "cause"),
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "causallab", Subsystem: "walwatch", Name: "health",
			Help: "Standby state: 0 unknown, 1 streaming, 2 missing, 3 no-reply, 4 stale, 5 not-streaming, 6 primary-down, 7 not-primary."},
			[]string{"watcher", "standby"}),
	}
	if reg != nil {
		// Watchers sharing a registry share the collectors (the watcher
		// label tells them apart).
		for _, c := range []**prometheus.CounterVec{&m.ticks, &m.tickErrors, &m.timelineSwitches, &m.reconnects, &m.regressions} {
			if err := register(reg, c); err != nil {
				return nil, err
			}
		}
		if err := register(reg, &m.health); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// register registers *c with reg, or replaces *c with the collector of
// the same description already registered.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}

// Stats are a watcher's counters since New.
type Stats struct {
	// Ticks and TickErrors count reads of pg_stat_replication.
	Ticks, TickErrors uint64
	// Publishes counts snapshots that changed a position or a health.
	Publishes uint64
	// Reconnects, Regressions and TimelineSwitches count the tracker's
	// events (see the package's invariants).
	Reconnects, Regressions, TimelineSwitches uint64
}
