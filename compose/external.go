package compose

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/go-sql-driver/mysql"
)

// externalBackend attaches to servers it does not own: only SQL-level
// faults work; process and network faults return ErrNotSupported.
type externalBackend struct {
	cfg *Config
}

var _ backend = (*externalBackend)(nil)

func newExternalBackend(cfg *Config) *externalBackend { return &externalBackend{cfg: cfg} }

func parseNodeDSN(name string, role Role, dsn string) (Node, error) {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return Node{}, fmt.Errorf("compose: DSN of %s: %w", name, err)
	}
	if mc.Net != "tcp" {
		return Node{}, fmt.Errorf("compose: DSN of %s: want tcp(host:port), got %q", name, mc.Net)
	}
	host, portStr, err := net.SplitHostPort(mc.Addr)
	if err != nil {
		return Node{}, fmt.Errorf("compose: DSN of %s: address %q: %w", name, mc.Addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return Node{}, fmt.Errorf("compose: DSN of %s: bad port %q", name, portStr)
	}
	return Node{Name: name, Role: role, Host: host, Port: port, User: mc.User, Password: mc.Passwd, PeerHost: host, PeerPort: port}, nil
}

func (b *externalBackend) start(ctx context.Context) ([]Node, error) {
	p, err := parseNodeDSN("primary", RolePrimary, b.cfg.External.PrimaryDSN)
	if err != nil {
		return nil, err
	}
	nodes := []Node{p}
	for i, d := range b.cfg.External.ReplicaDSNs {
		n, err := parseNodeDSN(fmt.Sprintf("replica%d", i+1), RoleReplica, d)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		if err := pingNode(ctx, n); err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

func pingNode(ctx context.Context, n Node) error {
	mc := mysql.NewConfig()
	mc.User, mc.Passwd, mc.Net, mc.Addr = n.User, n.Password, "tcp", n.Addr()
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return err
	}
	c, err := conn.Connect(ctx)
	if err != nil {
		return fmt.Errorf("compose: %s at %s does not answer: %w", n.Name, n.Addr(), err)
	}
	return c.Close()
}

func (b *externalBackend) unsupported(fault, name string) error {
	return fmt.Errorf("compose: %s of %s: the external backend does not own the servers, only SQL-level faults (StopApplier, StartApplier, SetApplyDelay, HeavyTransaction, Failover, Partition as IO-thread stop) work: %w", fault, name, ErrNotSupported)
}

func (b *externalBackend) kill(_ context.Context, name string) error {
	return b.unsupported("kill", name)
}
func (b *externalBackend) restart(_ context.Context, name string) error {
	return b.unsupported("restart", name)
}
func (b *externalBackend) pause(_ context.Context, name string) error {
	return b.unsupported("pause", name)
}
func (b *externalBackend) resume(_ context.Context, name string) error {
	return b.unsupported("resume", name)
}
func (b *externalBackend) offline(_ context.Context, name, _ string) error {
	return b.unsupported("offline", name)
}
func (b *externalBackend) partition(context.Context, string) error { return ErrNotSupported }
func (b *externalBackend) heal(context.Context, string) error      { return ErrNotSupported }
func (b *externalBackend) down(context.Context) error              { return nil }
func (b *externalBackend) state() backendState                     { return backendState{} }

// condition: the external backend cannot see processes; it reports
// running and lets SQL find out.
func (b *externalBackend) condition(context.Context, string) (condition, error) {
	return condRunning, nil
}
