package hashroute

import (
	"fmt"
	"strings"
	"testing"
)

var sinkInt int
var sinkReason Reason
var sinkExtraction Extraction

func benchTable(b *testing.B, n int) *Table {
	servers := make([]Server, n)
	for i := range servers {
		servers[i] = Server{Name: fmt.Sprint("s", i), Weight: 1 + i%3}
	}
	tab, err := NewTable(servers)
	if err != nil {
		b.Fatal(err)
	}
	return tab
}

// BenchmarkSelect: one selection per op, cycling over 1024 id hashes.
func BenchmarkSelect(b *testing.B) {
	hs := ids(1024)
	for _, n := range []int{8, 64} {
		tab := benchTable(b, n)
		inflight := make([]int, n)
		for i := range inflight {
			inflight[i] = 3 + i%5
		}
		for _, c := range []struct {
			name string
			mode Mode
			up   Availability
			load []int
		}{
			{"full-list/all-up", FullList, tab.AllUp(), nil},
			{"full-list/one-down", FullList, tab.AllUp().Without(1), nil},
			{"full-list/half-down", FullList, tab.AllUp() & 0x5555555555555555, nil},
			{"available-only/one-down", AvailableOnly, tab.AllUp().Without(1), nil},
			{"rebalance-override/loaded", RebalanceOverride, tab.AllUp(), inflight},
		} {
			b.Run(fmt.Sprintf("servers=%d/%s", n, c.name), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					sinkInt, sinkReason = tab.Select(hs[i&1023], c.mode, c.up, c.load)
				}
			})
		}
	}
}

func BenchmarkHash(b *testing.B) {
	id := "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
	b.ReportAllocs()
	var h uint64
	for b.Loop() {
		h += Hash(id)
	}
	sinkInt = int(h)
}

// stmt200 builds a statement of exactly n bytes with the given comment at the
// front or at the end.
func benchStmt(n int, comment string, front bool) string {
	body := "SELECT o.id, o.total, o.created_at FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.shop_id = 42 AND o.status = 'open' AND o.note <> 'x' ORDER BY o.created_at DESC LIMIT 50"
	for len(body)+len(comment)+1 < n {
		body += " AND o.flag IN (1, 2, 3)"
	}
	body = body[:max(0, n-len(comment)-1)]
	if front {
		return comment + " " + body
	}
	return body + " " + comment
}

func BenchmarkExtract(b *testing.B) {
	const id = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
	standalone := "/* consistent_read_id:" + id + " */"
	list := "/*application:shop,controller:orders,action:index,consistent_read_id:" + id + "*/"
	cases := []struct {
		name string
		stmt string
	}{
		{"200B/front/standalone", benchStmt(200, standalone, true)},
		{"200B/front/list", benchStmt(200, list, true)},
		{"200B/end/standalone", benchStmt(200, standalone, false)},
		{"200B/no-key", benchStmt(200, "/* controller:orders */", true)},
		{"1000B/front/standalone", benchStmt(1000, standalone, true)},
		{"1000B/end/standalone", benchStmt(1000, standalone, false)},
		{"4000B/end/standalone", benchStmt(4000, standalone, false)},
		{"4000B/no-key", benchStmt(4000, "/* controller:orders */", true)},
	}
	// Linearity in the comment's length: list comments of growing size at the front.
	for _, pad := range []int{64, 256, 1024, 4096} {
		c := "/*application:shop," + strings.Repeat("k:v,", pad/4) + "consistent_read_id:" + id + "*/"
		cases = append(cases, struct {
			name string
			stmt string
		}{fmt.Sprintf("comment=%dB/front/list", len(c)), c + " SELECT 1"})
	}
	for _, c := range cases {
		if got := Extract(c.stmt); got.Status != Found && !strings.Contains(c.name, "no-key") {
			b.Fatalf("%s: %+v", c.name, got)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.stmt)))
			for b.Loop() {
				sinkExtraction = Extract(c.stmt)
			}
		})
	}
}
