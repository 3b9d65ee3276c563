package live

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/causallab/causallab/internal/mysqlwire"
)

// Node is one MySQL server the live router talks to.
type Node struct {
	// Name is the stable identity (compose uses "primary", "replica1", ...).
	Name string
	// Addr is host:port.
	Addr string
	// Weight is a replica's hashing weight (PolicyAffinity's share of
	// ids, as ProxySQL's hostgroup weights), 1..hashroute.MaxWeight; 0
	// means 1. Unused for the primary.
	Weight int
}

// ErrNoSessionTracking is returned at connect time when the primary does not
// report the session's write positions (for MySQL: CLIENT_SESSION_TRACK not
// negotiated, session_track_gtids not settable, or gtid_mode not ON; see
// Flavor.TrackSession): read-your-writes tokens could not be captured, so
// the router refuses to start rather than degrade silently.
var ErrNoSessionTracking = errors.New("router: primary does not report session GTIDs (session tracking)")

// ErrMissingGTID is returned by Session.Exec when a statement changed rows
// in autocommit mode (or a COMMIT ended a transaction that did) but the OK
// packet carried no GTID (no position, for the flavor): the session's
// token cannot be trusted.
var ErrMissingGTID = errors.New("router: write acknowledged without a GTID")

// ErrArgCount is returned by a read whose arguments do not match the
// statement's placeholders. It is the caller's error: no node is held down
// for it and the read is not retried elsewhere.
var ErrArgCount = mysqlwire.ErrArgCount

// ErrTxLost is returned by Session.Exec when the session's open
// transaction was on a primary the router has since failed over from: the
// transaction is rolled back (its connection closed) and the statement was
// not run. The session can start a new transaction.
var ErrTxLost = errors.New("router: the session's open transaction was lost in a failover; the statement was not run")

// dialTracking opens a primary connection with CLIENT_SESSION_TRACK and
// has the flavor set it up and prove that the server reports each write's
// position (Flavor.TrackSession).
func dialTracking(ctx context.Context, d *mysqlwire.Dialer, addr string, track func(context.Context, SessionConn) error) (*client.Conn, error) {
	c, err := d.Dial(ctx, addr, true)
	if err != nil {
		return nil, err
	}
	if err := track(ctx, &sessionConn{c: c}); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrNoSessionTracking, addr, err)
	}
	return c, nil
}

// sessionConn is the SessionConn a flavor gets: a primary connection whose
// responses are recorded (the tracking comes from the router's own copy of
// the OK packet). broken is set by an error that leaves the connection
// unusable (anything but the server's refusal of a statement).
type sessionConn struct {
	c      *client.Conn
	broken bool
}

var _ SessionConn = (*sessionConn)(nil)

// Exec implements SessionConn.
func (s *sessionConn) Exec(ctx context.Context, query string) (Ack, error) {
	rec := mysqlwire.InstallRecorder(s.c)
	rec.Start()
	_, err := mysqlwire.Exec(ctx, s.c, query)
	tr, perr := rec.LastOK()
	if err != nil {
		s.broken = s.broken || !mysqlwire.IsServerError(err)
		return Ack{}, err
	}
	if perr != nil && !errors.Is(perr, mysqlwire.ErrNoOK) {
		return Ack{}, perr
	}
	return Ack{GTID: tr.GTID, StateChanged: tr.StateChanged, Vars: tr.Vars}, nil
}

// ReadValue implements SessionConn.
func (s *sessionConn) ReadValue(ctx context.Context, query string) (string, error) {
	v, err := mysqlwire.ReadValue(ctx, s.c, query)
	if err != nil && !mysqlwire.IsServerError(err) {
		s.broken = true
	}
	return v, err
}

// pool keeps idle connections per node address, and each address's
// log_status verdict (LogStatusFlavor: probed on a read connection the
// first time a read served there needs it).
type pool struct {
	d         *mysqlwire.Dialer
	maxIdle   int
	mu        sync.Mutex
	idle      map[string][]*client.Conn
	logStatus map[string]*mysqlwire.LogStatus
}

func newPool(d *mysqlwire.Dialer, maxIdle int) *pool {
	return &pool{d: d, maxIdle: maxIdle, idle: map[string][]*client.Conn{}, logStatus: map[string]*mysqlwire.LogStatus{}}
}

// logStatusOf is addr's log_status verdict (kept for the pool's life).
func (p *pool) logStatusOf(addr string) *mysqlwire.LogStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	ls, ok := p.logStatus[addr]
	if !ok {
		ls = &mysqlwire.LogStatus{}
		p.logStatus[addr] = ls
	}
	return ls
}

func (p *pool) get(ctx context.Context, addr string) (*client.Conn, error) {
	p.mu.Lock()
	if l := p.idle[addr]; len(l) > 0 {
		c := l[len(l)-1]
		p.idle[addr] = l[:len(l)-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := p.d.Dial(ctx, addr, false)
	if err != nil {
		return nil, err
	}
	mysqlwire.InstallPipe(c)
	return c, nil
}

// put returns a healthy connection; broken ones must be closed instead.
func (p *pool) put(addr string, c *client.Conn) {
	p.mu.Lock()
	if len(p.idle[addr]) < p.maxIdle {
		p.idle[addr] = append(p.idle[addr], c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// drop closes every idle connection to addr: after a node failure they
// predate it, and a restarted server has closed them all (each would
// otherwise fail once and hold the node down once more).
func (p *pool) drop(addr string) {
	p.mu.Lock()
	l := p.idle[addr]
	delete(p.idle, addr)
	p.mu.Unlock()
	for _, c := range l {
		c.Close()
	}
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, l := range p.idle {
		for _, c := range l {
			c.Close()
		}
		delete(p.idle, a)
	}
}
