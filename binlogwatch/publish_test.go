package binlogwatch

import (
	"testing"

	"github.com/causallab/causallab/gtid"
)

// TestPublishConfirmedUnion: the confirmer and the ahead waiter publish
// through publishConfirmed; the published set only ever grows to the union
// of what each confirmed, in whatever order they arrive, and a confirmation
// adding nothing publishes nothing unless it carries stream metadata.
func TestPublishConfirmedUnion(t *testing.T) {
	w, err := New(Config{Host: "h", User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	const u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	cs := &confirmState{uuid: u}
	w.publishConfirmed(cs, gtid.MustParse(u+":1-5"), &candidate{set: gtid.MustParse(u + ":1-5"), health: HealthStreaming}, stageTimes{})
	seq := w.Snapshot().Seq
	// The ahead waiter confirms 7 before the stream's 6 is confirmed.
	seven := gtid.MustParse(u + ":7")
	w.publishConfirmed(cs, seven, nil, stageTimes{})
	if got, want := w.Snapshot().Executed, gtid.MustParse(u+":1-5:7"); !got.Equal(want) {
		t.Fatalf("after ahead 7: %s, want %s", got, want)
	}
	if !seven.Equal(gtid.MustParse(u + ":7")) {
		t.Fatalf("input modified: %s", seven)
	}
	if w.Snapshot().Health != HealthStreaming {
		t.Fatalf("ahead publish changed health to %s", w.Snapshot().Health)
	}
	// The stream's confirmation of 1-6 must not drop 7.
	w.publishConfirmed(cs, gtid.MustParse(u+":1-6"), &candidate{set: gtid.MustParse(u + ":1-6"), health: HealthStreaming}, stageTimes{})
	if got, want := w.Snapshot().Executed, gtid.MustParse(u+":1-7"); !got.Equal(want) {
		t.Fatalf("after stream 1-6: %s, want %s", got, want)
	}
	// An ahead confirmation of something already published is not a publish.
	before := w.Snapshot().Seq
	w.publishConfirmed(cs, seven, nil, stageTimes{})
	if w.Snapshot().Seq != before {
		t.Fatal("a confirmation adding nothing was published")
	}
	if before != seq+2 {
		t.Fatalf("seq %d, want %d", before, seq+2)
	}
}
