package gtid_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/compose/composetest"
	"github.com/causallab/causallab/gtid"
)

// server is the one mysqld the differential test uses (nil under -short).
var server *compose.Topology

// mariadb is the one MariaDB server the MariaDB differential test uses.
var mariadb *compose.Topology

func TestMain(m *testing.M) {
	os.Exit(composetest.Main(m, compose.Config{PrimaryOnly: true}, func(t *compose.Topology) int {
		server = t
		return composetest.Main(m, compose.Config{Engine: compose.EngineMariaDB, PrimaryOnly: true}, func(t *compose.Topology) int {
			mariadb = t
			return m.Run()
		})
	}))
}

// genSet writes a random valid GTID set in messy (non-canonical) text: a few
// UUIDs from a pool, tags, fragmented and overlapping intervals, repeated
// UUIDs, random order and case, whitespace after commas. GNOs mostly come
// from a small range so that pairs overlap; a few sit near MaxGNO.
func genSet(rng *rand.Rand, uuids []string, tags []string) string {
	return joinParts(rng, genParts(rng, uuids, tags, rng.IntN(6)))
}

// genPair returns a random pair; a third of the time b is built from a
// random part of a's elements (often a subset), so GTID_SUBSET is true often
// enough to matter.
func genPair(rng *rand.Rand, uuids []string, tags []string) [2]string {
	pa := genParts(rng, uuids, tags, rng.IntN(6))
	if rng.IntN(3) != 0 {
		return [2]string{joinParts(rng, pa), genSet(rng, uuids, tags)}
	}
	var pb []string
	for _, p := range pa {
		if rng.IntN(2) == 0 {
			pb = append(pb, p)
		}
	}
	if rng.IntN(3) == 0 {
		pb = append(pb, genParts(rng, uuids, tags, 1)...)
	}
	return [2]string{joinParts(rng, pa), joinParts(rng, pb)}
}

// genParts returns n comma-free elements "uuid[:tag]:intervals...".
func genParts(rng *rand.Rand, uuids []string, tags []string, n int) []string {
	var parts []string
	for range n {
		u := uuids[rng.IntN(len(uuids))]
		if rng.IntN(4) == 0 {
			u = strings.ToUpper(u)
		}
		var b strings.Builder
		b.WriteString(u)
		for range 1 + rng.IntN(3) {
			if tag := tags[rng.IntN(len(tags))]; tag != "" {
				b.WriteString(":" + tag)
			}
			for range 1 + rng.IntN(6) {
				var lo, hi int64
				switch rng.IntN(10) {
				case 0:
					lo = gtid.MaxGNO - rng.Int64N(5)
					hi = lo + rng.Int64N(gtid.MaxGNO-lo+1)
				default:
					lo = 1 + rng.Int64N(60)
					hi = lo + rng.Int64N(8)
				}
				if hi == lo && rng.IntN(2) == 0 {
					fmt.Fprintf(&b, ":%d", lo)
				} else {
					fmt.Fprintf(&b, ":%d-%d", lo, hi)
				}
			}
		}
		parts = append(parts, b.String())
	}
	return parts
}

// genGTID returns one GTID text from the same pools (some in upper case).
func genGTID(rng *rand.Rand, uuids []string, tags []string) string {
	u := uuids[rng.IntN(len(uuids))]
	if rng.IntN(4) == 0 {
		u = strings.ToUpper(u)
	}
	gno := 1 + rng.Int64N(70)
	if rng.IntN(10) == 0 {
		gno = gtid.MaxGNO - rng.Int64N(5)
	}
	if tag := tags[rng.IntN(len(tags))]; tag != "" {
		return fmt.Sprintf("%s:%s:%d", u, tag, gno)
	}
	return fmt.Sprintf("%s:%d", u, gno)
}

// joinParts joins elements with varied separators, in random order.
func joinParts(rng *rand.Rand, parts []string) string {
	parts = append([]string(nil), parts...)
	rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	seps := []string{",", ", ", ",\n", ",\n  "}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(seps[rng.IntN(len(seps))])
		}
		b.WriteString(p)
	}
	return b.String()
}

// pairResult is what MySQL answers for one pair (a, b).
type pairResult struct {
	aSubB, bSubA         bool   // GTID_SUBSET(a,b), GTID_SUBSET(b,a)
	aMinusB, bMinusA     string // GTID_SUBTRACT(a,b), GTID_SUBTRACT(b,a)
	union, canonA, inter string // normalised "a,b", normalised a, a ∩ b
	gInA                 bool   // GTID_SUBSET(g, a) for the pair's probe GTID g
}

func sqlString(s string) string {
	// The generated text holds no quote or backslash; escape anyway.
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

// queryBatch asks MySQL about many pairs in one SELECT ... UNION ALL.
func queryBatch(ctx context.Context, db *sql.DB, pairs [][2]string, probes []string) ([]pairResult, error) {
	var q strings.Builder
	for i, p := range pairs {
		if i > 0 {
			q.WriteString("\nUNION ALL ")
		}
		a, b := sqlString(p[0]), sqlString(p[1])
		u := sqlString(p[0] + "," + p[1])
		fmt.Fprintf(&q, "SELECT %d, GTID_SUBSET(%s,%s), GTID_SUBSET(%s,%s), GTID_SUBTRACT(%s,%s), GTID_SUBTRACT(%s,%s), GTID_SUBTRACT(%s,''), GTID_SUBTRACT(%s,''), GTID_SUBTRACT(%s, GTID_SUBTRACT(%s,%s)), GTID_SUBSET(%s,%s)",
			i, a, b, b, a, a, b, b, a, u, a, a, a, b, sqlString(probes[i]), a)
	}
	rows, err := db.QueryContext(ctx, q.String())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]pairResult, len(pairs))
	for rows.Next() {
		var i int
		var r pairResult
		if err := rows.Scan(&i, &r.aSubB, &r.bSubA, &r.aMinusB, &r.bMinusA, &r.union, &r.canonA, &r.inter, &r.gInA); err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, rows.Err()
}

