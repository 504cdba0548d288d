package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const messageHelp = `
Find messages by key or msgId, through the broker's key and id index
(docs/storage.md, "Key and id index") and its HTTP admin API
(GET /api/v1/messages, docs/http.md). Like the topic commands, the API is
the one of the broker at --addr, or --http host:port.
`

const messageGetHelp = `
Print the messages with key K (--key) or the message with msgId ID (--id),
in topic T (--topic) or in every topic the user may read: topic,
partition, offset, msgId, time, key, tags, headers, attribute and body,
or with --json one object per message (the shape of consume --json, with
time added). At most --limit messages (the newest) and the broker's time
budget of 3 s: a line on stderr says when more matched or the budget
ended the lookup. Exit status 1 when nothing matched.

A msgId is only on the broker that stored the message (and its slaves):
ask that broker.

examples:
  metaq message get --key order-42 --topic orders
  metaq message get --id 2064082327604035585 --json
`

func cmdMessage(e *env) *cobra.Command {
	var httpAddr string
	c := parent(e, "message", messageHelp,
		leaf(e, "message get", "message get (--key K | --id ID) [--topic T] [--limit N] [--json]", messageGetHelp, func(fs *pflag.FlagSet) func([]string) error {
			key := fs.String("key", "", "the message key to find")
			id := fs.String("id", "", "the msgId to find")
			topic := fs.String("topic", "", "the topic to search (default: every topic the user may read)")
			limit := fs.Int("limit", 20, "the most messages to print (the newest), 1..1000")
			asJSON := fs.Bool("json", false, "print one JSON object per message")
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("message get takes no arguments, got %q", args)
				}
				q := admin.FindQuery{Topic: *topic, Limit: *limit}
				switch {
				case fs.Changed("key") == fs.Changed("id"):
					return usagef("message get needs --key K or --id ID (one of them)")
				case fs.Changed("key"):
					q.Key = []byte(*key)
				default:
					n, err := strconv.ParseInt(*id, 10, 64)
					if err != nil || n <= 0 {
						return usagef("--id must be a msgId (a positive decimal integer), got %q", *id)
					}
					q.ID = n
				}
				if *limit < 1 || *limit > 1000 {
					return usagef("--limit must be 1..1000, got %d", *limit)
				}
				var out admin.Found
				if err := topicCall(e, httpAddr, func(ctx context.Context, adm *admin.Admin) (err error) {
					out, err = adm.FindMessages(ctx, q)
					return err
				}); err != nil {
					return err
				}
				return printFound(e, q, out, *asJSON)
			}
		}),
	)
	c.PersistentFlags().StringVar(&httpAddr, "http", "", "the broker's HTTP admin API `host:port` (default: the one the broker at --addr reports)")
	return c
}

// printFound prints what message get found.
func printFound(e *env, q admin.FindQuery, out admin.Found, asJSON bool) error {
	for _, n := range out.Notes {
		fmt.Fprintf(e.stderr, "note: %s\n", n)
	}
	for _, m := range out.Messages {
		if asJSON {
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\n", b)
			continue
		}
		fmt.Fprintf(e.stdout, "topic %s partition %d offset %d msgId %s time %s\n", m.Topic, m.Partition, m.Offset, m.MsgID,
			time.UnixMilli(m.Time).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
		if m.Key != nil {
			fmt.Fprintf(e.stdout, "  key: %s%s\n", *m.Key, encNote(m.KeyEncoding))
		}
		if len(m.Tags) > 0 {
			fmt.Fprintf(e.stdout, "  tags: %s\n", strings.Join(m.Tags, ", "))
		}
		for _, h := range m.Headers {
			if h.Value == nil {
				fmt.Fprintf(e.stdout, "  header %s: (null)\n", h.Key)
			} else {
				fmt.Fprintf(e.stdout, "  header %s: %s%s\n", h.Key, *h.Value, encNote(h.Encoding))
			}
		}
		if m.Attribute != nil {
			fmt.Fprintf(e.stdout, "  attribute: %s\n", *m.Attribute)
		}
		fmt.Fprintf(e.stdout, "  body: %s%s\n", m.Body, encNote(m.Encoding))
	}
	what := "key " + strconv.Quote(string(q.Key))
	if q.Key == nil {
		what = "msgId " + strconv.FormatInt(q.ID, 10)
	}
	if out.More {
		fmt.Fprintf(e.stderr, "more messages with %s matched: the newest %d are shown (raise --limit)\n", what, len(out.Messages))
	}
	if out.TimedOut {
		fmt.Fprintf(e.stderr, "the broker's time budget ended the lookup: these are the messages with %s found until then\n", what)
	}
	if len(out.Messages) == 0 {
		where := "any topic"
		if q.Topic != "" {
			where = "topic " + q.Topic
		}
		fmt.Fprintf(e.stderr, "no message with %s in %s\n", what, where)
		return errSilent
	}
	return nil
}

// encNote marks a value shown in base64.
func encNote(enc string) string {
	if enc == "" || enc == "utf8" {
		return ""
	}
	return " (" + enc + ")"
}
