package compose

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Installed reports whether this machine can start engine e on backend b
// as Start would find it, without starting anything: the local backend
// needs the server program in the engine's default root filesystem (what
// `causallab image --engine e` builds, scripts/ensure-engine.sh), the
// docker backend the engine's default image in a Docker engine answering
// within 5 s. A nil error means it is there; otherwise the error says
// what is missing (wrapping ErrNoRootFS or ErrNoImage, and ErrNoDocker too
// when no Docker engine answers) and how to get it.
func Installed(ctx context.Context, e Engine, b Backend) error {
	eng, err := engineFor(e)
	if err != nil {
		return err
	}
	rootfs := DefaultEngineRootFS(e)
	switch b {
	case BackendLocal:
		prog := filepath.Join(rootfs, eng.server().program)
		if _, err := os.Stat(prog); err != nil {
			return fmt.Errorf("compose: %s: %w: %s missing (build it with `causallab image --engine %s`)", e, ErrNoRootFS, prog, e)
		}
		return nil
	case BackendDocker:
		image := DefaultEngineImage(e, rootfs)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		p := ProbeDocker(pctx, image)
		if !p.Engine {
			return fmt.Errorf("compose: %s: %w: %s (%s): %w", e, ErrNoImage, image, p.Reason, ErrNoDocker)
		}
		if !p.Image {
			return fmt.Errorf("compose: %s: %w: %s is not in the Docker engine (build it with `causallab image --engine %s`)", e, ErrNoImage, image, e)
		}
		return nil
	}
	return fmt.Errorf("compose: %s: backend %q cannot start engines (want local or docker)", e, b)
}
