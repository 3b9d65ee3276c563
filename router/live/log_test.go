package live

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/pingcap/errors"

	"github.com/causallab/causallab/gtid"
)

// TestQuietLogs: a node error is one WARN line when the node goes down
// (DEBUG while it is already held down), and go-mysql's traced errors
// (pingcap/errors, whose %+v prints a stack) appear as their message only.
func TestQuietLogs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, _ := funcRouter(t, func(c *Config[gtid.Set]) { c.Logger = log })
	traced := errors.Trace(io.ErrUnexpectedEOF)
	if !strings.Contains(slogAny(traced), ".go:") {
		t.Fatalf("test premise: slog does not print a traced error's stack: %q", slogAny(traced))
	}
	ctx := context.Background()
	r.markDown(ctx, r.cfg.Replicas[0], traced)
	r.markDown(ctx, r.cfg.Replicas[0], traced)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines for two errors, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[1], "level=DEBUG") {
		t.Errorf("levels: %q", lines)
	}
	for _, l := range lines {
		if !strings.Contains(l, `err="unexpected EOF"`) || strings.Contains(l, ".go:") {
			t.Errorf("not the bare message: %s", l)
		}
	}
}

// slogAny is how slog's text handler formats a value it knows nothing
// about (fmt %+v).
func slogAny(v any) string {
	var b bytes.Buffer
	slog.New(slog.NewTextHandler(&b, nil)).Info("x", "err", v)
	return b.String()
}
