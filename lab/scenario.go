package lab

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/router"
)

// Scenarios are data folders (gh-ost localtests style): a folder holds a
// scenario.yaml naming the workload, the condition, the routers, the
// scripted events, the simulator's part and the expected structural
// results, so a new case is a new folder. Every experiment of `causallab
// lab` (routers, gated, failover, hash, chaos) is one of the folders of
// lab/scenarios, embedded in the binary (Builtin); users keep their own in
// any directory. docs/lab.md describes the format.

// ScenarioFile is the file name inside a scenario folder.
const ScenarioFile = "scenario.yaml"

//go:embed scenarios
var embedded embed.FS

// Builtin returns the built-in scenarios (lab/scenarios, embedded in the
// binary): one folder per scenario, named as `causallab lab` names them.
func Builtin() fs.FS {
	sub, err := fs.Sub(embedded, "scenarios")
	if err != nil {
		panic(fmt.Sprintf("lab: embedded scenarios: %v", err)) // cannot happen: the directive embeds "scenarios"
	}
	return sub
}

// BuiltinScenario loads the built-in scenario name.
func BuiltinScenario(name string) (*Scenario, error) { return LoadScenarioFS(Builtin(), name) }

// Scenario is one parsed scenario.yaml.
type Scenario struct {
	// Name is the folder's base name.
	Name string `yaml:"-"`
	// Description says what the scenario shows.
	Description string `yaml:"description"`
	// Condition is a ParseCondition text; default identical.
	Condition string `yaml:"condition"`
	// Duration, Sessions, WriteRate, ReadsPerWrite, GapMin and GapMax are
	// the workload (Config's defaults when zero).
	Duration      time.Duration `yaml:"duration"`
	Sessions      int           `yaml:"sessions"`
	WriteRate     float64       `yaml:"write_rate"`
	ReadsPerWrite int           `yaml:"reads_per_write"`
	GapMin        time.Duration `yaml:"gap_min"`
	GapMax        time.Duration `yaml:"gap_max"`
	// MinReplicas is the fewest replicas the scenario runs on; the
	// replicas its events name (and chaos's two) raise it.
	MinReplicas int `yaml:"min_replicas"`
	// Routers are the routers under test (at least one, unless Runs).
	Routers []ScenarioRouter `yaml:"routers"`
	// Weights are the replicas' hashing weights in configured order (as
	// ProxySQL's hostgroup weights), one per replica; default all 1.
	Weights []int `yaml:"weights"`
	// Events are scripted faults; At and For scale with the duration when
	// a run changes it (ScenarioOptions.Config.Duration).
	Events []ScenarioEvent `yaml:"events"`
	// Chaos adds a seeded random fault schedule (ChaosEvents) to Events.
	Chaos *ScenarioChaos `yaml:"chaos"`
	// Predict is the simulator's part; default none.
	Predict PredictKind `yaml:"predict"`
	// Note is a text/template executed per router row into the result's
	// notes (see noteFuncs for the functions it may call).
	Note string `yaml:"note"`
	// Runs, when set, are several runs of the scenario one after the
	// other, each with its own routers, events and expectations (Routers,
	// Events and Expect must then be empty); the rest is shared.
	Runs []ScenarioRun `yaml:"runs"`
	// Expect maps a router name to metric -> expectation ("0", ">0",
	// "<=5", ...: a bare number means ==). Metrics are --fail-on's.
	Expect map[string]map[string]string `yaml:"expect"`

	note *template.Template
}

// ScenarioRun is one run of a scenario with several (Scenario.Runs).
type ScenarioRun struct {
	// Name is the run's result name (Result.Experiment).
	Name    string                       `yaml:"name"`
	Routers []ScenarioRouter             `yaml:"routers"`
	Events  []ScenarioEvent              `yaml:"events"`
	Expect  map[string]map[string]string `yaml:"expect"`
}

// ScenarioRouter is one router of a scenario: a router.ParsePolicy text
// ("token-wait(400ms)", named by its text, with an "lsn:" prefix for the
// scalar token), or a mapping {name, policy, token}.
type ScenarioRouter struct {
	// Name labels the router; default the policy text.
	Name string `yaml:"name"`
	// Policy is a router.ParsePolicy text.
	Policy string `yaml:"policy"`
	// Token is the position kind: gtid (default) or lsn.
	Token TokenKind `yaml:"token"`
}

