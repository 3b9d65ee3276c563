package binlogwatch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/causallab/causallab/gtid"
)

// Subscriber follows one node's executed set from a server of the
// binlog-reader protocol (a ProxySQLServer: `causallab watch --proxysql`,
// or ProxySQL's own proxysql_mysqlbinlog), so that many proxies share one
// binlog stream per node instead of opening their own. It reconnects
// after every error, each time reading the set afresh from its ST= line
// (a set that shrank is taken as it is: the server's fence or rebootstrap
// decides, ProxySQLConfig.OnShrink). The set it holds is what the server
// sent: tagged GTIDs are never sent, so it is a lower bound of the
// node's, never ahead of it.
type Subscriber struct {
	cfg SubscriberConfig

	mu sync.Mutex
	// set is what the server sent; up: connected and its ST= read.
	set gtid.Set
	up  bool
	// changed is closed (and replaced) at every change of set or up.
	changed chan struct{}
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Addr is the server's host:port.
	Addr string
	// DialTimeout bounds a connection attempt. Default 5s.
	DialTimeout time.Duration
	// IdleTimeout is the read deadline: a stream silent this long (an
	// idle node sends nothing) is reconnected, which also reads its set
	// again. Default 10 min.
	IdleTimeout time.Duration
	// MaxLine bounds one line. Default 1 MiB (an ST= of a long history).
	MaxLine int
	// Logger gets connect and disconnect lines. Default slog.Default().
	Logger *slog.Logger
}

func (c *SubscriberConfig) validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("binlogwatch: subscriber address %q: %w", c.Addr, err)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 10 * time.Minute
	}
	if c.MaxLine == 0 {
		c.MaxLine = 1 << 20
	}
	if c.DialTimeout < 0 || c.IdleTimeout < 0 || c.MaxLine < 64 {
		return fmt.Errorf("binlogwatch: subscriber %s: negative timeout or max line under 64 bytes", c.Addr)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// NewSubscriber returns a subscriber; Run connects it.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Subscriber{cfg: cfg, changed: make(chan struct{})}, nil
}

// Position returns the set the server sent and whether the stream is up.
func (s *Subscriber) Position() (gtid.Set, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set, s.up
}

