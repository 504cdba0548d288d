package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

const consumeHelp = `
Print the messages of a topic, one body per line (or one JSON object per
line with --json). Without --follow the command stops once every partition
has been read up to the end it had when the command started; with --follow
it keeps waiting for new messages until Ctrl-C. --from applies to every
selected partition: earliest (the oldest stored message, the default),
latest (only messages sent from now on) or a byte offset (a record start,
such as the offset printed by "metaq produce --verbose").

--json objects have: topic, partition, offset, msgId, attribute (null when
the message has none), body, and encoding: "utf8" when body is the message
as text, "base64" when the message is not valid UTF-8 and body holds it
base64-encoded.

With --zk the command is a member of consumer group --group in a cluster
(MetaQ's ZooKeeper layout under --root): the group's partitions across all
brokers are shared among its members, offsets are committed (every 5 s and
on exit) and the command runs until Ctrl-C or --max; --from applies to
partitions with no committed offset; --json objects also carry "broker".
--broadcast makes it a broadcast consumer (its own group "<group>-<id>").

examples:
  metaq consume --topic meta-test
  metaq consume --zk 127.0.0.1:2181 --topic meta-test --group g1 --json
  metaq consume --topic meta-test --partition 0,1 --from 1044 --json
  metaq consume --topic meta-test --from latest --follow
`

// partList is a repeatable flag of partitions: "--partition 1 --partition 2"
// or "--partition 1,2".
type partList []int32

func (p *partList) String() string {
	s := make([]string, len(*p))
	for i, v := range *p {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ",")
}

func (p *partList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || n < 0 {
			return fmt.Errorf("bad partition %q", f)
		}
		if !slices.Contains(*p, int32(n)) {
			*p = append(*p, int32(n))
		}
	}
	return nil
}

type jsonMessage struct {
	Topic     string  `json:"topic"`
	Broker    *int    `json:"broker,omitempty"`
	Partition int32   `json:"partition"`
	Offset    int64   `json:"offset"`
	MsgID     int64   `json:"msgId"`
	Attribute *string `json:"attribute"`
	Body      string  `json:"body"`
	Encoding  string  `json:"encoding"`
}

