package lab

import (
	"strings"
	"testing"
)

func TestParseFailOn(t *testing.T) {
	rules, err := ParseFailOn(" ryw > 0, mr>0 ,token-ryw-mr:ryw_pct>=0.5,any:primary_pct<1e1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ryw>0", "mr>0", "token-ryw-mr:ryw_pct>=0.5", "any:primary_pct<10"}
	if len(rules) != len(want) {
		t.Fatalf("got %v", rules)
	}
	for i, r := range rules {
		if r.String() != want[i] {
			t.Errorf("rule %d = %q, want %q", i, r, want[i])
		}
	}
	for _, bad := range []string{"ryw", "ryw>", "ryw>x", "foo>1", ">1", "ryw=>1", ":ryw>0", "ryw>NaN", "ryw>Inf", "ryw~1"} {
		if _, err := ParseFailOn(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if r, err := ParseFailOn(""); err != nil || len(r) != 0 {
		t.Fatalf("empty: %v %v", r, err)
	}
}

func TestFailures(t *testing.T) {
	res := &Result{Routers: []RouterResult{
		{Name: "any", RYW: 3, MR: 1, Outcomes: map[string]int64{}},
		{Name: "token-ryw-mr", Outcomes: map[string]int64{}},
	}}
	rules, _ := ParseFailOn("ryw>0,mr>0")
	f := Failures(res, rules)
	if len(f) != 2 || !strings.HasPrefix(f[0], "any: ryw = 3") || !strings.HasPrefix(f[1], "any: mr = 1") {
		t.Fatalf("failures %q", f)
	}
	rules, _ = ParseFailOn("token-ryw-mr:ryw>0")
	if f := Failures(res, rules); len(f) != 0 {
		t.Fatalf("clean router failed: %q", f)
	}
	rules, _ = ParseFailOn("tokn-ryw-mr:ryw>0")
	if f := Failures(res, rules); len(f) != 1 || !strings.Contains(f[0], "names no router") {
		t.Fatalf("typo passed: %q", f)
	}
}

// FuzzParseFailOn: the parser never panics, and what it accepts renders to
// text it parses back to the same rules.
func FuzzParseFailOn(f *testing.F) {
	for _, s := range []string{"ryw>0,mr>0", "token-ryw-mr:ryw_pct>=0.5", "any:lat_p99_ms<250", "", ",,", "a:b:ryw!=1", "mr==-0", "ryw>1e308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rules, err := ParseFailOn(s)
		if err != nil {
			return
		}
		parts := make([]string, len(rules))
		for i, r := range rules {
			parts[i] = r.String()
		}
		again, err := ParseFailOn(strings.Join(parts, ","))
		if err != nil {
			t.Fatalf("rendered %q does not parse: %v", parts, err)
		}
		if len(again) != len(rules) {
			t.Fatalf("round trip %d rules -> %d", len(rules), len(again))
		}
		for i := range rules {
			if again[i] != rules[i] {
				t.Fatalf("round trip %+v -> %+v", rules[i], again[i])
			}
		}
	})
}

// TestCheckFailOn: a rule naming a router a run lacks is refused before
// the run, with the run's routers; --routers replaces the scenario's.
func TestCheckFailOn(t *testing.T) {
	sc, err := BuiltinScenario("routers")
	if err != nil {
		t.Fatal(err)
	}
	rules := func(s string) []FailRule {
		r, err := ParseFailOn(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if err := sc.CheckFailOn(ScenarioOptions{}, rules("ryw>0,token-ryw-mr:ryw>0,any:mr_pct>5")); err != nil {
		t.Errorf("the scenario's own routers refused: %v", err)
	}
	err = sc.CheckFailOn(ScenarioOptions{}, rules("bogus:ryw>0"))
	if err == nil || !strings.Contains(err.Error(), "bogus:ryw>0 names no router of routers") || !strings.Contains(err.Error(), "token-ryw-mr") {
		t.Errorf("bogus router: %v", err)
	}
	only, err := ParseRouters("any")
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.CheckFailOn(ScenarioOptions{Config: Config{Routers: only}}, rules("token-ryw-mr:ryw>0")); err == nil {
		t.Error("a router --routers left out was accepted")
	}
}