// WaitFor blocks until the set contains want, or ctx ends.
func (s *Subscriber) WaitFor(ctx context.Context, want gtid.Set) error {
	for {
		s.mu.Lock()
		ok, ch := s.set.Contains(want), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// publish stores set and up and wakes the waiters.
func (s *Subscriber) publish(set gtid.Set, up bool) {
	s.mu.Lock()
	s.set, s.up = set, up
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Run follows the server until ctx ends, reconnecting after each error
// (backing off from 10 ms to 1 s).
func (s *Subscriber) Run(ctx context.Context) {
	delay := time.Duration(0)
	for ctx.Err() == nil {
		err := s.follow(ctx)
		set, _ := s.Position()
		s.publish(set, false)
		if ctx.Err() != nil {
			return
		}
		s.cfg.Logger.Debug("binlogwatch: subscriber disconnected", "addr", s.cfg.Addr, "err", err)
		delay = min(max(2*delay, 10*time.Millisecond), time.Second)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
	}
}

// follow reads one connection's lines until an error.
func (s *Subscriber) follow(ctx context.Context) error {
	d := net.Dialer{Timeout: s.cfg.DialTimeout, KeepAlive: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	r := bufio.NewReaderSize(c, 64<<10)
	var st SubscriberState
	for {
		if err := c.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout)); err != nil {
			return err
		}
		line, err := readLine(r, s.cfg.MaxLine)
		if err != nil {
			return err
		}
		if err := st.Apply(line); err != nil {
			return err
		}
		s.publish(st.Set.Clone(), st.Started)
	}
}

// errLongLine: a line past SubscriberConfig.MaxLine.
var errLongLine = errors.New("binlogwatch: line too long")

// readLine reads one '\n'-ended line (without it) of at most max bytes.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > max+1 {
			return nil, errLongLine
		}
		line = append(line, frag...)
		if err == nil {
			return line[:len(line)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// SubscriberState is the protocol's client state, pure (no I/O): the set
// so far and the UUID the previous line named (which I2 and I4 reuse).
type SubscriberState struct {
	// Set is what the lines said; Started: the ST= line was read.
	Set     gtid.Set
	Started bool
	last    gtid.SID
	haveSID bool
}

// errProtocol: a line the binlog-reader protocol does not have.
var errProtocol = errors.New("binlogwatch: binlog-reader protocol")

// Apply takes one line (without its '\n'): ST= replaces the set, I1..I4
// add to it. A line before ST=, or one that does not parse, is an error
// naming it; the state is then unchanged.
func (st *SubscriberState) Apply(line []byte) error {
	kind, rest, ok := bytes.Cut(line, []byte{'='})
	if !ok || len(kind) != 2 {
		return fmt.Errorf("%w: %q", errProtocol, clip(line))
	}
	if string(kind) == "ST" {
		set, err := parseBootstrap(rest)
		if err != nil {
			return fmt.Errorf("%w: ST=: %w", errProtocol, err)
		}
		*st = SubscriberState{Set: set, Started: true}
		return nil
	}
	if !st.Started {
		return fmt.Errorf("%w: %q before ST=", errProtocol, clip(line))
	}
	var named bool
	switch string(kind) {
	case "I1", "I3":
		named = true
	case "I2", "I4":
		if !st.haveSID {
			return fmt.Errorf("%w: %q names no UUID and none came before", errProtocol, clip(line))
		}
	default:
		return fmt.Errorf("%w: unknown line %q", errProtocol, clip(line))
	}
	sid := st.last
	if named {
		u, num, ok := bytes.Cut(rest, []byte{':'})
		if !ok {
			return fmt.Errorf("%w: %q lacks uuid:", errProtocol, clip(line))
		}
		var err error
		if sid, err = gtid.ParseSID(string(u)); err != nil {
			return fmt.Errorf("%w: %q: %w", errProtocol, clip(line), err)
		}
		rest = num
	}
	a, b, err := parseRange(rest, kind[1] == '3' || kind[1] == '4')
	if err != nil {
		return fmt.Errorf("%w: %q: %w", errProtocol, clip(line), err)
	}
	add, err := gtid.Parse(sid.String() + ":" + strconv.FormatInt(a, 10) + "-" + strconv.FormatInt(b, 10))
	if err != nil {
		return fmt.Errorf("%w: %q: %w", errProtocol, clip(line), err)
	}
	st.Set.UnionInPlace(add)
	st.last, st.haveSID = sid, true
	return nil
}

// parseRange parses "<gno>" (ranged false) or "<a>-<b>" (ranged).
func parseRange(b []byte, ranged bool) (lo, hi int64, err error) {
	if !ranged {
		n, err := strconv.ParseInt(string(b), 10, 64)
		return n, n, err
	}
	x, y, ok := bytes.Cut(b, []byte{'-'})
	if !ok {
		return 0, 0, errors.New("want a-b")
	}
	if lo, err = strconv.ParseInt(string(x), 10, 64); err != nil {
		return 0, 0, err
	}
	if hi, err = strconv.ParseInt(string(y), 10, 64); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, errors.New("range ends before it starts")
	}
	return lo, hi, nil
}

// parseBootstrap parses ST='s set: "uuid:a-b" tokens joined by ','
// (empty: the empty set).
func parseBootstrap(b []byte) (gtid.Set, error) {
	if len(b) == 0 {
		return gtid.Set{}, nil
	}
	return gtid.Parse(string(b))
}

// clip is at most 64 bytes of line, for an error.
func clip(line []byte) string {
	if len(line) > 64 {
		return string(line[:64]) + "..."
	}
	return string(line)
}
