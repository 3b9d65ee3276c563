package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// All runs every experiment with o and returns their reports in Experiments
// order. The experiments run concurrently (each also spreads its trials over
// GOMAXPROCS workers), so one experiment's serial tail (its last trials, a
// traced trial, the single-threaded workorder stream) overlaps the others'
// work and both cores stay busy. Every trial still lands in its own slot, so
// the output does not depend on scheduling. o.Progress, when set, is told
// how many experiments have finished.
func All(ctx context.Context, o Options) ([]*Report, error) {
	exps := Experiments()
	reps := make([]*Report, len(exps))
	errs := make([]error, len(exps))
	progress := o.Progress
	o.Progress = nil
	var done atomic.Int64
	var wg sync.WaitGroup
	for i, e := range exps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := e.Run(ctx, o)
			if err != nil {
				errs[i] = fmt.Errorf("sim %s: %w", e.Name, err)
				return
			}
			reps[i] = rep
			if progress != nil {
				progress(int(done.Add(1)), len(exps))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return reps, nil
}

// WriteReport writes DIR/report.md and DIR/report.html: every table in
// full, each followed by its pictures (which WritePlots has drawn into
// DIR: the markdown links the SVGs, the page shows the PNGs).
func WriteReport(dir string, reps []*Report) error {
	if err := writeReportMD(dir, reps); err != nil {
		return err
	}
	return writeReportHTML(dir, reps)
}

// reportIntro is the report's first paragraph.
const reportIntro = "Every table below was produced by `causallab sim all` with the seed and setup noted under it; " +
	"the same seed and flags reproduce it byte for byte. Tables are also in CSV and JSON lines beside this file."

func writeReportHTML(dir string, reps []*Report) error {
	var b bytes.Buffer
	b.WriteString(HTMLHead("causallab simulator report"))
	fmt.Fprintf(&b, "<h1>causallab simulator report</h1>\n<p>%s</p>\n", html.EscapeString(strings.ReplaceAll(reportIntro, "`", "")))
	exps := Experiments()
	for i, rep := range reps {
		fmt.Fprintf(&b, "<h2>%s</h2>\n", html.EscapeString(exps[i].Name))
		for _, t := range rep.Tables {
			fmt.Fprintf(&b, "<h3>%s</h3>\n", html.EscapeString(t.Title))
			t.WriteHTML(&b)
		}
		for _, p := range rep.Plots {
			fmt.Fprintf(&b, "<p><img src=%q alt=%q style=\"max-width:100%%\"></p>\n", p.Name+".png", p.Title)
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), b.Bytes(), 0o644)
}

func writeReportMD(dir string, reps []*Report) error {
	var b bytes.Buffer
	b.WriteString("# causallab simulator report\n\n")
	b.WriteString(reportIntro + "\n\n")
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
