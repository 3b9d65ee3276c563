package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/causallab/causallab/compose"
	"github.com/causallab/causallab/lab"
	"github.com/causallab/causallab/sim"
)

// parseEngines reads --engines: a comma-separated list of compose
// engines, each once.
func parseEngines(s string) ([]compose.Engine, error) {
	var out []compose.Engine
	for _, part := range strings.Split(s, ",") {
		e := compose.Engine(strings.TrimSpace(part))
		if !slices.Contains(compose.Engines(), e) {
			return nil, usageErrorf("--engines: %q is not an engine (want a comma-separated list of %v)", part, compose.Engines())
		}
		if slices.Contains(out, e) {
			return nil, usageErrorf("--engines: %s named twice", e)
		}
		out = append(out, e)
	}
	return out, nil
}

// runEngineFailover is `lab failover --engines`: the failover experiment
// on one fresh topology per engine (lab.RunEngineFailover), its table and
// the simulator's failover table.
func runEngineFailover(cmd *cobra.Command, f *labFlags, engines string) error {
	if bad := changedOutside(cmd, engineFailoverFlags); len(bad) > 0 && f.primaryDSN == "" {
		return usageErrorf("--engines does not take %s (it takes %s; without --engines those flags run the MySQL scenario)", strings.Join(bad, ", "), strings.Join(prefixed(engineFailoverFlags), ", "))
	}
	var es []compose.Engine
	var err error
	if engines != enginesAuto {
		if es, err = parseEngines(engines); err != nil {
			return err
		}
	}
	format, err := f.formatAndBackend()
	if err != nil {
		return err
	}
	if f.primaryDSN != "" {
		return usageErrorf("--engines starts its own topologies: --primary-dsn does not apply")
	}
	ctx, errw := cmd.Context(), cmd.ErrOrStderr()
	rep := newReporter(errw, "lab failover", f.noProgress)
	backend := compose.Backend(f.backend)
	if f.backend == backendAuto {
		b, why := compose.ChooseBackend(ctx, "", es...)
		rep.Line(fmt.Sprintf("backend %s (auto: %s)", b, why))
		backend = b
	}
	var skipped []string
	if engines == enginesAuto {
		es, skipped = installedEngines(ctx, backend)
		for _, s := range skipped {
			rep.Line(s)
		}
		if len(es) == 0 {
			rep.Done()
			return fmt.Errorf("--engines auto: no engine is installed for the %s backend (%s)", backend, strings.Join(skipped, "; "))
		}
		rep.Line(fmt.Sprintf("engines %s (auto: every engine installed for the %s backend)", joinEngines(es), backend))
	}
	cfg := lab.EngineFailoverConfig{Engines: es, Backend: backend, Seed: f.seed,
		Progress: func(e compose.Engine, phase string) { rep.Line(fmt.Sprintf("%s: %s", e, phase)) }}
	if cmd.Flags().Changed("sessions") {
		cfg.Sessions = f.sessions
	}
	if cmd.Flags().Changed("duration") {
		cfg.Duration = f.duration
	}
	res, err := lab.RunEngineFailover(ctx, cfg)
	rep.Done()
	if err != nil {
		return oneLine(err)
	}
	out := cmd.OutOrStdout()
	t := lab.EngineFailoverTable(res)
	for _, s := range skipped {
		t.Notes = append(t.Notes, s+".")
	}
	if err := t.Write(out, format); err != nil {
		return err
	}
	if f.noSim {
		return nil
	}
	rep = newReporter(errw, "sim failover", f.noProgress)
	srep, err := sim.Failover(ctx, sim.Options{Base: sim.Config{Trials: f.simTrials, Seed: f.seed}})
	rep.Done()
	if err != nil {
		return oneLine(err)
	}
	for _, t := range srep.Tables {
		fmt.Fprintln(out)
		if err := t.Write(out, format); err != nil {
			return err
		}
	}
	return nil
}

func joinEngines(es []compose.Engine) string {
	var s []string
	for _, e := range es {
		s = append(s, string(e))
	}
	return strings.Join(s, ",")
}
