package binlogwatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/gtid"
)

// ProxySQLServer serves one watcher's executed set with the binlog-reader
// protocol of sysown/proxysql_mysqlbinlog, so that ProxySQL can use the
// watcher in place of its own reader (mysql_servers.gtid_port pointing here).
// docs/binlogwatch.md describes the protocol byte by byte and what each
// ProxySQL version does with each line.
//
// Wire format (text lines, server to client only). On connect, once the
// watcher has read its replica:
//
//	ST=<uuid>:<a>-<b>[,<uuid>:<a>-<b>]...\n
//
// one token per interval, the dashed UUID repeated in each, every interval
// written a-b (a single transaction as 5-5). Then, per new transaction,
// "I1=<uuid without dashes>:<gno>\n" when its UUID differs from the previous
// line's and "I2=<gno>\n" when it is the same (ProxySQLConfig.Batch = 0, the
// upstream reader's default); or, with Batch > 0, at most once per Batch, one
// line per new interval: "I3=<uuid without dashes>:<a>-<b>\n" or
// "I4=<a>-<b>\n" (the reader's -t; ProxySQL 3.0.8 or later only).
//
// ProxySQL knows neither GTID tags nor a set that shrinks. Tagged GTIDs are
// left out (SkippedTagged). What happens when the watcher's set stops
// containing what ProxySQL was told is ProxySQLConfig.OnShrink.
type ProxySQLServer struct {
	w   *Watcher
	cfg ProxySQLConfig
	log *slog.Logger

	mu sync.Mutex
	// taught is the union of every untagged GTID written to any client since
	// the server was created: a superset of what a ProxySQL that never
	// forgets (3.x) can believe this replica holds, because of us.
	taught gtid.Set
	fenced bool
	seq    uint64 // the newest snapshot admit has judged

	clients       atomic.Int64
	skippedTagged atomic.Uint64
	dropped       atomic.Uint64
	refused       atomic.Uint64
	fences        atomic.Uint64
	midLine       atomic.Uint64
}

// ShrinkPolicy says what a ProxySQLServer does when the watcher's set no
// longer contains GTIDs it has sent (the replica was reset, restored or
// replaced: the watcher resynced to a smaller set). ProxySQL has no message
// to un-learn a GTID.
type ShrinkPolicy int

const (
	// ShrinkFence (the default) is for a ProxySQL that keeps what it learned
	// across reconnects (3.x: GTID_Server_Data and its gtid_executed survive
	// a disconnect, and a new ST= is added to the old set). Every client is
	// disconnected and every new connection is closed at once, without a
	// byte, until the replica's set again contains everything ever sent
	// (Taught). A disconnected reader is inactive in ProxySQL 3.x, so it is
	// not chosen for a GTID read. It is safe for 2.x too, which then only
	// loses the replica for GTID reads while the fence lasts.
	ShrinkFence ShrinkPolicy = iota
	// ShrinkRebootstrap is for a ProxySQL that forgets a reader's set when
	// its connection ends (2.x, and 3.0.0-3.0.1, which share its
	// GTID_Server_Data: reader_cb deletes it on EOF). Clients that were sent
	// a GTID the set no longer holds are disconnected; they reconnect and
	// read a fresh ST= of the smaller set. Wrong for a ProxySQL that never
	// un-learns: it would keep the GTIDs the replica lost.
	ShrinkRebootstrap
)

func (p ShrinkPolicy) String() string {
	switch p {
	case ShrinkFence:
		return "fence"
	case ShrinkRebootstrap:
		return "rebootstrap"
	}
	return fmt.Sprintf("ShrinkPolicy(%d)", int(p))
}

// ParseShrinkPolicy parses "fence" or "rebootstrap".
func ParseShrinkPolicy(s string) (ShrinkPolicy, error) {
	switch s {
	case "fence":
		return ShrinkFence, nil
	case "rebootstrap":
		return ShrinkRebootstrap, nil
	}
	return 0, fmt.Errorf("binlogwatch: shrink policy %q: want fence or rebootstrap", s)
}

