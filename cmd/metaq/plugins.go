package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
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

type pluginRow struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Version  int    `json:"version"`
	PID      int    `json:"pid"`
	State    string `json:"state"`
	Restarts int64  `json:"restarts"`
	Calls    int64  `json:"calls"`
	Errors   int64  `json:"errors"`
}

func cmdPlugins(e *env, args []string) error {
	fs := newFlagSet(e, "plugins", "plugins [--json]", pluginsHelp)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	adm, err := newAdmin(e)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	body, err := adm.Stats(ctx, "plugins")
	if err != nil {
		return err
	}
	rows, err := parsePluginStats(body)
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

// parsePluginStats parses the reply of `stats plugins`: STATS, then
// "<kind> <name> version <v> pid <pid> state <s> restarts <n> calls <n>
// errors <n>" per plugin, then END. Unknown keys are ignored.
func parsePluginStats(body string) ([]pluginRow, error) {
	rows := []pluginRow{}
	for _, line := range statsBodyLines(body) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case f[0] == "topic" || f[0] == "result_code":
			return nil, fmt.Errorf("the broker does not support `stats plugins` (it answered with topic stats)")
		case len(f) < 2 || len(f)%2 != 0:
			return nil, fmt.Errorf("unexpected stats plugins line %q", line)
		}
		r := pluginRow{Kind: f[0], Name: f[1]}
		for i := 2; i+1 < len(f); i += 2 {
			k, v := f[i], f[i+1]
			var err error
			switch k {
			case "version":
				r.Version, err = strconv.Atoi(v)
			case "pid":
				r.PID, err = strconv.Atoi(v)
			case "state":
				r.State = v
			case "restarts":
				r.Restarts, err = strconv.ParseInt(v, 10, 64)
			case "calls":
				r.Calls, err = strconv.ParseInt(v, 10, 64)
			case "errors":
				r.Errors, err = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("stats plugins line %q: bad %s: %v", line, k, err)
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}
