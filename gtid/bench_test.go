package gtid

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/google/uuid"
)

// benchUUIDs are five source UUIDs, as in a topology that saw a few failovers.
var benchUUIDs = []string{
	"05a7b3c2-1111-11ef-8a01-0242ac120002",
	"3e11fa47-71ca-11e1-9e33-c80aa9429562",
	"8a94f357-aab4-11df-86ab-c80aa9429563",
	"b6c3e1d0-2222-11ef-9b02-0242ac120003",
	"f0e1d2c3-3333-11ef-ac03-0242ac120004",
}

// fiveUUIDs is an executed set with five sources, one long run each.
func fiveUUIDs(scale int64) string {
	var parts []string
	for i, u := range benchUUIDs {
		parts = append(parts, fmt.Sprintf("%s:1-%d", u, scale*int64(i+1)))
	}
	return strings.Join(parts, ",\n")
}

// fragmented is one source with n intervals (every other block of 10 GNOs),
// and its subset that takes a piece of every interval.
func fragmented(n int, sub bool) string {
	var b strings.Builder
	b.WriteString(benchUUIDs[1])
	for i := range n {
		lo := int64(i*20 + 1)
		hi := lo + 9
		if sub {
			lo, hi = lo+2, hi-3
		}
		fmt.Fprintf(&b, ":%d-%d", lo, hi)
	}
	return b.String()
}

func goMySQL(b *testing.B, s string) *mysql.MysqlGTIDSet {
	g, err := mysql.ParseMysqlGTIDSet(s)
	if err != nil {
		b.Fatal(err)
	}
	return g.(*mysql.MysqlGTIDSet)
}

var sink bool

func BenchmarkContainsGTID(b *testing.B) {
	text := fiveUUIDs(1000000)
	set := MustParse(text)
	g := MustParseGTID(benchUUIDs[3] + ":123456")
	b.Run("impl=gtid/5uuids", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = set.ContainsGTID(g)
		}
		if !sink {
			b.Fatal("wrong answer")
		}
	})
	b.Run("impl=go-mysql/5uuids", func(b *testing.B) {
		// go-mysql has no one-GTID test: a one-GTID set and Contain.
		gm := goMySQL(b, text)
		one := mysql.NewMysqlGTIDSet()
		one.AddGTID(uuid.UUID(g.SID), g.GNO)
		b.ReportAllocs()
		for b.Loop() {
			sink = gm.Contain(&one)
		}
		if !sink {
			b.Fatal("wrong answer")
		}
	})
}

func BenchmarkContainsSet(b *testing.B) {
	cases := []struct{ name, sup, sub string }{
		{"5uuids", fiveUUIDs(1000000), fiveUUIDs(900000)},
		{"100intervals", fragmented(100, false), fragmented(100, true)},
	}
	for _, c := range cases {
		sup, sub := MustParse(c.sup), MustParse(c.sub)
		b.Run("impl=gtid/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = sup.Contains(sub)
			}
			if !sink {
				b.Fatal("wrong answer")
			}
		})
		b.Run("impl=go-mysql/"+c.name, func(b *testing.B) {
			gsup, gsub := goMySQL(b, c.sup), goMySQL(b, c.sub)
			b.ReportAllocs()
			for b.Loop() {
				sink = gsup.Contain(gsub)
			}
			if !sink {
				b.Fatal("wrong answer")
			}
		})
	}
}

var sinkSet Set

func BenchmarkParse(b *testing.B) {
	cases := []struct{ name, text string }{
		{"5uuids", fiveUUIDs(1000000)},
		{"100intervals", fragmented(100, false)},
	}
	for _, c := range cases {
		b.Run("impl=gtid/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.text)))
			for b.Loop() {
				s, err := Parse(c.text)
				if err != nil {
					b.Fatal(err)
				}
				sinkSet = s
			}
		})
		b.Run("impl=go-mysql/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.text)))
			for b.Loop() {
				if _, err := mysql.ParseMysqlGTIDSet(c.text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var sinkString string

func BenchmarkString(b *testing.B) {
	text := fiveUUIDs(1000000)
	set := MustParse(text)
	gm := goMySQL(b, text)
	b.Run("impl=gtid/5uuids", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkString = set.String()
		}
	})
	b.Run("impl=go-mysql/5uuids", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkString = gm.String()
		}
	})
}

func BenchmarkUnion(b *testing.B) {
	x, y := MustParse(fiveUUIDs(1000000)), MustParse(fragmented(100, true))
	b.ReportAllocs()
	for b.Loop() {
		sinkSet = x.Union(y)
	}
}

// BenchmarkAddInPlace is the binlog's common case: the next GNO of a source.
func BenchmarkAddInPlace(b *testing.B) {
	b.Run("impl=gtid/next", func(b *testing.B) {
		s := MustParse(fiveUUIDs(1000))
		g := MustParseGTID(benchUUIDs[4] + ":5001")
		b.ReportAllocs()
		for b.Loop() {
			if err := s.AddInPlace(g); err != nil {
				b.Fatal(err)
			}
			g.GNO++
		}
	})
	b.Run("impl=go-mysql/next", func(b *testing.B) {
		gm := goMySQL(b, fiveUUIDs(1000))
		u := uuid.MustParse(benchUUIDs[4])
		gno := int64(5001)
		b.ReportAllocs()
		for b.Loop() {
			gm.AddGTID(u, gno)
			gno++
		}
	})
}
