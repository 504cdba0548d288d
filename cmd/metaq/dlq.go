package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/admin"
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
partition and in all ("absent" when the topic does not exist), then how
many dead letters are pending: past the position replay and purge moved
(the offsets committed on the dead-letter topic by the group
<group>.dlq-replay). Those counts are of the log, which is append-only:
replayed and purged dead letters stay in it until retention deletes them.

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
		leaf(e, "dlq list", "dlq list --group G [--zk CONNECT [--root /meta]]", dlqListHelp, func(fs *pflag.FlagSet) func(args []string) error {
			group := fs.String("group", "", "the consumer group (required)")
			var o groupOpts
			addZKFlags(fs, &o)
			return func(args []string) error {
				adm, ctx, done, err := dlqAdmin(e, args, *group, o)
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
				dl, err := adm.DeadLetters(ctx, *group)
				if errors.Is(err, admin.ErrNoDeadLetterTopic) || errors.Is(err, admin.ErrUnknownGroup) {
					return nil
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "%s pending %s (past the replay and purge position, group %s)\n",
					dl.Topic, countOrDash(dl.Pending), dl.PositionGroup)
				return nil
			}
		}),
		cmdDLQReplay(e),
		cmdDLQPurge(e),
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

const dlqReplayHelp = `
Send a group's pending dead letters (past the replay position, from the
earliest) back: --to retry (the default) appends each to the group's retry
topic, whose members deliver it at once as it first was, with its delivery
count reset (so it gets all its deliveries again): only this group handles
it again. --to origin appends each to the topic it came from (the
metaq-origin-topic header) with a fresh msgId, its key, tags, attribute,
create time and user headers kept and the metaq-origin-*,
metaq-delivery-count and metaq-last-error headers removed: every group
consuming that topic handles it again, and the output names the other
groups it knows of.

Without --yes it is a dry run: it prints how many it would send and the
first few (partition, offset, msgId, origin topic, last error) and sends
nothing. With --yes it sends them (the idempotent producer) and, after each
read's worth, commits the position past them as the offsets of the group
<group>.dlq-replay on the dead-letter topic: a replay resumes where the last
stopped and never sends a dead letter twice, except those sent when a
failure came between their send and the commit after it. One replay or
purge of a group runs at a time: with --yes it holds a lease on
<group>.dlq-replay (a membership of the broker's group coordinator), and
another one fails with "another replay of the dead letters is running"
until it ends. --limit N replays at most N. Local mode asks the broker at --addr; --zk finds the brokers
(and sends to the origin topics) through ZooKeeper.

examples:
  metaq dlq replay --group orders-billing
  metaq dlq replay --group orders-billing --yes
  metaq dlq replay --group orders-billing --to origin --limit 10 --yes
`

const dlqPurgeHelp = `
Move a group's replay position to the end of its dead-letter topic: the
dead letters before it are no longer pending, listed as pending nor
replayed. The log is append-only, so nothing is deleted: purge hides,
retention (the topic's delete_when) deletes. Without --yes it is a dry run
that prints how many it would hide. It fails while a replay runs.

examples:
  metaq dlq purge --group orders-billing --yes
`

// addZKFlags adds the cluster mode flags (--zk, --root) of the group
// commands.
func addZKFlags(fs *pflag.FlagSet, o *groupOpts) {
	fs.StringVar(&o.zk, "zk", "", "cluster mode: ZooKeeper connect string `host:port[,...]` (default: local mode, the broker at --addr)")
	fs.StringVar(&o.root, "root", cluster.DefaultRoot, "MetaQ's zkRoot (cluster mode)")
}

// dlqAdmin checks a dlq command's arguments and opens its Admin (local or
// cluster mode) with a context bounded like the group commands'.
func dlqAdmin(e *env, args []string, group string, o groupOpts) (*admin.Admin, context.Context, func(), error) {
	if len(args) > 0 {
		return nil, nil, nil, usagef("unexpected argument %q", args[0])
	}
	if group == "" {
		return nil, nil, nil, usagef("--group is required")
	}
	if err := o.check(); err != nil {
		return nil, nil, nil, err
	}
	adm, _, err := groupAdmin(e, o)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := groupCmdCtx(e)
	return adm, ctx, func() { cancel(); adm.Close() }, nil
}

