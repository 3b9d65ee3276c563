package gtid

import (
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// ToGoMySQL converts s to go-mysql's representation (half-open intervals),
// for the binlog syncer. The result shares no memory with s.
func (s Set) ToGoMySQL() *mysql.MysqlGTIDSet {
	m := mysql.NewMysqlGTIDSet()
	for _, src := range s.srcs {
		u := uuid.UUID(src.key.SID)
		tags, ok := m[u]
		if !ok {
			tags = make(map[mysql.Tag]mysql.IntervalSlice, 1)
			m[u] = tags
		}
		ivs := make(mysql.IntervalSlice, len(src.ivs))
		for i, iv := range src.ivs {
			ivs[i] = mysql.Interval{Start: iv.Start, Stop: iv.End + 1}
		}
		tags[mysql.NewTag(src.key.Tag)] = ivs
	}
	return &m
}

// FromGoMySQL converts a go-mysql set, validating and normalising it: it
// fails on an interval outside 1..MaxGNO, an empty or reversed interval or a
// malformed tag. A nil set is the empty set.
func FromGoMySQL(m *mysql.MysqlGTIDSet) (Set, error) {
	if m == nil {
		return Set{}, nil
	}
	var srcs []source
	for u, tags := range *m {
		for tag, ivs := range tags {
			if len(ivs) == 0 {
				continue
			}
			key := SourceKey{SID: SID(u), Tag: tag.String()}
			if key.Tag != "" {
				end, err := scanTag(key.Tag, 0)
				if err != nil {
					return Set{}, fmt.Errorf("gtid: go-mysql set, source %s: %w", u, err)
				}
				if end != len(key.Tag) {
					return Set{}, fmt.Errorf("gtid: go-mysql set, source %s: tag %q holds a character other than a letter, digit or '_'", u, key.Tag)
				}
				key.Tag = lowerTag(key.Tag)
			}
			out := make([]Interval, len(ivs))
			for i, iv := range ivs {
				if iv.Start < 1 || iv.Stop <= iv.Start || iv.Stop-1 > MaxGNO {
					return Set{}, fmt.Errorf("gtid: go-mysql set, source %s:%s: interval [%d,%d) is empty or outside 1..%d", u, key.Tag, iv.Start, iv.Stop, MaxGNO)
				}
				out[i] = Interval{iv.Start, iv.Stop - 1}
			}
			srcs = append(srcs, source{key: key, ivs: out})
		}
	}
	return normalize(srcs), nil
}
