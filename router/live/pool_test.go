package live

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/internal/mysqlwire"
	"github.com/causallab/causallab/router"
)

// testSharedPool: 2,000 live sessions on one router whose shared primary
// pool holds 16 connections, replica1's applier stopped. Half the sessions
// write with Exec (the pool) and read with Query; the other half write on
// the worker's own tracked connection (RecordAck) and read with QueryFunc
// on the worker's own connections (the proxy's way). Every session reads
// its own row back: zero RYW violations from the rows MySQL returned,
// every token captured, and the pool never opened more than 16
// connections. Then session state pins a connection and a transaction
// pins one until COMMIT.
func testSharedPool(t *testing.T, ctx context.Context, pl *Poller[gtid.Set]) {
	const sessions, poolSize, workers = 2000, 16, 32
	reps := topo.Replicas()
	if err := topo.StopApplier(ctx, reps[0].Name); err != nil {
		t.Fatal(err)
	}
	defer resetFaults(t, ctx)
	reg := prometheus.NewRegistry()
	r := newLiveRouter(t, ctx, Config[gtid.Set]{Positions: pl, PrimaryPool: poolSize, MaxIdle: workers, Registerer: reg,
		Policy: router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 500 * time.Millisecond, CheckEpoch: true}})
	setup := r.NewSession()
	mustExec(t, ctx, setup, "CREATE TABLE IF NOT EXISTS rt.pool (sess INT PRIMARY KEY, v INT NOT NULL)")
	mustExec(t, ctx, setup, "DELETE FROM rt.pool")
	setup.Close()

	ss := make([]*LiveSession[gtid.Set], sessions)
	for i := range ss {
		ss[i] = r.NewSession()
	}
	var viol, readErrs, replicaReads, funcReads atomic.Int64
	var firstErr atomic.Value
	note := func(err error) {
		readErrs.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// The worker's own connections (QueryFunc sessions): a tracked
			// primary connection, one per replica.
			own, err := dialTracking(ctx, r.dial, r.cfg.Primary.Addr, MySQL{}.TrackSession)
			if err != nil {
				note(err)
				return
			}
			defer own.Close()
			nodeConn := map[string]*client.Conn{}
			defer func() {
				for _, c := range nodeConn {
					c.Close()
				}
			}()
			for i := w; i < sessions; i += workers {
				s := ss[i]
				viaFunc := (i/workers)%2 == 1 // each worker alternates: up to 32 writers on a pool of 16
				if viaFunc {
					// The GTID from our own copy of the OK packet (go-mysql's
					// SessionTracking strings alias a shared pooled buffer).
					rec := mysqlwire.InstallRecorder(own)
					rec.Start()
					_, err := mysqlwire.Exec(ctx, own, "INSERT INTO rt.pool VALUES (?, ?)", i, i*7)
					tr, perr := mysqlwire.ParseLastOK(rec.Stop())
					if err != nil || perr != nil || tr.GTID == "" {
						note(fmt.Errorf("own write: %v %v", err, perr))
						continue
					}
					set, err := gtid.Parse(tr.GTID)
					if err != nil {
						note(err)
						continue
					}
					s.RecordAck(set)
				} else if _, err := s.Exec(ctx, "INSERT INTO rt.pool VALUES (?, ?)", i, i*7); err != nil {
					note(err)
					continue
				}
				if gtok(s).GTIDs.IsEmpty() {
					note(fmt.Errorf("session %d: no token after its write", i))
					continue
				}
				var got int64 = -1
				var rd *Read[gtid.Set]
				if viaFunc {
					rd, err = s.QueryFunc(ctx, s.Policy(), ReadOptions[gtid.Set]{}, func(ctx context.Context, tg Target) (gtid.Set, error) {
						c := nodeConn[tg.Node.Name]
						if c == nil {
							if c, err = r.dial.Dial(ctx, tg.Node.Addr, false); err != nil {
								return gtid.Set{}, err
							}
							nodeConn[tg.Node.Name] = c
						}
						res, err := mysqlwire.Exec(ctx, c, "SELECT v FROM rt.pool WHERE sess = ?", i)
						if err != nil {
							c.Close()
							delete(nodeConn, tg.Node.Name)
							return gtid.Set{}, err
						}
						if res.RowNumber() > 0 {
							got, _ = res.GetInt(0, 0)
						}
						if !tg.Watermark {
							return gtid.Set{}, nil
						}
						return mysqlwire.ReadExecuted(ctx, c)
					})
					funcReads.Add(1)
				} else {
					rd, err = s.Query(ctx, "SELECT v FROM rt.pool WHERE sess = ?", i)
					if err == nil && rd.Result.RowNumber() > 0 {
						got, _ = rd.Result.GetInt(0, 0)
					}
				}
				if err != nil {
					note(err)
					continue
				}
				if rd.Outcome == router.OutReplica {
					replicaReads.Add(1)
				}
				if got != int64(i*7) {
					viol.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(t0)
	dials := testutil.ToFloat64(r.m.poolDials)
	t.Logf("%d sessions, pool %d: %v; RYW violations %d, read errors %d (first: %v), replica reads %d, QueryFunc reads %d, primary pool dials %v, pool waits %v, writes %v",
		sessions, poolSize, el.Round(time.Millisecond), viol.Load(), readErrs.Load(), firstErr.Load(), replicaReads.Load(),
		funcReads.Load(), dials, testutil.ToFloat64(r.m.poolWaits), testutil.ToFloat64(r.m.writes))
	if viol.Load() != 0 || readErrs.Load() != 0 {
		t.Fatalf("RYW violations %d, errors %d", viol.Load(), readErrs.Load())
	}
	if dials > poolSize {
		t.Errorf("primary pool opened %v connections, bound %d", dials, poolSize)
	}
	if n := testutil.ToFloat64(r.m.poolInUse); n != 0 {
		t.Errorf("%v primary connections still borrowed by sessions between writes", n)
	}
	if n := testutil.ToFloat64(r.m.pins.WithLabelValues("session-state")); n != 0 {
		t.Errorf("plain INSERTs pinned connections for session state %v times", n)
	}
	if replicaReads.Load() == 0 {
		t.Error("no read served by a replica: the test proves nothing about routing")
	}

	// Session state pins the connection: a user variable set by Exec is
	// seen by the session's next read (pinned to that connection).
	s := r.NewSession()
	mustExec(t, ctx, s, "SET @causallab_pin = 42")
	rd, err := s.Query(ctx, "SELECT @causallab_pin")
	if err != nil {
		t.Fatal(err)
	}
	if v := readInt(t, rd); v != 42 || rd.Pin != "session-state" {
		t.Errorf("after SET: read %d pinned %q, want 42 on the session's connection", v, rd.Pin)
	}
	s.Close()
	if n := testutil.ToFloat64(r.m.poolInUse); n != 0 {
		t.Errorf("%v borrowed after Close", n)
	}
	// A transaction pins until COMMIT, then the GTID is captured.
	s = r.NewSession()
	mustExec(t, ctx, s, "BEGIN")
	mustExec(t, ctx, s, "INSERT INTO rt.pool VALUES (?, 1)", sessions+1)
	if n := testutil.ToFloat64(r.m.poolInUse); n != 1 || !gtok(s).GTIDs.IsEmpty() {
		t.Errorf("in transaction: borrowed %v, token %v (want 1 borrowed, no token yet)", n, gtok(s))
	}
	rd, err = s.Query(ctx, "SELECT v FROM rt.pool WHERE sess = ?", sessions+1)
	if err != nil || rd.Pin != "in-transaction" || rd.Result.RowNumber() != 1 {
		t.Fatalf("read in transaction: %+v %v", rd, err)
	}
	mustExec(t, ctx, s, "COMMIT")
	if n := testutil.ToFloat64(r.m.poolInUse); n != 0 || gtok(s).GTIDs.IsEmpty() {
		t.Errorf("after COMMIT: borrowed %v, token %v", n, gtok(s))
	}
	s.Close()

	// A transaction open when the router switches primaries (here: the
	// same server under a new node name, as Failover would install) is
	// refused with ErrTxLost, rolled back, and the statement is not run.
	s = r.NewSession()
	mustExec(t, ctx, s, "BEGIN")
	mustExec(t, ctx, s, "INSERT INTO rt.pool VALUES (?, 2)", sessions+2)
	r.mu.Lock()
	old := r.st.Primary
	r.st.Primary = Node{Name: old.Name + "-new", Addr: old.Addr}
	r.mu.Unlock()
	_, err = s.Exec(ctx, "INSERT INTO rt.pool VALUES (?, 3)", sessions+3)
	r.mu.Lock()
	r.st.Primary = old
	r.mu.Unlock()
	if !errors.Is(err, ErrTxLost) {
		t.Fatalf("statement after the primary changed under an open transaction: %v, want ErrTxLost", err)
	}
	chk := r.NewSession()
	defer chk.Close()
	mustExec(t, ctx, chk, "BEGIN") // read on the primary, pinned
	rd, err = chk.Query(ctx, "SELECT COUNT(*) FROM rt.pool WHERE sess IN (?, ?)", sessions+2, sessions+3)
	if err != nil {
		t.Fatal(err)
	}
	if n := readInt(t, rd); n != 0 {
		t.Errorf("%d rows of the lost transaction or of the refused statement are in the table", n)
	}
	mustExec(t, ctx, chk, "COMMIT")
	if n := testutil.ToFloat64(r.m.poolInUse); n != 0 {
		t.Errorf("%v borrowed after the lost transaction", n)
	}
	s.Close()
}
