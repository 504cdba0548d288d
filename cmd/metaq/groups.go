package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/metaq-go/metaq/sdk/cluster"
)

// Consumer groups: `metaq groups`, `metaq group describe` and `metaq group
// reset-offsets`. A group is read in one of two modes:
//
//   - local (the default): the broker at --addr coordinates the members
//     (`stats groups`, `stats members`);
//   - cluster (--zk): the members and owners are MetaQ's znodes,
//     R/consumers/<g>/ids/<consumerId> (data: the subscribed topics) and
//     R/consumers/<g>/owners/<t>/<brokerId>-<p> (data: the owner), and the
//     partitions are the brokers' topics-sub registrations.
//
// Either way the committed offsets are read and written through the broker
// that holds the partition (the fetch and commit extensions: that broker's
// offset store), and the log bounds come from its `stats offsets`.

const groupsHelp = `
List the consumer groups: one line per group with its topics and how many
live members it has.

Local mode (the default) asks the broker at --addr, which knows the groups
it coordinates while they have members (a group with only committed offsets
is not listed). Cluster mode (--zk) lists <root>/consumers in ZooKeeper,
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
log end (the partition's max offset), the lag (log end - committed, "-"
when nothing is committed) and the owning member ("-" for none); then the
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
  TIME          the first message stored at or after TIME: RFC 3339
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

// scanGroup is the group sent with the gets that look for a time or check
// an offset: a name no server-side filter is configured for.
const scanGroup = "metaq-cli-scan"

// groupOpts are the flags every group command has.
type groupOpts struct {
	zk     string
	root   string
	asJSON bool
	topics []string
}

func addGroupFlags(fs *flag.FlagSet, o *groupOpts, withTopic bool) {
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

// parseInterspersed parses flags that may come before or after the
// positional arguments, which it returns.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// ---- the commands ----

type jsonGroupSummary struct {
	Group   string   `json:"group"`
	Topics  []string `json:"topics"`
	Members int      `json:"members"`
}

func cmdGroups(e *env, args []string) error {
	var o groupOpts
	fs := newFlagSet(e, "groups", "groups [--zk CONNECT [--root /meta]] [--json]", groupsHelp)
	addGroupFlags(fs, &o, false)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := o.check(); err != nil {
		return err
	}
	var list []jsonGroupSummary
	if o.zk != "" {
		list, err = zkListGroups(e, o)
	} else {
		list, err = localListGroups(e)
	}
	if err != nil {
		return err
	}
	if o.asJSON {
		if list == nil {
			list = []jsonGroupSummary{}
		}
		return writeJSON(e.stdout, list)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPICS\tMEMBERS")
	for _, g := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", g.Group, orDash(strings.Join(g.Topics, ",")), g.Members)
	}
	return tw.Flush()
}

func cmdGroup(e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprintf(e.stderr, "usage: metaq group describe|reset-offsets <group> [flags]\n\n%s\n", strings.TrimSpace(groupHelp))
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "describe":
		return cmdGroupDescribe(e, args[1:])
	case "reset-offsets":
		return cmdGroupReset(e, args[1:])
	}
	return usagef("unknown subcommand %q: want describe or reset-offsets", args[0])
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

type jsonGroupDescription struct {
	Group      string       `json:"group"`
	Mode       string       `json:"mode"`
	Members    []memberInfo `json:"members"`
	Partitions []partRow    `json:"partitions"`
}

func cmdGroupDescribe(e *env, args []string) error {
	var o groupOpts
	fs := newFlagSet(e, "group describe", "group describe <group> [--topic T] [--zk CONNECT [--root /meta]] [--json]", groupDescribeHelp)
	addGroupFlags(fs, &o, true)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	g, err := oneGroupArg(pos)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	gs, err := loadGroup(e, o, g)
	if err != nil {
		return err
	}
	defer gs.close()
	if len(gs.rows) == 0 && len(gs.members) == 0 && len(o.topics) == 0 {
		return fmt.Errorf("group %q not found: no members and no committed offsets (%s)", g, gs.where)
	}
	if o.asJSON {
		members := gs.members
		if members == nil {
			members = []memberInfo{}
		}
		rows := gs.rows
		if rows == nil {
			rows = []partRow{}
		}
		if err := writeJSON(e.stdout, jsonGroupDescription{Group: g, Mode: gs.mode, Members: members, Partitions: rows}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "group %s (%s)\n\n", g, gs.where)
		fmt.Fprintln(tw, "TOPIC\tBROKER\tPARTITION\tCOMMITTED\tLOG_END\tLAG\tOWNER")
		for _, r := range gs.rows {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Topic, r.BrokerID, r.Partition, optInt(r.Committed),
				optInt(r.LogEnd), optInt(r.Lag), orDash(r.Owner))
		}
		fmt.Fprintf(tw, "\nmembers: %d\n", len(gs.members))
		if len(gs.members) > 0 {
			fmt.Fprintln(tw, "ID\tTOPICS\tPARTITIONS")
		}
		for _, m := range gs.members {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", m.ID, orDash(strings.Join(m.Topics, ",")), m.Partitions)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return gs.brokerErrors()
}

// resetTo is a parsed --to.
type resetTo struct {
	kind   string // earliest, latest, offset, time
	offset int64
	ms     int64 // unix ms, for time
}

func parseResetTo(s string) (resetTo, error) {
	switch s {
	case "earliest", "latest":
		return resetTo{kind: s}, nil
	case "":
		return resetTo{}, errors.New("--to is required: earliest, latest, an offset or a time")
	}
	if ms, ok := strings.CutPrefix(s, "@"); ok {
		v, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || v < 0 {
			return resetTo{}, fmt.Errorf("bad --to %q: @ must be followed by unix milliseconds", s)
		}
		return resetTo{kind: "time", ms: v}, nil
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		if v < 0 {
			return resetTo{}, fmt.Errorf("bad --to %q: an offset is not negative", s)
		}
		return resetTo{kind: "offset", offset: v}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return resetTo{}, fmt.Errorf("bad --to %q: want earliest, latest, a byte offset, an RFC 3339 time or @<unix ms>", s)
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

func (p partFilter) match(r partRow) bool {
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

type resetRow struct {
	Topic     string `json:"topic"`
	BrokerID  int    `json:"broker_id"`
	Partition int32  `json:"partition"`
	Current   *int64 `json:"current"`
	New       int64  `json:"new"`
}

type jsonReset struct {
	Group      string     `json:"group"`
	To         string     `json:"to"`
	Executed   bool       `json:"executed"`
	Partitions []resetRow `json:"partitions"`
}

func cmdGroupReset(e *env, args []string) error {
	var o groupOpts
	fs := newFlagSet(e, "group reset-offsets",
		"group reset-offsets <group> --to earliest|latest|OFFSET|TIME [--topic T] [--partition P] [--execute] [--zk CONNECT [--root /meta]] [--json]",
		groupResetHelp)
	addGroupFlags(fs, &o, true)
	to := fs.String("to", "", "where to: earliest, latest, a byte offset, an RFC 3339 time or @<unix ms> (required)")
	execute := fs.Bool("execute", false, "commit the new offsets (default: only print the plan)")
	var parts partFilter
	fs.Var(&parts, "partition", "only these partitions: P or BROKER-P, repeatable or a comma list")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	g, err := oneGroupArg(pos)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	target, err := parseResetTo(*to)
	if err != nil {
		return usagef("%v", err)
	}
	gs, err := loadGroup(e, o, g)
	if err != nil {
		return err
	}
	defer gs.close()
	if err := gs.brokerErrors(); err != nil {
		return err
	}
	if len(gs.members) > 0 {
		ids := make([]string, len(gs.members))
		for i, m := range gs.members {
			ids[i] = m.ID
		}
		msg := fmt.Sprintf("group %s has %d live member(s) (%s)", g, len(ids), strings.Join(ids, ", "))
		if *execute {
			return fmt.Errorf("%s: refusing to reset its offsets, which they would overwrite; stop them first", msg)
		}
		fmt.Fprintf(e.stderr, "warning: %s: --execute will be refused until they are stopped\n", msg)
	}
	var rows []partRow
	for _, r := range gs.rows {
		if parts.match(r) {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		if len(o.topics) == 0 && len(parts) == 0 {
			return fmt.Errorf("group %s has no partitions to reset (no members and no committed offsets): name the topics with --topic", g)
		}
		return fmt.Errorf("no partition of group %s matches --topic/--partition", g)
	}
	plan := make([]resetRow, 0, len(rows))
	for _, r := range rows {
		n, err := gs.newOffset(e, r, target)
		if err != nil {
			return err
		}
		plan = append(plan, resetRow{Topic: r.Topic, BrokerID: r.BrokerID, Partition: r.Partition, Current: r.Committed, New: n})
	}
	if *execute {
		if err := gs.commit(e, g, plan); err != nil {
			return err
		}
	}
	if o.asJSON {
		if err := writeJSON(e.stdout, jsonReset{Group: g, To: *to, Executed: *execute, Partitions: plan}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tBROKER\tPARTITION\tCURRENT\tNEW")
		for _, p := range plan {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\n", p.Topic, p.BrokerID, p.Partition, optInt(p.Current), p.New)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if *execute {
		fmt.Fprintf(e.stderr, "committed %d offsets of group %s\n", len(plan), g)
	} else {
		fmt.Fprintf(e.stderr, "dry run: nothing changed; add --execute to commit these %d offsets\n", len(plan))
	}
	return nil
}

// ---- helpers ----

func int64Ptr(v int64) *int64 { return &v }

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

func sortedGroupKeys[K int | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortedMembers(byID map[string]*memberInfo) []memberInfo {
	var out []memberInfo
	for _, id := range sortedGroupKeys(byID) {
		m := byID[id]
		sort.Strings(m.Topics)
		if m.Topics == nil {
			m.Topics = []string{}
		}
		out = append(out, *m)
	}
	return out
}
