package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Scenarios are data folders (gh-ost localtests style): a folder holds a
// scenario.yaml naming the condition, the scripted events, the routers and
// the expected structural results, so a new case is a new folder. See
// docs/lab.md for the format; lab/scenarios holds the shipped ones.

// ScenarioFile is the file name inside a scenario folder.
const ScenarioFile = "scenario.yaml"

// Scenario is one parsed scenario.yaml.
type Scenario struct {
	// Name is the folder's base name.
	Name string `yaml:"-"`
	// Description says what the scenario shows.
	Description string `yaml:"description"`
	// Condition is a ParseCondition text; default identical.
	Condition string `yaml:"condition"`
	// Routers are router.ParsePolicy texts; a "lsn:" prefix selects the
	// scalar token (the LSN adapter). At least one.
	Routers []string `yaml:"routers"`
	// Duration, Sessions, WriteRate, ReadsPerWrite: the workload (Config's
	// defaults when zero).
	Duration      time.Duration `yaml:"duration"`
	Sessions      int           `yaml:"sessions"`
	WriteRate     float64       `yaml:"write_rate"`
	ReadsPerWrite int           `yaml:"reads_per_write"`
	// Events are scripted faults; At and For scale with the duration when
	// a run shortens it (ScenarioOptions.Duration).
	Events []ScenarioEvent `yaml:"events"`
	// Expect maps a router name to metric -> expectation ("0", ">0",
	// "<=5", ...: a bare number means ==). Metrics are --fail-on's.
	Expect map[string]map[string]string `yaml:"expect"`
}

// ScenarioEvent is one scripted fault of a scenario.
type ScenarioEvent struct {
	At   time.Duration `yaml:"at"`
	Kind EventKind     `yaml:"kind"`
	Node string        `yaml:"node"`
	For  time.Duration `yaml:"for"`
	Load int           `yaml:"load"`
}

// Expectation is one expected structural result.
type Expectation struct {
	Router, Metric, Op string
	Value              float64
}

func (x Expectation) String() string {
	return fmt.Sprintf("%s: %s %s %g", x.Router, x.Metric, x.Op, x.Value)
}

// LoadScenario reads dir/scenario.yaml (unknown keys are an error).
func LoadScenario(dir string) (*Scenario, error) {
	b, err := os.ReadFile(filepath.Join(dir, ScenarioFile))
	if err != nil {
		return nil, fmt.Errorf("lab: scenario %s: %w", dir, err)
	}
	sc, err := ParseScenario(b)
	if err != nil {
		return nil, fmt.Errorf("lab: scenario %s: %w", dir, err)
	}
	sc.Name = filepath.Base(filepath.Clean(dir))
	return sc, nil
}

// ParseScenario decodes and checks a scenario.yaml.
func ParseScenario(b []byte) (*Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		return nil, fmt.Errorf("bad YAML: %w", err)
	}
	if _, err := sc.config(); err != nil {
		return nil, err
	}
	if _, err := sc.Expectations(); err != nil {
		return nil, err
	}
	return &sc, nil
}

// ScenarioDirs lists the scenario folders under root (those holding a
// scenario.yaml), sorted.
func ScenarioDirs(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(d, ScenarioFile)); err == nil {
			out = append(out, d)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	slices.Sort(out)
	return out, nil
}

// config builds the run's Config (unvalidated routers parsed).
func (sc *Scenario) config() (Config, error) {
	var cfg Config
	cond := sc.Condition
	if cond == "" {
		cond = CondIdentical
	}
	c, err := ParseCondition(cond)
	if err != nil {
		return cfg, err
	}
	if len(sc.Routers) == 0 {
		return cfg, errors.New("no routers")
	}
	for _, r := range sc.Routers {
		tok := TokenGTID
		text := r
		if rest, ok := strings.CutPrefix(r, "lsn:"); ok {
			tok, text = TokenLSN, rest
		}
		specs, err := ParseRouters(text)
		if err != nil {
			return cfg, err
		}
		for _, s := range specs {
			s.Name, s.Token = r, tok
			cfg.Routers = append(cfg.Routers, s)
		}
	}
	for _, e := range sc.Events {
		switch e.Kind {
		case EvKill, EvPause, EvPartition, EvHeavy, EvApplyDelay, EvStall, EvFailover, EvDrift:
		default:
			return cfg, fmt.Errorf("event kind %q unknown", e.Kind)
		}
		if e.At < 0 || e.For < 0 {
			return cfg, fmt.Errorf("event %s %s: negative time", e.Kind, e.Node)
		}
	}
	cfg.Condition = c
	cfg.Duration, cfg.Sessions, cfg.WriteRate, cfg.ReadsPerWrite = sc.Duration, sc.Sessions, sc.WriteRate, sc.ReadsPerWrite
	return cfg, nil
}

