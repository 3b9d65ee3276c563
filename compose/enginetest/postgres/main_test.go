package postgres_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/compose/enginetest"
	"github.com/causallab/causallab/gtid"
)

// topo is this package's one topology: a primary and two replicas.
var topo *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{Engine: compose.EnginePostgres, Replicas: 2}, func(t *compose.Topology) int {
		topo = t
		return m.Run()
	}))
}

// TestTokenCapture measures which LSN to take as a write's token, right
// after its commit on the same session: pg_current_wal_lsn() (WAL
// written) or pg_current_wal_insert_lsn() (WAL reserved, possibly by
// other sessions' records not yet written). A concurrent writer runs so
// the two can differ. Each token must be enough: once replica1's
// pg_last_wal_replay_lsn() reaches it, the row is there. It also
// records that PostgreSQL 18 has no server-side wait for an LSN (WAIT
// FOR LSN is a syntax error, pg_wal_replay_wait does not exist): waits
// poll. (Runs before TestFaults, whose failover changes roles.)
func TestTokenCapture(t *testing.T) {
	composetest.Need(t, topo)
	ctx := enginetest.Ctx(t)
	cc, err := pgx.ParseConfig(topo.Primary().DSN())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS public.tokens (id BIGSERIAL PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	// The concurrent writer.
	bg, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer bg.Close(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := bg.Exec(ctx, "INSERT INTO public.tokens (v) VALUES (-1)"); err != nil {
				return
			}
		}
	}()
	r1 := enginetest.DB(t, topo, "replica1")
	const n = 100
	differ, stale := 0, 0
	var gap uint64
	for i := range n {
		var id int64
		if err := conn.QueryRow(ctx, "INSERT INTO public.tokens (v) VALUES ($1) RETURNING id", i).Scan(&id); err != nil {
			t.Fatal(err)
		}
		var w, ins string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text, pg_current_wal_insert_lsn()::text").Scan(&w, &ins); err != nil {
			t.Fatal(err)
		}
		lw, li := gtid.MustParsePGLSN(w), gtid.MustParsePGLSN(ins)
		if li < lw {
			t.Fatalf("insert LSN %s before write LSN %s", li, lw)
		}
		if li != lw {
			differ++
			gap += uint64(li - lw)
		}
		// Wait (by polling, the only way) until replica1 has replayed the
		// write LSN: the row must then be visible.
		enginetest.Eventually(t, "replica1 to replay "+w, func() bool {
			var at string
			if err := r1.QueryRowContext(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&at); err != nil {
				t.Fatal(err)
			}
			return gtid.MustParsePGLSN(at).Contains(lw)
		})
		var c int
		if err := r1.QueryRowContext(ctx, "SELECT count(*) FROM public.tokens WHERE id = $1", id).Scan(&c); err != nil {
			t.Fatal(err)
		}
		if c != 1 {
			stale++
		}
	}
	close(stop)
	<-done
	if stale > 0 {
		t.Fatalf("%d of %d rows missing on replica1 once it had replayed pg_current_wal_lsn() taken after the commit", stale, n)
	}
	t.Logf("%d writes with a concurrent writer: pg_current_wal_lsn() was enough for every one; pg_current_wal_insert_lsn() was further in %d (by %d bytes on average when it was)",
		n, differ, gap/uint64(max(differ, 1)))
	_, err = conn.Exec(ctx, "WAIT FOR LSN '0/0'")
	if err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Fatalf("WAIT FOR LSN on PostgreSQL 18: %v (expected a syntax error: the command is not in this version)", err)
	}
	var fns int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_proc WHERE proname IN ('pg_wal_replay_wait', 'pg_wal_replay_wait_status')").Scan(&fns); err != nil || fns != 0 {
		t.Fatalf("pg_wal_replay_wait functions: %d, %v", fns, err)
	}
}

// TestFaults runs the engine-neutral topology and fault tests, failover
// last (it leaves replica1 the primary). PostgreSQL replays all the WAL a
// standby received when it is promoted, so the failover holds replica1
// back by stopping its WAL receiver (StopReceiver, on either backend).
func TestFaults(t *testing.T) {
	composetest.Need(t, topo)
	enginetest.Run(t, topo, 300*time.Millisecond, 50*time.Millisecond, func(t *testing.T, ctx context.Context, topo *compose.Topology) error {
		return topo.StopReceiver(ctx, "replica1")
	})
}
