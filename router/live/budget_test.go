package live

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// TestHugeTokenWaitBounded: a read whose token is a set of 60,000
// intervals no server holds, with a 400 ms budget. The replica's
// WAIT_FOR_EXECUTED_GTID_SET parses such a set for seconds before its own
// timeout can end it; the router gives it up past its budget (killed on
// the server), refuses the read as timed out within a bound near the
// budget (counted wait_seconds{result="overran"}), and holds no replica
// down for it (it marked the replica down and the read took budget + 1 s
// or more).
func TestHugeTokenWaitBounded(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pl := startPoller(t, ctx, 5*time.Millisecond)
	reg := prometheus.NewRegistry()
	pol := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 400 * time.Millisecond}
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Wait: WaitGTIDFunction, Policy: pol, Registerer: reg})
	var b strings.Builder
	b.WriteString("5c1e8b3a-0d2f-11f0-9f3c-0242ac120099")
	for i := range 60000 {
		b.WriteString(":" + strconv.Itoa(2*i+1))
	}
	set, err := gtid.Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	s := r.NewSession()
	defer s.Close()
	s.AddToken(set, r.Epoch())
	t0 := time.Now()
	_, err = s.Query(ctx, "SELECT 1")
	took := time.Since(t0)
	t.Logf("read: %v after %v", err, took)
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("read with a token nobody holds: %v, want ErrTimedOut", err)
	}
	// That the read did not wait for the server's parse (seconds, longer
	// under load) is the overran count below: the router gave the wait
	// up at its budget + mysqlwire.WaitSlack, on its own clock. (It was
	// a 4 s bound on the read, which a loaded machine could pass.)
	for _, n := range r.cfg.Replicas {
		if f := r.Failures(n.Name); f != 0 {
			t.Errorf("%s held down %d times for a wait that overran its budget", n.Name, f)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	overran := false
	for _, mf := range mfs {
		if mf.GetName() != "causallab_router_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "overran" && m.GetHistogram().GetSampleCount() > 0 {
					overran = true
				}
			}
		}
	}
	if !overran {
		t.Error(`the wait given up is not counted as wait_seconds{result="overran"}`)
	}
	r.Close() // waits for the kill
	waitsEnded(t, ctx)
}

// waitsEnded waits until no replica runs WAIT_FOR_EXECUTED_GTID_SET (a
// killed wait on a huge set ends only once the server has parsed it), so
// that the next test does not meet a replica still busy with it (under
// load its poller's first polls then timed out). A generous bound, with
// the reason: the parse's CPU, seconds unloaded, stretches with load.
func waitsEnded(t *testing.T, ctx context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	pu := topo.Primary()
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 10 * time.Second}
	for _, n := range topo.Replicas() {
		for {
			left, err := func() (int64, error) {
				c, err := d.Dial(ctx, n.Addr(), false)
				if err != nil {
					return -1, err
				}
				defer c.Close()
				qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
				defer qcancel()
				res, err := mysqlwire.Exec(qctx, c, "SELECT COUNT(*) FROM performance_schema.processlist WHERE info LIKE 'SELECT WAIT_FOR_EXECUTED_GTID_SET%'")
				if err != nil {
					return -1, err
				}
				return res.GetInt(0, 0)
			}()
			if err == nil && left == 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s still runs waits (%d, %v) 3 min after the read", n.Name, left, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// TestReadOnPausedReplicas: with idle read connections open to both
// replicas, both are paused (SIGSTOP: sockets open, nothing answers). The
// next read is cut on each replica once the position source reports it
// unhealthy, each is held down, and the read ends on the primary (it hung
// until the socket's deadline).
func TestReadOnPausedReplicas(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pl := startPoller(t, ctx, 5*time.Millisecond)
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, Policy: router.Policy{Kind: router.PolicyAny}})
	s := r.NewSession()
	defer s.Close()
	used := map[string]bool{}
	for i := 0; len(used) < len(r.cfg.Replicas); i++ {
		rd, err := s.Query(ctx, "SELECT 1")
		if err != nil {
			t.Fatal(err)
		}
		used[rd.Node] = true
		if i > 500 {
			t.Fatalf("500 reads did not reach every replica: %v", used)
		}
	}
	for _, n := range topo.Replicas() {
		if err := topo.Pause(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := topo.Resume(context.Background(), n.Name); err != nil {
				t.Errorf("resume %s: %v", n.Name, err)
			}
		})
	}
	t0 := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	rd, err := s.Query(rctx, "SELECT 1")
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("a read with both replicas paused: %v after %v", err, took)
	}
	t.Logf("a read with both replicas paused: %s (%v) after %v", rd.Node, rd.Outcome, took)
	if rd.Node != r.cfg.Primary.Name {
		t.Fatalf("a read with both replicas paused served by %s", rd.Node)
	}
	// Generous for a loaded machine: each replica is given up about
	// 0.5-0.6 s after the pause (the poller's down-after plus a probe).
	if took > 20*time.Second {
		t.Fatalf("a read with both replicas paused took %v", took)
	}
}
