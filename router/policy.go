package router

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/causallab/causallab/hashroute"
)

// DefaultWindow is PolicyWindow's window when none is given ("window").
const DefaultWindow = 500 * time.Millisecond

// DefaultWaitBudget is PolicyTokenWait's and PolicyGlobal's budget when none
// is given ("token-wait", "global").
const DefaultWaitBudget = 400 * time.Millisecond

// MaxDuration bounds every duration a Policy or Cap accepts (one hour): a
// larger one is a typo, not a plan.
const MaxDuration = time.Hour

var kindNames = [...]string{
	PolicyAny:        "any",
	PolicyAffinity:   "affinity",
	PolicyWindow:     "window",
	PolicyTokenRYW:   "token-ryw",
	PolicyTokenRYWMR: "token-ryw-mr",
	PolicyTokenWait:  "token-wait",
	PolicyGlobal:     "global",
}

// String returns the policy kind's name (any, affinity, window, token-ryw,
// token-ryw-mr, token-wait, global).
func (k PolicyKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "policy(" + strconv.Itoa(int(k)) + ")"
}

// PolicyKinds lists every kind, in declaration order: the simulator, the
// live router, the proxy and the lab run them all.
func PolicyKinds() []PolicyKind {
	return []PolicyKind{PolicyAny, PolicyAffinity, PolicyWindow, PolicyTokenRYW, PolicyTokenRYWMR, PolicyTokenWait, PolicyGlobal}
}

// IsToken reports whether the kind honours session tokens.
func (k PolicyKind) IsToken() bool {
	return k == PolicyTokenRYW || k == PolicyTokenRYWMR || k == PolicyTokenWait || k == PolicyGlobal
}

var reasonNames = [...]string{
	ReasonRouted:             "routed",
	ReasonNoToken:            "no-token",
	ReasonWindow:             "window",
	ReasonNoReplicaQualifies: "no-replica-qualifies",
	ReasonWaitBudgetSpent:    "wait-budget-spent",
	ReasonNoReplicaUp:        "no-replica-up",
	ReasonCapExceeded:        "cap-exceeded",
	ReasonWriteLost:          "write-lost-in-failover",
	ReasonTimedOut:           "timed-out",
	ReasonSeenLost:           "seen-lost-in-failover",
	ReasonInvalidPolicy:      "invalid-policy",
	ReasonPrimaryUnknown:     "primary-position-unknown",
	ReasonSeenPending:        "seen-pending",
	ReasonSeenUnknown:        "seen-unknown",
	ReasonWaitFutile:         "wait-futile",
}

// String returns the reason's metric label.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Reasons lists every reason in declaration order (metric label sets).
func Reasons() []Reason {
	out := make([]Reason, len(reasonNames))
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

var outcomeNames = [...]string{
	OutReplica:    "replica",
	OutFallback:   "fallback",
	OutPrimary:    "primary",
	OutStale:      "stale",
	OutProxied:    "proxied",
	OutFailedFast: "failed-fast",
	OutTimedOut:   "timed-out",
	OutError:      "error",
	OutDeferred:   "deferred",
}

// String returns the outcome's name (metric label, JSON, tables).
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Served reports whether the read returned rows.
func (o Outcome) Served() bool { return o <= OutProxied }

// Outcomes lists every outcome in declaration order.
func Outcomes() []Outcome {
	out := make([]Outcome, NumOutcomes)
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}

// Actions lists every action in declaration order (metric label sets).
func Actions() []Action {
	return []Action{ActReplica, ActPrimary, ActWait, ActFail, ActStale, ActDefer}
}

// String returns the behaviour's flag name.
func (c CapBehavior) String() string {
	switch c {
	case CapWaitLonger:
		return "wait-longer"
	case CapFailFast:
		return "fail-fast"
	case CapServeStale:
		return "serve-stale"
	case CapDefer:
		return "defer"
	}
	return "cap-behavior(" + strconv.Itoa(int(c)) + ")"
}

// CapBehaviors lists every behaviour in declaration order.
func CapBehaviors() []CapBehavior {
	return []CapBehavior{CapWaitLonger, CapFailFast, CapServeStale, CapDefer}
}

// ParseCapBehavior parses wait-longer, fail-fast, serve-stale or defer.
func ParseCapBehavior(s string) (CapBehavior, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "wait-longer":
		return CapWaitLonger, nil
	case "fail-fast":
		return CapFailFast, nil
	case "serve-stale":
		return CapServeStale, nil
	case "defer":
		return CapDefer, nil
	}
	return 0, fmt.Errorf("router: unknown cap behaviour %q (want wait-longer, fail-fast, serve-stale or defer)", s)
}

