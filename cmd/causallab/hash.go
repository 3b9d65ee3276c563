package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/causallab/causallab/hashroute"
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
	cmd.Flags().StringVar(&f.format, "format", "table", "output format: table or json")
	_ = cmd.MarkFlagRequired("servers")
}

// setup builds the table, the availability with --down applied, and the
// in-flight counts.
func (f *hashFlags) setup() (*hashroute.Table, hashroute.Availability, []int, error) {
	if f.format != "table" && f.format != "json" {
		return nil, 0, nil, fmt.Errorf("--format %q: want table or json", f.format)
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
		Short: "consistent_read_id hashing: where an id goes and what moves when a server goes down",
		Long: `Shopify-style hash-based monotonic reads: an id from /* consistent_read_id:<id> */
is hashed (xxhash64) onto the full configured server list. Modes:
  full-list           the correct scheme: only ids whose server is down move
  available-only      bug 1: modulo over the up servers, so most ids move
  rebalance-override  bug 2: a load rebalancer overrides the hash`,
	}
	cmd.AddCommand(newHashExplainCmd(), newHashRemapCmd())
	return cmd
}

// explainRow is one line of `hash explain` output.
type explainRow struct {
	Mode          string   `json:"mode"`
	ID            string   `json:"id"`
	Hash          string   `json:"hash"`
	First         string   `json:"first_choice"`
	FirstUp       bool     `json:"first_choice_up"`
	Probes        []string `json:"probes,omitempty"`
	Server        string   `json:"server"`
	Reason        string   `json:"reason"`
	InflightShare float64  `json:"inflight_share,omitempty"`
	WeightShare   float64  `json:"weight_share,omitempty"`
}

func newHashExplainCmd() *cobra.Command {
	var f hashFlags
	var id, sql, mode string
	cmd := &cobra.Command{
		Use:   "explain --servers a:1,b:1,c:2 [--down b] (--id X | --sql STATEMENT)",
		Short: "show where an id goes under each mode, and why",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
					return withExitCode(1, err)
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

func writeExplain(w io.Writer, format string, rows []explainRow) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tID\tHASH\tFIRST CHOICE\tPROBES\tSERVER\tREASON")
	for _, r := range rows {
		first := r.First
		if !r.FirstUp {
			first += " (down)"
		}
		probes := "-"
		if len(r.Probes) > 0 {
			probes = strings.Join(r.Probes, ">")
		}
		reason := r.Reason
		if r.Mode == hashroute.RebalanceOverride.String() {
			reason += fmt.Sprintf(" (load share %.2f, weight share %.2f)", r.InflightShare, r.WeightShare)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Mode, r.ID, r.Hash, first, probes, r.Server, reason)
	}
	return tw.Flush()
}

// remapRow is one line of `hash remap` output.
type remapRow struct {
	hashroute.RemapStats
	MovedShare      float64 `json:"moved_share"`
	NeedlessShare   float64 `json:"moved_needlessly_share"`
	DownWeightShare float64 `json:"down_weight_share"`
}

func newHashRemapCmd() *cobra.Command {
	var f hashFlags
	var n int
	var prefix string
	cmd := &cobra.Command{
		Use:   "remap --servers a:1,b:1,c:2 --down b [--ids N] [--inflight a:9,b:1]",
		Short: "the share of N sample ids that change server when servers go down (or load drifts), per mode",
		Long: `remap compares, for N sample ids (PREFIX0 .. PREFIX<N-1>), the server each id gets with every
server up and no load against the server it gets with --down servers down and --inflight load.
Under full-list only the ids on the downed servers move (their weight share); under
available-only most ids move; rebalance-override moves ids when --inflight is skewed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			var rows []remapRow
			for _, m := range hashroute.Modes() {
				if err := cmd.Context().Err(); err != nil {
					return err
				}
				st := tab.Remap(hashes, m, tab.AllUp(), up, nil, inflight)
				rows = append(rows, remapRow{
					RemapStats:      st,
					MovedShare:      float64(st.Moved) / float64(st.IDs),
					NeedlessShare:   float64(st.MovedNeedlessly) / float64(st.IDs),
					DownWeightShare: downW / allW,
				})
			}
			return writeRemap(cmd.OutOrStdout(), f.format, rows)
		},
	}
	f.register(cmd)
	cmd.Flags().IntVar(&n, "ids", 100000, "number of sample ids")
	cmd.Flags().StringVar(&prefix, "prefix", "id-", "sample ids are PREFIX0 .. PREFIX<N-1>")
	return cmd
}

func writeRemap(w io.Writer, format string, rows []remapRow) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tIDS\tMOVED\tMOVED %\tMOVED NEEDLESSLY %\tDOWN SERVERS' WEIGHT %")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\n", r.Mode, r.IDs, r.Moved,
			100*r.MovedShare, 100*r.NeedlessShare, 100*r.DownWeightShare)
	}
	return tw.Flush()
}
