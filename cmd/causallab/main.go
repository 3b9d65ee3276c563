// Command causallab reproduces, simulates and measures read-your-writes and
// monotonic-reads behaviour of MySQL replica read routing.
//
// Each area of the tool owns one file in this folder that defines the
// constructor of its subcommands; newRootCmd wires them together.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

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

func newRootCmd() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:   "causallab",
		Short: "Reproduce, simulate and measure causal reads from MySQL replicas",
		Long: `causallab answers one question with numbers: when an application writes to a
MySQL primary and reads from lagging replicas, how often does a session miss its
own write (read-your-writes) or see the world go backwards (monotonic reads), and
what does each routing rule cost the primary and the reader?`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug detail to stderr")
	root.AddCommand(
		// One constructor per area; keep this list sorted.
		newGTIDCmd(),
		newHashCmd(),
		newLabCmd(),
		newProxyCmd(),
		newSimCmd(),
		newWatchCmd(),
	)
	root.AddCommand(newComposeCmds()...) // compose: up, status, down, fault, image
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "causallab:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}
