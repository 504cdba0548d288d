package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Consumer groups: `metaq groups`, `metaq group describe` and `metaq group
// reset-offsets`, on sdk/admin. Local mode (the default) is an Admin of
// the broker at --addr (its local groups); cluster mode (--zk) an Admin
// with ZooKeeper discovery (MetaQ's consumers/ znodes).

const groupsHelp = `
List the consumer groups: one line per group with its topics and how many
live members it has.

Local mode (the default) asks the broker at --addr, which knows the groups
it coordinates and those with offsets committed through it; a group with
committed offsets and no live member is shown with "0 (committed offsets,
no live member)". Cluster mode (--zk) lists <root>/consumers in ZooKeeper,
MetaQ's layout, which keeps a group after its members are gone.

examples:
  metaq groups
  metaq groups --zk 127.0.0.1:2181 --json
`

const groupHelp = `
Inspect a consumer group or move its committed offsets.

  describe <group>        per partition: committed offset, log end, lag,
                          owner; then the members
  reset-offsets <group>   --to earliest|latest|OFFSET|TIME [--execute]

Run "metaq group describe --help" or "metaq group reset-offsets --help".
`

const groupDescribeHelp = `
Describe a consumer group: per (topic, broker, partition) the committed
offset (from the broker's offset store, "-" when nothing is committed), the
log end (the partition's max offset), the lag in bytes (log end -
committed, "-" when nothing is committed) and in messages (exact, from
the broker's record-count index through "stats count:"; only from an older
broker, or while a restarted broker is still indexing its old segments,
counted by reading the records when the lag is at most 4 MiB, else
estimated from the mean record size and shown as ~N) and the owning member
("-" for none); then the
members with their topics and how many partitions each owns.

The topics shown are --topic, else those the group has members or owner
nodes for, or any committed offset in. Local mode (the default) asks the
broker at --addr; cluster mode (--zk) reads the members and owners from
ZooKeeper and the offsets from every broker registered for the topics.

examples:
  metaq group describe my-group
  metaq group describe my-group --zk 127.0.0.1:2181 --json
`

const groupResetHelp = `
Move a consumer group's committed offsets. --to is one of:

  earliest      the oldest stored offset of each partition
  latest        the end of each partition (only new messages)
  OFFSET        a byte offset, which must be a record start in every
                selected partition (e.g. from "metaq produce --verbose")
  TIME          the first message created (its timestamp) or else stored
                at or after TIME: RFC 3339
                (2024-05-01T10:00:00Z, 2024-05-01T12:00:00.250+02:00) or
                @<unix milliseconds> (@1714557600000); the end of the
                partition if every message is older

Without --execute the plan (each partition's current -> new offset) is
printed and nothing changes. With --execute the new offsets are committed
through the brokers; this is refused while the group has live members
(they would overwrite the offsets): stop them first.

The partitions are every partition of the group's topics (see describe),
narrowed by --topic and --partition (P, or BROKER-P in cluster mode).

examples:
  metaq group reset-offsets my-group --to earliest
  metaq group reset-offsets my-group --topic meta-test --to 2024-05-01T10:00:00Z --execute
  metaq group reset-offsets my-group --topic meta-test --partition 1 --to 1044 --execute
`

// groupOpts are the flags every group command has.
type groupOpts struct {
	zk     string
	root   string
	asJSON bool
	topics []string
}

func addGroupFlags(fs *pflag.FlagSet, o *groupOpts, withTopic bool) {
	fs.StringVar(&o.zk, "zk", "", "cluster mode: ZooKeeper connect string `host:port[,...]` (default: local mode, the broker at --addr)")
	fs.StringVar(&o.root, "root", cluster.DefaultRoot, "MetaQ's zkRoot (cluster mode)")
	fs.StringVar(&o.root, "zk-root", cluster.DefaultRoot, "same as --root")
	fs.BoolVar(&o.asJSON, "json", false, "print JSON")
	if withTopic {
		fs.Func("topic", "only this topic (repeatable or a comma list)", func(s string) error {
			for _, t := range strings.Split(s, ",") {
				if t = strings.TrimSpace(t); t == "" || strings.ContainsAny(t, " \t\r\n") {
					return fmt.Errorf("bad topic %q", t)
				} else if !slices.Contains(o.topics, t) {
					o.topics = append(o.topics, t)
				}
			}
			return nil
		})
	}
}

func (o *groupOpts) check() error {
	if o.zk != "" && !strings.HasPrefix(o.root, "/") {
		return usagef("--root must start with /, got %q", o.root)
	}
	return nil
}

// ---- the commands ----

// groupAdmin returns the Admin of the group commands: of the broker at
// --addr, or with --zk of the cluster registered in ZooKeeper; and what
// it reads, for messages.
func groupAdmin(e *env, o groupOpts) (*admin.Admin, string, error) {
	if o.zk == "" {
		adm, err := newAdmin(e)
		return adm, "local mode, broker " + e.addr, err
	}
	adm, err := zkAdmin(e, o.zk, o.root)
	return adm, "cluster mode, ZooKeeper " + o.zk + " root " + o.root, err
}

