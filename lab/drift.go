package lab

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
	"github.com/causallab/causallab/router/live"
)

// drifter is the outside load of drift events, for one live router: real
// reads (SELECT SLEEP(0.2) in a loop) through the router, with read ids
// that hash to the drifting replica under full-list and a full-list policy
// of their own, so they stay there and the router's in-flight count for
// the replica rises as a load balancer would see it. This is what
// rebalance-override reacts to. Through the proxy it is the proxy's own
// router (proxy.Server.Router): the load of other clients of the same
// proxy.
type drifter[P gtid.Position[P]] struct {
	ctx      context.Context // bounds the readers
	rt       *live.Router[P]
	table    *hashroute.Table // over the configured replicas, with their weights
	replicas []string

	mu     sync.Mutex
	drifts map[string][]context.CancelFunc // per node: running readers' cancels
	wg     sync.WaitGroup
	errs   atomic.Int64 // failed drift reads
}

func newDrifter[P gtid.Position[P]](ctx context.Context, rt *live.Router[P], table *hashroute.Table, replicas []string) *drifter[P] {
	return &drifter[P]{ctx: ctx, rt: rt, table: table, replicas: replicas, drifts: map[string][]context.CancelFunc{}}
}

// drift starts (d > 0) or stops (d < 0) d outside readers on the named
// replica.
func (f *drifter[P]) drift(name string, d int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d < 0 {
		for _, c := range f.drifts[name] {
			c()
		}
		delete(f.drifts, name)
		return
	}
	idx := -1
	for i, r := range f.replicas {
		if r == name {
			idx = i
		}
	}
	if idx < 0 || f.table == nil || f.rt == nil {
		f.errs.Add(1)
		return
	}
	ids := make([]string, 0, d)
	for k := 0; len(ids) < d && k < 1_000_000; k++ {
		id := "drift-" + strconv.Itoa(k)
		if f.table.First(hashroute.Hash(id)) == idx {
			ids = append(ids, id)
		}
	}
	ctx, cancel := context.WithCancel(f.ctx)
	f.drifts[name] = append(f.drifts[name], cancel)
	pol := router.Policy{Kind: router.PolicyAffinity, HashMode: hashroute.FullList}
	for _, id := range ids {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			s := f.rt.NewSession()
			s.SetConsistentReadID(id)
			defer s.Close()
			for ctx.Err() == nil {
				if _, err := s.QueryWith(ctx, pol, "SELECT SLEEP(0.2)"); err != nil && ctx.Err() == nil {
					f.errs.Add(1)
					sleepCtx(ctx, 50*time.Millisecond)
				}
			}
		}()
	}
}

// close stops every reader and waits for them.
func (f *drifter[P]) close() {
	f.mu.Lock()
	for _, cs := range f.drifts {
		for _, c := range cs {
			c()
		}
	}
	f.drifts = map[string][]context.CancelFunc{}
	f.mu.Unlock()
	f.wg.Wait()
}

// hashTable is the hashing table over the topology's replicas with the
// run's weights (nil without replicas).
func hashTable(names []string, weights []int) (*hashroute.Table, error) {
	if len(names) == 0 {
		return nil, nil
	}
	srv := make([]hashroute.Server, len(names))
	for i, n := range names {
		srv[i] = hashroute.Server{Name: n, Weight: weightOf(weights, i)}
	}
	return hashroute.NewTable(srv)
}

// weightOf is replica i's weight (1 when none is configured).
func weightOf(weights []int, i int) int {
	if i < len(weights) && weights[i] > 0 {
		return weights[i]
	}
	return 1
}