// Validate rejects nonsense (unknown kind or hash mode, negative or huge
// durations, Defer on a policy without tokens, SkipFutile on one that
// never waits). It fills no defaults: a zero Window means "no window", a zero
// WaitBudget means "do not wait"; ParsePolicy applies DefaultWindow and
// DefaultWaitBudget when the text gives none.
func (p *Policy) Validate() error {
	if int(p.Kind) >= len(kindNames) {
		return fmt.Errorf("router: unknown policy kind %d", p.Kind)
	}
	if p.HashMode > hashroute.RebalanceOverride {
		return fmt.Errorf("router: unknown hash mode %d", p.HashMode)
	}
	if p.Defer && !p.Kind.IsToken() {
		return fmt.Errorf("router: policy %v has no freshness fallback to defer (defer needs token-ryw, token-ryw-mr, token-wait or global)", p.Kind)
	}
	if p.SkipFutile && p.Kind != PolicyTokenWait && p.Kind != PolicyGlobal {
		return fmt.Errorf("router: policy %v has no budget wait to skip (skip-futile needs token-wait or global)", p.Kind)
	}
	if p.FutileTrend && !p.SkipFutile {
		return fmt.Errorf("router: policy %v has futile-trend without skip-futile (futile-trend refines skip-futile's estimate)", p.Kind)
	}
	if err := checkDuration("window", p.Window); err != nil {
		return err
	}
	return checkDuration("wait budget", p.WaitBudget)
}

func checkDuration(what string, d time.Duration) error {
	if d < 0 || d > MaxDuration {
		return fmt.Errorf("router: %s %v out of range [0, %v]", what, d, MaxDuration)
	}
	return nil
}

// String renders the policy in ParsePolicy's syntax, e.g. "window(500ms)",
// "token-wait(400ms)", "global(400ms)", "affinity(full-list)"; "+epoch"
// marks CheckEpoch, "+defer" Defer, "+skip-futile" SkipFutile,
// "+futile-trend" FutileTrend.
func (p Policy) String() string {
	var b strings.Builder
	b.WriteString(p.Kind.String())
	switch p.Kind {
	case PolicyAffinity:
		b.WriteString("(" + p.HashMode.String() + ")")
	case PolicyWindow:
		b.WriteString("(" + p.Window.String() + ")")
	case PolicyTokenWait, PolicyGlobal:
		b.WriteString("(" + p.WaitBudget.String() + ")")
	}
	if p.CheckEpoch {
		b.WriteString("+epoch")
	}
	if p.Defer {
		b.WriteString("+defer")
	}
	if p.SkipFutile {
		b.WriteString("+skip-futile")
	}
	if p.FutileTrend {
		b.WriteString("+futile-trend")
	}
	return b.String()
}

