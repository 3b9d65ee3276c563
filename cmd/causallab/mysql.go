package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/causallab/causallab/compose"
)

// proxyTarget is the argument of `causallab mysql` that means the proxy.
const proxyTarget = "proxy"

// newMySQLCmd is `causallab mysql [NODE|proxy]`: the root filesystem's own
// client (the host has none) on a node of the running topology or on
// `causallab proxy`.
func newMySQLCmd() *cobra.Command {
	statePath := defaultStatePath()
	var proxyAddr, user, password, execute string
	cmd := &cobra.Command{
		Use:   "mysql [NODE|proxy] [-- CLIENT-ARGS...]",
		Short: "Open the mysql client on a node of the topology, or the proxy",
		Long: `mysql opens MySQL's command-line client, the one in the MySQL root filesystem
the servers run from (the host has no client of its own), connected to a node of
the topology ` + "`causallab up`" + ` runs (default: its primary) with the topology's
account, or with "proxy" to ` + "`causallab proxy`" + ` (--proxy, as --user). Local
backend: the client runs chrooted into the root filesystem; docker backend: in
the node's container (docker exec), or for the proxy in a container of the image
on the host's network. MariaDB topologies get mariadb, PostgreSQL ones psql.

Arguments after -- go to the client as they are. Through the proxy, a session
reads its causal token with SELECT @causal_token and another connection carries
it with a /* causal_token:<token> */ comment (see the README's tour).`,
		Example: `  causallab mysql                                  # the primary, interactive
  causallab mysql replica2 -e 'SELECT @@gtid_executed'
  causallab mysql proxy -e "INSERT INTO t VALUES (1); SELECT @causal_token"
  causallab mysql proxy -- --table -e "/* causal_token:g1.1.… */ SELECT * FROM t"`,
		Args: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n > 1 || (n < 0 && len(args) > 1) {
				return fmt.Errorf("want at most one NODE or proxy before --, got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target, clientArgs := "", args
			if n := cmd.ArgsLenAtDash(); n != 0 && len(args) > 0 {
				target, clientArgs = args[0], args[1:]
			}
			if execute != "" {
				clientArgs = append([]string{"-e", execute}, clientArgs...)
			}
			tty := false
			if f, ok := cmd.InOrStdin().(*os.File); ok {
				tty = term.IsTerminal(int(f.Fd()))
			}
			o := compose.ClientOptions{Node: target, TTY: tty, Args: clientArgs}
			if target == proxyTarget {
				o.Node, o.Addr, o.User, o.Password = "", proxyAddr, user, password
			}
			topo, err := attach(cmd.Context(), statePath)
			var client *exec.Cmd
			switch {
			case err == nil:
				if o.Node == "" && o.Addr == "" {
					o.Node = topo.Primary().Name
				}
				client, err = topo.ClientCommand(o)
				if errors.Is(err, compose.ErrUnknownNode) {
					return withExitCode(exitUsage, oneLine(err))
				}
			case o.Addr != "":
				// No topology: the proxy may front your own servers.
				client, err = compose.LocalClientCommand(compose.EngineMySQL, o)
			default:
				return err
			}
			if err != nil {
				return oneLine(err)
			}
			client.Stdin, client.Stdout, client.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			// No context: an interrupt reaches the client itself (the
			// terminal's process group), which cancels its statement.
			if err := client.Run(); err != nil {
				var xe *exec.ExitError
				if errors.As(err, &xe) {
					return fmt.Errorf("the client exited with status %d", xe.ExitCode())
				}
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&execute, "execute", "e", "", "run these statements and exit (the client's own -e)")
	f.StringVar(&proxyAddr, "proxy", "127.0.0.1:6033", "address of causallab proxy (with the target proxy)")
	f.StringVar(&user, "user", "app", "the account to log in to the proxy as (causallab up creates app/app)")
	f.StringVar(&password, "password", "app", "its password")
	addStateFlag(cmd, &statePath)
	return cmd
}