// UnmarshalYAML takes a policy text or a {name, policy, token} mapping.
func (r *ScenarioRouter) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*r = ScenarioRouter{Name: n.Value, Policy: n.Value}
		if rest, ok := strings.CutPrefix(n.Value, "lsn:"); ok {
			r.Policy, r.Token = rest, TokenLSN
		}
		return nil
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; k != "name" && k != "policy" && k != "token" {
				return fmt.Errorf("line %d: router field %q unknown (want name, policy, token)", n.Content[i].Line, k)
			}
		}
		type plain ScenarioRouter
		var p plain
		if err := n.Decode(&p); err != nil {
			return err
		}
		*r = ScenarioRouter(p)
		if r.Name == "" {
			r.Name = r.Policy
		}
		return nil
	}
	return fmt.Errorf("line %d: a router is a policy text or {name, policy, token}", n.Line)
}

// ScenarioEvent is one scripted fault of a scenario.
type ScenarioEvent struct {
	At   time.Duration `yaml:"at"`
	Kind EventKind     `yaml:"kind"`
	// Node names the node; Replica instead picks the topology's Replica-th
	// replica (1-based) when the run starts, whatever its name.
	Node    string        `yaml:"node"`
	Replica int           `yaml:"replica"`
	For     time.Duration `yaml:"for"`
	Load    int           `yaml:"load"`
}

// ScenarioChaos is a random fault schedule (ChaosEvents).
type ScenarioChaos struct {
	// Every is the mean time between faults (it does not scale with the
	// duration).
	Every time.Duration `yaml:"every"`
}

// PredictKind is what the simulator adds to a scenario's results.
type PredictKind string

const (
	// PredictNone: no simulator.
	PredictNone PredictKind = "none"
	// PredictFit: a prediction per router row, the simulator's lag fitted
	// to the measured one (Predict).
	PredictFit PredictKind = "fit"
	// PredictFailover: the simulator's failover table (sim.Failover).
	PredictFailover PredictKind = "failover"
	// PredictHashing: the simulator on the same staggered world, faults and
	// drifts, its attribution of moves and violations beside each affinity
	// row's (PredictHash).
	PredictHashing PredictKind = "hashing"
)

// Expectation is one expected structural result.
type Expectation struct {
	Router, Metric, Op string
	Value              float64
}

func (x Expectation) String() string {
	return fmt.Sprintf("%s: %s %s %g", x.Router, x.Metric, x.Op, x.Value)
}

// LoadScenario reads dir/scenario.yaml from the file system.
func LoadScenario(dir string) (*Scenario, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("lab: scenario %s: %w", dir, err)
	}
	return loadScenario(os.DirFS(abs), ".", filepath.Base(abs), dir)
}

// LoadScenarioFS reads name/scenario.yaml from fsys (Builtin(), or
// os.DirFS of a folder of scenario folders).
func LoadScenarioFS(fsys fs.FS, name string) (*Scenario, error) {
	return loadScenario(fsys, name, path.Base(name), name)
}

func loadScenario(fsys fs.FS, dir, name, shown string) (*Scenario, error) {
	b, err := fs.ReadFile(fsys, path.Join(dir, ScenarioFile))
	if err != nil {
		return nil, fmt.Errorf("lab: scenario %s: %w", shown, err)
	}
	sc, err := ParseScenario(b)
	if err != nil {
		return nil, fmt.Errorf("lab: scenario %s: %w", shown, err)
	}
	sc.Name = name
	return sc, nil
}

