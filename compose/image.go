package compose

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/causallab/causallab/scripts"
)

// ImageInfo is what `causallab image` (scripts/ensure-engine.sh) reports.
type ImageInfo struct {
	// RootFS is the MySQL root filesystem for the local backend.
	RootFS string
	// Image is the Docker image tag; "" when no Docker engine answered.
	Image string
	// Version is the server version, e.g. 9.7.4 (MySQL), 11.8.9 (MariaDB),
	// 18.6 (PostgreSQL).
	Version string
}

// ImageOptions tune EnsureImage.
type ImageOptions struct {
	// Engine is the engine whose root filesystem and image to build.
	// Default: EngineMySQL.
	Engine Engine
	// CacheDir overrides $CAUSALLAB_CACHE (default ~/.cache/causallab).
	CacheDir string
	// SkipImage builds only the root filesystem, not the Docker image.
	SkipImage bool
	// Progress receives the script's progress lines (stderr); nil drops them.
	Progress io.Writer
}

// EnsureImage builds, once and cached, an engine's root filesystem (MySQL
// by default) and (when a Docker engine answers) its Docker image, by
// running the embedded scripts/ensure-engine.sh: the same script make and
// CI run.
func EnsureImage(ctx context.Context, opts ImageOptions) (ImageInfo, error) {
	engine := opts.Engine
	if engine == "" {
		engine = EngineMySQL
	}
	if _, err := engineFor(engine); err != nil {
		return ImageInfo{}, err
	}
	f, err := os.CreateTemp("", "causallab-ensure-engine-*.sh")
	if err != nil {
		return ImageInfo{}, fmt.Errorf("compose: image: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(scripts.EnsureEngine()); err != nil {
		f.Close()
		return ImageInfo{}, fmt.Errorf("compose: image: %w", err)
	}
	if err := f.Close(); err != nil {
		return ImageInfo{}, fmt.Errorf("compose: image: %w", err)
	}
	cmd := exec.CommandContext(ctx, "bash", f.Name(), string(engine))
	cmd.Env = os.Environ()
	if opts.CacheDir != "" {
		abs, err := filepath.Abs(opts.CacheDir)
		if err != nil {
			return ImageInfo{}, err
		}
		cmd.Env = append(cmd.Env, "CAUSALLAB_CACHE="+abs)
	}
	if opts.SkipImage {
		cmd.Env = append(cmd.Env, "CAUSALLAB_SKIP_IMAGE=1")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if opts.Progress != nil {
		cmd.Stderr = io.MultiWriter(&stderr, opts.Progress)
	}
	if err := cmd.Run(); err != nil {
		if last := lastLine(stderr.String()); last != "" {
			return ImageInfo{}, fmt.Errorf("compose: ensure-engine.sh failed (%v): %s", err, last)
		}
		return ImageInfo{}, fmt.Errorf("compose: ensure-engine.sh failed (%v)", err)
	}
	return parseImageOutput(stdout.String())
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// parseImageOutput reads the key=value lines ensure-engine.sh prints.
func parseImageOutput(out string) (ImageInfo, error) {
	var info ImageInfo
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return ImageInfo{}, fmt.Errorf("compose: ensure-engine.sh printed %q, want key=value", line)
		}
		if seen[k] {
			return ImageInfo{}, fmt.Errorf("compose: ensure-engine.sh printed %s twice", k)
		}
		seen[k] = true
		switch k {
		case "rootfs":
			info.RootFS = v
		case "image":
			info.Image = v
		case "version":
			info.Version = v
		default:
			return ImageInfo{}, fmt.Errorf("compose: ensure-engine.sh printed unknown key %q", k)
		}
	}
	if info.RootFS == "" || info.Version == "" {
		return ImageInfo{}, fmt.Errorf("compose: ensure-engine.sh printed no rootfs or version (got %q)", out)
	}
	return info, nil
}
