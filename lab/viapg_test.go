package lab

import (
	"strings"
	"testing"

	"github.com/causallab/causallab/compose"
)

// TestPGRows: the PostgreSQL workload's answers are decoded only when
// they hold exactly the expected rows; every other shape is an error
// naming what was wrong.
func TestPGRows(t *testing.T) {
	hot := make([]int64, 2)
	own, err := parsePGReadRows([][]any{{int64(7), int32(0), int64(3)}, {int64(7), int32(1), int64(5)}}, 4, hot)
	if err != nil || own != 7 || hot[0] != 3 || hot[1] != 5 {
		t.Fatalf("good read: own %d hot %v, %v", own, hot, err)
	}
	for _, tc := range []struct {
		rows [][]any
		want string
	}{
		{[][]any{{int64(7), int32(0), int64(3)}}, "1 hot rows, want 2"},
		{[][]any{{int64(7), int32(0)}, {int64(7), int32(1), int64(5)}}, "2 columns"},
		{[][]any{{nil, int32(0), int64(3)}, {nil, int32(1), int64(5)}}, "row is missing"},
		{[][]any{{int64(7), int32(1), int64(3)}, {int64(7), int32(0), int64(5)}}, "is hot row 1"},
		{[][]any{{int64(7), int32(0), int64(3)}, {int64(8), int32(1), int64(5)}}, "differs between rows"},
		{[][]any{{int64(7), int32(0), "3"}, {int64(7), int32(1), int64(5)}}, "hot version is string"},
	} {
		if _, err := parsePGReadRows(tc.rows, 4, make([]int64, 2)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.rows, err, tc.want)
		}
	}
	if v, err := parseWriteRows([][]any{{int64(9), int64(1)}}, 4, 2); err != nil || v != 9 {
		t.Fatalf("good write: %d, %v", v, err)
	}
	for _, rows := range [][][]any{nil, {{int64(9), int64(0)}}, {{nil, int64(1)}}, {{int64(9)}}} {
		if _, err := parseWriteRows(rows, 4, 2); err == nil || !strings.Contains(err.Error(), "session 4 seq 2") {
			t.Errorf("%v: %v, want an error naming the write", rows, err)
		}
	}
}

// TestServerFlavorPostgres: the instruments read a node's LSN as a set
// that holds a write tokened at or before it, and refuse to name a write
// for the GTID passes.
func TestServerFlavorPostgres(t *testing.T) {
	f := flavorOf(compose.EnginePostgres)
	s, err := f.parseExecuted("0/3000060")
	if err != nil {
		t.Fatal(err)
	}
	at, err := f.parseWrite("0/3000060")
	if err != nil {
		t.Fatal(err)
	}
	past, err := f.parseWrite("0/3000061")
	if err != nil {
		t.Fatal(err)
	}
	if !s.ContainsGTID(at) || s.ContainsGTID(past) {
		t.Fatalf("LSN set %s: holds its own write %v: %v; the next %v: %v", s, at, s.ContainsGTID(at), past, s.ContainsGTID(past))
	}
	if _, err := f.writeID("0/3000060"); err == nil {
		t.Fatal("a PostgreSQL write was named for the prefix check")
	}
	if l, err := f.lostWrites("0/3000060-0/3000100"); err != nil || !l.IsEmpty() {
		t.Fatalf("lost writes: %v, %v", l, err)
	}
	if _, err := f.parseExecuted("x"); err == nil {
		t.Fatal("bad LSN read")
	}
}
