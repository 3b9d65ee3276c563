package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/causallab/causallab/hashroute"
	"github.com/causallab/causallab/sim"
)

// hashFlags are the flags shared by `hash explain` and `hash remap`.
type hashFlags struct {
	servers  string
	down     string
	inflight string
	factor   float64
	format   string
}

func (f *hashFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.servers, "servers", "", "configured servers in order, name:weight,... (e.g. a:1,b:1,c:2)")
	cmd.Flags().StringVar(&f.down, "down", "", "comma-separated names of servers that are down")
	cmd.Flags().StringVar(&f.inflight, "inflight", "", "in-flight work per server for rebalance-override, name:count,... (missing: 0)")
	cmd.Flags().Float64Var(&f.factor, "factor", hashroute.DefaultRebalanceFactor, "rebalance-override factor")
	cmd.Flags().StringVar(&f.format, "format", "md", "output: md, csv or json (JSON lines, one object per row)")
	_ = cmd.MarkFlagRequired("servers")
}

// setup builds the table, the availability with --down applied, and the
// in-flight counts.
func (f *hashFlags) setup() (*hashroute.Table, hashroute.Availability, []int, error) {
	if _, err := sim.ParseFormat(f.format); err != nil {
		return nil, 0, nil, flagError("format", err)
	}
	servers, err := hashroute.ParseServers(f.servers)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("--servers: %w", err)
	}
	tab, err := hashroute.New(hashroute.Config{Servers: servers, RebalanceFactor: f.factor})
	if err != nil {
		return nil, 0, nil, err
	}
	up := tab.AllUp()
	for _, name := range splitList(f.down) {
		i, ok := tab.Index(name)
		if !ok {
			return nil, 0, nil, fmt.Errorf("--down: no configured server named %q", name)
		}
		up = up.Without(i)
	}
	var inflight []int
	if items := splitList(f.inflight); len(items) > 0 {
		inflight = make([]int, tab.Len())
		for _, item := range items {
			name, v, ok := strings.Cut(item, ":")
			if !ok {
				return nil, 0, nil, fmt.Errorf("--inflight: item %q is not name:count", item)
			}
			i, found := tab.Index(strings.TrimSpace(name))
			if !found {
				return nil, 0, nil, fmt.Errorf("--inflight: no configured server named %q", name)
			}
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				return nil, 0, nil, fmt.Errorf("--inflight: count %q for %s is not a non-negative integer", v, name)
			}
			inflight[i] = n
		}
	}
	return tab, up, inflight, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// modesFlag parses --mode: "all" or one mode name.
func modesFlag(s string) ([]hashroute.Mode, error) {
	if s == "all" {
		return hashroute.Modes(), nil
	}
	m, err := hashroute.ParseMode(s)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	return []hashroute.Mode{m}, nil
}

func newHashCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hash",
		Short: "consistent_read_id hashing: where an id goes, what moves when down",
		Long: `Shopify-style hash-based monotonic reads: an id from
/* consistent_read_id:<id> */ is hashed (xxhash64) onto the full configured
server list. Modes:
  full-list           the correct scheme: only ids whose server is down move
  available-only      bug 1: modulo over the up servers, so most ids move
  rebalance-override  bug 2: a load rebalancer overrides the hash`,
	}
	cmd.AddCommand(newHashExplainCmd(), newHashRemapCmd())
	return cmd
}

// explainRow is one line of `hash explain` output.
type explainRow struct {
	Mode          string
	ID            string
	Hash          string
	First         string
	FirstUp       bool
	Probes        []string
	Server        string
	Reason        string
	InflightShare float64
	WeightShare   float64
}

func newHashExplainCmd() *cobra.Command {
	var f hashFlags
	var id, sql, mode string
	cmd := &cobra.Command{
		Use:   "explain --servers a:1,b:1,c:2 [--down b] (--id X | --sql STATEMENT)",
		Short: "show where an id goes under each mode, and why",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseZero(cmd, []defaultIfZero{{name: "factor"}}); err != nil {
				return err
			}
			tab, up, inflight, err := f.setup()
			if err != nil {
				return withExitCode(2, err)
			}
			modes, err := modesFlag(mode)
			if err != nil {
				return withExitCode(2, err)
			}
			switch {
			case id != "" && sql != "":
				return withExitCode(2, fmt.Errorf("give --id or --sql, not both"))
			case sql != "":
				ex := hashroute.Extract(sql)
				if err := ex.Err(); err != nil {
					return flagError("sql", err)
				}
				if ex.Status == hashroute.NoID {
					fmt.Fprintln(cmd.OutOrStdout(), "no consistent_read_id in the statement: it is routed without hashing")
					return nil
				}
				id = ex.ID
			case id == "":
				return withExitCode(2, fmt.Errorf("give --id or --sql"))
			}
			name := func(i int) string {
				if i < 0 {
					return "(none)"
				}
				return tab.Server(i).Name
			}
			var rows []explainRow
			for _, m := range modes {
				e := tab.Explain(hashroute.Hash(id), m, up, inflight)
				r := explainRow{
					Mode: m.String(), ID: id, Hash: fmt.Sprintf("%#016x", e.Hash),
					First: name(e.First), FirstUp: e.FirstUp, Server: name(e.Index),
					Reason: e.Reason.String(), InflightShare: e.InflightShare, WeightShare: e.WeightShare,
				}
				for _, p := range e.Probes {
					r.Probes = append(r.Probes, name(p))
				}
				rows = append(rows, r)
			}
			return writeExplain(cmd.OutOrStdout(), f.format, rows)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&id, "id", "", "the consistent_read_id")
	cmd.Flags().StringVar(&sql, "sql", "", "a statement to extract the id from")
	cmd.Flags().StringVar(&mode, "mode", "all", "mode to show: all, full-list, available-only or rebalance-override")
	return cmd
}

