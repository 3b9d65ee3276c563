package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/causallab/causallab/internal/mysqlwire"
)

// nodeConn is one go-mysql client connection to one node, tracking the
// GTID of each committed transaction (session_track_gtids=OWN_GTID). The
// GTID is parsed from the connection's own copy of the response
// (mysqlwire.Recorder), never from Result.SessionTracking (which
// aliases a buffer go-mysql has already returned to a shared pool).
//
// It is a thin adapter: go-mysql's client takes no context, so a context
// that ends during a statement closes the connection (the statement then
// fails and the connection is marked broken; the owner reconnects).
type nodeConn struct {
	addr, user, password string
	c                    *client.Conn
	rec                  *mysqlwire.Recorder // records c's responses for ExecuteWrite
	broken               bool
	// tracked is the causal_token a proxy reported in the last
	// ExecuteWrite's OK packet (its session tracking), "" when none.
	tracked string
	// f is the server's engine (its GTID tracking).
	f serverFlavor
}

var _ Execer = (*nodeConn)(nil)

// dialNode connects to the MySQL server at addr and turns on GTID
// tracking.
func dialNode(ctx context.Context, addr, user, password string) (*nodeConn, error) {
	return dialNodeAs(ctx, flavorOf(""), addr, user, password)
}

// dialNodeAs connects to the f server at addr and turns on GTID
// tracking.
func dialNodeAs(ctx context.Context, f serverFlavor, addr, user, password string) (*nodeConn, error) {
	n := &nodeConn{addr: addr, user: user, password: password, f: f}
	if err := n.connect(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *nodeConn) connect(ctx context.Context) error {
	c, err := client.ConnectWithContext(ctx, n.addr, n.user, n.password, "", 5*time.Second, func(c *client.Conn) error {
		return c.SetCapability(mysql.CLIENT_SESSION_TRACK)
	})
	if err != nil {
		return fmt.Errorf("lab: connecting to %s: %w", n.addr, err)
	}
	if _, err := c.Execute(n.f.trackQuery()); err != nil {
		c.Close()
		return fmt.Errorf("lab: enabling GTID tracking on %s: %w", n.addr, err)
	}
	n.c = c
	n.rec = mysqlwire.InstallRecorder(c)
	n.broken = false
	return nil
}

// Execute implements Execer. After a network error the connection is
// re-dialled on the next call.
func (n *nodeConn) Execute(ctx context.Context, query string) (*mysql.Result, error) {
	r, _, err := n.exec(ctx, query, false)
	return r, err
}

// ExecuteWrite implements Execer: the GTID comes from the recorder's copy
// of the response's last OK packet.
func (n *nodeConn) ExecuteWrite(ctx context.Context, query string) (*mysql.Result, string, error) {
	return n.exec(ctx, query, true)
}

// exec runs query, (re)connecting first if needed; with record it returns
// the GTID of the response's last OK packet.
func (n *nodeConn) exec(ctx context.Context, query string, record bool) (*mysql.Result, string, error) {
	if n.c == nil || n.broken {
		if n.c != nil {
			n.c.Close()
			n.c = nil
		}
		if err := n.connect(ctx); err != nil {
			return nil, "", err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	c := n.c
	n.tracked = ""
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	if record {
		n.rec.Start()
	}
	r, err := c.Execute(query)
	var g string
	var gerr error
	if record {
		// LastOK stops recording on every path. A response that ends
		// without an OK packet (a result set) carries no GTID: "".
		var tr mysqlwire.Tracking
		if tr, gerr = n.rec.LastOK(); errors.Is(gerr, mysqlwire.ErrNoOK) {
			gerr = nil
		}
		g, n.tracked = tr.GTID, tr.Vars[proxyTokenVariable]
		if n.f.mariaDB() || g == "" {
			// MariaDB's, directly or through a proxy that forwards
			// the backend's tracking (session_track_gtids there).
			g = tr.Vars["last_gtid"]
		}
	}
	if !stop() {
		n.broken = true
		if err == nil {
			err = ctx.Err()
		}
		return nil, "", fmt.Errorf("lab: %s: %w", n.addr, errors.Join(ctx.Err(), err))
	}
	if err != nil {
		var me *mysql.MyError
		if !errors.As(err, &me) {
			n.broken = true // network or protocol error: the connection is unusable
		}
		return nil, "", fmt.Errorf("lab: %s: %w", n.addr, err)
	}
	if gerr != nil {
		// The statement succeeded but its OK packet could not be parsed:
		// the write's GTID is unknown, so it is an error, not "".
		return r, "", fmt.Errorf("lab: %s: reading the GTID from the OK packet: %w", n.addr, gerr)
	}
	return r, g, nil
}

// proxyTokenVariable is the tracked system variable a causallab proxy
// reports a session's token in (proxy's track_token).
const proxyTokenVariable = "causal_token"

// trackedToken is the token the last ExecuteWrite's OK packet carried
// ("" when none: not through a proxy, or the token did not change).
func (n *nodeConn) trackedToken() string { return n.tracked }

// Close closes the connection.
func (n *nodeConn) Close() error {
	if n.c == nil {
		return nil
	}
	err := n.c.Close()
	n.c = nil
	return err
}
