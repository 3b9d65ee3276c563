package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/causallab/causallab/compose"
)

// reporter shows the phases of a long command (image build, topology
// start, workload, drain, fit, simulation). On a terminal each phase draws
// a bar on stderr (a spinner when its length is unknown); otherwise, or
// with --no-progress, each phase is one log line (slog, level info), so a
// log shows what ran and for how long, and no phase passes in silence.
type reporter struct {
	label string // the command, e.g. "lab routers"
	errw  io.Writer
	tty   bool

	mu      sync.Mutex
	phase   string
	began   time.Time // of the phase
	start   time.Time // of the command
	bar     *progressbar.ProgressBar
	barMax  int64
	barDesc string
}

// newReporter reports on errw for the command label; bars only when errw
// is a terminal and noBars is false.
func newReporter(errw io.Writer, label string, noBars bool) *reporter {
	tty := false
	if f, ok := errw.(*os.File); ok && !noBars {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &reporter{label: label, errw: errw, tty: tty, start: time.Now()}
}

// Phase begins phase name (ending the one before). total > 0 is its
// length in the units Set counts (a bar); 0 draws a spinner. attrs are
// logged with it when there is no terminal.
func (r *reporter) Phase(name string, total int64, attrs ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == r.phase {
		return
	}
	r.endLocked()
	r.phase, r.began = name, time.Now()
	if !r.tty {
		slog.Info(r.label+": "+name, attrs...)
		return
	}
	r.barDesc = r.label + ": " + name
	r.newBarLocked(total)
}

// newBarLocked draws a new bar of length total (a spinner when total <= 0).
func (r *reporter) newBarLocked(total int64) {
	max := int64(-1)
	if total > 0 {
		max = total
	}
	r.barMax = max
	r.bar = progressbar.NewOptions64(max, progressbar.OptionSetWriter(r.errw),
		progressbar.OptionSetDescription(r.barDesc), progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(total > 0), progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSpinnerType(14),
		progressbar.OptionSetWidth(12)) // the line fits 80 columns with lab's counts
	_ = r.bar.RenderBlank()
}

// SetOf is Set for a phase whose length is known only once it runs (the
// simulator's trials): the spinner becomes a bar of length total.
func (r *reporter) SetOf(done, total int64, detail string) {
	r.mu.Lock()
	if r.bar != nil && total > 0 && r.barMax != total {
		r.endLocked()
		r.newBarLocked(total)
	}
	r.mu.Unlock()
	r.Set(done, detail)
}

// Set moves the phase's bar to done and adds detail to its description
// (terminal only: a log line per update would be a log line per 250 ms).
func (r *reporter) Set(done int64, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bar == nil {
		return
	}
	desc := r.barDesc
	if detail != "" {
		desc += "  " + detail
	}
	r.bar.Describe(desc)
	if r.barMax > 0 {
		_ = r.bar.Set64(min(done, r.barMax))
	}
}

// Line prints one line that stays (a phase's outcome, a choice made):
// above the bar on a terminal, as a log line otherwise.
func (r *reporter) Line(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.tty {
		slog.Info(r.label + ": " + msg)
		return
	}
	if r.bar != nil {
		_ = r.bar.Clear()
	}
	fmt.Fprintf(r.errw, "causallab %s: %s\n", r.label, msg)
	if r.bar != nil {
		_ = r.bar.RenderBlank()
	}
}

// Done ends the last phase.
func (r *reporter) Done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endLocked()
	r.phase = ""
}

func (r *reporter) endLocked() {
	if r.bar != nil {
		_ = r.bar.Finish()
		_ = r.bar.Clear()
		r.bar = nil
	}
}

// buildOptions reports compose's image build and topology start as
// phases: each of compose's notes begins one ("building ...", "starting
// ...") or is a line ("topology up in 4.9s", "using the running ...");
// the build script's own output feeds the spinner on a terminal and is
// dropped otherwise (compose keeps it for the error when the build fails).
func (r *reporter) buildOptions() compose.BuildOptions {
	return compose.BuildOptions{
		Progress: &lastLine{r: r},
		Notify: func(m string) {
			switch {
			case strings.HasPrefix(m, "building "):
				r.Phase("image build", 0, "what", m)
			case strings.HasPrefix(m, "starting "):
				r.Phase("topology start", 0, "what", strings.TrimSuffix(m, "..."))
			default:
				r.Done()
				r.Line(m)
			}
		},
	}
}

// lastLine shows the last line written to it beside the spinner.
type lastLine struct {
	r   *reporter
	buf []byte
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	if i := strings.LastIndexByte(string(l.buf), '\n'); i >= 0 {
		lines := strings.Split(strings.TrimSpace(string(l.buf[:i])), "\n")
		l.buf = l.buf[i+1:]
		if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
			if len(last) > 60 {
				last = last[:60] + "…"
			}
			l.r.Set(0, last)
		}
	}
	return len(p), nil
}
