package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/metaq-go/metaq/sdk/client"
)

const statsHelp = `
Print the reply of the broker's memcached-style stats command, as sent
(STATS, key/value lines, END). item selects the content: (none) the broker
summary, topics, offsets, realtime, config, reset, help, or a topic name.

examples:
  metaq stats
  metaq stats topics
  metaq stats meta-test
`

func newAdmin(e *env) (*client.Admin, error) {
	if err := checkBroker(e); err != nil {
		return nil, err
	}
	return client.NewAdmin(e.addr, adminOpts(e)...)
}

// adminOpts are the options of the CLI's admin and offset store clients.
func adminOpts(e *env) []client.AdminOption {
	return []client.AdminOption{client.WithLogger(silentLogger), client.WithDialTimeout(e.timeout), client.WithRequestTimeout(e.timeout)}
}

func cmdStats(e *env, args []string) error {
	fs := newFlagSet(e, "stats", "stats [item]", statsHelp)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("at most one item, got %q", strings.Join(fs.Args(), " "))
	}
	adm, err := newAdmin(e)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	body, err := adm.Stats(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	if !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	_, err = fmt.Fprint(e.stdout, body)
	return err
}

const topicsHelp = `
List the broker's topics: partitions, message count and bytes, whether
publishing and subscribing are accepted, then each partition's readable
offset range [min, max). With --json: a JSON array of topics, each with a
"partitions_detail" array.

examples:
  metaq topics
  metaq topics --json
`

type jsonPartition struct {
	Partition int32 `json:"partition"`
	MinOffset int64 `json:"min_offset"`
	MaxOffset int64 `json:"max_offset"`
}

type jsonTopic struct {
	Name            string          `json:"name"`
	Partitions      int             `json:"partitions"`
	MessageCount    int64           `json:"message_count"`
	MessageBytes    int64           `json:"message_bytes"`
	AcceptPublish   bool            `json:"accept_publish"`
	AcceptSubscribe bool            `json:"accept_subscribe"`
	Detail          []jsonPartition `json:"partitions_detail"`
}

func cmdTopics(e *env, args []string) error {
	fs := newFlagSet(e, "topics", "topics [--json]", topicsHelp)
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
	infos, err := adm.Topics(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]jsonTopic, 0, len(infos))
		for _, t := range infos {
			jt := jsonTopic{Name: t.Name, Partitions: t.Partitions, MessageCount: t.MessageCount,
				MessageBytes: t.MessageBytes, AcceptPublish: t.AcceptPublish, AcceptSubscribe: t.AcceptSubscribe,
				Detail: []jsonPartition{}}
			for _, o := range t.Offsets {
				jt.Detail = append(jt.Detail, jsonPartition{o.Partition, o.Min, o.Max})
			}
			out = append(out, jt)
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tMESSAGES\tBYTES\tPUBLISH\tSUBSCRIBE")
	for _, t := range infos {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%t\t%t\n", t.Name, t.Partitions, t.MessageCount, t.MessageBytes,
			t.AcceptPublish, t.AcceptSubscribe)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tMIN_OFFSET\tMAX_OFFSET\tBYTES")
	for _, t := range infos {
		for _, o := range t.Offsets {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", t.Name, o.Partition, o.Min, o.Max, o.Max-o.Min)
		}
	}
	return tw.Flush()
}
