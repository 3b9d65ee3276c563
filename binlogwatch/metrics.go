package binlogwatch

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the watchers' Prometheus collectors, labelled by replica.
// Create one with NewMetrics and share it between watchers.
type Metrics struct {
	events        *prometheus.CounterVec
	transactions  *prometheus.CounterVec
	ignored       *prometheus.CounterVec
	reconnects    *prometheus.CounterVec
	resyncs       *prometheus.CounterVec
	health        *prometheus.GaugeVec
	notifyDelay   *prometheus.HistogramVec
	lastEventUnix *prometheus.GaugeVec
	confirmWaits  *prometheus.CounterVec
	aheadHits     *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg (never the
// global registry unless the caller passes it).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "events_total",
			Help: "Binlog events applied (events inside compressed payloads included).",
		}, []string{"replica"}),
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "transactions_total",
			Help: "Transactions added to the published executed set at their commit event.",
		}, []string{"replica"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "ignored_total",
			Help: "Events that did not add a GTID, by kind: duplicate (re-streamed), anonymous, orphan (commit without GTID), abandoned (GTID without commit), invalid.",
		}, []string{"replica", "kind"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "reconnects_total",
			Help: "Stream sessions that ended in an error and were retried.",
		}, []string{"replica"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "resyncs_total",
			Help: "Times the executed set was replaced by a fresh snapshot that is not a superset of it, by reason.",
		}, []string{"replica", "reason"}),
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "health",
			Help: "Watcher state: 0 starting, 1 catching-up, 2 streaming, 3 reconnecting, 4 down.",
		}, []string{"replica"}),
		notifyDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "notification_delay_seconds",
			Help:    "From the replica's immediate commit timestamp of a transaction to its publish.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"replica"}),
		lastEventUnix: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "last_event_timestamp_seconds",
			Help: "Unix time the last binlog event or heartbeat arrived.",
		}, []string{"replica"}),
		confirmWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "confirm_timeouts_total",
			Help: "Streamed sets that were not in @@gtid_executed within ConfirmWait (kept unpublished, retried).",
		}, []string{"replica"}),
		aheadHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "binlogwatch", Name: "ahead_confirms_total",
			Help: "Transactions published by the ahead waiter (a wait parked on the predicted next GTID) rather than by a confirmation after the stream.",
		}, []string{"replica"}),
	}
	for _, c := range []prometheus.Collector{m.aheadHits, m.confirmWaits, m.events, m.transactions, m.ignored, m.reconnects, m.resyncs, m.health, m.notifyDelay, m.lastEventUnix} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("binlogwatch: metrics already registered with this registry: create one Metrics and share it")
			}
			return nil, err
		}
	}
	return m, nil
}

// replicaMetrics are the children of one replica, resolved once.
type replicaMetrics struct {
	events, transactions                             prometheus.Counter
	duplicate, anonymous, orphan, abandoned, invalid prometheus.Counter
	reconnects, confirmTimeouts, aheadHits           prometheus.Counter
	health, lastEvent                                prometheus.Gauge
	notifyDelay                                      prometheus.Observer
	resyncs                                          *prometheus.CounterVec
	name                                             string
}

func (m *Metrics) forReplica(name string) *replicaMetrics {
	if m == nil {
		return nil
	}
	return &replicaMetrics{
		name:            name,
		events:          m.events.WithLabelValues(name),
		transactions:    m.transactions.WithLabelValues(name),
		duplicate:       m.ignored.WithLabelValues(name, "duplicate"),
		anonymous:       m.ignored.WithLabelValues(name, "anonymous"),
		orphan:          m.ignored.WithLabelValues(name, "orphan"),
		abandoned:       m.ignored.WithLabelValues(name, "abandoned"),
		invalid:         m.ignored.WithLabelValues(name, "invalid"),
		reconnects:      m.reconnects.WithLabelValues(name),
		confirmTimeouts: m.confirmWaits.WithLabelValues(name),
		aheadHits:       m.aheadHits.WithLabelValues(name),
		health:          m.health.WithLabelValues(name),
		lastEvent:       m.lastEventUnix.WithLabelValues(name),
		notifyDelay:     m.notifyDelay.WithLabelValues(name),
		resyncs:         m.resyncs,
	}
}

// syncStats adds the tracker's counts since prev to the counters.
func (r *replicaMetrics) syncStats(prev *trackerStats, cur trackerStats) {
	if r == nil {
		*prev = cur
		return
	}
	add := func(c prometheus.Counter, a, b uint64) {
		if b > a {
			c.Add(float64(b - a))
		}
	}
	add(r.events, prev.events, cur.events)
	add(r.transactions, prev.commits, cur.commits)
	add(r.duplicate, prev.duplicates, cur.duplicates)
	add(r.anonymous, prev.anonymous, cur.anonymous)
	add(r.orphan, prev.orphans, cur.orphans)
	add(r.abandoned, prev.abandoned, cur.abandoned)
	add(r.invalid, prev.invalid, cur.invalid)
	*prev = cur
}
