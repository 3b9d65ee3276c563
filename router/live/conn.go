package live

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
}

// ErrNoSessionTracking is returned at connect time when the primary does not
// send the session's GTIDs in OK packets (CLIENT_SESSION_TRACK not
// negotiated, session_track_gtids not settable, or gtid_mode not ON):
// read-your-writes tokens could not be captured, so the router refuses to
// start rather than degrade silently.
var ErrNoSessionTracking = errors.New("router: primary does not report session GTIDs (session tracking)")

// ErrMissingGTID is returned by Session.Exec when a statement changed rows
// in autocommit mode (or a COMMIT ended a transaction that did) but the OK
// packet carried no GTID: the session's token cannot be trusted.
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

// dialTracking opens a primary connection and proves that the server sends
// the session's GTIDs: it asks the server to report changes of
// session_track_gtids itself and checks that the OK packet of setting it to
// OWN_GTID says so.
func dialTracking(ctx context.Context, d *mysqlwire.Dialer, addr string) (*client.Conn, error) {
	c, err := d.Dial(ctx, addr, true)
	if err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) (*client.Conn, error) {
		c.Close()
		return nil, fmt.Errorf("%w: %s: %s", ErrNoSessionTracking, addr, fmt.Sprintf(format, args...))
	}
	// session_track_state_change reports any change of session state
	// (variables, schema, temporary tables, user variables) in the OK
	// packet: the shared primary pool keeps such a connection with its
	// session instead of handing it to another.
	if _, err := mysqlwire.Exec(ctx, c, "SET SESSION session_track_state_change = ON"); err != nil {
		return fail("enable state-change tracking: %v", err)
	}
	if _, err := mysqlwire.Exec(ctx, c, "SET SESSION session_track_system_variables = 'session_track_gtids'"); err != nil {
		return fail("enable variable tracking: %v", err)
	}
	rec := mysqlwire.InstallRecorder(c)
	rec.Start()
	_, err = mysqlwire.Exec(ctx, c, "SET SESSION session_track_gtids = OWN_GTID")
	tr, perr := rec.LastOK()
	if err != nil {
		return fail("set session_track_gtids: %v", err)
	}
	if perr != nil || !strings.EqualFold(tr.Vars["session_track_gtids"], "OWN_GTID") {
		return fail("the OK packet carried no session-tracking data (is CLIENT_SESSION_TRACK negotiated?)")
	}
	r, err := mysqlwire.Exec(ctx, c, "SELECT @@GLOBAL.gtid_mode")
	if err != nil {
		return fail("read gtid_mode: %v", err)
	}
	if mode, _ := r.GetString(0, 0); !strings.EqualFold(mode, "ON") {
		return fail("gtid_mode is %q, want ON", mode)
	}
	return c, nil
}

// pool keeps idle connections per node address.
type pool struct {
	d       *mysqlwire.Dialer
	maxIdle int
	mu      sync.Mutex
	idle    map[string][]*client.Conn
}

func newPool(d *mysqlwire.Dialer, maxIdle int) *pool {
	return &pool{d: d, maxIdle: maxIdle, idle: map[string][]*client.Conn{}}
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
