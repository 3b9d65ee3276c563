package binlogwatch

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// faultDialer is a test Dialer that can partition the watcher from its
// server: while partitioned, bytes in both directions are dropped (reads see
// silence until their deadline) and new dials hang until healed or their
// context ends, as with a dropped-packet network partition.
type faultDialer struct {
	mu          sync.Mutex
	partitioned bool
	healed      chan struct{}
	dials       int
}

func newFaultDialer() *faultDialer { return &faultDialer{healed: make(chan struct{})} }

func (d *faultDialer) state() (bool, chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.partitioned, d.healed
}

func (d *faultDialer) partition() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.partitioned {
		d.partitioned = true
		d.healed = make(chan struct{})
	}
}

func (d *faultDialer) heal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.partitioned {
		d.partitioned = false
		close(d.healed)
	}
}

func (d *faultDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if p, healed := d.state(); p {
		select {
		case <-healed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.dials++
	d.mu.Unlock()
	return &faultConn{Conn: c, d: d}, nil
}

type faultConn struct {
	net.Conn
	d    *faultDialer
	lost atomic.Bool // bytes were dropped: the connection is unusable
}

func (c *faultConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if part, _ := c.d.state(); part && n > 0 {
			// Dropped by the partition. A connection that lived through a
			// partition is broken for good, as a real one would be after
			// losing bytes: fail it once the partition heals. The read
			// deadline the caller set still applies to the underlying Read.
			if err == nil {
				c.broken()
				continue
			}
		}
		if c.isBroken() {
			return 0, net.ErrClosed
		}
		return n, err
	}
}

func (c *faultConn) Write(p []byte) (int, error) {
	if part, _ := c.d.state(); part {
		c.broken()
		return len(p), nil
	}
	if c.isBroken() {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

func (c *faultConn) broken()        { c.lost.Store(true) }
func (c *faultConn) isBroken() bool { return c.lost.Load() }