// writeExplain prints the rows as a table (sim.Table: md, csv, json).
func writeExplain(w io.Writer, format string, rows []explainRow) error {
	title := "hash explain: where the id goes under each mode"
	if len(rows) > 0 {
		title = fmt.Sprintf("hash explain: id %q (hash %s) under each mode", rows[0].ID, rows[0].Hash)
	}
	t := &sim.Table{Name: "hash_explain", Title: title, Columns: []sim.Column{
		{Key: "mode", Header: "mode"}, {Key: "first_choice", Header: "first"}, {Key: "first_choice_up", Header: "up"},
		{Key: "probes", Header: "probes"}, {Key: "server", Header: "server"}, {Key: "reason", Header: "reason"},
		{Key: "load_share", Header: "load share", Prec: 2}, {Key: "weight_share", Header: "weight share", Prec: 2},
	}}
	for _, r := range rows {
		probes := strings.Join(r.Probes, ">")
		if probes == "" {
			probes = "-"
		}
		load, weight := sim.NA(), sim.NA()
		if r.Mode == hashroute.RebalanceOverride.String() {
			load, weight = sim.N(r.InflightShare), sim.N(r.WeightShare)
		}
		up := "yes"
		if !r.FirstUp {
			up = "no"
		}
		t.Rows = append(t.Rows, []sim.Cell{sim.L(r.Mode), sim.L(r.First), sim.L(up), sim.L(probes), sim.L(r.Server), sim.L(r.Reason), load, weight})
	}
	return t.Write(w, sim.Format(format))
}

func newHashRemapCmd() *cobra.Command {
	var f hashFlags
	var n int
	var prefix string
	cmd := &cobra.Command{
		Use:   "remap --servers a:1,b:1,c:2 --down b [--ids N] [--inflight a:9,b:1]",
		Short: "the share of N sample ids that change server when servers go down",
		Long: `remap compares, for N sample ids (PREFIX0 .. PREFIX<N-1>), the server each id
gets with every server up and no load against the server it gets with --down
servers down and --inflight load. Under full-list only the ids on the downed
servers move (their weight share); under available-only most ids move;
rebalance-override moves ids when --inflight is skewed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseZero(cmd, []defaultIfZero{{name: "factor"}}); err != nil {
				return err
			}
			tab, up, inflight, err := f.setup()
			if err != nil {
				return withExitCode(2, err)
			}
			if n < 1 || n > 100_000_000 {
				return withExitCode(2, fmt.Errorf("--ids %d: want 1..100000000", n))
			}
			if up == tab.AllUp() && inflight == nil {
				return withExitCode(2, fmt.Errorf("nothing changes: give --down and/or --inflight"))
			}
			hashes := make([]uint64, n)
			for i := range hashes {
				hashes[i] = hashroute.Hash(prefix + strconv.Itoa(i))
			}
			var downW, allW float64
			for i := 0; i < tab.Len(); i++ {
				allW += float64(tab.Server(i).Weight)
				if !up.Up(i) {
					downW += float64(tab.Server(i).Weight)
				}
			}
			var rows []hashroute.RemapStats
			for _, m := range hashroute.Modes() {
				if err := cmd.Context().Err(); err != nil {
					return err
				}
				rows = append(rows, tab.Remap(hashes, m, tab.AllUp(), up, nil, inflight))
			}
			return writeRemap(cmd.OutOrStdout(), f.format, n, splitList(f.down), rows, downW/allW)
		},
	}
	f.register(cmd)
	cmd.Flags().IntVar(&n, "ids", 100000, "number of sample ids")
	cmd.Flags().StringVar(&prefix, "prefix", "id-", "sample ids are PREFIX0 .. PREFIX<N-1>")
	return cmd
}

// writeRemap prints one row per mode (sim.Table: md, csv, json).
func writeRemap(w io.Writer, format string, n int, down []string, rows []hashroute.RemapStats, downWeightShare float64) error {
	what := "down: " + strings.Join(down, ", ")
	if len(down) == 0 {
		what = "load drift only"
	}
	t := &sim.Table{Name: "hash_remap", Title: fmt.Sprintf("hash remap: ids that change server (%d ids, %s)", n, what), Columns: []sim.Column{
		{Key: "mode", Header: "mode"}, {Key: "ids", Header: "ids"}, {Key: "moved", Header: "moved"},
		{Key: "moved_pct", Header: "moved %", Prec: 2}, {Key: "moved_needlessly", Header: "needless"},
		{Key: "moved_needlessly_pct", Header: "needless %", Prec: 2},
		{Key: "down_weight_pct", Header: "down weight %", Prec: 2},
	}}
	// Headers short enough for 80 columns; the note says them in full
	// (markdown only: CSV and JSON keep their keys).
	if sim.Format(format) == sim.FormatMarkdown {
		t.Notes = sim.Wrap("needless: ids that moved although their own server stayed up; down weight: the "+
			"share of the configured weight on the servers down (what must move, at least).", sim.TermWidth)
	}
	for _, st := range rows {
		pct := func(k int) sim.Cell { return sim.N(100 * float64(k) / float64(st.IDs)) }
		t.Rows = append(t.Rows, []sim.Cell{sim.L(st.Mode.String()), sim.N(float64(st.IDs)), sim.N(float64(st.Moved)), pct(st.Moved),
			sim.N(float64(st.MovedNeedlessly)), pct(st.MovedNeedlessly), sim.N(100 * downWeightShare)})
	}
	return t.Write(w, sim.Format(format))
}
