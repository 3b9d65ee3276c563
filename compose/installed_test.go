package compose_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/causallab/causallab/compose"
)

// TestInstalled: the local backend's answer follows the server program in
// each engine's default root filesystem, naming what is missing.
func TestInstalled(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("CAUSALLAB_CACHE", cache)
	t.Setenv("CAUSALLAB_ROOTFS", "")
	ctx := context.Background()
	for _, e := range compose.Engines() {
		err := compose.Installed(ctx, e, compose.BackendLocal)
		if !errors.Is(err, compose.ErrNoRootFS) || !strings.Contains(err.Error(), "causallab image --engine "+string(e)) {
			t.Errorf("%s in an empty cache: %v, want ErrNoRootFS naming the fix", e, err)
		}
	}
	prog := filepath.Join(cache, "postgres-rootfs", "usr/lib/postgresql/18/bin/postgres")
	if err := os.MkdirAll(filepath.Dir(prog), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := compose.Installed(ctx, compose.EnginePostgres, compose.BackendLocal); err != nil {
		t.Errorf("postgres with its program in place: %v", err)
	}
	if err := compose.Installed(ctx, compose.EngineMySQL, compose.BackendLocal); err == nil {
		t.Error("mysql found in a cache holding only postgres")
	}
	if err := compose.Installed(ctx, "oracle", compose.BackendLocal); err == nil {
		t.Error("an unknown engine is installed")
	}
	if err := compose.Installed(ctx, compose.EngineMySQL, compose.BackendExternal); err == nil {
		t.Error("the external backend starts engines")
	}
}
