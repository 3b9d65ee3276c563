package live

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
)

// TestAllGTIDsTrackerBoundsTheRead checks, on real MySQL, what a cheaper
// monotonic-reads watermark would rest on: on a replica connection with
// CLIENT_SESSION_TRACK and CLIENT_DEPRECATE_EOF (go-mysql's client asks
// for it) and session_track_gtids = ALL_GTIDS, the OK packet that ends
// every autocommit SELECT's result set carries the replica's whole
// gtid_executed, and that set lies between gtid_executed read on another
// connection just before the statement and just after it, while the
// primary commits without pause. If so, the watermark could come from the
// read's own response instead of the extra SELECT @@GLOBAL.gtid_executed
// that token-wait pipelines behind every read today (docs/router.md).
// The router does not use this yet; the test pins the server behaviour.
func TestAllGTIDsTrackerBoundsTheRead(t *testing.T) {
	composetest.Need(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pu, rn := topo.Primary(), topo.Replicas()[0]
	d := &mysqlwire.Dialer{User: pu.User, Password: pu.Password, Timeout: 2 * time.Second}
	w, err := d.Dial(ctx, pu.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS rtrack", "CREATE TABLE IF NOT EXISTS rtrack.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)"} {
		if _, err := mysqlwire.Exec(ctx, w, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := topo.WaitReplicated(ctx, 30*time.Second); err != nil {
		t.Fatal(err) // the table must exist on the replica before it is read
	}
	// A writer commits on the primary for the whole test.
	wctx, stopWriter := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	var writes atomic.Int64
	go func() {
		defer wg.Done()
		for wctx.Err() == nil {
			if _, err := mysqlwire.Exec(wctx, w, "INSERT INTO rtrack.t (v) VALUES (1)"); err != nil {
				if wctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			writes.Add(1)
		}
	}()
	defer func() { stopWriter(); wg.Wait() }()

	r, err := d.Dial(ctx, rn.Addr(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !mysqlwire.CapsOf(r).DeprecateEOF {
		t.Skip("the server did not grant CLIENT_DEPRECATE_EOF: result sets end with EOF packets, which carry no tracking")
	}
	rec := mysqlwire.InstallRecorder(r)
	if _, err := mysqlwire.Exec(ctx, r, "SET SESSION session_track_gtids = ALL_GTIDS"); err != nil {
		t.Fatal(err)
	}
	other, err := d.Dial(ctx, rn.Addr(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	executed := func() gtid.Set {
		s, err := mysqlwire.ReadExecuted(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const n = 500
	grew := 0
	var prev gtid.Set
	for i := range n {
		before := executed()
		rec.Start()
		q := "SELECT COUNT(*) FROM rtrack.t"
		if i%2 == 1 {
			q = "SELECT 1"
		}
		if _, err := mysqlwire.Exec(ctx, r, q); err != nil {
			t.Fatal(err)
		}
		tr, err := mysqlwire.ParseLastOKDeprecateEOF(rec.Stop())
		if err != nil {
			t.Fatalf("statement %d: %v", i, err)
		}
		after := executed()
		if tr.GTID == "" {
			t.Fatalf("statement %d (%s): the result's OK packet carried no GTID set", i, q)
		}
		tracked, err := gtid.Parse(tr.GTID)
		if err != nil {
			t.Fatalf("statement %d: tracked set %q: %v", i, tr.GTID, err)
		}
		if !tracked.Contains(before) {
			t.Fatalf("statement %d: tracked %s lacks gtid_executed read before the statement %s", i, tracked, before)
		}
		if !after.Contains(tracked) {
			t.Fatalf("statement %d: tracked %s holds more than gtid_executed read after the statement %s", i, tracked, after)
		}
		if i > 0 && !tracked.Equal(prev) {
			grew++
		}
		prev = tracked
	}
	if grew < n/10 {
		t.Fatalf("the tracked set changed between only %d of %d statements: the writer did not reach the replica, the test proves little", grew, n)
	}
	t.Logf("%d statements, tracked set changed between %d of them; %d writes committed", n, grew, writes.Load())
}
