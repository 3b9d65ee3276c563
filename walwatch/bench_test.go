package walwatch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// sample is an observer's view changing: at t it first saw lsn.
type sample struct {
	t   time.Time
	lsn gtid.PGLSN
}

// observer records when its view of replica1's replay LSN changes. One
// goroutine appends; samples is read after it stopped.
type observer struct {
	name    string
	latest  atomic.Uint64
	samples []sample
	rounds  atomic.Uint64 // reads made (pollers)
}

func (o *observer) saw(lsn gtid.PGLSN) {
	if n := len(o.samples); n > 0 && o.samples[n-1].lsn == lsn {
		return
	}
	o.samples = append(o.samples, sample{time.Now(), lsn})
	o.latest.Store(uint64(lsn))
}

// first is when o first saw a position at or past want.
func (o *observer) first(want gtid.PGLSN) (time.Time, bool) {
	i, _ := slices.BinarySearchFunc(o.samples, want, func(s sample, w gtid.PGLSN) int {
		if s.lsn < w {
			return -1
		}
		return 1
	})
	if i == len(o.samples) {
		return time.Time{}, false
	}
	return o.samples[i].t, true
}

// pollReplay polls n's pg_last_wal_replay_lsn() every interval (0: back
// to back) into o until ctx ends.
func pollReplay(b *testing.B, ctx context.Context, n compose.Node, every time.Duration, o *observer, wg *sync.WaitGroup) {
	c := connect(b, ctx, n)
	wg.Go(func() {
		var t *time.Ticker
		if every > 0 {
			t = time.NewTicker(every)
			defer t.Stop()
		}
		for ctx.Err() == nil {
			var s string
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.QueryRow(qctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&s)
			cancel()
			if err == nil {
				if p, perr := gtid.ParsePGLSN(s); perr == nil {
					o.saw(p)
				}
			}
			o.rounds.Add(1)
			if t != nil {
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		}
	})
}

// watch records w's published replay LSN of name on every publish.
func watch(ctx context.Context, w *Watcher, name string, o *observer, wg *sync.WaitGroup) {
	wg.Go(func() {
		for {
			s := w.Snapshot()
			if st := s.Standbys[name]; st.Known {
				o.saw(st.ReplayLSN)
			}
			select {
			case <-ctx.Done():
				return
			case <-s.Changed():
			}
		}
	})
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

// BenchmarkFreshness measures, per write on the primary, the time from
// the moment replica1's own pg_last_wal_replay_lsn(), polled back to back
// (the reference), reaches the write's commit LSN to the moment each
// observer has it: the walwatch watcher at 10 ms and at 1 ms, and a poll
// of replica1's pg_last_wal_replay_lsn() every 10 ms and every 1 ms (the
// router's polling source at the watchers' rates), all observing the same
// writes in one run. Writes first with the primary's default synchronous_commit =
// remote_apply (compose's: the standby replies after each applied
// commit), then (b.N/10 writes, 10 to 40) with synchronous_commit = on in
// the writer's session: feedback only when WAL arrives, when the standby
// has caught up, or every wal_receiver_status_interval (1 s in compose).
// Then bursts of b.N writes in each mode, without and with a 100 ms
// recovery_min_apply_delay on replica1.
func BenchmarkFreshness(b *testing.B) {
	composetest.Need(b, topo)
	ctx, cancel := context.WithCancel(testCtx(b, 10*time.Minute))
	defer cancel()
	r1 := mustNode(b, "replica1")
	w10 := startWatcher(b, func(c *Config) { c.Name = "walwatch-10ms"; c.Interval = 10 * time.Millisecond })
	w1 := startWatcher(b, func(c *Config) { c.Name = "walwatch-1ms"; c.Interval = time.Millisecond })
	waitHealth(b, w10, r1.Name, HealthStreaming, 30*time.Second)
	waitHealth(b, w1, r1.Name, HealthStreaming, 30*time.Second)
	pc := connect(b, ctx, topo.Primary())
	if _, err := pc.Exec(ctx, "CREATE TABLE IF NOT EXISTS public.fresh (id BIGSERIAL PRIMARY KEY, v INT)"); err != nil {
		b.Fatal(err)
	}
	ref, obsW10, obsW1 := &observer{name: "reference"}, &observer{name: "walwatch 10ms"}, &observer{name: "walwatch 1ms"}
	poll, poll1 := &observer{name: "poll 10ms"}, &observer{name: "poll 1ms"}
	var wg sync.WaitGroup
	octx, stop := context.WithCancel(ctx)
	pollReplay(b, octx, r1, 0, ref, &wg)
	pollReplay(b, octx, r1, 10*time.Millisecond, poll, &wg)
	pollReplay(b, octx, r1, time.Millisecond, poll1, &wg)
	watch(octx, w10, r1.Name, obsW10, &wg)
	watch(octx, w1, r1.Name, obsW1, &wg)
	observers := []*observer{obsW10, poll, obsW1, poll1}

	type phase struct {
		name, mode string
		delay      time.Duration // replica1's recovery_min_apply_delay in a burst
		tokens     []gtid.PGLSN
	}
	phases := []*phase{{name: "remote_apply"}, {name: "on"}, {name: "remote_apply, burst", mode: "remote_apply"}, {name: "on, burst", mode: "on"},
		{name: "remote_apply, burst, 100ms delay", mode: "remote_apply", delay: 100 * time.Millisecond},
		{name: "on, burst, 100ms delay", mode: "on", delay: 100 * time.Millisecond}}
	await := func(p *phase, tok gtid.PGLSN) {
		deadline := time.Now().Add(5 * time.Second)
		for _, o := range append([]*observer{ref}, observers...) {
			for gtid.PGLSN(o.latest.Load()) < tok {
				if time.Now().After(deadline) {
					b.Fatalf("%s: %s did not reach %s within 5s", p.name, o.name, tok)
				}
				time.Sleep(200 * time.Microsecond)
			}
		}
	}
	insert := func(p *phase, conn *pgx.Conn) gtid.PGLSN {
		if _, err := conn.Exec(ctx, "INSERT INTO public.fresh (v) VALUES (1)"); err != nil {
			b.Fatal(err)
		}
		tok := lsn(b, ctx, conn, "pg_current_wal_lsn()")
		p.tokens = append(p.tokens, tok)
		return tok
	}
	write := func(p *phase, conn *pgx.Conn) {
		await(p, insert(p, conn))
		// Unphase the next write from the observers' ticks.
		time.Sleep(time.Duration(rand.Int64N(int64(10 * time.Millisecond))))
	}
	load0, began := loadavg(), time.Now()
	b.ResetTimer()
	for range b.N {
		write(phases[0], pc)
	}
	b.StopTimer()
	if _, err := pc.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		b.Fatal(err)
	}
	for range min(max(b.N/10, 10), 40) {
		write(phases[1], pc)
	}
	// Bursts: b.N writes back to back, each phase awaited at its end only
	// (the standby is busy replaying while WAL keeps arriving). With an
	// apply delay, the standby replays the burst after it has all arrived:
	// no WAL arrives while it works through the backlog.
	for _, p := range phases[2:] {
		if p.delay > 0 {
			if err := topo.SetApplyDelay(ctx, r1.Name, p.delay); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := pc.Exec(ctx, "SET synchronous_commit = "+p.mode); err != nil {
			b.Fatal(err)
		}
		var last gtid.PGLSN
		for range b.N {
			last = insert(p, pc)
		}
		await(p, last)
		if p.delay > 0 {
			if err := topo.SetApplyDelay(ctx, r1.Name, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pc.Exec(ctx, "RESET synchronous_commit"); err != nil {
		b.Fatal(err)
	}
	stop()
	wg.Wait()
	elapsed := time.Since(began)
	b.Logf("machine load average %s -> %s; %v; reference polls: %d (mean period %v)", load0, loadavg(), elapsed.Round(time.Millisecond),
		ref.rounds.Load(), (elapsed / time.Duration(max(ref.rounds.Load(), 1))).Round(time.Microsecond))
	for _, p := range phases {
		row := fmt.Sprintf("synchronous_commit=%s (%d writes), p50/p99/max:", p.name, len(p.tokens))
		for _, o := range observers {
			var d []time.Duration
			for _, tok := range p.tokens {
				tr, ok1 := ref.first(tok)
				to, ok2 := o.first(tok)
				if !ok1 || !ok2 {
					b.Fatalf("%s: %s or the reference never saw %s", p.name, o.name, tok)
				}
				d = append(d, max(to.Sub(tr), 0))
			}
			p50, p99, mx := pct(d, 0.5), pct(d, 0.99), slices.Max(d)
			row += fmt.Sprintf("\n\t%-14s %v / %v / %v", o.name, p50.Round(time.Microsecond), p99.Round(time.Microsecond), mx.Round(time.Microsecond))
			if p.name == "remote_apply" {
				unit := map[string]string{"walwatch 10ms": "watch10", "walwatch 1ms": "watch1", "poll 10ms": "poll10", "poll 1ms": "poll1"}[o.name]
				b.ReportMetric(float64(p50.Microseconds()), unit+"-p50-us")
				b.ReportMetric(float64(p99.Microseconds()), unit+"-p99-us")
			}
		}
		b.Log(row)
	}
	b.Logf("watcher stats: 10ms %+v; 1ms %+v", w10.Stats(), w1.Stats())
}

// loadavg is /proc/loadavg's 1-minute figure ("?" when unreadable).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
