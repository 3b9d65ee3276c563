package live

import (
	"context"
	"strings"
	"testing"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// TestAffinityWeightsAndHashReason: replica weights shape the live
// router's hashing table as they shape hashroute's, and every affinity
// read says why it went where it did (Read.HashReason).
func TestAffinityWeightsAndHashReason(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []hashroute.Mode{hashroute.FullList, hashroute.AvailableOnly} {
		r, src := funcRouter(t, func(c *Config[gtid.Set]) {
			c.Policy = router.Policy{Kind: router.PolicyAffinity, HashMode: mode}
			c.Replicas[0].Weight = 3
		})
		tab, err := hashroute.NewTable([]hashroute.Server{{Name: "r1", Weight: 3}, {Name: "r2", Weight: 1}})
		if err != nil {
			t.Fatal(err)
		}
		s := r.NewSession()
		on := map[string]int{}
		for i := range 400 {
			key := hashroute.Hash("session-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26))
			s.SetAffinityKey(key)
			rr := &runRec{}
			rd, err := s.QueryFunc(ctx, s.policy, ReadOptions[gtid.Set]{}, rr.run)
			if err != nil {
				t.Fatal(err)
			}
			want := tab.Server(tab.First(key)).Name
			if rd.Node != want || rd.HashReason != hashroute.FirstChoice {
				t.Fatalf("%v: key %#x on %s (%v), want %s (first-choice)", mode, key, rd.Node, rd.HashReason, want)
			}
			on[rd.Node]++
		}
		if on["r1"] < 2*on["r2"] {
			t.Errorf("%v: weights 3:1 gave %v", mode, on)
		}
		// r1 down: its ids are reselected onto r2 and say so.
		src.up["r1"] = false
		for i := range 50 {
			key := hashroute.Hash("down-" + strings.Repeat("y", i))
			s.SetAffinityKey(key)
			rd, err := s.QueryFunc(ctx, s.policy, ReadOptions[gtid.Set]{}, (&runRec{}).run)
			if err != nil {
				t.Fatal(err)
			}
			wantWhy := hashroute.FirstChoice
			if tab.First(key) == 0 {
				wantWhy = hashroute.Reselected
			}
			if rd.Node != "r2" || rd.HashReason != wantWhy {
				t.Fatalf("%v: r1 down: on %s (%v), want r2 (%v)", mode, rd.Node, rd.HashReason, wantWhy)
			}
		}
		src.up["r1"] = true
	}
}

func TestConfigRejectsBadWeight(t *testing.T) {
	for _, w := range []int{-1, hashroute.MaxWeight + 1} {
		cfg := Config[gtid.Set]{Primary: Node{Name: "p", Addr: "x:1"}, Replicas: []Node{{Name: "r", Addr: "x:2", Weight: w}},
			Positions: &staticSource{}}
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "weight") {
			t.Errorf("weight %d: %v, want a weight error", w, err)
		}
	}
}

// TestMarkDownDropsIdleConnections: a node failure closes the pool's idle
// connections to it, so a restarted node is not held down again by each
// connection that predates its restart.
func TestMarkDownDropsIdleConnections(t *testing.T) {
	r, _ := funcRouter(t, nil)
	addr := r.cfg.Replicas[0].Addr
	r.pool.idle[addr] = nil // no real connection needed: the list is what drop empties
	r.pool.idle["other:1"] = nil
	r.markDown(context.Background(), r.cfg.Replicas[0], context.Canceled)
	if _, ok := r.pool.idle[addr]; ok {
		t.Errorf("idle connections to %s kept after it failed", addr)
	}
	if _, ok := r.pool.idle["other:1"]; !ok {
		t.Errorf("another node's idle connections dropped")
	}
}
