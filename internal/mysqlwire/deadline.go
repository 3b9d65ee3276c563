package mysqlwire

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/internal/rawnet"
)

// ErrCut is the error of a read or write on a DeadlineConn after Cut.
var ErrCut = errors.New("mysqlwire: connection cut")

// DeadlineConn gives every read and write on a connection a deadline: an
// I/O call that makes no progress for Timeout fails (a net.Error whose
// Timeout() is true), as MySQL's net_read_timeout bounds the server's own
// waits. The deadline is refreshed lazily (only once it is nearer than
// 15/16 of Timeout), so the bound is between 15/16 and all of Timeout and
// the cost is one clock read per call. Cut ends the connection's I/O at
// once from any goroutine (a watchdog, a context's end): the blocked call
// and every later one fail, and the connection must be closed.
//
// Reads and writes come from one goroutine at a time (a MySQL
// connection's); Cut and SetDeadline may come from any.
type DeadlineConn struct {
	net.Conn
	// timeout is the bound of one call without progress.
	timeout time.Duration
	// until is the deadline last set, limit the caller's earlier one
	// (Limit; zero: none). Both are the I/O goroutine's.
	until, limit time.Time
	// cut holds the reason Cut gave (nil: not cut).
	cut atomic.Pointer[error]
}

// NewDeadlineConn wraps c; timeout must be positive.
func NewDeadlineConn(c net.Conn, timeout time.Duration) *DeadlineConn {
	return &DeadlineConn{Conn: c, timeout: timeout}
}

// DeadlineDial returns a dial function whose connections are
// DeadlineConns of timeout (raw system calls below them unless plainIO);
// each new connection is also passed to got, when given.
func DeadlineDial(d *net.Dialer, timeout time.Duration, plainIO bool, got func(*DeadlineConn)) rawnet.DialFunc {
	dial := d.DialContext
	if !plainIO {
		dial = rawnet.WrapDial(dial)
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		dc := NewDeadlineConn(c, timeout)
		if got != nil {
			got(dc)
		}
		return dc, nil
	}
}

// refresh arms the deadline before an I/O call, or returns the cut's
// reason.
func (c *DeadlineConn) refresh() error {
	if e := c.cut.Load(); e != nil {
		return *e
	}
	now := time.Now()
	if c.limit.IsZero() && c.until.Sub(now) >= c.timeout-c.timeout/16 {
		return nil
	}
	want := now.Add(c.timeout)
	if !c.limit.IsZero() && c.limit.Before(want) {
		want = c.limit
	}
	if want.Equal(c.until) {
		return nil
	}
	c.until = want
	if err := c.Conn.SetDeadline(want); err != nil {
		return err
	}
	// A Cut between the check above and SetDeadline must not be undone:
	// SetDeadline calls are serialised, so a Cut whose reason is not
	// visible here set its past deadline after ours.
	if e := c.cut.Load(); e != nil {
		_ = c.Conn.SetDeadline(time.Unix(1, 0))
		return *e
	}
	return nil
}

func (c *DeadlineConn) Read(b []byte) (int, error) {
	if err := c.refresh(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *DeadlineConn) Write(b []byte) (int, error) {
	if err := c.refresh(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Cut ends the connection's I/O with reason (ErrCut when nil): a call
// blocked now fails at once, later ones fail with reason. The first
// reason stays.
func (c *DeadlineConn) Cut(reason error) {
	if reason == nil {
		reason = ErrCut
	}
	c.cut.CompareAndSwap(nil, &reason)
	_ = c.Conn.SetDeadline(time.Unix(1, 0))
}

// CutReason is the reason Cut was given (nil when not cut).
func (c *DeadlineConn) CutReason() error {
	if e := c.cut.Load(); e != nil {
		return *e
	}
	return nil
}

// Limit bounds the I/O calls that follow by t as well (a statement's
// budget); the zero time removes the limit. From the I/O goroutine only.
func (c *DeadlineConn) Limit(t time.Time) { c.limit = t }

// SetDeadline with a time not in the future is a Cut (WithCtx expires a
// connection that way when its context ends); the zero time and a future
// one are left to the rolling deadline and Limit (an I/O goroutine's own
// bound is Limit: SetDeadline may come from another goroutine).
func (c *DeadlineConn) SetDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		c.Cut(nil)
	}
	return nil
}
