package sim

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestCompactViewsFitATerminal runs every experiment briefly and checks
// that each table's compact view (what a terminal shows by default) fits
// TermWidth, keeps the first column, and says what it left out.
func TestCompactViewsFitATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every experiment")
	}
	o := Options{Base: Config{Trials: 2, Duration: 2 * time.Second}}
	reps, err := All(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, rep := range reps {
		for _, tb := range rep.Tables {
			c := tb.Compact()
			var b bytes.Buffer
			if err := c.Write(&b, FormatMarkdown); err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(b.String(), "\n") {
				if n := utf8.RuneCountInString(l); n > TermWidth {
					t.Errorf("%s: compact line of %d characters: %q", tb.Name, n, l)
				}
			}
			if c.Columns[0].Key != tb.Columns[0].Key {
				t.Errorf("%s: compact view lost its first column %q", tb.Name, tb.Columns[0].Key)
			}
			if len(c.Columns) < len(tb.Columns) && !strings.Contains(b.String(), "--wide") {
				t.Errorf("%s: compact view left out %d columns without saying so:\n%s", tb.Name, len(tb.Columns)-len(c.Columns), b.String())
			}
		}
	}
}

// TestCompactFitsTheHeading: a heading wider than a terminal keeps its
// head and opens the notes with the rest; one with no head keeps what
// fits; one that fits is kept.
func TestCompactFitsTheHeading(t *testing.T) {
	for _, c := range []struct{ title, heading, note string }{
		{"Futile waits: budget 50ms on lagging replicas (and 400ms in the straggler+heavy world)", "Futile waits",
			"Budget 50ms on lagging replicas (and 400ms in the straggler+heavy world)."},
		{strings.Repeat("word ", 20) + "end", strings.TrimSpace(strings.Repeat("word ", 15)) + "…", strings.Repeat("word ", 20) + "end"},
		{"lab routers: real MySQL beside the simulator (straggler+heavy, via router)", "lab routers: real MySQL beside the simulator (straggler+heavy, via router)", ""},
	} {
		tb := &Table{Name: "x", Title: c.title, Columns: []Column{{"a", "a", 0}}, Rows: [][]Cell{{N(1)}}, Notes: []string{"Setup."}}
		got := tb.Compact()
		if got.Title != c.heading {
			t.Errorf("%q: heading %q, want %q", c.title, got.Title, c.heading)
		}
		if n := utf8.RuneCountInString("### " + got.Title); n > TermWidth {
			t.Errorf("%q: heading of %d columns", c.title, n)
		}
		want := []string{"Setup."}
		if c.note != "" {
			want = append(Wrap(c.note, TermWidth), want...)
		}
		if strings.Join(got.Notes, "|") != strings.Join(want, "|") {
			t.Errorf("%q: notes %q, want %q", c.title, got.Notes, want)
		}
		if tb.Title != c.title {
			t.Errorf("Compact changed the table's own title")
		}
	}
}

func TestCompactPairsAndTrims(t *testing.T) {
	tb := &Table{Name: "x", Title: "x", Columns: []Column{{"name", "name", 0}, {"a", "a", 2}, {"sim_a", "sim a", 2}, {"wide", strings.TrimSpace(strings.Repeat("w ", 45)), 0}},
		Rows:  [][]Cell{{L("r1"), S(Stat{Mean: 1.5, SD: 0.25}), N(2), N(3)}, {L("r2"), N(0), NA(), N(4)}},
		Notes: []string{strings.Repeat("word ", 40)},
		Brief: []BriefColumn{{Key: "name"}, {Key: "a", Header: "A %", Pair: "sim_a"}, {Key: "wide"}}}
	c := tb.Compact()
	if len(c.Columns) != 2 || c.Columns[1].Header != "A %" {
		t.Fatalf("columns %+v: want name and A %% (the 90-wide column trimmed)", c.Columns)
	}
	if got := c.Rows[0][1].Label; got != "1.50/2.00" {
		t.Errorf("paired cell %q, want 1.50/2.00 (spread dropped)", got)
	}
	if got := c.Rows[1][1].Label; got != "0.00/–" {
		t.Errorf("paired cell with a missing prediction %q, want 0.00/–", got)
	}
	for _, n := range c.Notes {
		if utf8.RuneCountInString(n) > TermWidth {
			t.Errorf("note line of %d characters", utf8.RuneCountInString(n))
		}
	}
	if all := strings.Join(c.Notes, " "); !strings.Contains(all, "--wide") || !strings.Contains(all, "w w w w") {
		t.Errorf("notes %q do not name the column left out", c.Notes)
	}
}

func TestWrap(t *testing.T) {
	got := Wrap("aa bb cc "+strings.Repeat("x", 12)+" dd", 8)
	want := []string{"aa bb cc", strings.Repeat("x", 12), "dd"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Wrap = %q, want %q", got, want)
	}
}
