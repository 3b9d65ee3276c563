package live

import (
	"context"
	"errors"
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
