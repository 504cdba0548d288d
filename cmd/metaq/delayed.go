package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// parseDelayFlags reads produce's --delay and --deliver-at.
func parseDelayFlags(delay time.Duration, deliverAt string) (time.Duration, time.Time, error) {
	if delay < 0 {
		return 0, time.Time{}, usagef("--delay %v: negative", delay)
	}
	if deliverAt == "" {
		return delay, time.Time{}, nil
	}
	if delay != 0 {
		return 0, time.Time{}, usagef("--delay and --deliver-at do not go together")
	}
	t, err := time.Parse(time.RFC3339Nano, deliverAt)
	if err != nil {
		return 0, time.Time{}, usagef("--deliver-at %q: want an RFC 3339 time (2026-12-08T09:00:00Z)", deliverAt)
	}
	return 0, t, nil
}

const delayedHelp = `
Delayed and scheduled messages (docs/delayed.md).
`

const delayedStatsHelp = `
Print the broker's timer counters (the stats delayed item): the delayed
messages pending, accepted, delivered, the cancellations recorded, the due
messages dropped because their topic or partition no longer exists, and the
pending count of each timer partition.

examples:
  metaq delayed stats
`

const delayedCancelHelp = `
Cancel a delayed message before it is due, by the msgId and partition its
send printed (metaq produce --verbose: "msgId partition offset"). The broker
records the cancellation in its timer log; a message already delivered is
not recalled.

examples:
  metaq delayed cancel --topic meta-test --partition 1 --id 7435671092547649536
`

func cmdDelayed(e *env) *cobra.Command {
	return parent(e, "delayed", delayedHelp,
		leaf(e, "delayed stats", "delayed stats", delayedStatsHelp, func(fs *pflag.FlagSet) func(args []string) error {
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q", args[0])
				}
				adm, ctx, done, err := openAdmin(e)
				if err != nil {
					return err
				}
				defer done()
				st, err := adm.Stats(ctx, e.addr, "delayed")
				if err != nil {
					return err
				}
				for _, l := range st.Lines {
					fmt.Fprintln(e.stdout, l.Name, l.Value)
				}
				return nil
			}
		}),
		leaf(e, "delayed cancel", "delayed cancel --topic T --partition P --id MSGID", delayedCancelHelp, func(fs *pflag.FlagSet) func(args []string) error {
			topic := fs.String("topic", "", "the message's topic (required)")
			partition := fs.Int32("partition", -1, "the partition its send was answered with (required)")
			id := fs.String("id", "", "its msgId (required)")
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q", args[0])
				}
				if *topic == "" || *partition < 0 || *id == "" {
					return usagef("--topic, --partition and --id are required")
				}
				msgID, err := strconv.ParseInt(*id, 10, 64)
				if err != nil || msgID == 0 {
					return usagef("--id %q: want a msgId (a non-zero decimal)", *id)
				}
				if err := e.sec.prepare(); err != nil {
					return err
				}
				cl, err := client.New(append(clientOpts(e), client.Brokers(e.addr), client.Logger(silentLogger))...)
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
				defer cancel()
				defer cl.Close(ctx)
				if err := cl.CancelDelayed(ctx, e.addr, *topic, *partition, msgID); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "cancel of %d recorded\n", msgID)
				return nil
			}
		}))
}
