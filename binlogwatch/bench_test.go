package binlogwatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

func connectNode(b testing.TB, host string, port int, user, pw string, track bool) *client.Conn {
	b.Helper()
	c, err := client.Connect(fmt.Sprintf("%s:%d", host, port), user, pw, "", func(c *client.Conn) error {
		if track {
			return c.SetCapability(mysql.CLIENT_SESSION_TRACK)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

// BenchmarkFreshness measures, per write on the primary, the time from the
// moment a WAIT_FOR_EXECUTED_GTID_SET on the replica returns to the moment
// the watcher publishes the GTID, and the same for polling @@gtid_executed
// every 10 ms.
func BenchmarkFreshness(b *testing.B) {
	composetest.Need(b, shared)
	n := node(b, "replica1")
	w, met := startWatcher(b, n, nil)
	// The same watcher without the ahead waiter, observed in the same
	// iterations: every sample of both saw the same transaction.
	wc, _ := startWatcher(b, n, func(c *Config) { c.DisableAhead = true; c.Name = n.Name + "-confirm-only" })
	waitHealth(b, w, HealthStreaming, 10*time.Second)
	waitHealth(b, wc, HealthStreaming, 10*time.Second)
	p := shared.Primary()
	pc := connectNode(b, p.Host, p.Port, p.User, p.Password, true)
	for _, q := range []string{"SET SESSION session_track_gtids = OWN_GTID", "CREATE DATABASE IF NOT EXISTS bw",
		"CREATE TABLE IF NOT EXISTS bw.fresh (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)"} {
		if _, err := pc.Execute(q); err != nil {
			b.Fatal(err)
		}
	}
	// The write's GTID is parsed from a private copy of its response, never
	// from Result.SessionTracking: go-mysql v1.16.0 returns the OK packet's
	// buffer to a process-wide pool before Execute returns, and the poller
	// below runs go-mysql queries concurrently with the write.
	rec := mysqlwire.InstallRecorder(pc)
	write := func() gtid.GTID {
		rec.Start()
		r, err := pc.Execute("INSERT INTO bw.fresh (v) VALUES (1)")
		tr, perr := rec.LastOK() // stops recording
		if err != nil {
			b.Fatal(err)
		}
		r.Close()
		if perr != nil {
			b.Fatal(perr)
		}
		text := tr.GTID
		if text == "" {
			b.Fatal("no GTID in the OK packet: session tracking is off")
		}
		g, err := gtid.ParseGTID(text)
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	last := write()
	waiter := connectNode(b, n.Host, n.Port, n.User, n.Password, false)
	poller := connectNode(b, n.Host, n.Port, n.User, n.Password, false)
	var watch, watchConfirm, poll []time.Duration
	var its, itsConfirm []freshIter
	ctx := testCtx(b, 10*time.Minute)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		next := gtid.GTID{SID: last.SID, GNO: last.GNO + 1}
		want, _ := gtid.Set{}.Add(next)
		text := want.CompactString()
		var wg sync.WaitGroup
		var tW, tPoll time.Time
		var werr, qerr error
		var seen [2]watchSeen
		for j, x := range []*Watcher{w, wc} {
			wg.Add(1)
			go func() { defer wg.Done(); seen[j] = waitSeen(ctx, x, want) }()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			r, err := waiter.Execute("SELECT WAIT_FOR_EXECUTED_GTID_SET('" + text + "', 10)")
			tW = time.Now()
			if err == nil {
				r.Close()
			}
			werr = err
		}()
		go func() {
			defer wg.Done()
			for {
				r, err := poller.Execute("SELECT @@gtid_executed")
				if err != nil {
					qerr = err
					return
				}
				s, _ := r.GetString(0, 0)
				set, err := gtid.Parse(strings.Clone(s))
				r.Close()
				if err == nil && set.Contains(want) {
					tPoll = time.Now()
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		time.Sleep(2 * time.Millisecond) // let the waits start before the write
		got := write()
		if got != next {
			b.Fatalf("write got %v, predicted %v: another writer is active", got, next)
		}
		wg.Wait()
		if werr != nil || seen[0].err != nil || seen[1].err != nil || qerr != nil {
			b.Fatalf("wait %v, watcher %v, confirm-only watcher %v, poll %v", werr, seen[0].err, seen[1].err, qerr)
		}
		watch = append(watch, max(0, seen[0].t.Sub(tW)))
		watchConfirm = append(watchConfirm, max(0, seen[1].t.Sub(tW)))
		poll = append(poll, max(0, tPoll.Sub(tW)))
		its = append(its, freshIter{tW: tW, tP: seen[0].t, st: seen[0].s.stages, published: seen[0].s.Published})
		itsConfirm = append(itsConfirm, freshIter{tW: tW, tP: seen[1].t, st: seen[1].s.stages, published: seen[1].s.Published})
		last = got
	}
	b.StopTimer()
	b.ReportMetric(float64(pct(watch, 0.5).Microseconds()), "watch-p50-µs")
	b.ReportMetric(float64(pct(watch, 0.99).Microseconds()), "watch-p99-µs")
	b.ReportMetric(float64(pct(watchConfirm, 0.5).Microseconds()), "confirm-only-p50-µs")
	b.ReportMetric(float64(pct(watchConfirm, 0.99).Microseconds()), "confirm-only-p99-µs")
	b.ReportMetric(float64(pct(poll, 0.5).Microseconds()), "poll10ms-p50-µs")
	b.ReportMetric(float64(pct(poll, 0.99).Microseconds()), "poll10ms-p99-µs")
	if p99 := pct(watch, 0.99); p99 > 0 {
		b.ReportMetric(float64(pct(poll, 0.99))/float64(p99), "poll/watch-p99")
	}
	b.ReportMetric(testutil.ToFloat64(met.aheadHits.WithLabelValues(n.Name))/float64(b.N), "ahead-hits/op")
	b.Log("watcher with the ahead waiter:")
	logStages(b, its)
	b.Log("watcher without it (confirmation after the stream only):")
	logStages(b, itsConfirm)
}

// watchSeen is when a reader of a watcher first saw a set published.
type watchSeen struct {
	t   time.Time
	s   *Snapshot // the first snapshot that contained it
	err error
}

// waitSeen is Watcher.WaitFor's loop, keeping the snapshot that first
// contained want (its stage times say where the time went).
func waitSeen(ctx context.Context, w *Watcher, want gtid.Set) watchSeen {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for s := w.Snapshot(); ; s = w.Snapshot() {
		if s.Contains(want) {
			return watchSeen{t: time.Now(), s: s}
		}
		select {
		case <-s.Changed():
		case <-ctx.Done():
			return watchSeen{err: ctx.Err()}
		}
	}
}

// freshIter is one freshness sample with the publishing snapshot's stages.
type freshIter struct {
	tW, tP    time.Time // waiter returned; watcher's reader saw the publish
	published time.Time
	st        stageTimes
}

// logStages logs, relative to tW (the waiting connection's return), when
// each stage happened: p50 and p99 over all samples, and the stages of the
// slowest 1% (where the tail comes from).
func logStages(b *testing.B, its []freshIter) {
	rel := func(t, tW time.Time) time.Duration {
		if t.IsZero() {
			return 0
		}
		return t.Sub(tW)
	}
	stage := map[string][]time.Duration{}
	names := []string{"streamed", "confirm-sent", "confirmed", "published", "seen"}
	for _, it := range its {
		for i, t := range []time.Time{it.st.streamed, it.st.confirmSent, it.st.confirmed, it.published, it.tP} {
			if !t.IsZero() {
				stage[names[i]] = append(stage[names[i]], rel(t, it.tW))
			}
		}
	}
	for _, n := range names {
		b.Logf("stage %-12s (relative to the waiter's return, %d samples) p50 %8v p99 %8v", n, len(stage[n]), pct(stage[n], 0.5), pct(stage[n], 0.99))
	}
	slices.SortFunc(its, func(a, c freshIter) int { return int(a.tP.Sub(a.tW) - c.tP.Sub(c.tW)) })
	for _, it := range its[len(its)-max(1, len(its)/100):] {
		b.Logf("tail sample: seen %v; streamed %v, confirm sent %v, confirmed %v, published %v",
			it.tP.Sub(it.tW), rel(it.st.streamed, it.tW), rel(it.st.confirmSent, it.tW), rel(it.st.confirmed, it.tW), rel(it.published, it.tW))
	}
}

// recordStream captures the raw events of replica1's binlog from the empty
// set until it is caught up, making sure it holds at least minTrx
// transactions.
func recordStream(b *testing.B, minTrx int) [][]byte {
	b.Helper()
	n := node(b, "replica1")
	pdb := openDB(b, shared.Primary())
	mustExec(b, pdb, "CREATE DATABASE IF NOT EXISTS bw", "CREATE TABLE IF NOT EXISTS bw.thru (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(32))")
	var have int
	_ = pdb.QueryRow("SELECT COUNT(*) FROM bw.thru").Scan(&have)
	if have < minTrx {
		var wg sync.WaitGroup
		per := (minTrx - have + 7) / 8
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					_, _ = pdb.Exec("INSERT INTO bw.thru (v) VALUES ('x')")
				}
			}()
		}
		wg.Wait()
	}
	if err := shared.WaitReplicated(testCtx(b, 2*time.Minute), time.Minute); err != nil {
		b.Fatal(err)
	}
	s := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 1<<31 + 99, Flavor: mysql.MySQLFlavor, Host: n.Host, Port: uint16(n.Port), User: n.User, Password: n.Password,
		RawModeEnabled: true, DisableRetrySync: true, HeartbeatPeriod: 200 * time.Millisecond, ReadTimeout: 2 * time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
	defer s.Close()
	st, err := s.StartSyncGTID(mysqlwire.GoMySQLSet(gtid.Set{}))
	if err != nil {
		b.Fatal(err)
	}
	var raw [][]byte
	ctx := testCtx(b, 2*time.Minute)
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if ev.Header.EventType == replication.HEARTBEAT_EVENT || ev.Header.EventType == replication.HEARTBEAT_LOG_EVENT_V2 {
			return raw // caught up
		}
		raw = append(raw, slices.Clone(ev.RawData))
	}
}

// BenchmarkThroughput replays a recorded binlog stream through the parser,
// the commit state machine and a publish per commit (set clone, snapshot,
// atomic swap). One op is one transaction. Run with -cpu 1 for one core.
func BenchmarkThroughput(b *testing.B) {
	composetest.Need(b, shared)
	raw := recordStream(b, 20000)
	b.ResetTimer()
	commits, events := 0, 0
	for commits < b.N {
		parser := replication.NewBinlogParser()
		parser.SetRowsEventDecodeFunc(skipRows)
		tr := newTracker(gtid.Set{})
		pub := newPublisher(&Snapshot{})
		for _, data := range raw {
			ev, err := parser.Parse(data)
			if err != nil {
				b.Fatalf("event %d: %v", events, err)
			}
			events++
			if r := tr.apply(ev); r.added > 0 {
				pub.publish(&Snapshot{Executed: tr.set.Clone(), Health: HealthStreaming, LastEvent: time.Now(), Published: time.Now()})
				commits += r.added
				if commits >= b.N {
					break
				}
			}
		}
		if tr.stats.commits == 0 {
			b.Fatal("recorded stream holds no transaction")
		}
	}
	b.ReportMetric(float64(commits)/b.Elapsed().Seconds(), "trx/s")
	b.ReportMetric(float64(events)/float64(commits), "events/trx")
}
