package proxy

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/causallab/causallab/hashroute"
)

// routeLog records Config.OnRead's reports by connection.
type routeLog struct {
	mu   sync.Mutex
	last map[uint32]ReadRoute
}

func (l *routeLog) add(r ReadRoute) {
	l.mu.Lock()
	l.last[r.Conn] = r
	l.mu.Unlock()
}

// TestAffinityThroughOutage: policy affinity through the proxy, in both
// hash modes, reports every read's route (OnRead: node and hash reason);
// a killed replica's ids are reselected (and say so); once it is back
// its sessions return to it without holding it down again on their
// connections opened before the kill (Router.Failures does not move).
func TestAffinityThroughOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, mode := range []hashroute.Mode{hashroute.FullList, hashroute.AvailableOnly} {
		t.Run(mode.String(), func(t *testing.T) {
			log := &routeLog{last: map[uint32]ReadRoute{}}
			s := startProxy(t, func(c *Config) {
				c.Policy, c.HashMode, c.OnRead = "affinity", mode.String(), log.add
			})
			reps := topo.Replicas()
			tab, err := hashroute.NewTable([]hashroute.Server{{Name: reps[0].Name, Weight: 1}, {Name: reps[1].Name, Weight: 1}})
			if err != nil {
				t.Fatal(err)
			}
			// one id per replica
			ids := map[int]string{}
			for k := 0; len(ids) < 2; k++ {
				id := "u" + strconv.Itoa(k)
				if _, ok := ids[tab.First(hashroute.Hash(id))]; !ok {
					ids[tab.First(hashroute.Hash(id))] = id
				}
			}
			db := openDB(t, s, "")
			db.SetMaxIdleConns(8)
			const sessions = 4
			var conns []*sql.Conn
			for range sessions {
				c, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				conns = append(conns, c)
			}
			// read reads id on c; a read in flight on a connection the
			// kill cut is lost to the client (error 2013, not retried: it
			// may have run), so one retry is allowed, as a client would.
			read := func(c *sql.Conn, id string) ReadRoute {
				t.Helper()
				var err error
				for try := 0; try < 2; try++ {
					log.mu.Lock()
					clear(log.last)
					log.mu.Unlock()
					var one int
					if err = c.QueryRowContext(ctx, "/* consistent_read_id:"+id+" */ SELECT 1").Scan(&one); err == nil {
						break
					}
				}
				if err != nil {
					t.Fatalf("read %s: %v", id, err)
				}
				log.mu.Lock()
				defer log.mu.Unlock()
				if len(log.last) != 1 {
					t.Fatalf("%d routes reported for one read", len(log.last))
				}
				for _, r := range log.last {
					return r
				}
				return ReadRoute{}
			}
			for _, c := range conns {
				for i, id := range ids {
					if r := read(c, id); r.Replica != i || r.Node != reps[i].Name || r.HashReason != hashroute.FirstChoice {
						t.Fatalf("id %s: route %+v, want %s first-choice", id, r, reps[i].Name)
					}
				}
			}
			down := reps[0].Name
			if err := topo.Kill(ctx, down); err != nil {
				t.Fatal(err)
			}
			restarted := false
			defer func() {
				if !restarted {
					_ = topo.Restart(context.WithoutCancel(ctx), down)
				}
			}()
			for _, c := range conns {
				if r := read(c, ids[0]); r.Node != reps[1].Name || r.HashReason != hashroute.Reselected {
					t.Fatalf("%s down: route %+v, want %s reselected", down, r, reps[1].Name)
				}
			}
			if err := topo.Restart(ctx, down); err != nil {
				t.Fatal(err)
			}
			restarted = true
			// wait until the router serves the id from its replica again
			deadline := time.Now().Add(60 * time.Second)
			for read(conns[0], ids[0]).Node != down {
				if time.Now().After(deadline) {
					t.Fatalf("%s never served again after its restart", down)
				}
				time.Sleep(100 * time.Millisecond)
			}
			before := s.Router().Failures(down)
			for _, c := range conns[1:] {
				if r := read(c, ids[0]); r.Node != down || r.HashReason != hashroute.FirstChoice {
					t.Errorf("after the restart: route %+v, want %s first-choice", r, down)
				}
			}
			if after := s.Router().Failures(down); after != before {
				t.Errorf("%s failed %d more times on connections opened before its restart", down, after-before)
			}
		})
	}
}
