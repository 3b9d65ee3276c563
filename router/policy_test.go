package router

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causallab/causallab/hashroute"
)

func TestParsePolicy(t *testing.T) {
	ok := []struct {
		in   string
		want Policy
	}{
		{"any", Policy{Kind: PolicyAny}},
		{" Token-RYW ", Policy{Kind: PolicyTokenRYW}},
		{"token-ryw-mr+epoch", Policy{Kind: PolicyTokenRYWMR, CheckEpoch: true}},
		{"token-wait", Policy{Kind: PolicyTokenWait, WaitBudget: DefaultWaitBudget}},
		{"token-wait(800ms)", Policy{Kind: PolicyTokenWait, WaitBudget: 800 * time.Millisecond}},
		{"token-wait(1600)", Policy{Kind: PolicyTokenWait, WaitBudget: 1600 * time.Millisecond}},
		{"window", Policy{Kind: PolicyWindow, Window: DefaultWindow}},
		{"window(0)", Policy{Kind: PolicyWindow}},
		{"window(2s)", Policy{Kind: PolicyWindow, Window: 2 * time.Second}},
		{"affinity", Policy{Kind: PolicyAffinity}},
		{"affinity(available-only)", Policy{Kind: PolicyAffinity, HashMode: hashroute.AvailableOnly}},
		{"affinity(rebalance-override)", Policy{Kind: PolicyAffinity, HashMode: hashroute.RebalanceOverride}},
		{"global", Policy{Kind: PolicyGlobal, WaitBudget: DefaultWaitBudget}},
		{"global(1s)", Policy{Kind: PolicyGlobal, WaitBudget: time.Second}},
		{"global(0)+defer", Policy{Kind: PolicyGlobal, Defer: true}},
		{"token-wait(2s)+defer", Policy{Kind: PolicyTokenWait, WaitBudget: 2 * time.Second, Defer: true}},
		{"token-ryw+defer+epoch", Policy{Kind: PolicyTokenRYW, Defer: true, CheckEpoch: true}},
		{"token-wait(50ms)+skip-futile", Policy{Kind: PolicyTokenWait, WaitBudget: 50 * time.Millisecond, SkipFutile: true}},
		{"global+skip-futile+defer+epoch", Policy{Kind: PolicyGlobal, WaitBudget: DefaultWaitBudget, SkipFutile: true, Defer: true, CheckEpoch: true}},
		{"token-wait(50ms)+skip-futile+futile-trend", Policy{Kind: PolicyTokenWait, WaitBudget: 50 * time.Millisecond, SkipFutile: true, FutileTrend: true}},
		{"global+futile-trend+skip-futile+defer+epoch", Policy{Kind: PolicyGlobal, WaitBudget: DefaultWaitBudget, SkipFutile: true, FutileTrend: true, Defer: true, CheckEpoch: true}},
		{" Token-RYW-MR+Epoch+Defer ", Policy{Kind: PolicyTokenRYWMR, Defer: true, CheckEpoch: true}},
	}
	for _, c := range ok {
		got, err := ParsePolicy(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParsePolicy(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := map[string]string{
		"":                                   "unknown policy",
		"random":                             "unknown policy",
		"token-ryw(5)":                       "takes no argument",
		"window(5":                           "closing parenthesis",
		"window(-5ms)":                       "out of range",
		"window(2h)":                         "out of range",
		"window(abc)":                        "duration",
		"window()":                           "empty duration",
		"token-wait(NaN)":                    "out of range",
		"affinity(modulo)":                   "unknown mode",
		"any+epoch+epoch":                    "unknown policy",
		"token-wait(1e300)":                  "out of range",
		"any+defer":                          "no freshness fallback to defer",
		"window(1s)+defer":                   "no freshness fallback to defer",
		"global+defer+defer":                 "unknown policy",
		"token-ryw-mr+skip-futile":           "no budget wait to skip",
		"token-wait+futile-trend":            "futile-trend without skip-futile",
		"any+skip-futile":                    "no budget wait to skip",
		"token-wait+skip-futile+skip-futile": "unknown policy",
		"global(-1)":                         "out of range",
	}
	for in, want := range bad {
		_, err := ParsePolicy(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePolicy(%q) error %v, want one mentioning %q", in, err, want)
		}
	}
}

func TestCapValidate(t *testing.T) {
	c := Cap{PerSecond: 20}
	if err := c.Validate(); err != nil || c.Burst != 20 {
		t.Fatalf("default burst: %+v %v", c, err)
	}
	c = Cap{PerSecond: 0.5}
	if err := c.Validate(); err != nil || c.Burst != 1 {
		t.Fatalf("default burst for slow rates: %+v %v", c, err)
	}
	for _, bad := range []Cap{{PerSecond: -1}, {PerSecond: 1, Burst: 0.5}, {Behavior: 9}, {ExtraWait: -1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted nonsense", bad)
		}
	}
	for _, s := range []string{"wait-longer", "fail-fast", "serve-stale", "defer"} {
		b, err := ParseCapBehavior(s)
		if err != nil || b.String() != s {
			t.Errorf("ParseCapBehavior(%q) = %v, %v", s, b, err)
		}
	}
	if _, err := ParseCapBehavior("retry"); err == nil {
		t.Error("ParseCapBehavior accepted retry")
	}
}

func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		n := r.String()
		if strings.HasPrefix(n, "reason(") || seen[n] {
			t.Errorf("reason %d has name %q", r, n)
		}
		seen[n] = true
	}
	seenOut := map[string]bool{}
	for _, o := range Outcomes() {
		n := o.String()
		if strings.HasPrefix(n, "outcome(") || seenOut[n] {
			t.Errorf("outcome %d has name %q", o, n)
		}
		seenOut[n] = true
	}
	for _, k := range PolicyKinds() {
		if p, err := ParsePolicy(k.String()); err != nil || p.Kind != k {
			t.Errorf("kind %v does not round-trip: %v", k, err)
		}
	}
	if len(PolicyKinds()) != len(kindNames) || !slices.Contains(PolicyKinds(), PolicyGlobal) {
		t.Errorf("PolicyKinds() = %v: want every kind", PolicyKinds())
	}
	for i, b := range CapBehaviors() {
		if int(b) != i || strings.HasPrefix(b.String(), "cap-behavior(") {
			t.Errorf("cap behaviour %d named %q", i, b)
		}
	}
	for _, a := range Actions() {
		if strings.HasPrefix(a.String(), "Action(") {
			t.Errorf("action %d unnamed", a)
		}
	}
}

// FuzzParsePolicy: whatever the text, ParsePolicy either fails or returns a
// valid policy whose String parses back to the same policy.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"any", "affinity(full-list)", "window(500ms)", "window(0)", "token-ryw",
		"token-ryw-mr+epoch", "token-wait(1600)", "token-wait(1.5s)", "window(", "x(y)z", "token-wait(1e-9)",
		"global(400ms)+defer", "token-ryw+defer+epoch", "global+epoch", "token-wait(50ms)+skip-futile", "global(1s)+epoch+defer+skip-futile",
		"token-wait+futile-trend+skip-futile", "global(1s)+futile-trend+epoch+defer+skip-futile", "token-wait+futile-trend"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParsePolicy(%q) returned an invalid policy: %v", s, err)
		}
		q, err := ParsePolicy(p.String())
		if err != nil || q != p {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, p, p.String(), q, err)
		}
	})
}