func cmdGroups(e *env) *cobra.Command {
	var o groupOpts
	return leaf(e, "groups", "groups [--zk CONNECT [--root /meta]] [--json]", groupsHelp, func(fs *pflag.FlagSet) func(args []string) error {
		addGroupFlags(fs, &o, false)
		return func(pos []string) error {
			if len(pos) > 0 {
				return usagef("unexpected argument %q", pos[0])
			}
			if err := o.check(); err != nil {
				return err
			}
			adm, _, err := groupAdmin(e, o)
			if err != nil {
				return err
			}
			defer adm.Close()
			ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
			defer cancel()
			list, err := adm.ListGroups(ctx)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(e.stdout, list)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "GROUP\tTOPICS\tMEMBERS")
			for _, g := range list {
				members := strconv.Itoa(g.Members)
				if g.Members == 0 && o.zk == "" { // local mode: listed for its committed offsets
					members = "0 (committed offsets, no live member)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", g.Group, orDash(strings.Join(g.Topics, ",")), members)
			}
			return tw.Flush()
		}
	})
}

func cmdGroup(e *env) *cobra.Command {
	return parent(e, "group", groupHelp, cmdGroupDescribe(e), cmdGroupReset(e))
}

func oneGroupArg(pos []string) (string, error) {
	switch {
	case len(pos) == 0:
		return "", usagef("missing the group name")
	case len(pos) > 1:
		return "", usagef("unexpected argument %q", pos[1])
	case strings.ContainsAny(pos[0], " \t\r\n/") || pos[0] == "":
		return "", usagef("bad group name %q", pos[0])
	}
	return pos[0], nil
}

// groupCmdCtx bounds a group command: each broker and ZooKeeper read has
// --timeout (the Admin's RequestTimeout); the whole command gets a
// minute more than one of them.
func groupCmdCtx(e *env) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, e.timeout+time.Minute)
}

func cmdGroupDescribe(e *env) *cobra.Command {
	var o groupOpts
	return leaf(e, "group describe", "group describe <group> [--topic T] [--zk CONNECT [--root /meta]] [--json]", groupDescribeHelp, func(fs *pflag.FlagSet) func(args []string) error {
		addGroupFlags(fs, &o, true)
		return func(pos []string) error {
			g, err := oneGroupArg(pos)
			if err != nil {
				return err
			}
			if err := o.check(); err != nil {
				return err
			}
			adm, where, err := groupAdmin(e, o)
			if err != nil {
				return err
			}
			defer adm.Close()
			ctx, cancel := groupCmdCtx(e)
			defer cancel()
			d, brokerErrs := adm.DescribeGroup(ctx, g, o.topics...)
			if d == nil {
				return brokerErrs
			}
			if len(d.Partitions) == 0 && len(d.Members) == 0 && len(o.topics) == 0 {
				return fmt.Errorf("group %q not found: no members and no committed offsets (%s)", g, where)
			}
			if o.asJSON {
				if err := writeJSON(e.stdout, d); err != nil {
					return err
				}
				return brokerErrs
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "group %s (%s)\n\n", g, where)
			fmt.Fprintln(tw, "TOPIC\tBROKER\tPARTITION\tCOMMITTED\tLOG_END\tLAG\tLAG_MSGS\tOWNER")
			for _, r := range d.Partitions {
				lagMsgs := optInt(r.LagMessages)
				if r.LagMessagesEstimated {
					lagMsgs = "~" + lagMsgs
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Topic, r.BrokerID, r.Partition, optInt(r.Committed),
					optInt(r.LogEnd), optInt(r.Lag), lagMsgs, orDash(r.Owner))
			}
			fmt.Fprintf(tw, "\nmembers: %d\n", len(d.Members))
			if len(d.Members) > 0 {
				fmt.Fprintln(tw, "ID\tTOPICS\tPARTITIONS")
			}
			for _, m := range d.Members {
				fmt.Fprintf(tw, "%s\t%s\t%d\n", m.ID, orDash(strings.Join(m.Topics, ",")), m.Partitions)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return brokerErrs
		}
	})
}

// resetTo is a parsed --to.
type resetTo struct {
	kind   string // earliest, latest, offset, time
	offset int64
	ms     int64 // unix ms, for time
}

func parseResetTo(flag, s string) (resetTo, error) {
	switch s {
	case "earliest", "latest":
		return resetTo{kind: s}, nil
	case "":
		return resetTo{}, fmt.Errorf("%s is required: earliest, latest, an offset or a time", flag)
	}
	if ms, ok := strings.CutPrefix(s, "@"); ok {
		v, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || v < 0 {
			return resetTo{}, fmt.Errorf("bad %s %q: @ must be followed by unix milliseconds", flag, s)
		}
		return resetTo{kind: "time", ms: v}, nil
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		if v < 0 {
			return resetTo{}, fmt.Errorf("bad %s %q: an offset is not negative", flag, s)
		}
		return resetTo{kind: "offset", offset: v}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return resetTo{}, fmt.Errorf("bad %s %q: want earliest, latest, a byte offset, an RFC 3339 time or @<unix ms>", flag, s)
	}
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 { // round a fraction of a millisecond up
		ms++
	}
	return resetTo{kind: "time", ms: ms}, nil
}

// partFilter is --partition: P, or BROKER-P.
type partFilter []string

func (p *partFilter) String() string { return strings.Join(*p, ",") }

// Type names the flag's value in help.
func (p *partFilter) Type() string { return "partitions" }

func (p *partFilter) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		b, part, dash := strings.Cut(f, "-")
		if !dash {
			b, part = "", f
		}
		if n, err := strconv.ParseInt(part, 10, 32); err != nil || n < 0 {
			return fmt.Errorf("bad partition %q: want P or BROKER-P", f)
		}
		if dash {
			if n, err := strconv.Atoi(b); err != nil || n < 0 {
				return fmt.Errorf("bad partition %q: want P or BROKER-P", f)
			}
		}
		*p = append(*p, f)
	}
	return nil
}

