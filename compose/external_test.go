package compose_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/compose/enginetest"
)

func TestExternalAttachesToRunningTopology(t *testing.T) {
	composetest.Need(t, shared)
	ctx := testCtx(t)
	cfg := compose.Config{Backend: compose.BackendExternal, External: compose.ExternalConfig{PrimaryDSN: shared.Primary().DSN()}}
	for _, r := range shared.Replicas() {
		cfg.External.ReplicaDSNs = append(cfg.External.ReplicaDSNs, r.DSN())
	}
	ext, err := compose.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ext.Primary().Addr(), shared.Primary().Addr(); got != want {
		t.Fatalf("external primary %s, want %s", got, want)
	}
	for _, st := range ext.Status(ctx) {
		if st.Health != compose.HealthOK {
			t.Fatalf("%s: %+v", st.Node.Name, st)
		}
	}
	for _, f := range []func(context.Context, string) error{ext.Kill, ext.Restart, ext.Pause, ext.Resume} {
		if err := f(ctx, "replica1"); !errors.Is(err, compose.ErrNotSupported) {
			t.Fatalf("process fault on external = %v, want ErrNotSupported", err)
		}
	}
	// SQL-level faults work and are visible through the owning topology.
	if err := ext.StopApplier(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	if st := enginetest.Status(t, ctx, shared, "replica2"); st.SQLRunning != "No" {
		t.Fatalf("StopApplier through external not seen: %+v", st)
	}
	if err := ext.StartApplier(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	if mode, err := ext.Partition(ctx, "replica2"); err != nil || mode != compose.PartitionIOThread {
		t.Fatalf("external Partition = %q, %v", mode, err)
	}
	if st := enginetest.Status(t, ctx, shared, "replica2"); st.IORunning != "No" {
		t.Fatalf("partition through external not seen: %+v", st)
	}
	if err := ext.Heal(ctx, "replica2"); err != nil {
		t.Fatal(err)
	}
	// Down of an external topology leaves the servers alone.
	if err := ext.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if st := enginetest.Status(t, ctx, shared, "primary"); st.Health != compose.HealthOK {
		t.Fatalf("external Down touched the primary: %+v", st)
	}
	bad := compose.Config{Backend: compose.BackendExternal, External: compose.ExternalConfig{PrimaryDSN: "u:p@tcp(127.0.0.1:1)/"}}
	if _, err := compose.Start(ctx, bad); err == nil {
		t.Fatal("attached to nothing")
	}
}

func TestAttachFromStateFile(t *testing.T) {
	composetest.Need(t, shared)
	ctx := testCtx(t)
	path := filepath.Join(t.TempDir(), "state.json")
	if err := compose.WriteStateFile(path, shared.State()); err != nil {
		t.Fatal(err)
	}
	st, err := compose.ReadStateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	att, err := compose.Attach(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if att.Primary() != shared.Primary() || len(att.Replicas()) != len(shared.Replicas()) {
		t.Fatalf("attached nodes %+v", att.Nodes())
	}
	// Process faults through the attached copy reach the same servers.
	if err := att.Pause(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = att.Resume(context.Background(), "replica1") })
	if st := enginetest.Status(t, ctx, shared, "replica1"); st.Health != compose.HealthUnreachable {
		t.Fatalf("pause through attached copy not seen: %+v", st)
	}
	if err := att.Resume(ctx, "replica1"); err != nil {
		t.Fatal(err)
	}
	id := enginetest.Write(t, ctx, shared)
	enginetest.Eventually(t, "replica1 to apply after resume", func() bool { return enginetest.Has(t, ctx, shared, "replica1", id) })
}
