package live

import (
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// TestDecideLiveFutile: DecideLive's futile-wait test (no MySQL: a static
// position source and a commit log the test writes). Two replicas hold
// u:1-10; the primary's log says u:1-10 at t0, u:1-20 at t0+1s and u:1-30
// at t0+2s. A session whose token is u:30 reads at t0+2s+5ms under
// token-wait(100ms)+skip-futile: the waited replica lacks the entry of
// t0+1s (Lag 1.005 s) and the need is 5 ms old, so it needs about 1 s more:
// futile, a capped fallback at once. The same read without +skip-futile,
// or without a commit log, or with an older token whose wait the estimate
// lets through, waits; a read a replica serves measures nothing (Lag stays
// 0 in the view).
func TestDecideLiveFutile(t *testing.T) {
	u := "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	set := func(s string) gtid.Set { return gtid.MustParse(u + ":" + s) }
	t0 := time.Unix(1000, 0)
	log := NewCommitLog[gtid.Set](16, 0)
	log.Record(t0, set("1-10"))
	log.Record(t0.Add(time.Second), set("1-20"))
	log.Record(t0.Add(2*time.Second), set("1-30"))
	src := &staticSource{pos: map[string]gtid.Set{"r0": set("1-10"), "r1": set("1-10"), "p": set("1-30")},
		up: map[string]bool{"r0": true, "r1": true, "p": true}}
	st := &LiveState[gtid.Set]{Flavor: MySQL{}, Primary: Node{Name: "p"}, Replicas: []Node{{Name: "r0"}, {Name: "r1"}},
		PrimaryPos: set("1-30"), DownUntil: map[string]time.Time{}, InFlight: map[string]int{}, Commits: log}
	wall := t0.Add(2*time.Second + 5*time.Millisecond)
	skip := router.Policy{Kind: router.PolicyTokenWait, WaitBudget: 100 * time.Millisecond, SkipFutile: true}
	plain := skip
	plain.SkipFutile = false
	decide := func(pol router.Policy, st *LiveState[gtid.Set], token string) (router.Decision, *router.View[gtid.Set]) {
		ses := router.Session[gtid.Set]{Token: set(token), HasToken: true}
		req := LiveRequest[gtid.Set]{Session: &ses, Policy: &pol, Wall: wall}
		var b router.Bucket
		d, v, _ := DecideLive(st, src, &req, &b)
		return d, v
	}
	noLog := *st
	noLog.Commits = nil
	for _, c := range []struct {
		name  string
		pol   router.Policy
		st    *LiveState[gtid.Set]
		token string
		want  router.Decision
		lag   time.Duration // the waited replica's Lag in the view (-1: not looked at)
	}{
		{"futile", skip, st, "30", router.Decision{Action: router.ActPrimary, Reason: router.ReasonWaitFutile, Replica: -1, Fallback: true}, time.Second + 5*time.Millisecond},
		{"off", plain, st, "30", router.Decision{Action: router.ActWait, Reason: router.ReasonNoReplicaQualifies, Replica: 0, WaitFor: 100 * time.Millisecond}, 0},
		{"no-commit-log", skip, &noLog, "30", router.Decision{Action: router.ActWait, Reason: router.ReasonNoReplicaQualifies, Replica: 0, WaitFor: 100 * time.Millisecond}, 0},
		// u:11 was first held at t0+1s, as old as the replicas' first
		// missing entry: if their lag holds steady they apply it now.
		{"old-need-waits", skip, st, "11", router.Decision{Action: router.ActWait, Reason: router.ReasonNoReplicaQualifies, Replica: 0, WaitFor: 100 * time.Millisecond}, time.Second + 5*time.Millisecond},
		{"served", skip, st, "5", router.Decision{Action: router.ActReplica, Reason: router.ReasonRouted, Replica: 0}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, v := decide(c.pol, c.st, c.token)
			if d != c.want {
				t.Fatalf("DecideLive = %+v, want %+v", d, c.want)
			}
			if got := v.Replicas[0].Lag; got != c.lag {
				t.Errorf("view's Lag of replica 0 = %v, want %v", got, c.lag)
			}
			if got := v.Replicas[1].Lag; got != 0 {
				t.Errorf("view's Lag of replica 1 (not waited on) = %v, want 0: measured off the wait", got)
			}
		})
	}
}

// TestCommitLogAge: the age of the first entry containing a position; a
// position newer than every entry gets the newest one's age, one older
// than the log the oldest's; an empty log knows nothing.
func TestCommitLogAge(t *testing.T) {
	l := NewCommitLog[gtid.PGLSN](4, 0)
	now := time.Unix(100, 0)
	if _, ok := l.Age(1, now); ok {
		t.Fatal("an empty log knows an age")
	}
	for i, p := range []gtid.PGLSN{10, 20, 30} {
		l.Record(now.Add(time.Duration(i-3)*time.Second), p)
	}
	for _, c := range []struct {
		p    gtid.PGLSN
		want time.Duration
	}{{5, 3 * time.Second}, {10, 3 * time.Second}, {11, 2 * time.Second}, {20, 2 * time.Second}, {30, time.Second}, {31, time.Second}} {
		if got, ok := l.Age(c.p, now); !ok || got != c.want {
			t.Errorf("Age(%d) = %v, %v; want %v", c.p, got, ok, c.want)
		}
	}
}

// TestLiveRejectsFutileTrend: +futile-trend needs Replica.Progress, which
// the live router does not measure: a session's SetPolicy and the
// router's config refuse it with an error naming it (the session keeps
// its policy), plain +skip-futile is taken.
func TestLiveRejectsFutileTrend(t *testing.T) {
	trend, err := router.ParsePolicy("token-wait(100ms)+skip-futile+futile-trend")
	if err != nil {
		t.Fatal(err)
	}
	s := &LiveSession[gtid.Set]{}
	if err := s.SetPolicy(trend); err == nil || !strings.Contains(err.Error(), "futile-trend") {
		t.Fatalf("SetPolicy(%v) = %v, want an error naming futile-trend", trend, err)
	}
	if s.Policy().FutileTrend {
		t.Fatal("the refused policy was kept")
	}
	plain := trend
	plain.FutileTrend = false
	if err := s.SetPolicy(plain); err != nil || s.Policy() != plain {
		t.Fatalf("SetPolicy(%v) = %v, policy %v", plain, err, s.Policy())
	}
	// The router's default policy: its config is refused the same way.
	cfg := Config[gtid.Set]{Primary: Node{Name: "p", Addr: "127.0.0.1:1"}, Positions: &Poller[gtid.Set]{}, Policy: trend}
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "futile-trend") {
		t.Fatalf("config with %v: %v, want an error naming futile-trend", trend, err)
	}
	cfg.Policy = plain
	if err := cfg.validate(); err != nil {
		t.Fatalf("config with %v: %v", plain, err)
	}
}
