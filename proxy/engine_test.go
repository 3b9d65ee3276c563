package proxy

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestOwnGTIDs: a MySQL OK packet's write position is its tracked GTIDs;
// a MariaDB one's is last_gtid read as a set of one source per domain,
// and a last_gtid that is not a MariaDB GTID comes back as it came (the
// session's parse then fails and counts it) rather than being dropped.
func TestOwnGTIDs(t *testing.T) {
	const uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562:7"
	for _, c := range []struct {
		mariaDB bool
		t       *mysql.SessionTrackingInfo
		want    string
	}{
		{false, nil, ""},
		{false, &mysql.SessionTrackingInfo{GTID: uuid}, uuid},
		{true, &mysql.SessionTrackingInfo{GTID: uuid}, ""},
		{true, &mysql.SessionTrackingInfo{Variables: map[string]string{"last_gtid": "0-1-42"}}, "4d617269-6144-4200-8000-000000000000:1-42"},
		{true, &mysql.SessionTrackingInfo{Variables: map[string]string{"last_gtid": ""}}, ""},
		{true, &mysql.SessionTrackingInfo{Variables: map[string]string{"last_gtid": "0-1-x"}}, "0-1-x"},
	} {
		if got := ownGTIDs(c.mariaDB, c.t); got != c.want {
			t.Errorf("mariaDB %v, %+v: %q, want %q", c.mariaDB, c.t, got, c.want)
		}
	}
}
