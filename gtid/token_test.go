package gtid

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestTokenText(t *testing.T) {
	tok := Token{Epoch: 3, GTIDs: MustParse(u2 + ":1-5:t:2," + u1 + ":7")}
	text := tok.String()
	want := "g1.3." + u1 + ":7~" + u2 + ":1-5:t:2"
	if text != want {
		t.Fatalf("String = %q, want %q", text, want)
	}
	for _, bad := range []string{"*/", "\n", " ", ",", ";", "\"", "\\"} {
		if strings.Contains(text, bad) {
			t.Errorf("token text holds %q", bad)
		}
	}
	back, err := ParseToken(text)
	if err != nil || back.Epoch != 3 || !back.GTIDs.Equal(tok.GTIDs) {
		t.Fatalf("ParseToken(%q) = %v, %v", text, back, err)
	}
	if e := (Token{}).String(); e != "g1.0." {
		t.Errorf("empty token %q", e)
	}
	if z, err := ParseToken("g1.0."); err != nil || !z.IsZero() {
		t.Errorf("ParseToken(empty) = %v, %v", z, err)
	}
	for _, tc := range []struct {
		in  string
		pos int
	}{
		{"x1.3." + u1 + ":1", 0},
		{"g1.." + u1 + ":1", 3},
		{"g1.3" + u1 + ":1", 5},
		{"g1.99999999999999999999." + u1 + ":1", 3},
		{"g1.3." + u1 + ":1," + u2 + ":1", 43},
		{"g1.3." + u1 + ":0", 42},
		{"g1.3." + u1 + ":1~" + u2 + ":x", 81},
	} {
		_, err := ParseToken(tc.in)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Pos != tc.pos {
			t.Errorf("ParseToken(%q) = %v, want error at %d", tc.in, err, tc.pos)
		}
	}
}

func TestTokenJSON(t *testing.T) {
	tok := Token{Epoch: 9, GTIDs: MustParse(u1 + ":1-5," + u2 + ":x:3")}
	b, err := json.Marshal(tok)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"epoch":9,"gtids":"` + u1 + `:1-5,\n` + u2 + `:x:3"}`; string(b) != want {
		t.Fatalf("JSON %s, want %s", b, want)
	}
	var back Token
	if err := json.Unmarshal(b, &back); err != nil || back.Epoch != 9 || !back.GTIDs.Equal(tok.GTIDs) {
		t.Fatalf("Unmarshal: %v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"epoch":1,"gtids":"bad"}`), &back); !errors.Is(err, ErrSyntax) {
		t.Fatalf("bad gtids accepted: %v", err)
	}
	// As a field (TextMarshaler is not used for JSON since MarshalJSON exists).
	type payload struct{ T Token }
	b, _ = json.Marshal(payload{tok})
	var p payload
	if err := json.Unmarshal(b, &p); err != nil || !p.T.GTIDs.Equal(tok.GTIDs) {
		t.Fatalf("nested: %s %v", b, err)
	}
}

func TestTokenOrder(t *testing.T) {
	a := Token{Epoch: 1, GTIDs: MustParse(u1 + ":1-5")}
	b := Token{Epoch: 2, GTIDs: MustParse(u1 + ":1-3," + u2 + ":1")}
	if a.Contains(b) || b.Contains(a) {
		t.Fatal("incomparable tokens compared")
	}
	m := a.Merge(b)
	if m.Epoch != 2 || m.GTIDs.String() != u1+":1-5,\n"+u2+":1" || !m.AtLeast(a) || !m.AtLeast(b) {
		t.Fatalf("Merge = %v", m)
	}
	if !a.SatisfiedBy(MustParse(u1+":1-9")) || a.SatisfiedBy(MustParse(u1+":1-4")) {
		t.Fatal("SatisfiedBy wrong")
	}
	if a.GTIDs.String() != u1+":1-5" {
		t.Fatal("Merge modified its receiver")
	}
}

func TestLSNToken(t *testing.T) {
	a := LSNToken{Epoch: 1, LSN: 100}
	if s := a.String(); s != "l1.1.100" {
		t.Fatalf("String = %q", s)
	}
	back, err := ParseLSNToken("l1.1.100")
	if err != nil || back != a {
		t.Fatalf("ParseLSNToken = %v, %v", back, err)
	}
	b, _ := json.Marshal(a)
	if string(b) != `{"epoch":1,"lsn":100}` {
		t.Fatalf("JSON %s", b)
	}
	var j LSNToken
	if err := json.Unmarshal(b, &j); err != nil || j != a {
		t.Fatalf("Unmarshal %v %v", j, err)
	}
	for _, bad := range []string{"", "l1.1.", "l1.1.x", "l1.1.-1", "g1.1.5", "l1.x.5", "l1.1.18446744073709551616"} {
		if _, err := ParseLSNToken(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("ParseLSNToken(%q) = %v", bad, err)
		}
	}
	// After a failover the new timeline reaches the same numbers: the bare
	// LSN comparison says yes (the hazard), the epoch-aware token says no.
	newTimeline := LSNToken{Epoch: 2, LSN: 150}
	if !newTimeline.LSN.Contains(a.LSN) {
		t.Fatal("LSN value comparison")
	}
	if newTimeline.Contains(a) {
		t.Fatal("LSNToken across epochs must not be contained")
	}
	if !(LSNToken{Epoch: 1, LSN: 150}).AtLeast(a) || a.AtLeast(LSNToken{Epoch: 1, LSN: 101}) {
		t.Fatal("same-epoch comparison")
	}
	if m := a.Merge(newTimeline); m != newTimeline {
		t.Fatalf("Merge = %v", m)
	}
	if m := (LSNToken{Epoch: 2, LSN: 1}).Merge(LSNToken{Epoch: 1, LSN: 9}); m.Epoch != 2 || m.LSN != 1 {
		t.Fatalf("Merge older epoch = %v", m)
	}
}

// positionsContain exercises the generic use the router makes of Position.
func positionsContain[P Position[P]](have, want P) bool { return have.Contains(want) }

func TestPositionGeneric(t *testing.T) {
	if !positionsContain(MustParse(u1+":1-5"), MustParse(u1+":2")) {
		t.Error("Set")
	}
	if !positionsContain(LSN(5), LSN(5)) || positionsContain(LSN(4), LSN(5)) {
		t.Error("LSN")
	}
}
