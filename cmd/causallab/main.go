// Command causallab reproduces, simulates and measures read-your-writes and
// monotonic-reads behaviour of MySQL replica read routing.
//
// Each area of the tool owns one file in this folder that defines the
// constructor of its subcommands; newRootCmd wires them together, and run
// turns what a command returned into the exit code (one convention for the
// whole CLI: exitCodes).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// The exit codes of every causallab command.
const (
	exitOK        = 0 // the command did what was asked
	exitFailure   = 1 // it could not (a server, a file, the network)
	exitUsage     = 2 // the command line was wrong; nothing was done
	exitViolation = 3 // it ran and a --fail-on rule held or an expectation failed
)

// exitCodes is the convention, as --help prints it.
const exitCodes = `Exit codes: 0 ok, 1 failure, 2 usage error (nothing was done), 3 violation
(a --fail-on rule held or a scenario's expectation failed).`

// exitError carries a process exit code through cobra's error return.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExitCode wraps err so that main exits with code.
func withExitCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// usageErrorf is an exit-2 error: the command line was wrong.
func usageErrorf(format string, args ...any) error {
	return withExitCode(exitUsage, fmt.Errorf(format, args...))
}

// flagError is an exit-2 error about flag --name: err's own package prefix
// ("sim: ", "lab: ") is dropped, the flag names what was wrong.
func flagError(name string, err error) error {
	if err == nil {
		return nil
	}
	msg := trimPackagePrefix(err.Error())
	if rest, ok := strings.CutPrefix(msg, name+" "); ok { // "fail-on rule ...": the flag says it
		msg = rest
	}
	return withExitCode(exitUsage, fmt.Errorf("--%s: %s", name, msg))
}

// packagePrefixes are the prefixes the library packages put on their errors.
var packagePrefixes = []string{"sim: ", "lab: ", "proxy: ", "router: ", "hashroute: ", "compose: ", "binlogwatch: ", "gtid: "}

func trimPackagePrefix(s string) string {
	for _, p := range packagePrefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest
		}
	}
	return s
}

func newRootCmd() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:   "causallab",
		Short: "Reproduce, simulate and measure causal reads from MySQL replicas",
		Long: `causallab answers one question with numbers: when an application writes to a
MySQL primary and reads from lagging replicas, how often does a session miss its
own write (read-your-writes) or see the world go backwards (monotonic reads),
and what does each routing rule cost the primary and the reader?`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			// Info: one line per phase of a long command when stderr is not
			// a terminal (progress.go); -v adds the libraries' debug detail.
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug detail to stderr")
	root.AddCommand(
		// One constructor per area; keep this list sorted.
		newGTIDCmd(),
		newHashCmd(),
		newLabCmd(),
		newMySQLCmd(),
		newProxyCmd(),
		newSimCmd(),
		newWatchCmd(),
	)
	root.AddCommand(newComposeCmds()...) // compose: up, status, down, fault, image
	// Every command's help fits 80 columns and ends with the convention,
	// once: the usage template prints it (a Long that said it too would
	// say it twice).
	setHelpTemplates(root)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withExitCode(exitUsage, err) })
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range allCommands(root) {
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args = cobra.ArbitraryArgs
			c.RunE = runGroup
		}
	}
	return root
}

// runGroup is the RunE of a command that only groups others (sim, gtid,
// hash, lab): alone it prints its help; with an argument that names none of
// its commands it is a usage error (cobra would print the help and exit 0).
func runGroup(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return usageErrorf("%s (commands: %s)", msg, strings.Join(names, ", "))
}

// allCommands returns c and every command below it.
func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, s := range c.Commands() {
		out = append(out, allCommands(s)...)
	}
	return out
}

// run executes the command line args and returns the exit code, writing the
// error (if any) on stderr as "causallab <command>: <message>". Whatever
// cobra refuses before a command's own code runs (an unknown command or
// flag, a wrong argument count, a missing required flag) is a usage error.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	started := false
	for _, c := range allCommands(root) {
		if f := c.RunE; f != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				started = true
				return f(cmd, args)
			}
		}
	}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitFailure
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
	case !started:
		code = exitUsage
	}
	fmt.Fprintln(stderr, errorLine(cmd, err))
	return code
}

// errorLine is "causallab <command path>: <message>", without the doubled
// prefix of a message that starts with the command's own name ("causallab
// proxy: proxy: ...").
func errorLine(cmd *cobra.Command, err error) string {
	path := "causallab"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	msg := err.Error()
	words := strings.Fields(path)
	for i := len(words) - 1; i >= 1; i-- {
		if rest, ok := strings.CutPrefix(msg, words[i]+": "); ok {
			msg = rest
			break
		}
	}
	return path + ": " + msg
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
