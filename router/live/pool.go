package live

import (
	"context"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/causallab/causallab/internal/mysqlwire"
)

// primaryPool is the router's shared, bounded pool of primary connections
// for writes. Every connection was opened by dialTracking (the flavor's
// session tracking set up and proven). At most size connections exist
// at once, borrowed or idle: a session borrows one for a write and returns
// it at once, or keeps it (pinned) while a transaction is open, autocommit
// is off or the statement changed session state. Thousands of sessions
// therefore need only size connections to the primary.
type primaryPool struct {
	d     *mysqlwire.Dialer
	track func(context.Context, SessionConn) error // Flavor.TrackSession
	m     *liveMetrics
	slot  chan struct{} // one token per connection that may exist

	mu   sync.Mutex
	idle []*primConn
}

// primConn is one pooled primary connection and the node it is open to.
type primConn struct {
	c    *client.Conn
	node Node
}

func newPrimaryPool(d *mysqlwire.Dialer, track func(context.Context, SessionConn) error, m *liveMetrics, size int) *primaryPool {
	return &primaryPool{d: d, track: track, m: m, slot: make(chan struct{}, size)}
}

// get borrows a connection to node, waiting for a free slot until ctx
// ends. Idle connections to another node (before a failover) are closed.
func (p *primaryPool) get(ctx context.Context, node Node) (*primConn, error) {
	t0 := time.Now()
	select {
	case p.slot <- struct{}{}:
	default:
		p.m.poolWaits.Inc()
		select {
		case p.slot <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p.m.poolWaitSecs.Observe(time.Since(t0).Seconds())
	var stale []*primConn
	var pc *primConn
	p.mu.Lock()
	for len(p.idle) > 0 {
		last := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if last.node == node {
			pc = last
			break
		}
		stale = append(stale, last)
	}
	p.mu.Unlock()
	for _, s := range stale {
		s.c.Close()
	}
	if pc != nil {
		p.m.poolInUse.Inc()
		return pc, nil
	}
	c, err := dialTracking(ctx, p.d, node.Addr, p.track)
	if err != nil {
		<-p.slot
		return nil, err
	}
	p.m.poolDials.Inc()
	p.m.poolInUse.Inc()
	return &primConn{c: c, node: node}, nil
}

// put returns a borrowed connection: kept idle when reusable, closed when
// broken or carrying session state.
func (p *primaryPool) put(pc *primConn, reusable bool) {
	p.m.poolInUse.Dec()
	if reusable {
		p.mu.Lock()
		p.idle = append(p.idle, pc)
		p.mu.Unlock()
	} else {
		pc.c.Close()
	}
	<-p.slot
}

// close closes the idle connections (borrowed ones close when returned).
func (p *primaryPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, pc := range idle {
		pc.c.Close()
	}
}
