package live

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
)

// fakeConn is a SessionConn answering from maps, recording what ran.
type fakeConn struct {
	acks   map[string]Ack
	values map[string]string
	ran    []string
}

func (f *fakeConn) Exec(_ context.Context, q string) (Ack, error) {
	f.ran = append(f.ran, q)
	return f.acks[q], nil
}

func (f *fakeConn) ReadValue(_ context.Context, q string) (string, error) {
	f.ran = append(f.ran, q)
	v, ok := f.values[q]
	if !ok {
		return "", errors.New("no such value")
	}
	return v, nil
}

func TestMySQLTrackSession(t *testing.T) {
	const set = "SET SESSION session_track_gtids = OWN_GTID"
	good := func() *fakeConn {
		return &fakeConn{acks: map[string]Ack{set: {Vars: map[string]string{"session_track_gtids": "OWN_GTID"}}},
			values: map[string]string{"SELECT @@GLOBAL.gtid_mode": "ON"}}
	}
	if err := (MySQL{}).TrackSession(context.Background(), good()); err != nil {
		t.Fatalf("a server that reports: %v", err)
	}
	noVar := good()
	noVar.acks[set] = Ack{}
	if err := (MySQL{}).TrackSession(context.Background(), noVar); err == nil || !strings.Contains(err.Error(), "no session-tracking data") {
		t.Errorf("an OK packet without the variable: %v", err)
	}
	off := good()
	off.values["SELECT @@GLOBAL.gtid_mode"] = "OFF"
	if err := (Scalar{}).TrackSession(context.Background(), off); err == nil || !strings.Contains(err.Error(), "gtid_mode") {
		t.Errorf("gtid_mode OFF: %v", err)
	}
}

func TestFlavorWritePosition(t *testing.T) {
	const g = "3e11fa47-71ca-11e1-9e33-c80aa9429562:7"
	ctx := context.Background()
	set, ok, err := MySQL{}.WritePosition(ctx, Ack{GTID: g}, nil)
	if err != nil || !ok || set.String() != g {
		t.Fatalf("MySQL: %v %v %v", set, ok, err)
	}
	if _, ok, err := (MySQL{}).WritePosition(ctx, Ack{}, nil); ok || err != nil {
		t.Errorf("MySQL without a GTID: ok=%v err=%v", ok, err)
	}
	if _, _, err := (MySQL{}).WritePosition(ctx, Ack{GTID: "not-a-gtid"}, nil); err == nil {
		t.Error("MySQL accepted an unparsable GTID")
	}
	c := &fakeConn{values: map[string]string{"SELECT @@GLOBAL.gtid_executed": "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-7,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:1-3"}}
	lsn, ok, err := Scalar{}.WritePosition(ctx, Ack{GTID: g}, c)
	if err != nil || !ok || lsn != 10 {
		t.Fatalf("Scalar: %v %v %v, want 10", lsn, ok, err)
	}
	c.ran = nil
	if _, ok, err := (Scalar{}).WritePosition(ctx, Ack{}, c); ok || err != nil || len(c.ran) != 0 {
		t.Errorf("Scalar without a commit: ok=%v err=%v ran %v (want nothing run)", ok, err, c.ran)
	}
}

func TestFlavorWaitAndBehind(t *testing.T) {
	need := gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")
	if q := (MySQL{}).WaitQuery(need, 250*time.Millisecond); q != "SELECT WAIT_FOR_EXECUTED_GTID_SET(_utf8mb4'3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5', 0.250)" {
		t.Errorf("MySQL wait query %q", q)
	}
	if q := (Scalar{}).WaitQuery(5, time.Second); q != "" {
		t.Errorf("Scalar has a wait query %q", q)
	}
	if b := (MySQL{}).Behind(need, gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-2")); b != 3 {
		t.Errorf("MySQL behind %d, want 3", b)
	}
	if b := (Scalar{}).Behind(3, 9); b != 0 {
		t.Errorf("Scalar ahead counted behind %d", b)
	}
}

// TestScalarConfigWaits: a flavor without a server-side wait waits on the
// position source (WaitAuto), and asking for the server-side wait fails.
func TestScalarConfigWaits(t *testing.T) {
	cfg := Config[gtid.LSN]{Flavor: Scalar{}, Primary: Node{Name: "p", Addr: "127.0.0.1:1"}, Positions: &Poller[gtid.LSN]{}}
	if err := cfg.validate(); err != nil || cfg.Wait != WaitWatcher {
		t.Fatalf("WaitAuto: %v, wait %v", err, cfg.Wait)
	}
	cfg.Wait = WaitGTIDFunction
	if err := cfg.validate(); err == nil {
		t.Fatal("WaitGTIDFunction accepted for a flavor without a server-side wait")
	}
	var none Config[gtid.LSN]
	none.Primary, none.Positions = Node{Name: "p", Addr: "127.0.0.1:1"}, &Poller[gtid.LSN]{}
	if err := none.validate(); err == nil || !strings.Contains(err.Error(), "no Flavor") {
		t.Fatalf("no flavor for gtid.LSN: %v", err)
	}
}