func cmdDLQReplay(e *env) *cobra.Command {
	return leaf(e, "dlq replay", "dlq replay --group G [--to origin|retry] [--limit N] [--yes] [--json] [--zk CONNECT [--root /meta]]", dlqReplayHelp, func(fs *pflag.FlagSet) func(args []string) error {
		group := fs.String("group", "", "the consumer group (required)")
		to := fs.String("to", admin.ReplayToRetry, "where to: retry (the group's retry topic: only the group handles them) or origin (each message's original topic: every group consuming it does)")
		limit := fs.Int("limit", 0, "replay at most this many (0: all pending)")
		yes := fs.Bool("yes", false, "send them (default: a dry run)")
		asJSON := fs.Bool("json", false, "print JSON")
		var o groupOpts
		addZKFlags(fs, &o)
		return func(args []string) error {
			if *to != admin.ReplayToOrigin && *to != admin.ReplayToRetry {
				return usagef("--to must be origin or retry, got %q", *to)
			}
			if *limit < 0 {
				return usagef("--limit must be >= 0, got %d", *limit)
			}
			adm, ctx, done, err := dlqAdmin(e, args, *group, o)
			if err != nil {
				return err
			}
			defer done()
			res, err := adm.ReplayDeadLetters(ctx, *group, admin.ReplayOptions{To: *to, Limit: *limit, Execute: *yes})
			if res != nil && *asJSON {
				if jerr := writeJSON(e.stdout, res); jerr != nil && err == nil {
					err = jerr
				}
			} else if res != nil {
				printReplay(e, res)
			}
			return err
		}
	})
}

// printReplay prints a replay's result: what was (or would be) sent.
func printReplay(e *env, res *admin.ReplayResult) {
	where := "their origin topics"
	if res.To == admin.ReplayToRetry {
		where = client.RetryTopicOf(res.Group) + " (delivery count reset)"
	}
	if res.Executed {
		fmt.Fprintf(e.stdout, "replayed %d of %s dead letters of %s to %s\n", res.Count, countOrDash(res.Pending), res.Topic, where)
	} else {
		fmt.Fprintf(e.stdout, "would replay %d of %s dead letters of %s to %s\n", res.Count, countOrDash(res.Pending), res.Topic, where)
	}
	for _, m := range res.Messages {
		fmt.Fprintf(e.stdout, "  broker %d partition %d offset %d msgId %s origin %s error %q\n",
			m.BrokerID, m.Partition, m.Offset, m.MsgID, m.Origin, m.LastError)
	}
	if more := res.Count - len(res.Messages); more > 0 {
		fmt.Fprintf(e.stdout, "  ... and %d more\n", more)
	}
	if len(res.OtherGroups) > 0 {
		fmt.Fprintf(e.stdout, "note: the groups %s consume the origin topics too and handle these messages again "+
			"(--to retry: %s only)\n", strings.Join(res.OtherGroups, ", "), res.Group)
	}
	if !res.Executed {
		fmt.Fprintln(e.stdout, "dry run: nothing sent (--yes to send)")
	}
}

func cmdDLQPurge(e *env) *cobra.Command {
	return leaf(e, "dlq purge", "dlq purge --group G [--yes] [--zk CONNECT [--root /meta]]", dlqPurgeHelp, func(fs *pflag.FlagSet) func(args []string) error {
		group := fs.String("group", "", "the consumer group (required)")
		yes := fs.Bool("yes", false, "move the position (default: a dry run)")
		var o groupOpts
		addZKFlags(fs, &o)
		return func(args []string) error {
			adm, ctx, done, err := dlqAdmin(e, args, *group, o)
			if err != nil {
				return err
			}
			defer done()
			res, err := adm.PurgeDeadLetters(ctx, *group, *yes)
			if err != nil {
				return err
			}
			verb := "would hide"
			if res.Executed {
				verb = "hid"
			}
			fmt.Fprintf(e.stdout, "%s %s dead letters of %s (the log keeps them until retention deletes them)\n",
				verb, countOrDash(res.Pending), res.Topic)
			if !res.Executed {
				fmt.Fprintln(e.stdout, "dry run: nothing changed (--yes to purge)")
			}
			return nil
		}
	})
}
