package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/causallab/causallab/compose"
)

// valueConn reads one value from one node: the driver's own instruments'
// connection (the position poller, writerOf), on the node's wire
// protocol.
type valueConn interface {
	// readValue runs q and returns the first column of its first row as
	// text; NULL or no row is an error.
	readValue(ctx context.Context, q string) (string, error)
	Close() error
}

var (
	_ valueConn = (*nodeConn)(nil)
	_ valueConn = (*pgConn)(nil)
)

// dialValue connects the instruments to n.
func (f serverFlavor) dialValue(ctx context.Context, n compose.Node) (valueConn, error) {
	if f.postgres() {
		return dialPG(ctx, n)
	}
	return dialNodeAs(ctx, f, n.Addr(), n.User, n.Password)
}

func (n *nodeConn) readValue(ctx context.Context, q string) (string, error) {
	r, err := n.Execute(ctx, q)
	if err != nil {
		return "", err
	}
	return r.GetString(0, 0)
}

// pgConn is one pgx connection to a PostgreSQL node (database postgres),
// for the instruments and the schema's set-up.
type pgConn struct {
	c    *pgx.Conn
	addr string
	// ctx is the dial's context without its cancellation: Close runs
	// under it (bounded), after the caller's context may have ended.
	ctx context.Context
}

// pgDialTimeout bounds a connection attempt and the close.
const pgDialTimeout = 5 * time.Second

// dialPG connects to PostgreSQL node n as its user.
func dialPG(ctx context.Context, n compose.Node) (*pgConn, error) {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(n.User, n.Password), Host: n.Addr(), Path: "/postgres", RawQuery: "sslmode=disable"}
	cc, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("lab: connecting to %s: %w", n.Addr(), err)
	}
	cc.ConnectTimeout = pgDialTimeout
	cc.DialFunc = (&net.Dialer{Timeout: pgDialTimeout}).DialContext
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("lab: connecting to %s: %w", n.Addr(), err)
	}
	return &pgConn{c: c, addr: n.Addr(), ctx: context.WithoutCancel(ctx)}, nil
}

func (p *pgConn) readValue(ctx context.Context, q string) (string, error) {
	var v *string
	if err := p.c.QueryRow(ctx, q).Scan(&v); err != nil {
		return "", fmt.Errorf("lab: %s: %w", p.addr, err)
	}
	if v == nil {
		return "", fmt.Errorf("lab: %s: %s answered NULL", p.addr, q)
	}
	return *v, nil
}

// exec runs one statement.
func (p *pgConn) exec(ctx context.Context, q string, args ...any) error {
	if _, err := p.c.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("lab: %s: %q: %w", p.addr, q, err)
	}
	return nil
}

// Close closes the connection, bounded by pgDialTimeout.
func (p *pgConn) Close() error {
	ctx, cancel := context.WithTimeout(p.ctx, pgDialTimeout)
	defer cancel()
	err := p.c.Close(ctx)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
