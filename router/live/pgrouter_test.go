package live

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causallab/causallab/gtid"
	"github.com/causallab/causallab/router"
)

// TestPGRunError: a statement error is the caller's; connection
// exceptions, operator intervention and recovery conflicts are the
// node's (held down, decided again); an error without a SQLSTATE passes
// through as a node error.
func TestPGRunError(t *testing.T) {
	for _, c := range []struct {
		code        string
		node, retry bool
	}{
		{"42703", false, false}, // undefined column
		{"23505", false, false}, // unique violation
		{"08006", true, true},   // connection failure
		{"57P01", true, true},   // admin shutdown
		{"40001", true, true},   // serialization failure / recovery conflict
	} {
		err := pgRunError(&pgconn.PgError{Code: c.code})
		var re *RunError
		if !errors.As(err, &re) || re.NodeFailed != c.node || re.Retry != c.retry {
			t.Errorf("%s: %#v, want NodeFailed %v Retry %v", c.code, err, c.node, c.retry)
		}
	}
	plain := errors.New("connection reset")
	if got := pgRunError(plain); got != plain {
		t.Errorf("an error without SQLSTATE: %v, want it unchanged", got)
	}
}

func TestPostgresFlavor(t *testing.T) {
	f := Postgres{}
	ctx := context.Background()
	if err := f.TrackSession(ctx, &fakeConn{values: map[string]string{pgInRecoveryQuery: "false"}}); err != nil {
		t.Fatalf("a primary: %v", err)
	}
	if err := f.TrackSession(ctx, &fakeConn{values: map[string]string{pgInRecoveryQuery: "true"}}); err == nil || !strings.Contains(err.Error(), "standby") {
		t.Errorf("a standby: %v", err)
	}
	p, ok, err := f.WritePosition(ctx, Ack{}, &fakeConn{values: map[string]string{pgWriteLSNQuery: "0/402ED38"}})
	if err != nil || !ok || p != gtid.MustParsePGLSN("0/402ED38") {
		t.Fatalf("WritePosition: %v %v %v", p, ok, err)
	}
	if _, _, err := f.WritePosition(ctx, Ack{}, &fakeConn{values: map[string]string{pgWriteLSNQuery: "zz"}}); err == nil {
		t.Error("an unparsable LSN was accepted")
	}
	if p, err := f.ParseExecuted(""); err != nil || p != 0 {
		t.Errorf("NULL replay LSN: %v %v, want 0", p, err)
	}
	if f.WaitQuery(1, time.Second) != "" {
		t.Error("PostgreSQL 18 has no server-side wait")
	}
	if f.Behind(100, 40) != 60 || f.Behind(40, 100) != 0 {
		t.Error("Behind")
	}
}

// TestPGConfigAndPoller: bad configuration is refused before any I/O.
func TestPGConfigAndPoller(t *testing.T) {
	c := PGConfig{MaxConns: -1}
	if err := c.validate(); err == nil {
		t.Error("negative MaxConns accepted")
	}
	ok := PGConfig{}
	if err := ok.validate(); err != nil || ok.Database != "postgres" || ok.StatementTimeout != 5*time.Second {
		t.Errorf("defaults: %+v %v", ok, err)
	}
	if _, err := NewPGPoller(PollerConfig[gtid.PGLSN]{}, ""); err == nil || !strings.Contains(err.Error(), "no nodes") {
		t.Errorf("no nodes: %v", err)
	}
	if _, err := NewPG(context.Background(), PGConfig{Primary: Node{Name: "p", Addr: "127.0.0.1:1"}, Policy: router.Policy{Kind: router.PolicyTokenWait}}); err == nil || !strings.Contains(err.Error(), "PositionSource") {
		t.Errorf("no position source: %v", err)
	}
}

// TestPGPositionsConfig: the kind is an explicit choice (an unknown one
// is refused, naming it); each kind builds its parts; two sources on one
// registry share the fallback counter.
func TestPGPositionsConfig(t *testing.T) {
	base := PGPositionsConfig{Primary: Node{Name: "primary", Addr: "127.0.0.1:1"}, Replicas: []Node{{Name: "replica1", Addr: "127.0.0.1:2"}}, User: "u"}
	bad := base
	bad.Kind = "feedback"
	if _, err := NewPGPositions(bad); err == nil || !strings.Contains(err.Error(), `"feedback"`) {
		t.Fatalf("unknown kind: %v", err)
	}
	noRep := base
	noRep.Kind, noRep.Replicas = PGPositionsWalsender, nil
	if _, err := NewPGPositions(noRep); err == nil {
		t.Fatal("no replicas accepted")
	}
	reg := prometheus.NewRegistry()
	for _, k := range []PGPositions{PGPositionsPoll, PGPositionsWalsender, PGPositionsWalsenderPoll, PGPositionsWalsenderPoll} {
		c := base
		c.Kind, c.Registerer = k, reg
		s, err := NewPGPositions(c)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if (s.Watcher() != nil) != (k != PGPositionsPoll) || (s.poller != nil) != (k != PGPositionsWalsender) || s.Kind() != k {
			t.Fatalf("%s: watcher %v, poller %v", k, s.Watcher() != nil, s.poller != nil)
		}
		// Nothing ran: no standby is vouched for, and the poller has not
		// answered either, so there is no fallback to count.
		if _, ok := s.Position("replica1"); ok || s.Fallbacks() != 0 {
			t.Fatalf("%s: a standby healthy before any read", k)
		}
	}
}

