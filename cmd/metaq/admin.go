package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const statsHelp = `
Print the reply of the broker's memcached-style stats command, as sent
(STATS, key/value lines, END). item selects the content: (none) the broker
summary, topics, offsets, partitions, realtime, config, plugins, groups,
members, disks, transactions, count:<topic>:<partition>:<offset>, reset,
help (the broker's own list), or a topic name. A topic the broker does not
have is an error (exit status 1).

With --json: a JSON array of the lines, each {"name": its first word,
"value": the rest}, in the broker's order.

examples:
  metaq stats
  metaq stats offsets --json
  metaq stats topics
  metaq stats meta-test
`

// newAdmin checks the broker at --addr and returns an Admin of it.
func newAdmin(e *env) (*admin.Admin, error) {
	if err := checkBroker(e); err != nil {
		return nil, err
	}
	return adminOf(e)
}

// openAdmin is newAdmin with a context bounded by --timeout; done closes
// both.
func openAdmin(e *env) (adm *admin.Admin, ctx context.Context, done func(), err error) {
	if adm, err = newAdmin(e); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	return adm, ctx, func() { cancel(); adm.Close() }, nil
}

// adminOf returns an Admin of the broker at --addr without checking it
// (connections are made when first needed).
func adminOf(e *env) (*admin.Admin, error) {
	cl, err := client.New(append(clientOpts(e), client.Brokers(e.addr))...)
	if err != nil {
		return nil, err
	}
	return admin.New(cl), nil
}

func cmdStats(e *env) *cobra.Command {
	return leaf(e, "stats", "stats [item] [--json]", statsHelp, func(fs *pflag.FlagSet) func(args []string) error {
		asJSON := fs.Bool("json", false, "print the reply's lines as a JSON array")
		return func(args []string) error {
			if len(args) > 1 {
				return usagef("at most one item, got %q", strings.Join(args, " "))
			}
			adm, ctx, done, err := openAdmin(e)
			if err != nil {
				return err
			}
			defer done()
			item := ""
			if len(args) == 1 {
				item = args[0]
			}
			st, err := adm.Stats(ctx, e.addr, item)
			if err != nil {
				return err
			}
			if err := unknownTopicStats(st, e.addr); err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(e.stdout, st.Lines)
			}
			body := st.Raw
			if !strings.HasSuffix(body, "\n") {
				body += "\n"
			}
			_, err = fmt.Fprint(e.stdout, body)
			return err
		}
	})
}

// unknownTopicStats is the error of `stats <topic>` for a topic the broker
// does not have: its reply is MetaQ's, a "topic" line with result_code 1,
// which the CLI turns into an error and exit status 1.
func unknownTopicStats(st *admin.Stats, addr string) error {
	name, isTopic := st.Value("topic")
	if code, _ := st.Value("result_code"); isTopic && code == "1" {
		return fmt.Errorf("%w: %s is not a topic of the broker at %s, nor a stats item (see `metaq stats --help`)", client.ErrUnknownTopic, name, addr)
	}
	return nil
}

const topicsHelp = `
List the broker's topics: partitions, message count and bytes, whether
publishing and subscribing are accepted, then each partition's readable
offset range [min, max), its bytes and its message count ("-" from a
broker without "stats partitions"). With --json: a JSON array of topics,
each with a "partitions_detail" array.

examples:
  metaq topics
  metaq topics --json
`

func cmdTopics(e *env) *cobra.Command {
	return leaf(e, "topics", "topics [--json]", topicsHelp, func(fs *pflag.FlagSet) func(args []string) error {
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
			infos, err := adm.Topics(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(e.stdout, infos)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tMESSAGES\tBYTES\tPUBLISH\tSUBSCRIBE")
			for _, t := range infos {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%t\t%t\n", t.Name, t.Partitions, t.MessageCount, t.MessageBytes,
					t.AcceptPublish, t.AcceptSubscribe)
			}
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tMIN_OFFSET\tMAX_OFFSET\tBYTES\tMESSAGES")
			for _, t := range infos {
				for _, o := range t.Offsets {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", t.Name, o.Partition, o.Min, o.Max, o.Bytes(), countOrDash(o.Messages))
				}
			}
			return tw.Flush()
		}
	})
}

// countOrDash prints a count, "-" when unknown (negative).
func countOrDash(n int64) string {
	if n < 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}
