package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/rawnet"
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
var ErrArgCount = errors.New("router: wrong number of arguments for the statement's placeholders")

// ErrTxLost is returned by Session.Exec when the session's open
// transaction was on a primary the router has since failed over from: the
// transaction is rolled back (its connection closed) and the statement was
// not run. The session can start a new transaction.
var ErrTxLost = errors.New("router: the session's open transaction was lost in a failover; the statement was not run")

// dialer opens go-mysql connections with the router's credentials.
type dialer struct {
	user, password, db string
	timeout            time.Duration
	// plainIO keeps Go's ordinary socket calls (Config.PlainSocketIO);
	// by default connections are wrapped by rawnet.
	plainIO bool
}

func (d *dialer) dial(ctx context.Context, addr string, track bool) (*client.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	opt := func(c *client.Conn) error {
		if track {
			return c.SetCapability(mysql.CLIENT_SESSION_TRACK)
		}
		return nil
	}
	dial := (&net.Dialer{Timeout: d.timeout}).DialContext
	if !d.plainIO {
		dial = rawnet.WrapDial(dial)
	}
	c, err := client.ConnectWithDialer(dctx, "", addr, d.user, d.password, d.db, dial, opt)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	return c, nil
}

// dialTracking opens a primary connection and proves that the server sends
// the session's GTIDs: it asks the server to report changes of
// session_track_gtids itself and checks that the OK packet of setting it to
// OWN_GTID says so.
func (d *dialer) dialTracking(ctx context.Context, addr string) (*client.Conn, error) {
	c, err := d.dial(ctx, addr, true)
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
	if _, err := execCtx(ctx, c, "SET SESSION session_track_state_change = ON"); err != nil {
		return fail("enable state-change tracking: %v", err)
	}
	if _, err := execCtx(ctx, c, "SET SESSION session_track_system_variables = 'session_track_gtids'"); err != nil {
		return fail("enable variable tracking: %v", err)
	}
	rec := recorder(c)
	rec.start()
	_, err = execCtx(ctx, c, "SET SESSION session_track_gtids = OWN_GTID")
	raw := rec.stop()
	if err != nil {
		return fail("set session_track_gtids: %v", err)
	}
	if tr, err := parseLastOK(raw); err != nil || !strings.EqualFold(tr.vars["session_track_gtids"], "OWN_GTID") {
		return fail("the OK packet carried no session-tracking data (is CLIENT_SESSION_TRACK negotiated?)")
	}
	r, err := execCtx(ctx, c, "SELECT @@GLOBAL.gtid_mode")
	if err != nil {
		return fail("read gtid_mode: %v", err)
	}
	if mode, _ := r.GetString(0, 0); !strings.EqualFold(mode, "ON") {
		return fail("gtid_mode is %q, want ON", mode)
	}
	return c, nil
}

// execCtx runs one statement, honouring ctx by expiring the connection's
// deadline when ctx ends (the connection is then unusable: close it).
func execCtx(ctx context.Context, c *client.Conn, q string, args ...any) (*mysql.Result, error) {
	return withCtx(ctx, c, func() (*mysql.Result, error) { return c.Execute(q, args...) })
}

// withCtx runs one statement on c (run), honouring ctx by expiring c's
// deadline when ctx ends (c is then unusable: close it).
func withCtx(ctx context.Context, c *client.Conn, run func() (*mysql.Result, error)) (*mysql.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	r, err := run()
	if !stop() {
		// ctx ended while the statement ran: report the context's error.
		if err == nil {
			err = ctx.Err()
		} else {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, err
	}
	return r, err
}

// readExecuted runs SELECT @@GLOBAL.gtid_executed on c.
func readExecuted(ctx context.Context, c *client.Conn) (gtid.Set, error) {
	r, err := execCtx(ctx, c, ExecutedQuery)
	if err != nil {
		return gtid.Set{}, err
	}
	s, err := r.GetString(0, 0)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("read gtid_executed: %w", err)
	}
	set, err := gtid.Parse(s)
	if err != nil {
		return gtid.Set{}, fmt.Errorf("parse gtid_executed: %w", err)
	}
	return set, nil
}

// pool keeps idle connections per node address.
type pool struct {
	d       *dialer
	maxIdle int
	mu      sync.Mutex
	idle    map[string][]*client.Conn
}

func newPool(d *dialer, maxIdle int) *pool {
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
	c, err := p.d.dial(ctx, addr, false)
	if err != nil {
		return nil, err
	}
	installPipe(c)
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
