package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const pluginsHelp = `
List the plugin processes the broker runs (server.toml [[plugin]] tables):
kind, name, protocol version, pid (0 while down), state (running,
restarting, stopped), restarts, calls and errors. Builtin selectors,
filters and the file offset store run in process and are not listed.
With --json: a JSON array.

examples:
  metaq plugins
  metaq plugins --json
`

func cmdPlugins(e *env) *cobra.Command {
	return leaf(e, "plugins", "plugins [--json]", pluginsHelp, func(fs *pflag.FlagSet) func(args []string) error {
		asJSON := fs.Bool("json", false, "print JSON")
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			adm, ctx, done, err := openAdmin(e)
			if err != nil {
				return err
			}
			defer done()
			rows, err := adm.Plugins(ctx, e.addr)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(e.stdout, rows)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tNAME\tVERSION\tPID\tSTATE\tRESTARTS\tCALLS\tERRORS")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\n", r.Kind, r.Name, r.Version, r.PID, r.State, r.Restarts, r.Calls, r.Errors)
			}
			return tw.Flush()
		}
	})
}