func cmdConsume(e *env, args []string) error {
	fs := newFlagSet(e, "consume", "consume --topic T [--partition P[,P..]] [--from earliest|latest|OFFSET] [--follow] [--json] [--max N] [--group G]", consumeHelp)
	topic := fs.String("topic", "", "topic to read (required)")
	var parts partList
	fs.Var(&parts, "partition", "partition to read, repeatable or a comma list (default: all)")
	from := fs.String("from", "earliest", "where to start: earliest, latest or a byte offset")
	follow := fs.Bool("follow", false, "keep waiting for new messages (until Ctrl-C)")
	asJSON := fs.Bool("json", false, "print one JSON object per message")
	maxN := fs.Int64("max", 0, "stop after this many messages (0: no limit)")
	group := fs.String("group", client.DefaultGroup, "consumer group name sent with each get")
	zkc := fs.String("zk", "", "join --group in the cluster registered at this ZooKeeper `host:port[,...]`")
	root := fs.String("root", "/meta", "MetaQ's zkRoot (with --zk)")
	id := fs.String("id", "", "consumer id in the group (with --zk; default host-pid-random)")
	broadcast := fs.Bool("broadcast", false, "broadcast consumer: every message (with --zk)")
	session := fs.Duration("session-timeout", 30*time.Second, "ZooKeeper session timeout (with --zk): how long a killed member's partitions wait")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *zkc != "" {
		if len(parts) > 0 {
			return usagef("--partition does not apply with --zk: the group assigns partitions")
		}
		return consumeCluster(e, clusterConsumeArgs{zk: *zkc, root: *root, topic: *topic, group: *group, id: *id,
			from: *from, broadcast: *broadcast, asJSON: *asJSON, max: *maxN, session: *session})
	}
	if *broadcast || *id != "" {
		return usagef("--broadcast and --id need --zk")
	}
	if *topic == "" {
		return usagef("--topic is required")
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	var startAt int64 = -1
	switch *from {
	case "earliest", "latest":
	default:
		n, err := strconv.ParseInt(*from, 10, 64)
		if err != nil || n < 0 {
			return usagef("--from must be earliest, latest or a non-negative offset, not %q", *from)
		}
		startAt = n
	}
	// The end of each partition now: without --follow, reading stops there.
	adm, err := newAdmin(e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	infos, err := adm.Topics(ctx)
	cancel()
	adm.Close()
	if err != nil {
		return err
	}
	idx := slices.IndexFunc(infos, func(t client.TopicInfo) bool { return t.Name == *topic })
	if idx < 0 {
		return fmt.Errorf("unknown topic %q (not listed by the broker at %s)", *topic, e.addr)
	}
	ti := infos[idx]
	if len(parts) == 0 {
		for p := 0; p < ti.Partitions; p++ {
			parts = append(parts, int32(p))
		}
	}
	for _, p := range parts {
		if int(p) >= ti.Partitions {
			return usagef("partition %d out of range: topic %s has %d partitions", p, *topic, ti.Partitions)
		}
	}
	type bounds struct{ min, end int64 }
	bnd := make(map[int32]bounds)
	for _, o := range ti.Offsets {
		bnd[o.Partition] = bounds{o.Min, o.Max}
	}
	var todo []int32
	for _, p := range parts {
		b := bnd[p]
		start := b.min
		switch {
		case *from == "latest":
			start = b.end
		case startAt >= 0:
			start = max(startAt, b.min)
		}
		if *follow || start < b.end {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		return nil
	}

	start := client.Earliest
	switch {
	case *from == "latest":
		start = client.Latest
	case startAt >= 0:
		start = client.AtOffset(startAt)
	}
	// The CLI reads from where --from says and never commits: it is a
	// viewer, and must not move a real group's stored offsets.
	c, err := client.NewConsumer(e.addr, *topic, client.WithLogger(silentLogger), client.WithGroup(*group),
		client.WithOffsetStore(nil, 0), client.WithPartitions(todo...), client.WithStartFrom(start), client.WithDialTimeout(e.timeout),
		client.WithRequestTimeout(e.timeout), client.WithMaxFetchDelay(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())

	var mu sync.Mutex // guards out
	out := bufio.NewWriterSize(e.stdout, 64<<10)
	if *follow {
		// New messages may trickle in: flush them within 100 ms.
		defer flushEvery(&mu, out, 100*time.Millisecond)()
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	remaining := len(todo)
	finished := make(map[int32]bool)
	var count int64
	var runErr error
	for m, err := range c.Messages(e.ctx) {
		if err != nil {
			runErr = err
			break
		}
		if startAt >= 0 && m.Offset < startAt {
			continue // re-aligned to a segment start before the asked offset
		}
		mu.Lock()
		werr := printMessage(out, enc, m, *asJSON)
		mu.Unlock()
		if werr != nil {
			runErr = werr
			break
		}
		count++
		if *maxN > 0 && count >= *maxN {
			break
		}
		if !*follow && !finished[m.Partition] && m.Offset+int64(message.HeaderSize+m.DataLen()) >= bnd[m.Partition].end {
			finished[m.Partition] = true
			if remaining--; remaining == 0 {
				break
			}
		}
	}
	mu.Lock()
	ferr := out.Flush()
	mu.Unlock()
	if runErr == nil {
		runErr = ferr
	}
	if errors.Is(runErr, context.Canceled) {
		return nil // Ctrl-C
	}
	return runErr
}

func printMessage(w *bufio.Writer, enc *json.Encoder, m *message.Message, asJSON bool) error {
	if !asJSON {
		w.Write(m.Body)
		return w.WriteByte('\n')
	}
	j := jsonMessage{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, MsgID: m.ID, Encoding: "utf8"}
	if m.BrokerID != 0 {
		b := m.BrokerID
		j.Broker = &b
	}
	if m.HasAttribute {
		a := m.Attribute
		j.Attribute = &a
	}
	if utf8.Valid(m.Body) {
		j.Body = string(m.Body)
	} else {
		j.Body, j.Encoding = base64.StdEncoding.EncodeToString(m.Body), "base64"
	}
	return enc.Encode(&j)
}

// flushEvery flushes out (guarded by mu) every d until the returned stop
// function is called.
func flushEvery(mu *sync.Mutex, out *bufio.Writer, d time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mu.Lock()
				out.Flush()
				mu.Unlock()
			}
		}
	}()
	return func() { close(done) }
}