// Expectations parses Expect, sorted by router and metric.
func (sc *Scenario) Expectations() ([]Expectation, error) {
	var out []Expectation
	for router, ms := range sc.Expect {
		if !slices.Contains(sc.Routers, router) {
			return nil, fmt.Errorf("expect names router %q, not among routers %v", router, sc.Routers)
		}
		for m, v := range ms {
			if _, ok := failMetrics[m]; !ok {
				return nil, fmt.Errorf("expect %s: unknown metric %q (want one of %s)", router, m, strings.Join(FailMetricNames(), ", "))
			}
			x := Expectation{Router: router, Metric: m, Op: "=="}
			v = strings.TrimSpace(v)
			for _, op := range []string{">=", "<=", "==", "!=", ">", "<"} {
				if rest, ok := strings.CutPrefix(v, op); ok {
					x.Op, v = op, strings.TrimSpace(rest)
					break
				}
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("expect %s.%s: %q is not a number", router, m, v)
			}
			x.Value = f
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b Expectation) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// ScenarioOptions adjust a scenario run.
type ScenarioOptions struct {
	// Config overrides the scenario's workload where set (Duration scales
	// the events' times); Routers and Condition come from the scenario.
	Config Config
}

// RunScenario runs sc on topo and returns the result and the expectations
// that did not hold (one line each; empty: the scenario passed).
func RunScenario(ctx context.Context, topo Topology, sc *Scenario, o ScenarioOptions) (*Result, []string, error) {
	cfg, err := sc.config()
	if err != nil {
		return nil, nil, err
	}
	base := cfg.Duration
	if base == 0 {
		base = 20 * time.Second
	}
	ov := o.Config
	ov.Routers, ov.Condition = cfg.Routers, cfg.Condition
	if ov.Duration == 0 {
		ov.Duration = base
	}
	if ov.Sessions == 0 {
		ov.Sessions = cfg.Sessions
	}
	if ov.WriteRate == 0 {
		ov.WriteRate = cfg.WriteRate
	}
	if ov.ReadsPerWrite == 0 {
		ov.ReadsPerWrite = cfg.ReadsPerWrite
	}
	scale := float64(ov.Duration) / float64(base)
	for _, e := range sc.Events {
		ov.Condition.Events = append(ov.Condition.Events, Event{At: time.Duration(float64(e.At) * scale), Kind: e.Kind,
			Node: e.Node, For: time.Duration(float64(e.For) * scale), Load: e.Load})
	}
	res, err := Run(ctx, topo, ov)
	if err != nil {
		return nil, nil, fmt.Errorf("lab scenario %s: %w", sc.Name, err)
	}
	res.Experiment = "scenario:" + sc.Name
	xs, err := sc.Expectations()
	if err != nil {
		return nil, nil, err
	}
	var failed []string
	for _, x := range xs {
		var row *RouterResult
		for i := range res.Routers {
			if res.Routers[i].Name == x.Router {
				row = &res.Routers[i]
			}
		}
		if row == nil {
			failed = append(failed, fmt.Sprintf("%s: no such router in the result", x))
			continue
		}
		if v := failMetrics[x.Metric](row); !compare(v, x.Op, x.Value) {
			failed = append(failed, fmt.Sprintf("expected %s, got %g", x, v))
		}
	}
	return res, failed, nil
}
