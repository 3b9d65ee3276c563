package proxy

import (
	"testing"
)

// TestPollersPrimaryPlain: with watermark_source lazy the replicas'
// pollers read bounds and the primary's does not (the router bounds
// reads on replicas only; a read the primary serves reads its watermark
// pipelined), and the group still reports bounds, as the router's lazy
// watermark requires.
func TestPollersPrimaryPlain(t *testing.T) {
	cfg := &Config{
		Primary:         Backend{Name: "primary", Addr: "127.0.0.1:1", User: "u"},
		Replicas:        []Backend{{Name: "replica1", Addr: "127.0.0.1:2", User: "u"}, {Name: "replica2", Addr: "127.0.0.1:3", User: "u"}},
		WatermarkSource: "lazy",
	}
	p, err := newPollers(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.byName["primary"].Bounds() {
		t.Error("the primary's poller reads bounds")
	}
	for _, r := range []string{"replica1", "replica2"} {
		if !p.byName[r].Bounds() {
			t.Errorf("%s's poller reads no bounds", r)
		}
	}
	if !p.Bounds() {
		t.Error("lazy pollers report no bounds")
	}
	if g := p.Generation("primary"); g != 0 {
		t.Errorf("primary generation %d, want 0 (no bounds)", g)
	}
	cfg.WatermarkSource = "query"
	if p, err = newPollers(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if p.Bounds() {
		t.Error("query watermark: pollers report bounds")
	}
}
