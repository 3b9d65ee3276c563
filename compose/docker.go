package compose

import (
	"context"
	"errors"
)

// dockerBackend runs one container per server (testcontainers-go).
type dockerBackend struct {
	cfg *Config
}

var _ backend = (*dockerBackend)(nil)

func newDockerBackend(cfg *Config) *dockerBackend { return &dockerBackend{cfg: cfg} }

var errDockerTODO = errors.New("compose: the docker backend is not written yet")

func (b *dockerBackend) start(context.Context) ([]Node, error)   { return nil, errDockerTODO }
func (b *dockerBackend) kill(context.Context, string) error      { return errDockerTODO }
func (b *dockerBackend) restart(context.Context, string) error   { return errDockerTODO }
func (b *dockerBackend) pause(context.Context, string) error     { return errDockerTODO }
func (b *dockerBackend) resume(context.Context, string) error    { return errDockerTODO }
func (b *dockerBackend) partition(context.Context, string) error { return errDockerTODO }
func (b *dockerBackend) heal(context.Context, string) error      { return errDockerTODO }
func (b *dockerBackend) down(context.Context) error              { return nil }
func (b *dockerBackend) state() backendState                     { return backendState{} }