func (p partFilter) match(r admin.GroupPartition) bool {
	if len(p) == 0 {
		return true
	}
	for _, f := range p {
		if f == strconv.Itoa(int(r.Partition)) || f == strconv.Itoa(r.BrokerID)+"-"+strconv.Itoa(int(r.Partition)) {
			return true
		}
	}
	return false
}

// target is the Admin's ResetTarget of a parsed --to.
func (t resetTo) target() admin.ResetTarget {
	switch t.kind {
	case "latest":
		return admin.Latest()
	case "offset":
		return admin.ToOffset(t.offset)
	case "time":
		return admin.ToTime(time.UnixMilli(t.ms))
	}
	return admin.Earliest()
}

func cmdGroupReset(e *env) *cobra.Command {
	var o groupOpts
	return leaf(e, "group reset-offsets",
		"group reset-offsets <group> --to earliest|latest|OFFSET|TIME [--topic T] [--partition P] [--execute] [--zk CONNECT [--root /meta]] [--json]",
		groupResetHelp, func(fs *pflag.FlagSet) func(args []string) error {
			addGroupFlags(fs, &o, true)
			to := fs.String("to", "", "where to: earliest, latest, a byte offset, an RFC 3339 time or @<unix ms> (required)")
			execute := fs.Bool("execute", false, "commit the new offsets (default: only print the plan)")
			var parts partFilter
			fs.Var(&parts, "partition", "only these partitions: P or BROKER-P, repeatable or a comma list")
			return func(pos []string) error {
				g, err := oneGroupArg(pos)
				if err != nil {
					return err
				}
				if err := o.check(); err != nil {
					return err
				}
				target, err := parseResetTo("--to", *to)
				if err != nil {
					return usagef("%v", err)
				}
				adm, _, err := groupAdmin(e, o)
				if err != nil {
					return err
				}
				defer adm.Close()
				ctx, cancel := groupCmdCtx(e)
				defer cancel()
				pr := newProgress(e, "reset-offsets")
				defer pr.done()
				ro := admin.ResetOptions{Topics: o.topics, Execute: *execute, Progress: func(stage string, done, total int) {
					pr.update("%s %d/%d partitions", stage, done, total)
				}}
				if len(parts) > 0 {
					ro.Match = parts.match
				}
				plan, err := adm.ResetOffsets(ctx, g, target.target(), ro)
				pr.done()
				if err != nil {
					if errors.Is(err, admin.ErrNoPartitions) {
						if len(o.topics) == 0 && len(parts) == 0 {
							return fmt.Errorf("group %s has no partitions to reset (no members and no committed offsets): name the topics with --topic", g)
						}
						return fmt.Errorf("no partition of group %s matches --topic/--partition", g)
					}
					return err
				}
				if len(plan.Members) > 0 {
					ids := make([]string, len(plan.Members))
					for i, m := range plan.Members {
						ids[i] = m.ID
					}
					fmt.Fprintf(e.stderr, "warning: group %s has %d live member(s) (%s): --execute will be refused until they are stopped\n",
						g, len(ids), strings.Join(ids, ", "))
				}
				if o.asJSON {
					plan.To = *to
					if err := writeJSON(e.stdout, plan); err != nil {
						return err
					}
				} else {
					tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "TOPIC\tBROKER\tPARTITION\tCURRENT\tNEW")
					for _, p := range plan.Partitions {
						fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\n", p.Topic, p.BrokerID, p.Partition, optInt(p.Current), p.New)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				if *execute {
					fmt.Fprintf(e.stderr, "committed %d offsets of group %s\n", len(plan.Partitions), g)
				} else {
					fmt.Fprintf(e.stderr, "dry run: nothing changed; add --execute to commit these %d offsets\n", len(plan.Partitions))
				}
				return nil
			}
		})
}

// ---- helpers ----

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
