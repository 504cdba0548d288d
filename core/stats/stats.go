// Package stats writes the text of the protocol's stats reports
// (docs/protocol.md, "stats"; reference §12) from typed values: the help,
// the framing of a component's lines (STATS, the lines, END), the topic
// and partition reports over the open topics' logs, `stats <topic>` and
// `stats count:`. The broker gathers the values and sends the reply.
package stats

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Help is `stats help`'s reply, with the protocol's line ends, built once.
var Help = strings.ReplaceAll(help, "\n", "\r\n")

const help = `STATS
stats               broker summary (pid, broker_id, uptime, counters, ...)
stats topics        one line per topic: partitions, message_count, message_bytes, accept flags
stats offsets       one line per partition: min_offset and max_offset
stats partitions    one line per partition: min_offset, max_offset and message_count
stats realtime      counters since the last reset, all topics with stat=true
stats config        the effective configuration, secrets shown as <redacted>
stats plugins       one line per plugin process: kind, name, version, pid, state, restarts, calls, errors
stats groups        one line per consumer group coordinated here (local mode): members, generation; groups with committed offsets and no live member: members 0
stats members       one line per member of those groups: its id and the partitions it holds
stats disks         one line per data directory: used_ratio, inodes_used_ratio, full (disk_max_used_ratio)
stats transactions  the open transactions, oldest first: key, type, state, session, messages, bytes, age, timeout
stats count:T:P:O   the messages of topic T partition P from offset O to its max offset: messages N exact true|false
stats reset         reset the realtime counters
stats help          this text
stats <topic>       one topic: result code (0 exists, 1 unknown, 2 configured but empty), partitions, counts
END
`

// Lines writes a stats reply's body: STATS, the lines lines emits (a
// component's: core/tx, core/groups, plugins/host), END.
func Lines(sb *strings.Builder, lines func(line func(string))) {
	sb.WriteString("STATS\r\n")
	lines(func(l string) { sb.WriteString(l); sb.WriteString("\r\n") })
	sb.WriteString("END\r\n")
}

// KV writes a stats reply's body of key value lines: STATS, a line "k v"
// per pair pairs emits, END.
func KV(sb *strings.Builder, pairs func(kv func(k string, v any))) {
	sb.WriteString("STATS\r\n")
	pairs(func(k string, v any) { fmt.Fprintf(sb, "%s %v\r\n", k, v) })
	sb.WriteString("END\r\n")
}

// Topic is an open topic as the reports see it.
type Topic struct {
	Name                           string
	Parts                          []*store.Log
	AcceptPublish, AcceptSubscribe bool
	RT                             *partition.Realtime
}

// Count is t's messages and their bytes.
func (t *Topic) Count() (count, size int64) {
	for _, l := range t.Parts {
		count += l.MessageCount()
		size += l.SizeBytes()
	}
	return count, size
}

// Topics answers `stats topics`: a line per topic.
func Topics(sb *strings.Builder, ts []Topic) {
	sb.WriteString("STATS\r\n")
	for i := range ts {
		t := &ts[i]
		count, size := t.Count()
		fmt.Fprintf(sb, "%s partitions %d message_count %d message_bytes %d accept_publish %t accept_subscribe %t\r\n",
			t.Name, len(t.Parts), count, size, t.AcceptPublish, t.AcceptSubscribe)
	}
	sb.WriteString("END\r\n")
}

// Offsets answers `stats offsets` (counts false) and `stats partitions`
// (counts true): a line per partition.
func Offsets(sb *strings.Builder, ts []Topic, counts bool) {
	sb.WriteString("STATS\r\n")
	for _, t := range ts {
		for p, l := range t.Parts {
			if counts {
				fmt.Fprintf(sb, "%s part %d min_offset %d max_offset %d message_count %d\r\n", t.Name, p,
					l.MinOffset(), l.MaxOffset(), l.MessageCount())
			} else {
				fmt.Fprintf(sb, "%s part %d min_offset %d max_offset %d\r\n", t.Name, p, l.MinOffset(), l.MaxOffset())
			}
		}
	}
	sb.WriteString("END\r\n")
}

// Realtime answers `stats realtime`: the counters of ts together, since
// the last reset.
func Realtime(sb *strings.Builder, ts []Topic, since time.Duration) {
	var agg partition.Realtime
	for _, t := range ts {
		t.RT.AddTo(&agg)
	}
	sb.WriteString("STATS\r\n")
	for i, name := range partition.RealtimeNames {
		fmt.Fprintf(sb, "realtime_%s %s\r\n", name, agg.All()[i].Format(since))
	}
	sb.WriteString("END\r\n")
}

// One answers `stats <topic>`: t is the topic when open (else nil), shown
// its name (printable), configured its configured partitions when it is
// configured but not open and would not be created by a put (else -1).
func One(sb *strings.Builder, shown string, t *Topic, configured int, since time.Duration) {
	code, parts := 0, 0
	var count, size int64
	if t == nil {
		code = 1
		if configured >= 0 {
			code, parts = 2, configured
		}
	} else {
		parts = len(t.Parts)
		if count, size = t.Count(); count == 0 {
			code = 2
		}
	}
	sb.WriteString("STATS\r\n")
	fmt.Fprintf(sb, "topic %s\r\n", shown)
	fmt.Fprintf(sb, "result_code %d\r\n", code)
	fmt.Fprintf(sb, "partitions %d\r\n", parts)
	fmt.Fprintf(sb, "message_count %d\r\n", count)
	fmt.Fprintf(sb, "message_bytes %d\r\n", size)
	for i, n := range partition.RealtimeNames {
		v := "null"
		if t != nil {
			v = t.RT.All()[i].Format(since)
		}
		sb.WriteString("topic_realtime_" + n + " " + v + "\r\n")
	}
	sb.WriteString("END\r\n")
}

// CountError is a refused `stats count:` (a 400).
type CountError struct{ Msg string }

func (e *CountError) Error() string { return e.Msg }

// Count answers `stats count:<topic>:<partition>:<offset>`
// (groups.CountItem; arg is what follows it): the messages from the offset
// to the partition's max offset, parts giving an open topic's partitions
// (nil when it is not open).
func Count(arg string, parts func(topic string) []*store.Log) (string, error) {
	name, p, from, err := groups.ParseCountItem(arg)
	if err != nil {
		return "", &CountError{"stats " + groups.CountItem + "<topic>:<partition>:<offset>: " + err.Error()}
	}
	ls := parts(name)
	if p >= len(ls) {
		return "", &CountError{"stats " + groups.CountItem + ": no partition " + strconv.Itoa(p) + " of topic " + protocol.Printable([]byte(name))}
	}
	l := ls[p]
	s := groups.PartSize{Min: l.MinOffset(), Max: l.MaxOffset(), Msgs: l.MessageCount()}
	n, exact := groups.LagMessages(l, s, from)
	return fmt.Sprintf("STATS\r\n%s part %d from %d to %d messages %d exact %t\r\nEND\r\n", name, p, from, s.Max, n, exact), nil
}
