package main

import (
	"fmt"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const dlqHelp = `
A consumer group's retry and dead-letter topics (Reject(RetryTopics(...)),
docs/sdk.md): <group>.retry holds the messages waiting for a redelivery,
<group>.dlq those rejected on their last delivery.
`

const dlqListHelp = `
List a group's retry and dead-letter topics with their message counts, per
partition and in all ("absent" when the topic does not exist).

examples:
  metaq dlq list --group orders-billing
`

const dlqShowHelp = `
Print a group's dead letters, from the earliest, as metaq consume prints
them (--json: one object per message with its headers): the headers
metaq-origin-topic, metaq-origin-partition, metaq-origin-offset and
metaq-origin-id say where each came from, metaq-delivery-count how often it
was delivered and metaq-last-error why it failed. It reads without a group
and commits nothing.

examples:
  metaq dlq show --group orders-billing --json
`

func cmdDLQ(e *env) *cobra.Command {
	return parent(e, "dlq", dlqHelp,
		leaf(e, "dlq list", "dlq list --group G", dlqListHelp, func(fs *pflag.FlagSet) func(args []string) error {
			group := fs.String("group", "", "the consumer group (required)")
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q", args[0])
				}
				if *group == "" {
					return usagef("--group is required")
				}
				adm, ctx, done, err := openAdmin(e)
				if err != nil {
					return err
				}
				defer done()
				ts, err := adm.Topics(ctx)
				if err != nil {
					return err
				}
				for _, name := range []string{client.RetryTopicOf(*group), client.DeadLetterTopicOf(*group)} {
					found := false
					for _, t := range ts {
						if t.Name != name {
							continue
						}
						found = true
						fmt.Fprintf(e.stdout, "%s messages %d\n", name, t.MessageCount)
						for _, p := range t.Offsets {
							fmt.Fprintf(e.stdout, "  broker %d partition %d messages %d offsets %d..%d\n",
								p.BrokerID, p.Partition, p.Messages, p.Min, p.Max)
						}
					}
					if !found {
						fmt.Fprintf(e.stdout, "%s absent\n", name)
					}
				}
				return nil
			}
		}),
		leaf(e, "dlq show", "dlq show --group G [--json | -f FORMAT] [--count N]", dlqShowHelp, func(fs *pflag.FlagSet) func(args []string) error {
			group := fs.String("group", "", "the consumer group (required)")
			var o consumeOpts
			fs.BoolVar(&o.asJSON, "json", false, "print one JSON object per message, with its headers")
			fs.StringVarP(&o.format, "format", "f", "", "print each message with this kcat-style `format` (see metaq consume --help)")
			fs.Int64Var(&o.count, "count", 0, "stop after this many messages (0: no limit)")
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q", args[0])
				}
				if *group == "" {
					return usagef("--group is required")
				}
				o.topic, o.from, o.session, o.root = client.DeadLetterTopicOf(*group), "earliest", 30*time.Second, cluster.DefaultRoot
				return consume(e, &o)
			}
		}))
}
