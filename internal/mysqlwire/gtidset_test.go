package mysqlwire

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"

	"github.com/causallab/causallab/gtid"
)

func TestGoMySQLRoundTrip(t *testing.T) {
	for _, text := range []string{
		"",
		u1 + ":1-5",
		u1 + ":1-5:7:9-10:ta:1-2:tb:5,\n" + u2 + ":1-3,\n" + u3 + ":1-9223372036854775806",
	} {
		s := gtid.MustParse(text)
		m := GoMySQLSet(s)
		if got := m.String(); got != s.CompactString() {
			t.Errorf("go-mysql prints %q, want %q", got, s.CompactString())
		}
		back, err := FromGoMySQLSet(m)
		if err != nil || !back.Equal(s) {
			t.Errorf("FromGoMySQLSet(ToGoMySQL(%q)) = %q, %v", text, back, err)
		}
		// And from go-mysql's own parser.
		gm, err := mysql.ParseMysqlGTIDSet(text)
		if err != nil {
			t.Fatal(err)
		}
		back, err = FromGoMySQLSet(gm.(*mysql.MysqlGTIDSet))
		if err != nil || !back.Equal(s) {
			t.Errorf("FromGoMySQLSet(go-mysql parse of %q) = %q, %v", text, back, err)
		}
	}
	if s, err := FromGoMySQLSet(nil); err != nil || !s.IsEmpty() {
		t.Errorf("nil: %v %v", s, err)
	}
}

func TestFromGoMySQLRejects(t *testing.T) {
	u := uuid.MustParse(u1)
	for name, ivs := range map[string]mysql.IntervalSlice{
		"zero":     {{Start: 0, Stop: 3}},
		"empty":    {{Start: 3, Stop: 3}},
		"reversed": {{Start: 5, Stop: 3}},
		"negative": {{Start: -5, Stop: 3}},
	} {
		m := mysql.MysqlGTIDSet{u: {mysql.Tag{}: ivs}}
		if _, err := FromGoMySQLSet(&m); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	m := mysql.MysqlGTIDSet{u: {mysql.NewTag("bad-tag"): {{Start: 1, Stop: 2}}}}
	if _, err := FromGoMySQLSet(&m); err == nil {
		t.Error("bad tag accepted")
	}
	// Unnormalised go-mysql input is normalised.
	m = mysql.MysqlGTIDSet{u: {mysql.Tag{}: {{Start: 5, Stop: 8}, {Start: 1, Stop: 5}}}}
	s, err := FromGoMySQLSet(&m)
	if err != nil || s.String() != u1+":1-7" {
		t.Errorf("normalise: %q %v", s, err)
	}
}

const (
	u1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	u2 = "4e11fa47-71ca-11e1-9e33-c80aa9429562"
	u3 = "5e11fa47-71ca-11e1-9e33-c80aa9429562"
)

// FuzzGoMySQLRoundTrip: every set gtid.Parse accepts survives the trip to
// go-mysql's representation and back.
func FuzzGoMySQLRoundTrip(f *testing.F) {
	for _, s := range []string{"", u1 + ":1-5", u1 + ":1-5:7:Ta:2,\n" + u2 + ":3", u3 + ":1-9223372036854775806"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := gtid.Parse(s)
		if err != nil {
			return
		}
		if back, err := FromGoMySQLSet(GoMySQLSet(set)); err != nil || !back.Equal(set) {
			t.Fatalf("go-mysql round trip of %q: %q, %v", s, back, err)
		}
	})
}
