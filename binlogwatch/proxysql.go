package binlogwatch

import (
	"bufio"
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

// ProxySQLServer serves one watcher's executed set with the ProxySQL
// binlog-reader protocol (what proxysql_mysqlbinlog speaks on its listen
// port), so that a ProxySQL 2.x can use the watcher in place of its own
// reader (mysql_servers.gtid_port pointing here).
//
// Wire format (plain text lines, server to client only): on connect
// "ST=<set>\n" with the whole executed set (dashed UUIDs, intervals,
// sources separated by ","), then one line per newly committed transaction:
// "I1=<uuid without dashes>:<gno>\n" when its UUID differs from the previous
// line's, "I2=<gno>\n" when it is the same. ProxySQL understands neither
// GTID tags nor a set that shrinks: tagged GTIDs are left out (counted in
// SkippedTagged), and when the watcher resyncs to a set that is not a
// superset of what a client was sent, that client is disconnected so it
// reconnects and reads a fresh ST line.
type ProxySQLServer struct {
	w   *Watcher
	log *slog.Logger
	// WriteTimeout bounds each write to a client; a client that does not
	// read for this long is disconnected. Default 10 s.
	WriteTimeout time.Duration

	clients       atomic.Int64
	skippedTagged atomic.Uint64
	dropped       atomic.Uint64
}

// NewProxySQLServer returns a server for w; logger nil means slog.Default().
func NewProxySQLServer(w *Watcher, logger *slog.Logger) *ProxySQLServer {
	if logger == nil {
		logger = slog.Default()
	}
	return &ProxySQLServer{w: w, log: logger.With("replica", w.Name(), "component", "proxysql-reader"), WriteTimeout: 10 * time.Second}
}

// Clients returns the number of connected clients.
func (s *ProxySQLServer) Clients() int64 { return s.clients.Load() }

// SkippedTagged counts tagged GTIDs left out of the protocol.
func (s *ProxySQLServer) SkippedTagged() uint64 { return s.skippedTagged.Load() }

// Dropped counts clients disconnected because the set shrank (a resync) or
// a write timed out.
func (s *ProxySQLServer) Dropped() uint64 { return s.dropped.Load() }

// Serve accepts clients on ln until ctx ends; it closes ln and waits for its
// client goroutines before returning.
func (s *ProxySQLServer) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer wg.Wait()
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

var errShrunk = errors.New("executed set shrank (resync): client must re-bootstrap")

func (s *ProxySQLServer) serveClient(ctx context.Context, c net.Conn) {
	s.clients.Add(1)
	defer s.clients.Add(-1)
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// ProxySQL never sends anything: any input or EOF ends the session.
	go func() {
		_, _ = io.Copy(io.Discard, c)
		cancel()
	}()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	err := s.stream(ctx, c)
	if errors.Is(err, errShrunk) || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		s.dropped.Add(1)
	}
	s.log.Debug("proxysql reader client gone", "remote", c.RemoteAddr().String(), "err", err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *ProxySQLServer) stream(ctx context.Context, c net.Conn) error {
	bw := bufio.NewWriterSize(c, 4096)
	flush := func() error {
		c.SetWriteDeadline(time.Now().Add(s.WriteTimeout))
		return bw.Flush()
	}
	snap := s.w.Snapshot()
	sent := snap.Executed // everything the client has been told about (tags included)
	st, skipped, err := untagged(sent)
	if err != nil {
		return err
	}
	s.skippedTagged.Add(skipped)
	line := append([]byte("ST="), st.CompactString()...)
	line = append(line, '\n')
	if _, err := bw.Write(line); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	var lastSID gtid.SID
	haveSID := false
	buf := make([]byte, 0, 64)
	for {
		select {
		case <-snap.Changed():
		case <-ctx.Done():
			return ctx.Err()
		}
		snap = s.w.Snapshot()
		if !snap.Executed.Contains(sent) {
			return errShrunk
		}
		diff := snap.Executed.Subtract(sent)
		for key, ivs := range diff.Sources() {
			if key.Tag != "" {
				s.skippedTagged.Add(count(ivs))
				continue
			}
			for _, iv := range ivs {
				for g := iv.Start; g <= iv.End; g++ {
					buf = buf[:0]
					if !haveSID || key.SID != lastSID {
						buf = append(buf, "I1="...)
						buf = appendSIDNoDashes(buf, key.SID)
						buf = append(buf, ':')
						lastSID, haveSID = key.SID, true
					} else {
						buf = append(buf, "I2="...)
					}
					buf = strconv.AppendInt(buf, g, 10)
					buf = append(buf, '\n')
					if _, err := bw.Write(buf); err != nil {
						return err
					}
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
		sent = snap.Executed
	}
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
			tagged = strconv.AppendInt(tagged, iv.Start, 10)
			tagged = append(tagged, '-')
			tagged = strconv.AppendInt(tagged, iv.End, 10)
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
