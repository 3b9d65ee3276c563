package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/binlogwatch"
	"github.com/causallab/causallab/router/live"

	"github.com/causallab/causallab/gtid"
)

// pollers is the proxy's default live.PositionSource[gtid.Set]: one live.Poller[gtid.Set]
// per backend (each backend may have its own credentials, a Poller has
// one). The binlogwatch-backed source replaces it through
// Config.Positions.
type pollers struct {
	byName map[string]*live.Poller[gtid.Set]
	all    []*live.Poller[gtid.Set]
	// mu guards stops and retired: each running poller's cancel by node
	// name (Run), and the nodes retired before Run stopped them (Retire).
	mu      sync.Mutex
	stops   map[string]context.CancelFunc
	retired map[string]bool
	// replicas names the replicas (their pollers read bounds when lazy).
	replicas map[string]bool
}

var (
	_ live.PositionSource[gtid.Set] = (*pollers)(nil)
	_ live.SeenBounder[gtid.Set]    = (*pollers)(nil)
	_ live.Demander[gtid.Set]       = (*pollers)(nil)
)

// DefaultPollIdleInterval is poll_idle_interval's default.
const DefaultPollIdleInterval = 100 * time.Millisecond

// With watermark_source lazy the replicas' pollers read bounds
// (live.PollerConfig.Bounds: performance_schema.log_status where the
// account may read it), the primary's does not: the router bounds a
// pending seen only on a replica (a read the primary serves reads its
// watermark pipelined on its own connection, live.Target.Watermark),
// and the proxy has no failover that could make a replica's pending seen
// one of the primary's. The primary's poll is the plain executed query
// (SELECT @@GLOBAL.gtid_executed): its position (a lower bound of what
// the primary committed, which raises the router's view of the primary
// and its commit log) and its health are all the router reads of it.
// log_status would cost the primary's mysqld about twice the CPU per poll
// (BenchmarkPollerCPU) and briefly hold its commits.
//
// Polling is demand-driven (poll_idle_interval, live.PollerConfig.
// IdleInterval): each backend is polled every poll_idle_interval unless
// a client needs a fresher view of it, then every poll_interval (the
// router tells a replica's poller what its clients need: live.Demander,
// pollers.Want). The primary's poller idles too, except with
// global_source view, where its view is a global read's target: polled
// less often it would miss more of other clients' newest writes, so it
// is polled every poll_interval as before. Elsewhere an older view of
// the primary is sound (a lower bound; the proxy's own writes raise the
// router's bound of it at their acknowledgement, and a token the view
// does not hold makes the router read the primary before refusing); it
// only makes the commit log's lag estimates (+skip-futile's test,
// +defer's retry-after) lower for other clients' writes.
func newPollers(cfg *Config, log *slog.Logger) (*pollers, error) {
	p := &pollers{byName: map[string]*live.Poller[gtid.Set]{}, replicas: map[string]bool{}}
	for _, b := range cfg.Replicas {
		p.replicas[b.Name] = true
	}
	for _, b := range append([]Backend{cfg.Primary}, cfg.Replicas...) {
		idle := cfg.PollIdleInterval
		if !p.replicas[b.Name] && cfg.globalSource() == live.GlobalView {
			idle = cfg.PollInterval
		}
		pl, err := live.NewPoller(live.PollerConfig[gtid.Set]{
			Nodes:        []live.Node{{Name: b.Name, Addr: b.Addr}},
			User:         b.User,
			Password:     b.Password,
			Interval:     cfg.PollInterval,
			IdleInterval: idle,
			DialTimeout:  cfg.ConnectTimeout,
			Bounds:       cfg.WatermarkSource == "lazy" && p.replicas[b.Name],
			Flavor:       cfg.flavor(),
			Logger:       log,
		})
		if err != nil {
			return nil, fmt.Errorf("proxy: poller for %s: %w", b.Name, err)
		}
		p.byName[b.Name] = pl
		p.all = append(p.all, pl)
	}
	return p, nil
}

// pollDescs are the pollers' series, read from their counters at each
// scrape (pollers.Collect).
var (
	pollsDesc = prometheus.NewDesc("causallab_proxy_polls_total",
		"Position polls of a backend by result: ok, or failed (a failed poll closes its connection; the next dials again).",
		[]string{"backend", "result"}, nil)
	pollModesDesc = prometheus.NewDesc("causallab_proxy_poll_modes_total",
		"Position polls of a backend (ok or failed) by mode: fast (every poll_interval, or at once: a client needed a fresher view) or idle (every poll_idle_interval: none did).",
		[]string{"backend", "mode"}, nil)
	pollOverrunsDesc = prometheus.NewDesc("causallab_proxy_poll_overruns_total",
		"Failed polls that overran their timeout (poll_timeout: the backend did not answer in time).",
		[]string{"backend"}, nil)
	pollLogStatusFallbacksDesc = prometheus.NewDesc("causallab_proxy_poll_log_status_fallbacks_total",
		"Polls of a replica that read gtid_executed joined with the received set because performance_schema.log_status is not the backend's bound (watermark_source lazy; grant BACKUP_ADMIN): an over-estimate of what a read there saw.",
		[]string{"backend"}, nil)
)

