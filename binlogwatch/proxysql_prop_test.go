package binlogwatch

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/causallab/causallab/gtid"
)

// Property and fuzz tests of the writer (appendBootstrap, incEncoder)
// against the ported ProxySQL parsers (proxysql_port_test.go).

var propSIDs = []string{tu1, tu2, tu3, "ffffffff-ffff-ffff-ffff-fffffffffff0"}

// genGrowth draws a random executed set and a sequence of supersets: gaps,
// gap fills, new UUIDs, tagged GTIDs, GNOs near the top of the range.
func genGrowth(t *rapid.T) []gtid.Set {
	steps := rapid.IntRange(1, 8).Draw(t, "steps")
	var sets []gtid.Set
	cur := gtid.Set{}
	for i := 0; i <= steps; i++ {
		var parts []string
		for k := rapid.IntRange(0, 6).Draw(t, "adds"); k > 0; k-- {
			sid := rapid.SampledFrom(propSIDs).Draw(t, "sid")
			tag := rapid.SampledFrom([]string{"", "", "", "blue"}).Draw(t, "tag")
			var lo int64
			if rapid.IntRange(0, 9).Draw(t, "high") == 0 {
				lo = gtid.MaxGNO - rapid.Int64Range(0, 50).Draw(t, "fromTop")
			} else {
				lo = rapid.Int64Range(1, 300).Draw(t, "lo")
			}
			hi := lo + min(rapid.Int64Range(0, 20).Draw(t, "len"), gtid.MaxGNO-lo)
			p := sid + ":"
			if tag != "" {
				p += tag + ":"
			}
			parts = append(parts, fmt.Sprintf("%s%d-%d", p, lo, hi))
		}
		if len(parts) > 0 {
			cur = cur.Union(gtid.MustParse(strings.Join(parts, ",")))
		}
		sets = append(sets, cur)
	}
	return sets
}

// feedChunks feeds b to r in random pieces (ProxySQL's reads split the
// stream anywhere).
func feedChunks(t *rapid.T, r *psqlReader, b []byte) error {
	for len(b) > 0 {
		n := rapid.IntRange(1, len(b)).Draw(t, "chunk")
		if err := r.feed(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func mustBelieve(t *rapid.T, r *psqlReader, want gtid.Set, when string) {
	b, odd := r.believed()
	if len(odd) > 0 || !b.Equal(want) {
		t.Fatalf("%s port %s: believes %s (odd %v), want %s", r.ver, when, b, odd, want)
	}
}

// TestProxySQLWriterProperty: for random executed sets with gaps, tags and
// several UUIDs, every ported ProxySQL reconstructs exactly the watcher's
// untagged set from a fresh ST= and from any stream of increments (I1/I2
// for all three; I3/I4 for 3.0.8 and 3.x), whatever the read boundaries.
func TestProxySQLWriterProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sets := genGrowth(t)
		batch := rapid.Bool().Draw(t, "batch")
		versions := psqlVersions
		if batch {
			versions = []psqlVersion{psql308, psql3}
		}
		var untag []gtid.Set
		for _, s := range sets {
			u, _, err := untagged(s)
			if err != nil {
				t.Fatal(err)
			}
			untag = append(untag, u)
		}
		for _, v := range versions {
			r := newPSQLReader(v)
			if err := feedChunks(t, r, appendBootstrap(nil, untag[0])); err != nil {
				t.Fatalf("%s on ST: %v", v, err)
			}
			mustBelieve(t, r, untag[0], "after ST")
			enc := incEncoder{batch: batch}
			for i := 1; i < len(untag); i++ {
				var buf []byte
				if err := enc.encode(untag[i].Subtract(untag[i-1]), &buf, func() error { return nil }); err != nil {
					t.Fatal(err)
				}
				if err := feedChunks(t, r, buf); err != nil {
					t.Fatalf("%s on %q: %v", v, buf, err)
				}
				mustBelieve(t, r, untag[i], fmt.Sprintf("after step %d", i))
				fresh := newPSQLReader(v)
				if err := fresh.feed(appendBootstrap(nil, untag[i])); err != nil {
					t.Fatalf("%s on a fresh ST: %v", v, err)
				}
				mustBelieve(t, fresh, untag[i], "from a fresh ST")
			}
		}
	})
}

// TestProxySQLFenceProperty: the ported 3.x semantics (a ProxySQL that adds
// every ST= to what it had and never forgets) fed what a fenced server
// would send, through random growth and shrinks: whenever the server serves
// a client, the client believes nothing the current set lacks.
func TestProxySQLFenceProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var taught gtid.Set
		r := newPSQLReader(psql3)
		connected := false
		var sent gtid.Set
		enc := incEncoder{}
		for step := rapid.IntRange(1, 12).Draw(t, "steps"); step > 0; step-- {
			// The replica's next set: grow, or lose an arbitrary part.
			s := genGrowth(t)
			cur, _, _ := untagged(s[len(s)-1])
			if rapid.Bool().Draw(t, "shrink") && !sent.IsEmpty() {
				cur = sent.Intersect(cur)
			} else {
				cur = sent.Union(cur)
			}
			fenced := !cur.Contains(taught)
			switch {
			case fenced:
				connected = false // dropped; reconnects are closed unanswered
			case !connected:
				r.reconnect()
				taught.UnionInPlace(cur)
				if err := r.feed(appendBootstrap(nil, cur)); err != nil {
					t.Fatal(err)
				}
				connected, sent, enc = true, cur, incEncoder{}
			default:
				diff := cur.Subtract(sent)
				taught.UnionInPlace(diff)
				var buf []byte
				_ = enc.encode(diff, &buf, func() error { return nil })
				if err := r.feed(buf); err != nil {
					t.Fatal(err)
				}
				sent = cur
			}
			if connected {
				mustBelieve(t, r, cur, "while served")
			}
		}
	})
}

