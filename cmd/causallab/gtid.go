package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/causallab/causallab/gtid"
	"github.com/spf13/cobra"
)

// newGTIDCmd builds "causallab gtid ...": GTID-set algebra without a server,
// mirroring MySQL's GTID_SUBSET and GTID_SUBTRACT. Bad input exits with
// code 2 and a message naming the offending text and its byte offset.
func newGTIDCmd() *cobra.Command {
	var compact bool
	cmd := &cobra.Command{
		Use:   "gtid",
		Short: "GTID-set algebra: contains, subset, union, subtract, ...",
		Long: `GTID-set algebra over MySQL's text form (classic and tagged GTIDs), exact and
without a server. Sets are printed in the canonical form MySQL 9.7 prints
(lower case, sorted, merged, sources separated by ",\n"); --compact prints them
on one line. An argument "-" reads the set from standard input. Bad input exits
with code 2.`,
	}
	cmd.PersistentFlags().BoolVar(&compact, "compact", false, "print sets on one line (sources separated by \",\")")

	printSet := func(w io.Writer, s gtid.Set) error {
		text := s.String()
		if compact {
			text = s.CompactString()
		}
		_, err := fmt.Fprintln(w, text)
		return err
	}
	binary := func(use, short string, op func(a, b gtid.Set) gtid.Set) *cobra.Command {
		return &cobra.Command{
			Use:   use + " A B",
			Short: short,
			Args:  cobra.ExactArgs(2),
			RunE: func(c *cobra.Command, args []string) error {
				a, b, err := parseTwo(c, args)
				if err != nil {
					return err
				}
				return printSet(c.OutOrStdout(), op(a, b))
			},
		}
	}
	boolean := func(use, short string, op func(a, b gtid.Set) bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " A B",
			Short: short,
			Args:  cobra.ExactArgs(2),
			RunE: func(c *cobra.Command, args []string) error {
				a, b, err := parseTwo(c, args)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(c.OutOrStdout(), op(a, b))
				return err
			},
		}
	}
	cmd.AddCommand(
		boolean("contains", "print true if A holds every transaction of B (GTID_SUBSET(B, A))", gtid.Set.Contains),
		boolean("subset", "print true if every transaction of A is in B (GTID_SUBSET(A, B))",
			func(a, b gtid.Set) bool { return b.Contains(a) }),
		binary("union", "print A ∪ B", gtid.Set.Union),
		binary("subtract", "print A \\ B (GTID_SUBTRACT(A, B))", gtid.Set.Subtract),
		binary("intersect", "print A ∩ B", gtid.Set.Intersect),
		&cobra.Command{
			Use:   "normalize A",
			Short: "print A in canonical form",
			Args:  cobra.ExactArgs(1),
			RunE: func(c *cobra.Command, args []string) error {
				a, err := parseArg(c, "A", args[0])
				if err != nil {
					return err
				}
				return printSet(c.OutOrStdout(), a)
			},
		},
	)
	return cmd
}

// parseTwo parses the A and B arguments; at most one may be "-".
func parseTwo(c *cobra.Command, args []string) (gtid.Set, gtid.Set, error) {
	if args[0] == "-" && args[1] == "-" {
		return gtid.Set{}, gtid.Set{}, withExitCode(2, fmt.Errorf("only one argument can be read from standard input"))
	}
	a, err := parseArg(c, "A", args[0])
	if err != nil {
		return gtid.Set{}, gtid.Set{}, err
	}
	b, err := parseArg(c, "B", args[1])
	if err != nil {
		return gtid.Set{}, gtid.Set{}, err
	}
	return a, b, nil
}

// parseArg parses one set argument ("-" reads standard input); bad text is
// an exit-code-2 error naming the argument.
func parseArg(c *cobra.Command, name, arg string) (gtid.Set, error) {
	if arg == "-" {
		b, err := io.ReadAll(io.LimitReader(c.InOrStdin(), 64<<20))
		if err != nil {
			return gtid.Set{}, fmt.Errorf("reading %s from standard input: %w", name, err)
		}
		arg = strings.TrimSpace(string(b))
	}
	s, err := gtid.Parse(arg)
	if err != nil {
		return gtid.Set{}, withExitCode(2, fmt.Errorf("argument %s: %w", name, err))
	}
	return s, nil
}
