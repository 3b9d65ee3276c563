package proxy

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPollersPrimaryPlain: with watermark_source lazy the replicas'
// pollers read bounds and the primary's does not (the router bounds
// reads on replicas only; a read the primary serves reads its watermark
// pipelined), and the group still reports bounds, as the router's lazy
// watermark requires.
func TestPollersPrimaryPlain(t *testing.T) {
	cfg := &Config{
		Primary:         Backend{Name: "primary", Addr: "127.0.0.1:1", User: "u"},
		Replicas:        []Backend{{Name: "replica1", Addr: "127.0.0.1:2", User: "u"}, {Name: "replica2", Addr: "127.0.0.1:3", User: "u"}},
		WatermarkSource: "lazy",
	}
	p, err := newPollers(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.byName["primary"].Bounds() {
		t.Error("the primary's poller reads bounds")
	}
	for _, r := range []string{"replica1", "replica2"} {
		if !p.byName[r].Bounds() {
			t.Errorf("%s's poller reads no bounds", r)
		}
	}
	if !p.Bounds() {
		t.Error("lazy pollers report no bounds")
	}
	if g := p.Generation("primary"); g != 0 {
		t.Errorf("primary generation %d, want 0 (no bounds)", g)
	}
	cfg.WatermarkSource = "query"
	if p, err = newPollers(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if p.Bounds() {
		t.Error("query watermark: pollers report bounds")
	}
}

// TestPollersCollect: a backend that refuses connections shows as failed
// polls in the pollers' series, by backend, and no successful one.
func TestPollersCollect(t *testing.T) {
	cfg := &Config{
		Primary:      Backend{Name: "primary", Addr: "127.0.0.1:1", User: "u"},
		Replicas:     []Backend{{Name: "replica1", Addr: "127.0.0.1:1", User: "u"}},
		PollInterval: time.Millisecond, ConnectTimeout: time.Second,
	}
	p, err := newPollers(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	reg := prometheus.NewRegistry()
	reg.MustRegister(p)
	for _, b := range []string{"primary", "replica1"} {
		for {
			if _, failed := p.byName[b].Stats(); failed >= 2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	<-done
	n, err := testutil.GatherAndCount(reg, "causallab_proxy_polls_total")
	if err != nil || n != 4 {
		t.Fatalf("polls_total series: %d, %v; want 4 (2 backends x ok, failed)", n, err)
	}
	for _, b := range []string{"primary", "replica1"} {
		ok, failed := p.byName[b].Stats()
		if ok != 0 || failed < 2 {
			t.Errorf("%s: %d ok, %d failed", b, ok, failed)
		}
	}
	want := `
# HELP causallab_proxy_poll_log_status_fallbacks_total Polls of a replica that read gtid_executed joined with the received set because performance_schema.log_status is not the backend's bound (watermark_source lazy; grant BACKUP_ADMIN): an over-estimate of what a read there saw.
# TYPE causallab_proxy_poll_log_status_fallbacks_total counter
causallab_proxy_poll_log_status_fallbacks_total{backend="primary"} 0
causallab_proxy_poll_log_status_fallbacks_total{backend="replica1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "causallab_proxy_poll_log_status_fallbacks_total"); err != nil {
		t.Error(err)
	}
	_, failed := p.byName["replica1"].Stats()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64 = -1
	for _, mf := range mfs {
		if mf.GetName() != "causallab_proxy_polls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["backend"] == "replica1" && l["result"] == "failed" {
				got = m.GetCounter().GetValue()
			}
		}
	}
	if uint64(got) != failed {
		t.Errorf("polls_total{replica1,failed} %v, the poller's count %d", got, failed)
	}
}
