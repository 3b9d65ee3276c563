package binlogwatch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
	rec := &okRecorder{Conn: pc.Conn.Conn}
	pc.Conn.Conn = rec
	write := func() gtid.GTID {
		rec.start()
		r, err := pc.Execute("INSERT INTO bw.fresh (v) VALUES (1)")
		raw := rec.stop()
		if err != nil {
			b.Fatal(err)
		}
		r.Close()
		text, err := okGTID(raw)
		if err != nil {
			b.Fatal(err)
		}
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

// okRecorder records what a go-mysql client connection reads while on, so
// a test parses the OK packet from its own copy. It is the benchmark's
// copy of router.RecordResponses (package router imports binlogwatch, so
// this package's tests cannot import it). One goroutine at a time uses
// the connection, so it needs no lock.
type okRecorder struct {
	net.Conn
	on  bool
	buf []byte
}

func (r *okRecorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if r.on && n > 0 {
		r.buf = append(r.buf, p[:n]...)
	}
	return n, err
}

func (r *okRecorder) start() { r.on, r.buf = true, r.buf[:0] }

// stop ends recording and returns the bytes read since start (valid until
// the next start).
func (r *okRecorder) stop() []byte { r.on = false; return r.buf }

// okGTID returns the session-tracking GTID of the last packet of a
// recorded response, which must be an OK packet (CLIENT_PROTOCOL_41 and
// CLIENT_SESSION_TRACK negotiated); "" when it reported none. The string
// is a copy.
func okGTID(resp []byte) (string, error) {
	var last []byte
	for len(resp) >= 4 {
		n := int(resp[0]) | int(resp[1])<<8 | int(resp[2])<<16
		if len(resp) < 4+n {
			return "", errors.New("truncated packet in the recorded response")
		}
		last, resp = resp[4:4+n], resp[4+n:]
	}
	if len(resp) != 0 || len(last) < 7 || last[0] != mysql.OK_HEADER {
		return "", errors.New("the response does not end with an OK packet")
	}
	p := last[1:]
	for range 2 { // affected rows, last insert id
		_, n, ok := benchLenencInt(p)
		if !ok {
			return "", errors.New("malformed OK packet: lengths")
		}
		p = p[n:]
	}
	if len(p) < 4 {
		return "", errors.New("malformed OK packet: status")
	}
	status := binary.LittleEndian.Uint16(p)
	p = p[4:] // status, warnings
	if len(p) == 0 {
		return "", nil
	}
	_, n, ok := benchLenencStr(p) // info
	if !ok {
		return "", errors.New("malformed OK packet: info")
	}
	p = p[n:]
	if status&mysql.SERVER_SESSION_STATE_CHANGED == 0 || len(p) == 0 {
		return "", nil
	}
	block, _, ok := benchLenencStr(p)
	if !ok {
		return "", errors.New("malformed OK packet: session-tracking block")
	}
	for p = block; len(p) > 0; {
		typ := p[0]
		data, n, ok := benchLenencStr(p[1:])
		if !ok {
			return "", errors.New("malformed OK packet: session-tracking entry")
		}
		p = p[1+n:]
		if typ != mysql.SESSION_TRACK_GTIDS {
			continue
		}
		if len(data) < 1 || data[0] != 0 {
			return "", errors.New("unknown session-tracking GTID format")
		}
		g, _, ok := benchLenencStr(data[1:])
		if !ok {
			return "", errors.New("malformed OK packet: GTID")
		}
		return string(g), nil
	}
	return "", nil
}

// benchLenencInt reads a length-encoded integer (ok false when b is too
// short or starts with a NULL/ERR marker).
func benchLenencInt(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch b[0] {
	case 0xfc:
		n = 3
	case 0xfd:
		n = 4
	case 0xfe:
		n = 9
	case 0xfb, 0xff:
		return 0, 0, false
	default:
		return uint64(b[0]), 1, true
	}
	if len(b) < n {
		return 0, 0, false
	}
	for i := n - 1; i >= 1; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, n, true
}

// benchLenencStr reads a length-encoded string; n is the bytes consumed.
func benchLenencStr(b []byte) (s []byte, n int, ok bool) {
	l, n, ok := benchLenencInt(b)
	if !ok || uint64(len(b)-n) < l {
		return nil, 0, false
	}
	return b[n : n+int(l)], n + int(l), true
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
	st, err := s.StartSyncGTID(gtid.Set{}.ToGoMySQL())
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

// TestOKGTID: the benchmark's OK-packet parser finds the GTID, reports
// none without session tracking, and rejects what is not a whole OK packet
// (no panic on short input).
func TestOKGTID(t *testing.T) {
	const g = "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"
	entry := append([]byte{0, byte(len(g))}, g...) // spec 0, GTID
	block := append([]byte{mysql.SESSION_TRACK_GTIDS, byte(len(entry))}, entry...)
	st := uint16(mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_SESSION_STATE_CHANGED)
	ok := []byte{mysql.OK_HEADER, 1, 0, byte(st), byte(st >> 8), 0, 0, 0} // rows 1, id 0, status, warnings, info ""
	ok = append(ok, byte(len(block)))
	ok = append(ok, block...)
	pkt := func(seq byte, body []byte) []byte {
		return append([]byte{byte(len(body)), byte(len(body) >> 8), byte(len(body) >> 16), seq}, body...)
	}
	got, err := okGTID(pkt(1, ok))
	if err != nil || got != g {
		t.Fatalf("okGTID = %q, %v; want %q", got, err, g)
	}
	plain := []byte{mysql.OK_HEADER, 1, 0, 2, 0, 0, 0} // no state change, no info
	if got, err := okGTID(pkt(1, plain)); err != nil || got != "" {
		t.Fatalf("okGTID without tracking = %q, %v; want \"\", nil", got, err)
	}
	errPkt := []byte{0xff, 0x15, 0x04, '#'}
	for name, resp := range map[string][]byte{
		"empty":       nil,
		"error":       pkt(1, errPkt),
		"truncated":   pkt(1, ok)[:10],
		"short block": pkt(1, ok[:len(ok)-5]),
	} {
		if got, err := okGTID(resp); err == nil {
			t.Errorf("%s: okGTID = %q, nil; want an error", name, got)
		}
	}
}