// ScenarioNames lists the folders of fsys holding a scenario.yaml, sorted.
func ScenarioNames(fsys fs.FS) ([]string, error) {
	ents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, err := fs.Stat(fsys, path.Join(e.Name(), ScenarioFile)); err == nil {
			out = append(out, e.Name())
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	slices.Sort(out)
	return out, nil
}

// ResolveScenarios loads the scenarios args name: "all" is every folder of
// catalog; an argument that is a folder holding scenario.yaml is loaded
// from there; any other is the name of a folder of catalog.
func ResolveScenarios(catalog fs.FS, args ...string) ([]*Scenario, error) {
	var out []*Scenario
	for _, a := range args {
		switch {
		case a == "all":
			names, err := ScenarioNames(catalog)
			if err != nil {
				return nil, fmt.Errorf("lab: scenarios: %w", err)
			}
			for _, n := range names {
				sc, err := LoadScenarioFS(catalog, n)
				if err != nil {
					return nil, err
				}
				out = append(out, sc)
			}
		case isFile(filepath.Join(a, ScenarioFile)):
			sc, err := LoadScenario(a)
			if err != nil {
				return nil, err
			}
			out = append(out, sc)
		default:
			if _, err := fs.Stat(catalog, path.Join(a, ScenarioFile)); err != nil || !fs.ValidPath(a) {
				names, _ := ScenarioNames(catalog)
				return nil, fmt.Errorf("lab: no scenario %q (have %s, or give a folder holding %s)", a, strings.Join(names, ", "), ScenarioFile)
			}
			sc, err := LoadScenarioFS(catalog, a)
			if err != nil {
				return nil, err
			}
			out = append(out, sc)
		}
	}
	return out, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// ParseScenario decodes and checks a scenario.yaml (unknown keys are an
// error).
func ParseScenario(b []byte) (*Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		return nil, fmt.Errorf("bad YAML: %w", err)
	}
	if err := sc.check(); err != nil {
		return nil, err
	}
	return &sc, nil
}

// runs returns the scenario's runs: Runs, or the scenario as one run named
// after it.
func (sc *Scenario) runs() []ScenarioRun {
	if len(sc.Runs) > 0 {
		return sc.Runs
	}
	return []ScenarioRun{{Name: sc.Name, Routers: sc.Routers, Events: sc.Events, Expect: sc.Expect}}
}

// check rejects what cannot run, with a message naming it.
func (sc *Scenario) check() error {
	if _, err := ParseCondition(sc.conditionText()); err != nil {
		return err
	}
	switch sc.Predict {
	case "", PredictNone, PredictFit, PredictFailover, PredictHashing:
	default:
		return fmt.Errorf("predict %q unknown (want none, fit, failover or hashing)", sc.Predict)
	}
	if sc.Duration < 0 || sc.GapMin < 0 || sc.GapMax < 0 || sc.Sessions < 0 || sc.WriteRate < 0 || sc.ReadsPerWrite < 0 || sc.MinReplicas < 0 {
		return errors.New("negative workload value")
	}
	for _, w := range sc.Weights {
		if w < 1 || w > hashroute.MaxWeight {
			return fmt.Errorf("weights %v: each 1..%d", sc.Weights, hashroute.MaxWeight)
		}
	}
	if sc.Chaos != nil && sc.Chaos.Every <= 0 {
		return fmt.Errorf("chaos every %v: want a positive duration", sc.Chaos.Every)
	}
	if len(sc.Runs) > 0 {
		if len(sc.Routers) > 0 || len(sc.Events) > 0 || len(sc.Expect) > 0 {
			return errors.New("with runs, routers, events and expect belong to each run")
		}
		names := map[string]bool{}
		for _, r := range sc.Runs {
			if r.Name == "" || names[r.Name] {
				return fmt.Errorf("run name %q empty or repeated", r.Name)
			}
			names[r.Name] = true
		}
	}
	for _, r := range sc.runs() {
		if _, err := r.specs(); err != nil {
			return err
		}
		for _, e := range r.Events {
			if err := e.check(); err != nil {
				return err
			}
		}
		if _, err := r.expectations(); err != nil {
			return err
		}
	}
	if sc.Note != "" {
		t, err := template.New("note").Funcs(noteFuncs).Parse(sc.Note)
		if err != nil {
			return fmt.Errorf("note: %w", err)
		}
		// Execute once on an empty row: a field or outcome name the row
		// lacks is an error now, not after a run.
		row := RouterResult{Outcomes: map[string]int64{}, Reasons: map[string]int64{}}
		for _, o := range knownOutcomes() {
			row.Outcomes[o] = 0
		}
		if err := t.Execute(new(bytes.Buffer), row); err != nil {
			return fmt.Errorf("note: %w", err)
		}
		sc.note = t
	}
	return nil
}

func (sc *Scenario) conditionText() string {
	if sc.Condition == "" {
		return CondIdentical
	}
	return sc.Condition
}

func (e ScenarioEvent) check() error {
	if !e.Kind.Valid() {
		kinds := make([]string, 0, len(EventKinds()))
		for _, k := range EventKinds() {
			kinds = append(kinds, string(k))
		}
		return fmt.Errorf("event kind %q unknown (want one of %s)", e.Kind, strings.Join(kinds, ", "))
	}
	switch {
	case e.At < 0 || e.For < 0:
		return fmt.Errorf("event %s: negative time", e.Kind)
	case e.Replica < 0:
		return fmt.Errorf("event %s: replica %d (want 1 or more)", e.Kind, e.Replica)
	case e.Node != "" && e.Replica > 0:
		return fmt.Errorf("event %s: give node or replica, not both", e.Kind)
	case e.Kind.needsNode() && e.Node == "" && e.Replica == 0:
		return fmt.Errorf("event %s: needs a node (node: NAME or replica: N)", e.Kind)
	case !e.Kind.needsNode() && (e.Node != "" || e.Replica > 0):
		return fmt.Errorf("event %s: takes no node", e.Kind)
	case e.Kind == EvDrift && e.Load <= 0:
		return fmt.Errorf("event drift: load %d (want the outside reads in flight, 1 or more)", e.Load)
	}
	return nil
}

// specs parses the run's routers (unvalidated otherwise).
func (r ScenarioRun) specs() ([]RouterSpec, error) {
	if len(r.Routers) == 0 {
		return nil, errors.New("no routers")
	}
	out := make([]RouterSpec, 0, len(r.Routers))
	for _, sr := range r.Routers {
		p, err := router.ParsePolicy(sr.Policy)
		if err != nil {
			return nil, err
		}
		tok := sr.Token
		if tok == "" {
			tok = TokenGTID
		}
		if tok != TokenGTID && tok != TokenLSN {
			return nil, fmt.Errorf("router %s: token %q unknown (want gtid or lsn)", sr.Name, tok)
		}
		out = append(out, RouterSpec{Name: sr.Name, Policy: p, Token: tok})
	}
	return out, nil
}

func (r ScenarioRun) routerNames() []string {
	names := make([]string, len(r.Routers))
	for i, sr := range r.Routers {
		names[i] = sr.Name
	}
	return names
}

// Expectations parses every run's expectations, sorted by router and
// metric within a run.
func (sc *Scenario) Expectations() ([]Expectation, error) {
	var out []Expectation
	for _, r := range sc.runs() {
		xs, err := r.expectations()
		if err != nil {
			return nil, err
		}
		out = append(out, xs...)
	}
	return out, nil
}

func (r ScenarioRun) expectations() ([]Expectation, error) {
	var out []Expectation
	names := r.routerNames()
	for rt, ms := range r.Expect {
		if !slices.Contains(names, rt) {
			return nil, fmt.Errorf("expect names router %q, not among routers %v", rt, names)
		}
		for m, v := range ms {
			if _, ok := failMetrics[m]; !ok {
				return nil, fmt.Errorf("expect %s: unknown metric %q (want one of %s)", rt, m, strings.Join(FailMetricNames(), ", "))
			}
			x := Expectation{Router: rt, Metric: m, Op: "=="}
			v = strings.TrimSpace(v)
			for _, op := range []string{">=", "<=", "==", "!=", ">", "<"} {
				if rest, ok := strings.CutPrefix(v, op); ok {
					x.Op, v = op, strings.TrimSpace(rest)
					break
				}
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("expect %s.%s: %q is not a number", rt, m, v)
			}
			x.Value = f
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b Expectation) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// noteFuncs are the functions a scenario's note template may call:
// outcomes ROW NAME... (the row's reads with those outcomes, every outcome
// when none is named; an unknown name is an error) and pct N D (100·N/D).
var noteFuncs = template.FuncMap{
	"outcomes": func(r RouterResult, names ...string) (int64, error) {
		var n int64
		if len(names) == 0 {
			for _, c := range r.Outcomes {
				n += c
			}
			return n, nil
		}
		for _, name := range names {
			if !slices.Contains(knownOutcomes(), name) {
				return 0, fmt.Errorf("outcome %q unknown (want one of %s)", name, strings.Join(knownOutcomes(), ", "))
			}
			n += r.Outcomes[name]
		}
		return n, nil
	},
	"pct": func(n, d int64) float64 { return pct(n, d) },
}

// knownOutcomes are the outcome names a row counts (router.Outcome.String).
func knownOutcomes() []string {
	out := make([]string, 0, router.NumOutcomes)
	for _, o := range router.Outcomes() {
		out = append(out, o.String())
	}
	return out
}