var _ prometheus.Collector = (*pollers)(nil)

// Describe implements prometheus.Collector.
func (p *pollers) Describe(ch chan<- *prometheus.Desc) {
	ch <- pollsDesc
	ch <- pollModesDesc
	ch <- pollOverrunsDesc
	ch <- pollLogStatusFallbacksDesc
}

// Collect implements prometheus.Collector: each backend's poll counts.
func (p *pollers) Collect(ch chan<- prometheus.Metric) {
	for name, pl := range p.byName {
		ok, failed := pl.Stats()
		ch <- prometheus.MustNewConstMetric(pollsDesc, prometheus.CounterValue, float64(ok), name, "ok")
		ch <- prometheus.MustNewConstMetric(pollsDesc, prometheus.CounterValue, float64(failed), name, "failed")
		fast, idle := pl.Modes()
		ch <- prometheus.MustNewConstMetric(pollModesDesc, prometheus.CounterValue, float64(fast), name, "fast")
		ch <- prometheus.MustNewConstMetric(pollModesDesc, prometheus.CounterValue, float64(idle), name, "idle")
		ch <- prometheus.MustNewConstMetric(pollOverrunsDesc, prometheus.CounterValue, float64(pl.Overran()), name)
		ch <- prometheus.MustNewConstMetric(pollLogStatusFallbacksDesc, prometheus.CounterValue, float64(pl.LogStatusFallbacks()), name)
	}
}

