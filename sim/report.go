package sim

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// All runs every experiment with o, in Experiments order.
func All(ctx context.Context, o Options) ([]*Report, error) {
	var reps []*Report
	for _, e := range Experiments() {
		rep, err := e.Run(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("sim %s: %w", e.Name, err)
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// WriteReport writes DIR/report.md: every table in markdown, each followed
// by links to its pictures (which WritePlots has drawn into DIR).
func WriteReport(dir string, reps []*Report) error {
	var b bytes.Buffer
	b.WriteString("# causallab simulator report\n\n")
	b.WriteString("Every table below was produced by `causallab sim all` with the seed and setup noted under it; ")
	b.WriteString("the same seed and flags reproduce it byte for byte. Tables are also in CSV and JSON lines beside this file.\n\n")
	exps := Experiments()
	for i, rep := range reps {
		fmt.Fprintf(&b, "## %s\n\n", exps[i].Name)
		for _, t := range rep.Tables {
			if err := t.Write(&b, FormatMarkdown); err != nil {
				return err
			}
		}
		for _, p := range rep.Plots {
			fmt.Fprintf(&b, "![%s](%s.svg)\n\n", p.Title, p.Name)
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), b.Bytes(), 0o644)
}