// ProxySQLConfig configures a ProxySQLServer. The zero value is the upstream
// reader's default mode with ShrinkFence.
type ProxySQLConfig struct {
	// Batch > 0 sends new transactions as I3/I4 range lines, at most once
	// per Batch (proxysql_mysqlbinlog -t <ms>). ProxySQL 3.0.8 or later
	// only: 2.x reads an I3/I4 line as GTID 0 of the previous UUID and loses
	// the range. 0 sends one I1/I2 line per transaction as it is published.
	Batch time.Duration
	// OnShrink is what happens when the watcher's set shrinks.
	OnShrink ShrinkPolicy
	// WriteTimeout bounds each write to a client: a client that reads
	// nothing for this long is disconnected at the next line boundary.
	// Default 10 s.
	WriteTimeout time.Duration
	// LineTimeout bounds finishing a line whose write timed out part-way
	// through, before the client is disconnected. A line cut short is
	// dangerous: ProxySQL 3.0.8 keeps the unread bytes of a connection and
	// prefixes them to the next one's first line, so "I2=12" (of "I2=123")
	// reads as GTID 12. Default 30 s; a cut that happens anyway is counted
	// (MidLineDrops).
	LineTimeout time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// maxPending bounds the bytes a client's stream gathers before it writes
// them (a large catch-up is written in pieces of whole lines).
const maxPending = 64 << 10

func (c *ProxySQLConfig) validate() error {
	if c.Batch < 0 {
		return fmt.Errorf("binlogwatch: proxysql Batch %v is negative", c.Batch)
	}
	if c.Batch > 0 && c.Batch < time.Millisecond {
		return fmt.Errorf("binlogwatch: proxysql Batch %v is under 1ms (the reader's -t unit)", c.Batch)
	}
	if c.OnShrink != ShrinkFence && c.OnShrink != ShrinkRebootstrap {
		return fmt.Errorf("binlogwatch: proxysql OnShrink %v is not a policy", c.OnShrink)
	}
	if c.WriteTimeout < 0 || c.LineTimeout < 0 {
		return fmt.Errorf("binlogwatch: proxysql timeouts must not be negative (write %v, line %v)", c.WriteTimeout, c.LineTimeout)
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.LineTimeout == 0 {
		c.LineTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// NewProxySQLServer returns a server for w.
func NewProxySQLServer(w *Watcher, cfg ProxySQLConfig) (*ProxySQLServer, error) {
	if w == nil {
		return nil, errors.New("binlogwatch: proxysql server needs a watcher")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &ProxySQLServer{w: w, cfg: cfg,
		log: cfg.Logger.With("replica", w.Name(), "component", "proxysql-reader")}, nil
}

// Clients returns the number of connected clients.
func (s *ProxySQLServer) Clients() int64 { return s.clients.Load() }

// SkippedTagged counts tagged GTIDs left out of the protocol (each time a
// line would have carried them).
func (s *ProxySQLServer) SkippedTagged() uint64 { return s.skippedTagged.Load() }

// Dropped counts clients disconnected by the server: the set shrank, a write
// timed out, or the fence went up.
func (s *ProxySQLServer) Dropped() uint64 { return s.dropped.Load() }

// Refused counts connections closed unanswered because the fence was up.
func (s *ProxySQLServer) Refused() uint64 { return s.refused.Load() }

// Fences counts the times the fence went up (ShrinkFence).
func (s *ProxySQLServer) Fences() uint64 { return s.fences.Load() }

// MidLineDrops counts clients disconnected in the middle of a line (a
// write, and then finishing the line, timed out).
func (s *ProxySQLServer) MidLineDrops() uint64 { return s.midLine.Load() }

// Taught returns the untagged GTIDs sent to any client so far.
func (s *ProxySQLServer) Taught() gtid.Set {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taught
}

// Fenced reports whether the fence is up and, if so, the GTIDs sent to
// clients that the watcher's set lacks.
func (s *ProxySQLServer) Fenced() (bool, gtid.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fenced {
		return false, gtid.Set{}
	}
	cur, _, err := untagged(s.w.Snapshot().Executed)
	if err != nil {
		return true, s.taught
	}
	return true, s.taught.Subtract(cur)
}

// Serve accepts clients on ln until ctx ends; it closes ln and waits for its
// client goroutines before returning.
func (s *ProxySQLServer) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.watchFence(ctx)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			ln.Close()
			return fmt.Errorf("binlogwatch: proxysql reader accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveClient(ctx, c)
		}()
	}
}

// watchFence raises and lowers the fence as snapshots arrive, so that the
// state (and its log lines) follows the replica even with no client.
func (s *ProxySQLServer) watchFence(ctx context.Context) {
	if s.cfg.OnShrink != ShrinkFence {
		return
	}
	for {
		snap := s.w.Snapshot()
		if cur, _, err := untagged(snap.Executed); err == nil {
			s.admit(snap, cur, gtid.Set{})
		}
		if snap.Stopped {
			return
		}
		select {
		case <-snap.Changed():
		case <-ctx.Done():
			return
		}
	}
}

// admit decides, under one lock, whether add (a part of cur, the untagged
// set of snap) may be sent: with ShrinkFence only while cur contains
// everything ever sent. An admitted add is recorded as taught before its
// bytes leave. A snapshot older than one already judged is stale (another
// client may have taught from the newer one): the caller must reload.
func (s *ProxySQLServer) admit(snap *Snapshot, cur, add gtid.Set) (ok, stale bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap.Seq < s.seq {
		return false, true
	}
	s.seq = snap.Seq
	if s.cfg.OnShrink == ShrinkFence {
		up := !cur.Contains(s.taught)
		switch {
		case up && !s.fenced:
			s.fences.Add(1)
			missing := s.taught.Subtract(cur)
			s.log.Error("proxysql reader fenced: the replica lost GTIDs that ProxySQL was sent; ProxySQL 3.x keeps them across reconnects, "+
				"so no client is served until the replica has them again. If it never will, make ProxySQL forget: "+
				"set this server's gtid_port to 0 in mysql_servers, LOAD MYSQL SERVERS TO RUNTIME, then restore gtid_port and load again",
				"missing", missing.CompactString(), "missing_count", missing.Count())
		case !up && s.fenced:
			s.log.Info("proxysql reader fence lifted: the replica holds every GTID ProxySQL was sent")
		}
		s.fenced = up
		if up {
			return false, false
		}
	}
	s.taught.UnionInPlace(add)
	return true, false
}

var (
	errShrunk  = errors.New("executed set shrank (resync): client must re-bootstrap")
	errFenced  = errors.New("fence up: the replica lacks GTIDs ProxySQL was sent")
	errStopped = errors.New("watcher stopped")
)

func (s *ProxySQLServer) serveClient(ctx context.Context, c net.Conn) {
	s.clients.Add(1)
	defer s.clients.Add(-1)
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// ProxySQL never sends anything: any input or EOF ends the session
	// (as in the upstream reader's read_cb).
	go func() {
		_, _ = io.Copy(io.Discard, c)
		cancel()
	}()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	lc := &lineConn{c: c, timeout: s.cfg.WriteTimeout, lineTimeout: s.cfg.LineTimeout}
	err := s.stream(ctx, lc)
	switch {
	case errors.Is(err, errMidLine):
		s.midLine.Add(1)
		s.dropped.Add(1)
	case errors.Is(err, errShrunk), errors.Is(err, errFenced), isTimeout(err) && ctx.Err() == nil:
		s.dropped.Add(1)
	}
	s.log.Debug("proxysql reader client gone", "remote", c.RemoteAddr().String(), "err", err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bootstrap waits for the watcher's first read of its replica and returns
// the first snapshot to serve, its untagged set and the number of tagged
// transactions left out, or errFenced.
func (s *ProxySQLServer) bootstrap(ctx context.Context) (*Snapshot, gtid.Set, uint64, error) {
	for {
		snap := s.w.Snapshot()
		if snap.Health == HealthStarting && !snap.Stopped {
			select {
			case <-snap.Changed():
				continue
			case <-ctx.Done():
				return nil, gtid.Set{}, 0, ctx.Err()
			}
		}
		if snap.Stopped {
			return nil, gtid.Set{}, 0, errStopped
		}
		st, skipped, err := untagged(snap.Executed)
		if err != nil {
			return nil, gtid.Set{}, 0, err
		}
		ok, stale := s.admit(snap, st, st)
		if stale {
			continue
		}
		if !ok {
			s.refused.Add(1)
			return nil, gtid.Set{}, 0, errFenced
		}
		s.skippedTagged.Add(skipped)
		return snap, st, skipped, nil
	}
}

func (s *ProxySQLServer) stream(ctx context.Context, lc *lineConn) error {
	snap, sent, skippedSent, err := s.bootstrap(ctx)
	if err != nil {
		return err
	}
	lc.buf = appendBootstrap(lc.buf[:0], sent)
	if err := lc.flush(); err != nil {
		return err
	}
	enc := incEncoder{batch: s.cfg.Batch > 0}
	var lastFlush time.Time
	for {
		select {
		case <-snap.Changed():
		case <-ctx.Done():
			return ctx.Err()
		}
		if s.cfg.Batch > 0 {
			// Gather what commits until the next tick (the reader's timer).
			if wait := time.Until(lastFlush.Add(s.cfg.Batch)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				}
			}
		}
		snap = s.w.Snapshot()
		if snap.Stopped {
			return errStopped
		}
		cur, skipped, err := untagged(snap.Executed)
		if err != nil {
			return err
		}
		if !cur.Contains(sent) && s.cfg.OnShrink == ShrinkRebootstrap {
			return errShrunk
		}
		diff := cur.Subtract(sent)
		ok, stale := s.admit(snap, cur, diff)
		if stale {
			continue // a newer snapshot is out: its Changed is closed
		}
		if !ok {
			return errFenced
		}
		if skipped > skippedSent {
			s.skippedTagged.Add(skipped - skippedSent)
		}
		skippedSent = skipped
		if diff.IsEmpty() {
			continue
		}
		if err := enc.encode(diff, &lc.buf, func() error {
			if len(lc.buf) < maxPending {
				return nil
			}
			return lc.flush()
		}); err != nil {
			return err
		}
		if err := lc.flush(); err != nil {
			return err
		}
		lastFlush = time.Now()
		sent = cur
	}
}

// appendBootstrap appends "ST=<set>\n": one comma-separated token per
// interval, the dashed UUID repeated, every interval a-b.
func appendBootstrap(dst []byte, set gtid.Set) []byte {
	dst = append(dst, "ST="...)
	first := true
	for key, ivs := range set.Sources() {
		for _, iv := range ivs {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, key.SID.String()...)
			dst = append(dst, ':')
			dst = appendIv(dst, iv)
		}
	}
	return append(dst, '\n')
}

// incEncoder writes increment lines for one client: it remembers the UUID
// of the previous line (the reader's per-client uuid_server), which I2 and
// I4 reuse.
type incEncoder struct {
	batch   bool // I3/I4 ranges instead of I1/I2 singles
	last    gtid.SID
	haveSID bool
}

// encode appends the lines for diff (untagged, disjoint from what was sent)
// to *buf, calling spill after each line so that the caller can write out a
// large catch-up in pieces.
func (e *incEncoder) encode(diff gtid.Set, buf *[]byte, spill func() error) error {
	for key, ivs := range diff.Sources() {
		for _, iv := range ivs {
			if e.batch {
				*buf = e.appendLine(*buf, key.SID, iv)
				if err := spill(); err != nil {
					return err
				}
				continue
			}
			for g := iv.Start; g <= iv.End; g++ {
				*buf = e.appendLine(*buf, key.SID, gtid.Interval{Start: g, End: g})
				if err := spill(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// appendLine appends one line: I1/I2 with iv's start (singles), I3/I4 with
// iv (batch).
func (e *incEncoder) appendLine(dst []byte, sid gtid.SID, iv gtid.Interval) []byte {
	newSID := !e.haveSID || sid != e.last
	e.last, e.haveSID = sid, true
	switch {
	case !e.batch && newSID:
		dst = append(dst, "I1="...)
	case !e.batch:
		dst = append(dst, "I2="...)
	case newSID:
		dst = append(dst, "I3="...)
	default:
		dst = append(dst, "I4="...)
	}
	if newSID {
		dst = appendSIDNoDashes(dst, sid)
		dst = append(dst, ':')
	}
	if e.batch {
		dst = appendIv(dst, iv)
	} else {
		dst = strconv.AppendInt(dst, iv.Start, 10)
	}
	return append(dst, '\n')
}

func appendIv(dst []byte, iv gtid.Interval) []byte {
	dst = strconv.AppendInt(dst, iv.Start, 10)
	dst = append(dst, '-')
	return strconv.AppendInt(dst, iv.End, 10)
}

// errMidLine: the client was disconnected with a line cut short.
var errMidLine = errors.New("disconnected in the middle of a line")

// lineConn writes whole lines: buf always ends at a line boundary, and a
// write that times out part-way through a line gets LineTimeout more to
// finish that line (only) before the client is dropped.
type lineConn struct {
	c                    net.Conn
	buf                  []byte
	timeout, lineTimeout time.Duration
}

func (l *lineConn) flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	buf := l.buf
	l.buf = l.buf[:0]
	_ = l.c.SetWriteDeadline(time.Now().Add(l.timeout))
	n, err := l.c.Write(buf)
	if err == nil {
		return nil
	}
	if n == 0 || buf[n-1] == '\n' {
		return err // cut at a line boundary
	}
	end := n + bytes.IndexByte(buf[n:], '\n') + 1
	_ = l.c.SetWriteDeadline(time.Now().Add(l.lineTimeout))
	if _, err2 := l.c.Write(buf[n:end]); err2 != nil {
		return fmt.Errorf("%w: %w (finishing it: %w)", errMidLine, err, err2)
	}
	return err
}

func count(ivs []gtid.Interval) uint64 {
	var n uint64
	for _, iv := range ivs {
		n += uint64(iv.End - iv.Start + 1)
	}
	return n
}

// untagged returns the classic (untagged) part of set and the number of
// tagged transactions it leaves out.
func untagged(set gtid.Set) (gtid.Set, uint64, error) {
	var tagged []byte
	var skipped uint64
	for key, ivs := range set.Sources() {
		if key.Tag == "" {
			continue
		}
		skipped += count(ivs)
		if len(tagged) > 0 {
			tagged = append(tagged, ',')
		}
		tagged = append(tagged, key.SID.String()...)
		tagged = append(tagged, ':')
		tagged = append(tagged, key.Tag...)
		for _, iv := range ivs {
			tagged = append(tagged, ':')
			tagged = appendIv(tagged, iv)
		}
	}
	if skipped == 0 {
		return set, 0, nil
	}
	t, err := gtid.Parse(string(tagged))
	if err != nil {
		return gtid.Set{}, 0, fmt.Errorf("binlogwatch: tagged part of the set: %w", err)
	}
	return set.Subtract(t), skipped, nil
}

func appendSIDNoDashes(dst []byte, sid gtid.SID) []byte {
	const hexd = "0123456789abcdef"
	for _, b := range sid {
		dst = append(dst, hexd[b>>4], hexd[b&15])
	}
	return dst
}
