package sim

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/router"
)

// TestStripPicture: the strip covers the span of the offered writes (the
// lag curve's span), its per-bin read shares add up to 100% and account
// for every read before the end, and the drawn SVG stays small and names
// every node in its legend.
func TestStripPicture(t *testing.T) {
	cfg := Config{Seed: 4, Trials: 1, Duration: 3 * time.Second, Sessions: 500}
	tr, res, err := TraceTrial(context.Background(), cfg, spec(router.Policy{Kind: router.PolicyTokenRYWMR}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if tr.DurationMs != 3000 || !tr.Straggler {
		t.Fatalf("trace span %v ms, straggler %v; want 3000 ms, true (default world)", tr.DurationMs, tr.Straggler)
	}
	end := tr.DurationMs / 1000
	shares, nodes, after := stripShares(tr, end)
	if nodes != 5 || len(shares) != nodes+2 || len(shares[0]) != 12 {
		t.Fatalf("%d nodes, %d series of %d bins; want 5 nodes, 7 series of 12 bins", nodes, len(shares), len(shares[0]))
	}
	before := 0
	for _, r := range tr.Reads {
		if r.At < tr.DurationMs {
			before++
		}
	}
	if after != len(tr.Reads)-before || after == 0 || before == 0 {
		t.Fatalf("%d reads after the end, %d before, of %d", after, before, len(tr.Reads))
	}
	if int64(len(tr.Reads)) != res.Reads-res.Failed {
		t.Fatalf("trace holds %d reads, the trial served %d", len(tr.Reads), res.Reads-res.Failed)
	}
	for b := range shares[0] {
		var sum float64
		for k := range shares {
			sum += shares[k][b]
		}
		if math.Abs(sum-100) > 1e-9 {
			t.Fatalf("bin %d shares add up to %v%%", b, sum)
		}
	}
	dir := t.TempDir()
	names, err := WritePlots(dir, []Plot{{Name: "strip", Title: "strip", Strip: tr}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"<svg", "replica r0 (straggler)", "replica r4", "primary", "worst replica lag", "Times New Roman"} {
		if !strings.Contains(svg, want) {
			t.Errorf("strip SVG lacks %q", want)
		}
	}
	if len(b) > 100_000 {
		t.Errorf("strip SVG is %d bytes: keep it under 100 kB", len(b))
	}
}
