package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
		b, why := compose.ChooseBackend(ctx, "", orAllEngines(es)...)
		rep.Line(fmt.Sprintf("backend %s (auto: %s)", b, why))
		backend = b
	}
	var skipped []string
	if engines == enginesAuto {
		var line string
		es, skipped, line = autoEngines(ctx, backend)
		rep.Line(line)
	} else {
		rep.Line("engines " + joinEngines(es) + " (--engines; each built first when missing)")
	}
	for _, e := range es {
		if err := compose.EnsureEngine(ctx, e, backend, rep.buildOptions()); err != nil {
			rep.Done()
			return oneLine(err)
		}
	}
	cfg := lab.EngineFailoverConfig{Engines: es, Backend: backend, Seed: f.seed, RecordHistory: f.history != "",
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
	if err := writeEngineFailover(out, res, skipped, format, f.wide); err != nil {
		return err
	}
	if f.history != "" {
		for _, h := range res.Histories {
			if err := lab.WriteHistoryFiles(f.history, "failover-"+string(h.Engine), h.Ops, h.Sessions, h.HotRows); err != nil {
				return oneLine(err)
			}
		}
		fmt.Fprintf(errw, "causallab lab: wrote the history into %s\n", f.history)
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
	return writeTables(out, srep.Tables, format, f.wide, true)
}

// writeEngineFailover prints lab failover's engine table: in markdown its
// compact view (80 columns) unless wide; the engines skipped are a note.
func writeEngineFailover(out io.Writer, res *lab.EngineFailoverResult, skipped []string, format lab.Format, wide bool) error {
	t := lab.EngineFailoverTable(res)
	if len(skipped) > 0 {
		note := "Skipped: " + strings.Join(skipped, "; ") + "."
		t.Notes = append(t.Notes, note)
		t.BriefNotes = append(t.BriefNotes, note)
	}
	return writeTables(out, []*sim.Table{t}, format, wide, false)
}

// writeTables prints ts, in markdown their compact views unless wide
// (every table's compact view fits 80 columns), a blank line before each
// when sep.
func writeTables(out io.Writer, ts []*sim.Table, format lab.Format, wide, sep bool) error {
	for _, t := range ts {
		if sep {
			fmt.Fprintln(out)
		}
		if format == sim.FormatMarkdown && !wide {
			t = t.Compact()
		}
		if err := t.Write(out, format); err != nil {
			return err
		}
	}
	return nil
}

// orAllEngines is es, or every engine when es is empty (--engines auto,
// before it is resolved).
func orAllEngines(es []compose.Engine) []compose.Engine {
	if len(es) == 0 {
		return compose.Engines()
	}
	return es
}

// autoEngines is --engines auto on backend b: MySQL, built on first use
// as every lab command builds it, and whichever other engines this
// machine has (compose.Installed). It returns them, a phrase for each
// engine skipped, and one line that says which engines run and why.
func autoEngines(ctx context.Context, b compose.Backend) (es []compose.Engine, skipped []string, line string) {
	var build []string
	for _, e := range compose.Engines() {
		err := compose.Installed(ctx, e, b)
		switch {
		case err == nil:
			es = append(es, e)
		case e == compose.EngineMySQL:
			es = append(es, e)
			build = append(build, string(e))
		default:
			skipped = append(skipped, skipReason(e, err))
		}
	}
	line = "engines " + joinEngines(es) + " (auto: MySQL and every other engine built for the " + string(b) + " backend"
	if len(build) > 0 {
		line += "; building " + strings.Join(build, ", ") + " first"
	}
	line += ")"
	if len(skipped) > 0 {
		line += "; skipped " + strings.Join(skipped, "; ") + "; --engines " + joinEngines(compose.Engines()) + " builds every one first"
	}
	return es, skipped, line
}

// skipReason says why --engines auto skips engine e (Installed's err),
// with the command that builds it when a build would help.
func skipReason(e compose.Engine, err error) string {
	switch {
	case errors.Is(err, compose.ErrNoDocker):
		return fmt.Sprintf("%s (%v)", e, compose.ErrNoDocker)
	case errors.Is(err, compose.ErrNoRootFS):
		return fmt.Sprintf("%s (not built: causallab image --engine %s)", e, e)
	case errors.Is(err, compose.ErrNoImage):
		return fmt.Sprintf("%s (no image: causallab image --engine %s)", e, e)
	}
	return fmt.Sprintf("%s (%s)", e, trimPackagePrefix(err.Error()))
}

func joinEngines(es []compose.Engine) string {
	var s []string
	for _, e := range es {
		s = append(s, string(e))
	}
	return strings.Join(s, ",")
}
