package lab

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/causallab/causallab/router"
)

// FailRule is one `--fail-on` rule: a metric of a router row compared with
// a threshold. The run fails when any rule holds for any row it applies to.
type FailRule struct {
	// Router limits the rule to rows of this name ("" = every row).
	Router string
	// Metric is one of FailMetrics.
	Metric string
	// Op is one of > >= < <= == !=.
	Op string
	// Value is the threshold.
	Value float64
}

// FailMetrics lists the metrics a rule may name.
var failMetrics = withHashMetrics(map[string]func(*RouterResult) float64{
	"ryw":            func(r *RouterResult) float64 { return float64(r.RYW) },
	"mr":             func(r *RouterResult) float64 { return float64(r.MR) },
	"ryw_pct":        func(r *RouterResult) float64 { return r.RYWPct },
	"mr_pct":         func(r *RouterResult) float64 { return r.MRPct },
	"all_writes":     func(r *RouterResult) float64 { return float64(r.AllWrites) },
	"all_writes_pct": func(r *RouterResult) float64 { return r.AllWritesPct },
	"deferred":       func(r *RouterResult) float64 { return float64(r.Outcomes[router.OutDeferred.String()]) },
	"primary_pct":    func(r *RouterResult) float64 { return r.PrimaryPct },
	"timed_out":      func(r *RouterResult) float64 { return float64(r.Outcomes[router.OutTimedOut.String()]) },
	"failed_fast":    func(r *RouterResult) float64 { return float64(r.Outcomes[router.OutFailedFast.String()]) },
	"errors":         func(r *RouterResult) float64 { return float64(r.Outcomes[router.OutError.String()]) },
	"stale":          func(r *RouterResult) float64 { return float64(r.StaleServed) },
	"lat_p99_ms":     func(r *RouterResult) float64 { return r.LatP99Ms },
})

// FailMetricNames lists the metric names --fail-on accepts.
func FailMetricNames() []string {
	return append([]string{"ryw", "mr", "ryw_pct", "mr_pct", "all_writes", "all_writes_pct", "deferred", "primary_pct", "timed_out", "failed_fast", "errors", "stale", "lat_p99_ms"}, hashMetricNames()...)
}

// ParseFailOn parses rules like "ryw>0,mr>0" or "token-ryw-mr:ryw>0,any:ryw_pct>=50".
// Spaces are ignored. An empty string gives no rules.
func ParseFailOn(s string) ([]FailRule, error) {
	var out []FailRule
	for _, f := range strings.Split(s, ",") {
		f = strings.Join(strings.Fields(f), "")
		if f == "" {
			continue
		}
		var r FailRule
		body := f
		// A router name may itself hold ':' only inside parentheses-free
		// names; the last ':' before the metric splits them.
		if i := strings.LastIndexByte(f, ':'); i >= 0 {
			r.Router, body = f[:i], f[i+1:]
			if r.Router == "" {
				return nil, fmt.Errorf("lab: fail-on rule %q: empty router name before ':'", f)
			}
		}
		j := strings.IndexAny(body, "<>=!")
		if j <= 0 {
			return nil, fmt.Errorf("lab: fail-on rule %q: want METRIC OP NUMBER, e.g. ryw>0", f)
		}
		r.Metric = strings.ToLower(body[:j])
		if _, ok := failMetrics[r.Metric]; !ok {
			return nil, fmt.Errorf("lab: fail-on rule %q: unknown metric %q (want one of %s)", f, r.Metric, strings.Join(FailMetricNames(), ", "))
		}
		rest := body[j:]
		for _, op := range []string{">=", "<=", "==", "!=", ">", "<"} {
			if strings.HasPrefix(rest, op) {
				r.Op = op
				break
			}
		}
		if r.Op == "" {
			return nil, fmt.Errorf("lab: fail-on rule %q: unknown operator (want > >= < <= == !=)", f)
		}
		v, err := strconv.ParseFloat(rest[len(r.Op):], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("lab: fail-on rule %q: %q is not a finite number", f, rest[len(r.Op):])
		}
		r.Value = v
		out = append(out, r)
	}
	return out, nil
}

// String renders the rule in ParseFailOn's syntax.
func (r FailRule) String() string {
	s := r.Metric + r.Op + strconv.FormatFloat(r.Value, 'g', -1, 64)
	if r.Router != "" {
		s = r.Router + ":" + s
	}
	return s
}

// Failures returns one line per (rule, row) that holds. A rule naming a
// router absent from the result is itself a failure (a typo must not pass).
func Failures(res *Result, rules []FailRule) []string {
	var out []string
	for _, rule := range rules {
		get := failMetrics[rule.Metric]
		matched := false
		for i := range res.Routers {
			row := &res.Routers[i]
			if rule.Router != "" && rule.Router != row.Name {
				continue
			}
			matched = true
			v := get(row)
			if compare(v, rule.Op, rule.Value) {
				out = append(out, fmt.Sprintf("%s: %s = %g (rule %s)", row.Name, rule.Metric, v, rule))
			}
		}
		if !matched {
			out = append(out, fmt.Sprintf("rule %s names no router of this run", rule))
		}
	}
	return out
}

// FailuresAll is Failures over several results of one invocation (lab
// hash's runs): each rule is checked on every result, and a rule naming a
// router that none of them has is a failure once.
func FailuresAll(results []*Result, rules []FailRule) []string {
	var out []string
	for _, rule := range rules {
		matched := false
		for _, res := range results {
			for _, f := range Failures(res, []FailRule{rule}) {
				if !strings.HasPrefix(f, "rule ") {
					out = append(out, res.Experiment+": "+f)
				}
			}
			for i := range res.Routers {
				matched = matched || rule.Router == "" || rule.Router == res.Routers[i].Name
			}
		}
		if !matched {
			out = append(out, fmt.Sprintf("rule %s names no router of this run", rule))
		}
	}
	return out
}

func compare(v float64, op string, t float64) bool {
	switch op {
	case ">":
		return v > t
	case ">=":
		return v >= t
	case "<":
		return v < t
	case "<=":
		return v <= t
	case "==":
		return v == t
	case "!=":
		return v != t
	}
	return false
}

// CheckFailOn refuses, before anything runs, a rule naming a router that
// no run of sc under o has: Failures would report it after the run (a
// typo must not pass), but it need not cost the run.
func (sc *Scenario) CheckFailOn(o ScenarioOptions, rules []FailRule) error {
	return CheckFailOnAll([]*Scenario{sc}, o, rules)
}

// CheckFailOnAll is CheckFailOn for the scenarios of one invocation (lab
// hash's three folders): a rule is checked on every run that has its
// router (FailuresAll), so it is refused only when no run of any of them
// has that router.
func CheckFailOnAll(scs []*Scenario, o ScenarioOptions, rules []FailRule) error {
	have := map[string]bool{}
	var names, scNames []string
	for _, sc := range scs {
		scNames = append(scNames, sc.Name)
		cfgs, err := sc.checkedConfigs(o)
		if err != nil {
			return err
		}
		for _, cfg := range cfgs {
			for _, sp := range cfg.Routers {
				if !have[sp.Name] {
					have[sp.Name] = true
					names = append(names, sp.Name)
				}
			}
		}
	}
	for _, rule := range rules {
		if rule.Router != "" && !have[rule.Router] {
			return fmt.Errorf("lab: fail-on rule %s names no router of %s (its routers: %s)", rule, strings.Join(scNames, ", "), strings.Join(names, ", "))
		}
	}
	return nil
}