// ParsePolicy parses a policy: any | affinity[(MODE)] | window[(DUR)] |
// token-ryw | token-ryw-mr | token-wait[(DUR)] | global[(DUR)], optionally
// followed by "+epoch" (CheckEpoch), "+defer" (Defer), "+skip-futile"
// (SkipFutile) and "+futile-trend" (FutileTrend, with skip-futile), in any
// order.
// MODE is a hashroute mode name; DUR a Go duration ("400ms") or a bare
// number of milliseconds ("400"). Case and surrounding space are ignored.
// The result is validated.
func ParsePolicy(s string) (Policy, error) {
	orig := s
	s = strings.ToLower(strings.TrimSpace(s))
	var p Policy
	for range 4 {
		if rest, ok := strings.CutSuffix(s, "+epoch"); ok && !p.CheckEpoch {
			p.CheckEpoch, s = true, strings.TrimSpace(rest)
		} else if rest, ok := strings.CutSuffix(s, "+defer"); ok && !p.Defer {
			p.Defer, s = true, strings.TrimSpace(rest)
		} else if rest, ok := strings.CutSuffix(s, "+skip-futile"); ok && !p.SkipFutile {
			p.SkipFutile, s = true, strings.TrimSpace(rest)
		} else if rest, ok := strings.CutSuffix(s, "+futile-trend"); ok && !p.FutileTrend {
			p.FutileTrend, s = true, strings.TrimSpace(rest)
		}
	}
	name, arg, hasArg := s, "", false
	if i := strings.IndexByte(s, '('); i >= 0 {
		if !strings.HasSuffix(s, ")") {
			return Policy{}, fmt.Errorf("router: policy %q: missing closing parenthesis", orig)
		}
		name, arg, hasArg = strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:len(s)-1]), true
	}
	found := false
	for k, n := range kindNames {
		if n == name {
			p.Kind, found = PolicyKind(k), true
			break
		}
	}
	if !found {
		return Policy{}, fmt.Errorf("router: unknown policy %q (want any, affinity, window, token-ryw, token-ryw-mr, token-wait or global)", orig)
	}
	switch p.Kind {
	case PolicyAffinity:
		if hasArg {
			m, err := hashroute.ParseMode(arg)
			if err != nil {
				return Policy{}, fmt.Errorf("router: policy %q: %w", orig, err)
			}
			p.HashMode = m
		}
	case PolicyWindow, PolicyTokenWait, PolicyGlobal:
		d := DefaultWindow
		if p.Kind != PolicyWindow {
			d = DefaultWaitBudget
		}
		if hasArg {
			var err error
			if d, err = parseDuration(arg); err != nil {
				return Policy{}, fmt.Errorf("router: policy %q: %w", orig, err)
			}
		}
		if p.Kind == PolicyWindow {
			p.Window = d
		} else {
			p.WaitBudget = d
		}
	default:
		if hasArg {
			return Policy{}, fmt.Errorf("router: policy %q takes no argument", orig)
		}
	}
	if err := p.Validate(); err != nil {
		return Policy{}, fmt.Errorf("router: policy %q: %w", orig, err)
	}
	return p, nil
}

// parseDuration accepts a Go duration or a bare number of milliseconds.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("empty duration")
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > float64(MaxDuration/time.Millisecond) {
			return 0, fmt.Errorf("duration %q ms out of range [0, %v]", s, MaxDuration)
		}
		return time.Duration(f * float64(time.Millisecond)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want e.g. 400ms or a number of milliseconds", s)
	}
	return d, nil
}

// Validate fills Burst's default (max(1, PerSecond)) and rejects nonsense
// (negative or non-finite rate or burst, unknown behaviour, bad ExtraWait).
func (c *Cap) Validate() error {
	if math.IsNaN(c.PerSecond) || math.IsInf(c.PerSecond, 0) || c.PerSecond < 0 {
		return fmt.Errorf("router: cap rate %v per second, want a finite number >= 0", c.PerSecond)
	}
	if math.IsNaN(c.Burst) || math.IsInf(c.Burst, 0) || c.Burst < 0 {
		return fmt.Errorf("router: cap burst %v, want a finite number >= 0", c.Burst)
	}
	if c.PerSecond > 0 && c.Burst > 0 && c.Burst < 1 {
		return fmt.Errorf("router: cap burst %v below 1 would never allow a fallback", c.Burst)
	}
	if c.Burst == 0 {
		c.Burst = max(1, c.PerSecond)
	}
	if c.Behavior > CapDefer {
		return fmt.Errorf("router: unknown cap behaviour %d", c.Behavior)
	}
	return checkDuration("cap extra wait", c.ExtraWait)
}
