package mysqlwire

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"

	"github.com/causallab/causallab/gtid"
)

// GoMySQLSet converts s to go-mysql's representation (half-open
// intervals), for the binlog syncer. The result shares no memory with s.
func GoMySQLSet(s gtid.Set) *mysql.MysqlGTIDSet {
	m := mysql.NewMysqlGTIDSet()
	for key, ivs := range s.Sources() {
		u := uuid.UUID(key.SID)
		tags, ok := m[u]
		if !ok {
			tags = make(map[mysql.Tag]mysql.IntervalSlice, 1)
			m[u] = tags
		}
		out := make(mysql.IntervalSlice, len(ivs))
		for i, iv := range ivs {
			out[i] = mysql.Interval{Start: iv.Start, Stop: iv.End + 1}
		}
		tags[mysql.NewTag(key.Tag)] = out
	}
	return &m
}

// FromGoMySQLSet converts a go-mysql set, validating and normalising it
// (through gtid.Parse): it fails on an interval outside 1..gtid.MaxGNO,
// an empty or reversed interval or a malformed tag. A nil set is the empty
// set.
func FromGoMySQLSet(m *mysql.MysqlGTIDSet) (gtid.Set, error) {
	if m == nil {
		return gtid.Set{}, nil
	}
	var b strings.Builder
	for u, tags := range *m {
		for tag, ivs := range tags {
			if len(ivs) == 0 {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(u.String())
			if t := tag.String(); t != "" {
				b.WriteString(":" + t)
			}
			for _, iv := range ivs {
				if iv.Start < 1 || iv.Stop <= iv.Start || iv.Stop-1 > gtid.MaxGNO {
					return gtid.Set{}, fmt.Errorf("mysqlwire: go-mysql set, source %s:%s: interval [%d,%d) is empty or outside 1..%d", u, tag, iv.Start, iv.Stop, gtid.MaxGNO)
				}
				b.WriteString(":" + strconv.FormatInt(iv.Start, 10) + "-" + strconv.FormatInt(iv.Stop-1, 10))
			}
		}
	}
	s, err := gtid.Parse(b.String())
	if err != nil {
		return gtid.Set{}, fmt.Errorf("mysqlwire: go-mysql set: %w", err)
	}
	return s, nil
}