// TestPGPollTimeline: NewPGPoller's flavor answers Postgres' queries until
// a timeline is bound; bound to timeline 2, both position queries look
// for timeline 3's history file after reading the LSN (so a node that
// knows of a later timeline answers NULL), and rebinding follows the
// failover's timeline. A PGPositionSource's poller is bound the same way;
// a flavor other than Postgres is refused.
func TestPGPollTimeline(t *testing.T) {
	nodes := []Node{{Name: "p", Addr: "127.0.0.1:1"}, {Name: "s1", Addr: "127.0.0.1:2"}}
	pl, err := NewPGPoller(PollerConfig[gtid.PGLSN]{Flavor: Postgres{}, Nodes: nodes, Primary: "p"}, "")
	if err != nil {
		t.Fatal(err)
	}
	f, ok := pl.cfg.Flavor.(*pgPollFlavor)
	if !ok {
		t.Fatalf("NewPGPoller's flavor is %T", pl.cfg.Flavor)
	}
	if pl.query("s1") != pgStandbyQuery || pl.query("p") != pgExecutedQuery || f.timeline() != 0 {
		t.Fatalf("unbound: %q, %q, timeline %d", pl.query("s1"), pl.query("p"), f.timeline())
	}
	setPollTimeline(pl, 2)
	for node, inner := range map[string]string{"s1": "SELECT pg_last_wal_replay_lsn() AS lsn",
		"p": "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS lsn"} {
		q := pl.query(node)
		file, sub := strings.Index(q, "pg_wal/00000003.history"), strings.Index(q, "FROM ("+inner+" OFFSET 0) s")
		if file < 0 || sub < 0 || !strings.Contains(q, "IS NULL THEN s.lsn END") {
			t.Errorf("%s on timeline 2: %q", node, q)
		}
	}
	setPollTimeline(pl, 0x1A)
	if q := pl.query("s1"); !strings.Contains(q, "pg_wal/0000001B.history") || f.timeline() != 0x1A {
		t.Errorf("timeline 0x1A: %q", q)
	}
	setPollTimeline(pl, 0)
	if pl.query("s1") != pgStandbyQuery {
		t.Errorf("unbound again: %q", pl.query("s1"))
	}
	src, err := NewPGPositions(PGPositionsConfig{Kind: PGPositionsWalsenderPoll, Primary: nodes[0], Replicas: nodes[1:], User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	setPollTimeline(src, 5)
	if q := src.poller.query("s1"); !strings.Contains(q, "pg_wal/00000006.history") {
		t.Errorf("a PGPositionSource's poller on timeline 5: %q", q)
	}
	setPollTimeline(nil, 5) // no source: nothing to bind
	if _, err := NewPGPoller(PollerConfig[gtid.PGLSN]{Flavor: &pgPollFlavor{}, Nodes: nodes}, ""); err == nil {
		t.Error("a flavor other than Postgres accepted")
	}
}

// TestParsePGTimeline: the timeline is a WAL file name's first eight hex
// digits, never 0.
func TestParsePGTimeline(t *testing.T) {
	for in, want := range map[string]uint32{"000000010000000000000005": 1, "0000002A000000000000000B": 42, "FFFFFFFF00000000000000FF": 0xFFFFFFFF} {
		if got, err := parsePGTimeline(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0000001", "000000000000000000000001", "zz000001000000000000000001", "-0000001000000000000000001"} {
		if got, err := parsePGTimeline(in); err == nil {
			t.Errorf("%q: %d accepted", in, got)
		}
	}
}

// FuzzParsePGTimeline: never panics; an accepted name starts with the
// timeline's eight hex digits.
func FuzzParsePGTimeline(f *testing.F) {
	for _, s := range []string{"000000010000000000000005", "", "0000000G", "+0000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tli, err := parsePGTimeline(s)
		if err != nil {
			return
		}
		if tli == 0 || !strings.EqualFold(s[:8], fmt.Sprintf("%08X", tli)) {
			t.Fatalf("%q: timeline %d", s, tli)
		}
	})
}
