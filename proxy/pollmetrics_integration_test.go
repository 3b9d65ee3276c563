package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
)

// TestPollMetrics: the proxy exports its pollers' counts per backend
// (causallab_proxy_polls_total{backend,result}, ..._poll_overruns_total,
// ..._poll_log_status_fallbacks_total). With the replicas' account denied
// BACKUP_ADMIN, every poll of a replica under the lazy watermark reads the
// joined bounds query and is counted as a fallback; the primary's poll
// reads no bounds, so it counts none.
func TestPollMetrics(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	userWithoutBackupAdmin(t, ctx, "nopolllogstatus", "nppw")
	s := startProxy(t, func(cfg *Config) {
		cfg.WatermarkSource = "lazy"
		for i := range cfg.Replicas {
			cfg.Replicas[i].User, cfg.Replicas[i].Password = "nopolllogstatus", "nppw"
		}
	})
	reps := s.cfg.Replicas
	series := func(m, name, backend, extra string) int {
		return metricSum(m, name+`{backend="`+backend+`"`+extra+`}`)
	}
	var m string
	for {
		m = metricText(t, s)
		// A fallback is counted as its poll starts, before the poll's
		// success: wait for both.
		done := series(m, "causallab_proxy_polls_total", s.cfg.Primary.Name, `,result="ok"`) >= 3
		for _, r := range reps {
			done = done && series(m, "causallab_proxy_poll_log_status_fallbacks_total", r.Name, "") >= 3 &&
				series(m, "causallab_proxy_polls_total", r.Name, `,result="ok"`) >= 3
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no three polls and fallbacks counted per backend:\n%s", grepLines(m, "causallab_proxy_poll"))
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, r := range reps {
		if ok := series(m, "causallab_proxy_polls_total", r.Name, `,result="ok"`); ok < 3 {
			t.Errorf("%s: %d polls ok", r.Name, ok)
		}
	}
	if n := series(m, "causallab_proxy_poll_log_status_fallbacks_total", s.cfg.Primary.Name, ""); n != 0 {
		t.Errorf("the primary's poll counted %d log_status fallbacks; it reads no bounds", n)
	}
	if !strings.Contains(m, `causallab_proxy_poll_overruns_total{backend="`+s.cfg.Primary.Name+`"}`) {
		t.Errorf("no overrun series for the primary:\n%s", grepLines(m, "causallab_proxy_poll"))
	}
}