// TestDifferentialMySQL checks Contains, Subtract, Union, Intersect and the
// canonical text against a real MySQL, byte for byte, on random pairs.
func TestDifferentialMySQL(t *testing.T) {
	composetest.Need(t, server)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, err := server.DB("primary")
	if err != nil {
		t.Fatal(err)
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	pairs := 10000
	if s := os.Getenv("CAUSALLAB_GTID_PAIRS"); s != "" {
		if pairs, err = strconv.Atoi(s); err != nil {
			t.Fatalf("CAUSALLAB_GTID_PAIRS: %v", err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CAUSALLAB_GTID_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CAUSALLAB_GTID_SEED: %v", err)
		}
	}
	t.Logf("MySQL %s, %d pairs, seed %d (rerun with CAUSALLAB_GTID_SEED=%d)", version, pairs, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 99))
	uuids := make([]string, 6)
	for i := range uuids {
		var sid gtid.SID
		for k := range sid {
			sid[k] = byte(rng.Uint32())
		}
		uuids[i] = sid.String()
	}
	tags := []string{"", "", "a", "tag_b", "Zz", "_x9", "abcdefghijabcdefghijabcdefghijab"}

	const batch = 250
	start := time.Now()
	checked, subsets, overlapping, tagged, probeHits := 0, 0, 0, 0, 0
	for checked < pairs {
		n := min(batch, pairs-checked)
		ps := make([][2]string, n)
		probes := make([]string, n)
		for i := range ps {
			ps[i] = genPair(rng, uuids, tags)
			probes[i] = genGTID(rng, uuids, tags)
			if rng.IntN(2) == 0 {
				// Half the probes come from a's own intervals, perturbed by
				// at most one, so hits and near misses both come up.
				for k, ivs := range gtid.MustParse(ps[i][0]).Sources() {
					iv := ivs[rng.IntN(len(ivs))]
					gno := min(max(iv.Start+rng.Int64N(iv.End-iv.Start+1)+rng.Int64N(3)-1, 1), gtid.MaxGNO)
					g := gtid.GTID{SID: k.SID, Tag: k.Tag, GNO: gno}
					probes[i] = g.String()
					if rng.IntN(2) == 0 {
						break
					}
				}
			}
		}
		res, err := queryBatch(ctx, db, ps, probes)
		if err != nil {
			t.Fatalf("MySQL: %v", err)
		}
		for i, p := range ps {
			comparePair(t, p[0], p[1], res[i])
			g := gtid.MustParseGTID(probes[i])
			if got := gtid.MustParse(p[0]).ContainsGTID(g); got != res[i].gInA {
				t.Errorf("ContainsGTID(%s) = %v, GTID_SUBSET = %v\n a=%q", probes[i], got, res[i].gInA, p[0])
			}
			if res[i].gInA {
				probeHits++
			}
			if (res[i].aSubB && p[0] != "") || (res[i].bSubA && p[1] != "") {
				subsets++
			}
			if res[i].inter != "" {
				overlapping++
			}
			for k := range gtid.MustParse(res[i].union).Sources() {
				if k.Tag != "" {
					tagged++
					break
				}
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		checked += n
	}
	t.Logf("%d pairs agreed with MySQL in %v (a non-empty subset either way: %d, a ∩ b non-empty: %d, tagged: %d, probe GTID in a: %d)",
		checked, time.Since(start).Round(time.Millisecond), subsets, overlapping, tagged, probeHits)
	// The comparison means little unless every kind of answer came up.
	if pairs >= 1000 && (subsets < pairs/20 || overlapping < pairs/10 || tagged < pairs/10 || probeHits < pairs/20) {
		t.Errorf("generator coverage too low: subsets %d, overlapping %d, tagged %d, probe hits %d of %d", subsets, overlapping, tagged, probeHits, pairs)
	}
}

func comparePair(t *testing.T, ta, tb string, want pairResult) {
	t.Helper()
	a, err := gtid.Parse(ta)
	if err != nil {
		t.Errorf("Parse(%q): %v", ta, err)
		return
	}
	b, err := gtid.Parse(tb)
	if err != nil {
		t.Errorf("Parse(%q): %v", tb, err)
		return
	}
	u, err := gtid.Parse(ta + "," + tb)
	if err != nil {
		t.Errorf("Parse(a,b): %v", err)
		return
	}
	check := func(what, got, want string) {
		if got != want {
			t.Errorf("%s\n a=%q\n b=%q\n got  %q\n want %q (MySQL)", what, ta, tb, got, want)
		}
	}
	if got := b.Contains(a); got != want.aSubB {
		t.Errorf("b.Contains(a) = %v, GTID_SUBSET(a,b) = %v\n a=%q\n b=%q", got, want.aSubB, ta, tb)
	}
	if got := a.Contains(b); got != want.bSubA {
		t.Errorf("a.Contains(b) = %v, GTID_SUBSET(b,a) = %v\n a=%q\n b=%q", got, want.bSubA, ta, tb)
	}
	check("a.Subtract(b)", a.Subtract(b).String(), want.aMinusB)
	check("b.Subtract(a)", b.Subtract(a).String(), want.bMinusA)
	check("a.Union(b)", a.Union(b).String(), want.union)
	check("Parse(a,b)", u.String(), want.union)
	check("canonical a", a.String(), want.canonA)
	check("a.Intersect(b)", a.Intersect(b).String(), want.inter)
}
