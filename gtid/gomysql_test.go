package gtid

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

func TestGoMySQLRoundTrip(t *testing.T) {
	for _, text := range []string{
		"",
		u1 + ":1-5",
		u1 + ":1-5:7:9-10:ta:1-2:tb:5,\n" + u2 + ":1-3,\n" + u3 + ":1-9223372036854775806",
	} {
		s := MustParse(text)
		m := s.ToGoMySQL()
		if got := m.String(); got != s.CompactString() {
			t.Errorf("go-mysql prints %q, want %q", got, s.CompactString())
		}
		back, err := FromGoMySQL(m)
		if err != nil || !back.Equal(s) {
			t.Errorf("FromGoMySQL(ToGoMySQL(%q)) = %q, %v", text, back, err)
		}
		// And from go-mysql's own parser.
		gm, err := mysql.ParseMysqlGTIDSet(text)
		if err != nil {
			t.Fatal(err)
		}
		back, err = FromGoMySQL(gm.(*mysql.MysqlGTIDSet))
		if err != nil || !back.Equal(s) {
			t.Errorf("FromGoMySQL(go-mysql parse of %q) = %q, %v", text, back, err)
		}
	}
	if s, err := FromGoMySQL(nil); err != nil || !s.IsEmpty() {
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
		if _, err := FromGoMySQL(&m); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	m := mysql.MysqlGTIDSet{u: {mysql.NewTag("bad-tag"): {{Start: 1, Stop: 2}}}}
	if _, err := FromGoMySQL(&m); err == nil {
		t.Error("bad tag accepted")
	}
	// Unnormalised go-mysql input is normalised.
	m = mysql.MysqlGTIDSet{u: {mysql.Tag{}: {{Start: 5, Stop: 8}, {Start: 1, Stop: 5}}}}
	s, err := FromGoMySQL(&m)
	if err != nil || s.String() != u1+":1-7" {
		t.Errorf("normalise: %q %v", s, err)
	}
}
