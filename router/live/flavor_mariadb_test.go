package live

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/gtid"
)

func TestMariaDBTrackSession(t *testing.T) {
	const set = "SET SESSION session_track_system_variables = 'last_gtid'"
	good := func() *fakeConn {
		return &fakeConn{acks: map[string]Ack{set: {StateChanged: true, Vars: map[string]string{"session_track_system_variables": "last_gtid"}}},
			values: map[string]string{"SELECT @@SESSION.session_track_system_variables": "last_gtid", "SELECT @@GLOBAL.log_bin": "1"}}
	}
	ctx := context.Background()
	if err := (MariaDB{}).TrackSession(ctx, good()); err != nil {
		t.Fatalf("a server that reports: %v", err)
	}
	noTrack := good()
	noTrack.acks[set] = Ack{}
	if err := (MariaDB{}).TrackSession(ctx, noTrack); err == nil || !strings.Contains(err.Error(), "no session-tracking data") {
		t.Errorf("an OK packet without tracking: %v", err)
	}
	other := good()
	other.values["SELECT @@SESSION.session_track_system_variables"] = "autocommit"
	if err := (MariaDB{}).TrackSession(ctx, other); err == nil || !strings.Contains(err.Error(), "want last_gtid") {
		t.Errorf("list not taken: %v", err)
	}
	noBin := good()
	noBin.values["SELECT @@GLOBAL.log_bin"] = "0"
	if err := (MariaDB{}).TrackSession(ctx, noBin); err == nil || !strings.Contains(err.Error(), "log_bin") {
		t.Errorf("log_bin off: %v", err)
	}
}

func TestMariaDBWritePosition(t *testing.T) {
	ctx := context.Background()
	p, ok, err := MariaDB{}.WritePosition(ctx, Ack{Vars: map[string]string{"last_gtid": "0-1-42"}}, nil)
	if err != nil || !ok || p.String() != "0-1-42" {
		t.Fatalf("0-1-42: %v %v %v", p, ok, err)
	}
	if _, ok, err := (MariaDB{}).WritePosition(ctx, Ack{StateChanged: true}, nil); ok || err != nil {
		t.Errorf("no last_gtid: ok %v, err %v; want not a write, no error", ok, err)
	}
	if _, _, err := (MariaDB{}).WritePosition(ctx, Ack{Vars: map[string]string{"last_gtid": "0-1-x"}}, nil); err == nil || !strings.Contains(err.Error(), "0-1-x") {
		t.Errorf("garbage last_gtid: %v, want an error naming it", err)
	}
}

func TestMariaDBWaitAndBehind(t *testing.T) {
	f := MariaDB{}
	need := gtid.MustParseMariaDBPosition("0-1-5,2-3-9")
	if q := f.WaitQuery(need, 1500*time.Millisecond); q != "SELECT MASTER_GTID_WAIT(_utf8mb4'0-1-5,2-3-9', 1.500)" && !strings.HasPrefix(q, "SELECT MASTER_GTID_WAIT(_utf8mb4'0-1-5,2-3-9', 1.5") {
		t.Errorf("WaitQuery = %q", q)
	}
	if got := f.Behind(need, gtid.MustParseMariaDBPosition("0-2-3")); got != 2+9 {
		t.Errorf("Behind = %d, want 11 (2 in domain 0, 9 in domain 2)", got)
	}
	if got := f.Behind(gtid.MustParseMariaDBPosition("0-1-3"), need); got != 0 {
		t.Errorf("Behind of a replica ahead = %d, want 0", got)
	}
	if p, err := f.ParseExecuted("0-1-5,2-3-9"); err != nil || !p.Equal(need) {
		t.Errorf("ParseExecuted: %v %v", p, err)
	}
	// The watermark query's answer: the binary log's position, then
	// gtid_current_pos; each domain's highest counts.
	if p, err := f.ParseExecuted("0-1-7,2-3-9,0-1-5"); err != nil || !p.Equal(gtid.MustParseMariaDBPosition("0-1-7,2-3-9")) {
		t.Errorf("ParseExecuted of the joined lists: %v %v", p, err)
	}
	if _, err := f.ParseExecuted("0-1-5,x"); err == nil {
		t.Error("ParseExecuted accepted a malformed list")
	}
}

// TestMariaDBSetFlavor: the set flavor reads MariaDB's texts as sets of
// one source per domain and waits with MASTER_GTID_WAIT on the highest
// sequence number of each domain; a set naming a MySQL server waits for
// a domain no server has (it times out, it never passes).
func TestMariaDBSetFlavor(t *testing.T) {
	f := MariaDBSet{}
	s, err := f.ParseExecuted("0-1-10,2-5-3")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.WaitQuery(s, 2*time.Second), "SELECT MASTER_GTID_WAIT(_utf8mb4'0-0-10,2-0-3', 2.000)"; got != want {
		t.Errorf("wait: %s, want %s", got, want)
	}
	w, ok, err := f.WritePosition(context.Background(), Ack{Vars: map[string]string{"last_gtid": "2-5-4"}}, nil)
	if err != nil || !ok || !w.Union(s).Contains(s) || s.Contains(w) {
		t.Fatalf("write 2-5-4 over %s: %s, %v, %v", s, w, ok, err)
	}
	if _, ok, err := f.WritePosition(context.Background(), Ack{}, nil); ok || err != nil {
		t.Fatalf("no last_gtid: %v, %v", ok, err)
	}
	if got := f.WaitQuery(gtid.MustParse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"), time.Second); got != "SELECT MASTER_GTID_WAIT(_utf8mb4'4294967295-0-18446744073709551615', 1.000)" {
		t.Errorf("a MySQL set's wait: %s", got)
	}
	if f.Behind(s, gtid.Set{}) != 13 {
		t.Errorf("behind: %d", f.Behind(s, gtid.Set{}))
	}
}
