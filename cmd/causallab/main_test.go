package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestMain runs this test binary as the causallab command when
// CAUSALLAB_TEST_RUN_MAIN=1: processes the CLI starts with
// os.Executable() (`proxy --workers`' workers) are then the command under
// test.
func TestMain(m *testing.M) {
	if os.Getenv("CAUSALLAB_TEST_RUN_MAIN") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