// Run polls every backend until ctx ends, or until the backend is
// retired.
func (p *pollers) Run(ctx context.Context) {
	var wg sync.WaitGroup
	p.mu.Lock()
	p.stops = map[string]context.CancelFunc{}
	for name, pl := range p.byName {
		if p.retired[name] {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		p.stops[name] = cancel
		wg.Go(func() { _ = pl.Run(pctx); cancel() })
	}
	p.mu.Unlock()
	wg.Wait()
}

// Retire stops polling the named backend for good (a fenced primary,
// failover.go): it is no node of the topology any more, and a dead one
// would be dialled every poll interval forever. Its last position stays,
// read by nothing.
func (p *pollers) Retire(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retired == nil {
		p.retired = map[string]bool{}
	}
	p.retired[name] = true
	if stop := p.stops[name]; stop != nil {
		stop()
	}
}

// Position implements live.PositionSource[gtid.Set].
func (p *pollers) Position(node string) (gtid.Set, bool) {
	pl, ok := p.byName[node]
	if !ok {
		return gtid.Set{}, false
	}
	return pl.Position(node)
}

// WaitFor implements live.PositionSource[gtid.Set].
func (p *pollers) WaitFor(ctx context.Context, node string, want gtid.Set) error {
	pl, ok := p.byName[node]
	if !ok {
		return fmt.Errorf("proxy: no position source for node %q", node)
	}
	return pl.WaitFor(ctx, node, want)
}

// Want implements live.Demander: the node's poller polls it every
// poll_interval until its view holds want (bounded; live.Poller.Want).
func (p *pollers) Want(node string, want gtid.Set) {
	if pl, ok := p.byName[node]; ok {
		pl.Want(node, want)
	}
}

// Bounds reports whether every replica's poller reads upper bounds
// (watermark_source lazy): the router bounds reads on replicas only (the
// primary's poller never reads bounds; newPollers).
func (p *pollers) Bounds() bool {
	for name := range p.replicas {
		if !p.byName[name].Bounds() {
			return false
		}
	}
	return true
}

// Generation implements live.SeenBounder.
func (p *pollers) Generation(node string) uint64 {
	if pl, ok := p.byName[node]; ok {
		return pl.Generation(node)
	}
	return 0
}

// SeenBound implements live.SeenBounder.
func (p *pollers) SeenBound(node string, after time.Time, gen uint64) (gtid.Set, bool, time.Duration) {
	if pl, ok := p.byName[node]; ok {
		return pl.SeenBound(node, after, gen)
	}
	return gtid.Set{}, false, 0
}

// WaitBound implements live.SeenBounder.
func (p *pollers) WaitBound(ctx context.Context, node string, after time.Time) error {
	pl, ok := p.byName[node]
	if !ok {
		return fmt.Errorf("proxy: no position source for node %q", node)
	}
	return pl.WaitBound(ctx, node, after)
}

// newBinlogSource builds a binlogwatch stream per backend and the router's
// WatchSource over them; run is the group's Run.
func newBinlogSource(cfg *Config, log *slog.Logger) (live.PositionSource[gtid.Set], func(context.Context), error) {
	mk := func(b Backend) (*binlogwatch.Watcher, error) {
		host, port, err := net.SplitHostPort(b.Addr)
		if err != nil {
			return nil, fmt.Errorf("proxy: backend %s: %w", b.Name, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("proxy: backend %s: port %q: %w", b.Name, port, err)
		}
		return binlogwatch.New(binlogwatch.Config{Name: b.Name, Host: host, Port: uint16(p), User: b.User,
			Password: b.Password, ConnectTimeout: cfg.ConnectTimeout, Logger: log})
	}
	prim, err := mk(cfg.Primary)
	if err != nil {
		return nil, nil, err
	}
	names := []string{cfg.Primary.Name}
	var reps []*binlogwatch.Watcher
	for _, b := range cfg.Replicas {
		w, err := mk(b)
		if err != nil {
			return nil, nil, err
		}
		reps = append(reps, w)
		names = append(names, b.Name)
	}
	g, err := binlogwatch.NewGroup(prim, reps...)
	if err != nil {
		return nil, nil, err
	}
	src, err := live.NewGroupSource(g, 0, names...)
	if err != nil {
		return nil, nil, err
	}
	return src, func(ctx context.Context) { _ = g.Run(ctx) }, nil
}

// watcherSource is positions watchers: the backends named in
// Config.Watchers followed through their watchers' binlog-reader
// streams (binlogwatch.Subscriber: a fleet of proxies shares one binlog
// stream per node, and no proxy opens one of its own), the others polled
// (rest, nil when every backend has a watcher).
type watcherSource struct {
	subs map[string]*binlogwatch.Subscriber
	rest *pollers
}

var _ live.PositionSource[gtid.Set] = (*watcherSource)(nil)

// newWatcherSource builds positions watchers' source; run runs its
// subscribers and pollers.
func newWatcherSource(cfg *Config, log *slog.Logger) (*watcherSource, func(context.Context), error) {
	w := &watcherSource{subs: map[string]*binlogwatch.Subscriber{}}
	for name, addr := range cfg.Watchers {
		s, err := binlogwatch.NewSubscriber(binlogwatch.SubscriberConfig{Addr: addr, DialTimeout: cfg.ConnectTimeout, Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("proxy: watcher of %s: %w", name, err)
		}
		w.subs[name] = s
	}
	polled := *cfg
	polled.Replicas = nil
	for _, b := range cfg.Replicas {
		if w.subs[b.Name] == nil {
			polled.Replicas = append(polled.Replicas, b)
		}
	}
	if w.subs[cfg.Primary.Name] == nil || len(polled.Replicas) > 0 {
		p, err := newPollers(&polled, log)
		if err != nil {
			return nil, nil, err
		}
		if w.subs[cfg.Primary.Name] != nil {
			delete(p.byName, cfg.Primary.Name)
			p.all = p.all[1:] // the primary's is first (newPollers)
		}
		w.rest = p
	}
	run := func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, s := range w.subs {
			wg.Go(func() { s.Run(ctx) })
		}
		if w.rest != nil {
			wg.Go(func() { w.rest.Run(ctx) })
		}
		wg.Wait()
	}
	return w, run, nil
}

// Retire stops following the named backend (pollers.Retire); a watcher's
// stream is the watcher's own and stays.
func (w *watcherSource) Retire(name string) {
	if w.rest != nil {
		w.rest.Retire(name)
	}
}

// Position implements live.PositionSource.
func (w *watcherSource) Position(node string) (gtid.Set, bool) {
	if s := w.subs[node]; s != nil {
		return s.Position()
	}
	if w.rest != nil {
		return w.rest.Position(node)
	}
	return gtid.Set{}, false
}

// WaitFor implements live.PositionSource.
func (w *watcherSource) WaitFor(ctx context.Context, node string, want gtid.Set) error {
	if s := w.subs[node]; s != nil {
		return s.WaitFor(ctx, want)
	}
	if w.rest != nil {
		return w.rest.WaitFor(ctx, node, want)
	}
	return fmt.Errorf("proxy: no position source for node %q", node)
}