// FuzzPSQLReaders: the ported parsers take any byte stream, split anywhere,
// across a reconnect, without panicking; a 2.x never disconnects (it has no
// such check); a disconnect leaves a 3.x inactive.
func FuzzPSQLReaders(f *testing.F) {
	for _, s := range []string{
		"ST=\n",
		"ST=" + tu1 + ":1-5," + tu1 + ":7-7\nI1=3e11fa4771ca11e19e33c80aa9429562:8\nI2=9\n",
		"ST=" + tu1 + ":1-5:7-9\n",
		"ST=" + tu1 + ":5\n",
		"I3=3e11fa4771ca11e19e33c80aa9429562:6-9\nI4=12-14\n",
		"I4=1-2\nI2=3\n",
		"I1=:\nI2=\nI\nI1\nST\nX=1\n\n",
		"ST=:::,,,\n",
		"I1=3e11fa4771ca11e19e33c80aa9429562:99999999999999999999\n",
		"ST=" + tu1 + ":9223372036854775807-9223372036854775806\n",
		"I3=3e11fa4771ca11e19e33c80aa9429562:-5\nI9=x\n",
		"ST=12345:1-2\nI1=12345:3\n",
		"I2=1" + strings.Repeat("0", 90) + "\n",
		"ST=" + strings.Repeat("a", 70) + ":1-2\n",
	} {
		f.Add([]byte(s), uint8(7), uint8(0))
	}
	f.Fuzz(func(t *testing.T, stream []byte, chunk, cut uint8) {
		for _, v := range psqlVersions {
			r := newPSQLReader(v)
			rest := stream
			var err error
			at := len(stream) * int(cut) / 256
			fed := 0
			for len(rest) > 0 && err == nil {
				n := int(chunk)%len(rest) + 1
				if fed < at && fed+n > at {
					n = at - fed
				}
				err = r.feed(rest[:n])
				rest, fed = rest[n:], fed+n
				if fed == at && at > 0 && err == nil {
					r.reconnect()
				}
			}
			var de *disconnectError
			var ub *ubError
			switch {
			case err == nil:
			case errors.As(err, &de):
				if v == psql2 {
					t.Fatalf("2.x disconnected: %v", err)
				}
				if r.active {
					t.Fatalf("%s: disconnect %v but still active", v, err)
				}
			case errors.As(err, &ub):
			default:
				t.Fatalf("%s: untyped error %v", v, err)
			}
			if r.pos > r.n || r.n > len(r.data) {
				t.Fatalf("%s: buffer state pos %d n %d size %d", v, r.pos, r.n, len(r.data))
			}
			r.believed()
		}
	})
}

// FuzzProxySQLWriter: for any two sets (the second a superset), what the
// writer sends makes every ported ProxySQL believe exactly the untagged
// sets, in both modes.
func FuzzProxySQLWriter(f *testing.F) {
	f.Add(tu1+":1-5:7", tu2+":1,"+tu1+":6", false)
	f.Add(tu1+":1-5:7,"+tu1+":blue:1-3", tu1+":9-20:30,"+tu3+":1", true)
	f.Add("", tu1+":1", false)
	f.Add(tu1+":9223372036854775806", tu2+":1-9223372036854775806", true)
	f.Fuzz(func(t *testing.T, a, b string, batch bool) {
		s0, err := gtid.Parse(a)
		if err != nil {
			return
		}
		extra, err := gtid.Parse(b)
		if err != nil || extra.Count() > 5000 {
			return
		}
		s1 := s0.Union(extra)
		u0, _, err := untagged(s0)
		if err != nil {
			t.Fatal(err)
		}
		u1, _, err := untagged(s1)
		if err != nil {
			t.Fatal(err)
		}
		st := appendBootstrap(nil, u0)
		enc := incEncoder{batch: batch}
		var inc []byte
		if err := enc.encode(u1.Subtract(u0), &inc, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		for _, v := range psqlVersions {
			if batch && v == psql2 {
				continue
			}
			r := newPSQLReader(v)
			if err := r.feed(st); err != nil {
				t.Fatalf("%s on %q: %v", v, st, err)
			}
			if got, odd := r.believed(); len(odd) > 0 || !got.Equal(u0) {
				t.Fatalf("%s after %q believes %s (odd %v), want %s", v, st, got, odd, u0)
			}
			if err := r.feed(inc); err != nil {
				t.Fatalf("%s on %q: %v", v, inc, err)
			}
			if got, odd := r.believed(); len(odd) > 0 || !got.Equal(u1) {
				t.Fatalf("%s after %q believes %s (odd %v), want %s", v, inc, got, odd, u1)
			}
		}
	})
}
