package live

import (
	"context"
	"testing"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// TestSessionStaysOnLastReplica: a token-ryw session's reads stay on the
// replica its first replica read went to while it qualifies
// (router.Session.LastReplica), move when it stops qualifying (a token it
// lacks) or goes down, and a second session is not tied to the first's.
func TestSessionStaysOnLastReplica(t *testing.T) {
	r, src := funcRouter(t, func(c *Config[gtid.Set]) {
		c.Policy = router.Policy{Kind: router.PolicyTokenRYW}
	})
	// Both replicas hold everything for now.
	src.mu.Lock()
	src.pos["r2"] = src.pos["r1"]
	src.mu.Unlock()
	ctx := context.Background()
	read := func(s *LiveSession[gtid.Set]) string {
		t.Helper()
		var rr runRec
		rd, err := s.QueryFunc(ctx, s.policy, ReadOptions[gtid.Set]{}, rr.run)
		if err != nil || rd.Outcome != router.OutReplica {
			t.Fatalf("read = %+v, %v", rd, err)
		}
		return rd.Node
	}
	// Sessions' first reads are random: over 20 sessions both replicas
	// are someone's first, and each session's next 30 reads stay there.
	firsts := map[string]int{}
	var s *LiveSession[gtid.Set]
	for range 20 {
		s = r.NewSession()
		first := read(s)
		firsts[first]++
		for i := range 30 {
			if got := read(s); got != first {
				t.Fatalf("read %d went to %s, the session's last replica was %s", i+2, got, first)
			}
		}
	}
	if len(firsts) != 2 {
		t.Fatalf("first reads of 20 sessions: %v, want both replicas", firsts)
	}
	// The last replica stops qualifying: a token only the other holds.
	last := read(s)
	other := map[string]string{"r1": "r2", "r2": "r1"}[last]
	src.mu.Lock()
	src.pos[other] = set(t, uA+":1-12")
	src.mu.Unlock()
	s.RecordAck(set(t, uA+":12"))
	for range 5 {
		if got := read(s); got != other {
			t.Fatalf("with a token only %s holds the read went to %s", other, got)
		}
	}
	// And stays on its new last replica once both hold the token again.
	src.mu.Lock()
	src.pos[last] = src.pos[other]
	src.mu.Unlock()
	for range 5 {
		if got := read(s); got != other {
			t.Fatalf("both hold the token: the read went to %s, the session's last replica is %s", got, other)
		}
	}
	// Down: the session moves.
	src.mu.Lock()
	src.up[other] = false
	src.mu.Unlock()
	if got := read(s); got != last {
		t.Fatalf("%s down: the read went to %s", other, got)
	}
}
