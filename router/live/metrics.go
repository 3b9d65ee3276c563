package live

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/internal/promcache"
	"github.com/causallab/causallab/router"
)

// liveMetrics are the router's Prometheus collectors.
type liveMetrics struct {
	reads     *prometheus.CounterVec   // policy, outcome, reason
	fallbacks *prometheus.CounterVec   // reason: freshness fallbacks only
	waited    *prometheus.CounterVec   // policy: reads that waited
	waitSecs  *prometheus.HistogramVec // method
	nodeDown  *prometheus.CounterVec   // node: connection errors that marked it down
	writes    prometheus.Counter
	// decisions counts every Decide call of a read (waits included).
	decisions *prometheus.CounterVec // action, reason
	// refreshes counts re-reads of the primary's executed set before
	// refusing a read (a token from elsewhere may be newer than the view).
	refreshes prometheus.Counter
	// The shared primary pool: connections borrowed now, dials, borrows
	// that had to wait for a free connection and how long, and borrowed
	// connections kept by a session (pinned) by reason.
	poolInUse    prometheus.Gauge
	poolDials    prometheus.Counter
	poolWaits    prometheus.Counter
	poolWaitSecs prometheus.Histogram
	pins         *prometheus.CounterVec // reason
	// deferrals counts deferred reads (outcome deferred) by reason;
	// globals the PolicyGlobal targets captured, by source and result.
	deferrals *prometheus.CounterVec // reason
	globals   *prometheus.CounterVec // source, result
	// wmFallbacks counts watermarks read with a less exact query than
	// the flavor's sound one, by source.
	wmFallbacks *prometheus.CounterVec // source
	// decisionsBy and servedBy resolve the children every read counts
	// once (decision, served).
	decisionsBy, servedBy *promcache.Counters
}

// The enums' sizes for the cached children's indexes (a value past them
// is counted through the vector itself).
const (
	numActions  = int(router.ActDefer) + 1
	numReasons  = int(router.ReasonWaitFutile) + 1
	numPolicies = int(router.PolicyGlobal) + 1
)

// decision is decisions_total{action,reason}'s child.
func (m *liveMetrics) decision(a router.Action, why router.Reason) prometheus.Counter {
	if int(a) >= numActions || int(why) >= numReasons {
		return m.decisions.WithLabelValues(a.String(), why.String())
	}
	return m.decisionsBy.Get(int(a)*numReasons+int(why), a.String(), why.String())
}

// served is reads_total{policy,outcome,reason}'s child for a read served
// with the decision's reason.
func (m *liveMetrics) served(k router.PolicyKind, out router.Outcome, why router.Reason) prometheus.Counter {
	if int(k) >= numPolicies || int(out) >= router.NumOutcomes || int(why) >= numReasons {
		return m.reads.WithLabelValues(k.String(), out.String(), why.String())
	}
	return m.servedBy.Get((int(k)*router.NumOutcomes+int(out))*numReasons+int(why), k.String(), out.String(), why.String())
}

func newLiveMetrics(reg prometheus.Registerer) (*liveMetrics, error) {
	m := &liveMetrics{
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "reads_total",
			Help: "Reads by policy, typed outcome and decision reason.",
		}, []string{"policy", "outcome", "reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "freshness_fallbacks_total",
			Help: "Reads sent to the primary for freshness (limited by the cap), by reason.",
		}, []string{"reason"}),
		waited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "reads_waited_total",
			Help: "Reads that waited for a replica to catch up before being served or failing.",
		}, []string{"policy"}),
		waitSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "causallab", Subsystem: "router", Name: "wait_seconds",
			Help:    "Duration of one wait on a replica, by wait method and result (caught-up, timeout, overran: given up past its budget and killed, error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"method", "result"}),
		nodeDown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "node_errors_total",
			Help: "Connection or statement errors that marked a node down.",
		}, []string{"node"}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "writes_total",
			Help: "Writes acknowledged by the primary with a captured GTID.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "decisions_total",
			Help: "Routing decisions (every router.Decide call of a read, waits included) by action and reason.",
		}, []string{"action", "reason"}),
		refreshes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "primary_refreshes_total",
			Help: "Re-reads of the primary's gtid_executed before refusing a read as timed out or write-lost.",
		}),
		poolInUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "causallab", Subsystem: "router", Name: "primary_pool_in_use",
			Help: "Primary connections of the shared write pool borrowed now (pinned ones included).",
		}),
		poolDials: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "primary_pool_dials_total",
			Help: "Connections the shared primary pool opened.",
		}),
		poolWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "primary_pool_waits_total",
			Help: "Borrows of a primary connection that waited because the pool was exhausted.",
		}),
		poolWaitSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "causallab", Subsystem: "router", Name: "primary_pool_wait_seconds",
			Help:    "Time to borrow a primary connection from the shared pool.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
		}),
		pins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "primary_pins_total",
			Help: "Statements after which a session kept its primary connection (transaction, autocommit-off, session-state).",
		}, []string{"reason"}),
		deferrals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "deferrals_total",
			Help: "Reads deferred (answered with retry-after, the primary not used), by reason.",
		}, []string{"reason"}),
		globals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "global_targets_total",
			Help: "Read-all-writes (global) targets captured, by source (primary-query, view) and result (ok, error: the read then treats the target as unknown).",
		}, []string{"source", "result"}),
		wmFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causallab", Subsystem: "router", Name: "watermark_fallbacks_total",
			Help: "Watermarks read with another query than the sound one, by source (primary-no-log-status: a read served by the primary whose watermark was read with gtid_executed joined with the received set, which can lack a transaction the read saw, because the server does not answer performance_schema.log_status to the router's account or does not commit through its binary log).",
		}, []string{"source"}),
	}
	m.wmFallbacks.WithLabelValues("primary-no-log-status")
	m.decisionsBy = promcache.New(m.decisions, numActions*numReasons)
	m.servedBy = promcache.New(m.reads, numPolicies*router.NumOutcomes*numReasons)
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reads, m.fallbacks, m.waited, m.waitSecs, m.nodeDown, m.writes,
		m.decisions, m.refreshes, m.poolInUse, m.poolDials, m.poolWaits, m.poolWaitSecs, m.pins, m.deferrals, m.globals, m.wmFallbacks} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("router: metrics already registered (one Router per registry): %w", err)
			}
			return nil, fmt.Errorf("router: register metrics: %w", err)
		}
	}
	return m, nil
}
