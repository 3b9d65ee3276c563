package mysqlwire

import (
	"context"
	"errors"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// fakeServer answers the probe's two queries.
type fakeServer struct {
	binlog    string // LogStatusBinlogQuery's answer
	logStatus string // LogStatusQuery's answer
	refuse    bool   // LogStatusQuery refused (no BACKUP_ADMIN)
	broken    bool   // every query fails as a lost connection
	asked     int
}

func (f *fakeServer) read(_ context.Context, q string) (string, error) {
	f.asked++
	switch {
	case f.broken:
		return "", errors.New("connection reset")
	case q == LogStatusBinlogQuery:
		return f.binlog, nil
	case q == LogStatusQuery && f.refuse:
		return "", &mysql.MyError{Code: 1227, State: "42000", Message: "Access denied; you need (at least one of) the BACKUP_ADMIN privilege(s) for this operation"}
	case q == LogStatusQuery:
		return f.logStatus, nil
	}
	return "", errors.New("unexpected query " + q)
}

func TestProbeLogStatus(t *testing.T) {
	const set = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"
	ctx := t.Context()
	for _, tc := range []struct {
		name     string
		srv      fakeServer
		sound    bool
		refusal  func(error) bool
		connFail bool
	}{
		{name: "sound", srv: fakeServer{binlog: "1", logStatus: set}, sound: true},
		{name: "sound-empty-set", srv: fakeServer{binlog: "1", logStatus: ""}, sound: true},
		{name: "no-backup-admin", srv: fakeServer{binlog: "1", refuse: true},
			refusal: func(err error) bool { return IsServerError(err) }},
		{name: "no-binlog", srv: fakeServer{binlog: "0", logStatus: set},
			refusal: func(err error) bool { return errors.Is(err, ErrLogStatusNoBinlog) }},
		{name: "not-a-set", srv: fakeServer{binlog: "1", logStatus: "{\"oops\": 1}"},
			refusal: func(err error) bool { return err != nil && !IsServerError(err) }},
		{name: "connection-lost", srv: fakeServer{broken: true}, connFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ls LogStatus
			first, err := ls.Probe(ctx, tc.srv.read)
			switch {
			case tc.connFail:
				if err == nil || ls.Known() {
					t.Fatalf("a lost connection: err %v, known %v (want an error, verdict unknown)", err, ls.Known())
				}
				return
			case err != nil:
				t.Fatal(err)
			case tc.sound:
				if first != nil || !ls.Sound() {
					t.Fatalf("refusal %v, sound %v: want sound", first, ls.Sound())
				}
			default:
				if !tc.refusal(first) || ls.Sound() || !ls.Known() {
					t.Fatalf("refusal %v, sound %v, known %v", first, ls.Sound(), ls.Known())
				}
			}
			// The verdict is kept: a later probe asks nothing and reports
			// no refusal again (logged once).
			asked := tc.srv.asked
			if again, err := ls.Probe(ctx, tc.srv.read); again != nil || err != nil || tc.srv.asked != asked {
				t.Errorf("second probe: %v, %v, %d more queries", again, err, tc.srv.asked-asked)
			}
		})
	}
}
