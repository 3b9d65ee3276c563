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

// holey is an executed set of n UUIDs, each 1..hi with every 1000th pair
// of transactions missing (hi/1000 gaps per UUID), as router's
// BenchmarkDecide builds its fragmented replicas.
func holey(n int, hi int64) string {
	var parts []string
	for u := range n {
		var b strings.Builder
		fmt.Fprintf(&b, "%08x-0000-4000-8000-%012x", 0x3e11fa47+u, u)
		for start := int64(1); start <= hi; start += 1000 {
			fmt.Fprintf(&b, ":%d-%d", start, min(start+997, hi))
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, ",")
}

// tip is the one-GTID-per-UUID token at GNO gno of holey's n UUIDs.
func tip(n int, gno int64) string {
	var parts []string
	for u := range n {
		parts = append(parts, fmt.Sprintf("%08x-0000-4000-8000-%012x:%d", 0x3e11fa47+u, u, gno))
	}
	return strings.Join(parts, ",")
}

func BenchmarkContainsSet(b *testing.B) {
	cases := []struct{ name, sup, sub string }{
		{"5uuids", fiveUUIDs(1000000), fiveUUIDs(900000)},
		{"100intervals", fragmented(100, false), fragmented(100, true)},
		// Router's fragmented stress case: 10 UUIDs with 50 gaps each,
		// against the session's token (one GTID per UUID near the top)
		// and against its watermark (a set as fragmented as the replica).
		{"10uuids-50gaps-token", holey(10, 50020), tip(10, 50018)},
		{"10uuids-50gaps-watermark", holey(10, 50020), holey(10, 50017)},
		// One UUID with 1000 gaps against one GTID near the top.
		{"1uuid-1000gaps-token", holey(1, 1000020), tip(1, 1000018)},
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
