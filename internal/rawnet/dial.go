package rawnet

import (
	"context"
	"net"
)

// DialFunc is the shape of (*net.Dialer).DialContext and of go-mysql's
// client.Dialer.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// WrapDial returns a dial function whose connections are wrapped by Wrap.
func WrapDial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c), nil
	}
}
