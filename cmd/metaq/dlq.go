package main

import (
	"context"
	"fmt"

	"github.com/metaq-go/metaq/sdk/client"
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
				adm, err := newAdmin(e)
				if err != nil {
					return err
				}
				defer adm.Close()
				ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
				defer cancel()
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
		}))
}
