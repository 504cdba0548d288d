package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

const consumeHelp = `
Print the messages of a topic, one body per line, one JSON object per line
with --json, or as the -f format says.

Without --group the command reads the partitions of the broker at --addr
(all, or --partition) and commits nothing. Without --follow it stops once
every partition has been read up to the end it had when the command
started (by the fetch position, so records filtered out or skipped count);
with --follow it keeps waiting for new messages until Ctrl-C. --from
applies to every selected partition: earliest (the oldest stored message,
the default), latest (only messages sent from now on), a byte offset (a
record start, such as the offset "metaq produce --verbose" prints), or a
time (RFC 3339, or @<unix ms>): the first message whose time (its create
timestamp, else when it was stored) is at or after it.

With --group G the command is a member of consumer group G: the group's
members share the partitions (coordinated by the broker, or with --zk by
MetaQ's ZooKeeper layout under --root across every broker), positions are
committed every 5 s and on exit, and it runs until Ctrl-C or --count;
--from (earliest or latest) applies to partitions with no committed
offset. --broadcast makes it a broadcast member: its own group
"<group>-<id>", every message. --zk needs --group.

--filter EXPR has the broker send only the messages EXPR matches (it
registers the expression for the command's connections; nothing changes
in server.toml): RocketMQ's tag form 'TagA || TagB', or an expression
over the key, tags, headers and attribute, such as
'tag == "TagA" && header("region") == "eu"' (docs/filters.md). The
positions move past the messages left out, so a group commits past them.
A bad expression stops the command with the broker's message and column.

--json objects have: topic, partition, offset, msgId (a string: jq rounds
large numbers), attribute (null when the message has none), body, and
encoding: "utf8" when body is the message as text, "base64" when it is not
valid UTF-8 and body holds it base64-encoded; with --zk also "broker".
A message with a key, timestamp, tags or headers also has key (keyEncoding
"base64" when it is not UTF-8), timestamp (unix ms), tags and headers
([{"key","value"}], value null for a null one, encoding "base64" when not
UTF-8); they are left out for a message without them.

-f formats, as kcat's: %t topic, %p partition, %o offset, %k key, %K key
length, %h headers (k=v,k2=v2; k alone for a null value), %s body, %S body length, %a attribute, %i
msgId, %T timestamp (unix ms: the create time sent, else the msgId's), %b
broker id, %% a percent sign; \n \r \t \\ are escapes. Example: -f '%p:%o %s\n'.

examples:
  metaq consume --topic meta-test
  metaq consume --topic meta-test --partition 0,1 --from 1044 --json
  metaq consume --topic meta-test --from 2024-05-01T10:00:00Z -f '%o %T %s\n'
  metaq consume --topic meta-test --filter 'TagA || TagB'
  metaq consume --topic meta-test --from latest --follow
  metaq consume --topic meta-test --group g1 --count 10
  metaq consume --zk 127.0.0.1:2181 --topic meta-test --group g1 --json
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

// Type names the flag's value in help.
func (p *partList) Type() string { return "partitions" }

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

// jsonMessage is one message of consume --json.
type jsonMessage struct {
	Topic     string `json:"topic"`
	Broker    *int   `json:"broker,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	MsgID     string `json:"msgId"`
	message.JSONContent
}

// consumeOpts are the flags of consume.
type consumeOpts struct {
	topic     string
	parts     partList
	from      string
	follow    bool
	asJSON    bool
	format    string
	count     int64
	group     string
	zk        string
	root      string
	id        string
	broadcast bool
	session   time.Duration
	filter    string
}

func cmdConsume(e *env) *cobra.Command {
	return leaf(e, "consume", "consume --topic T [--partition P[,P..]] [--from earliest|latest|OFFSET|TIME] [--follow] [--count N] [--json | -f FORMAT] [--filter EXPR] [--group G [--zk CONNECT] [--broadcast]]", consumeHelp, func(fs *pflag.FlagSet) func(args []string) error {
		var o consumeOpts
		fs.StringVar(&o.topic, "topic", "", "topic to read (required)")
		fs.Var(&o.parts, "partition", "partition to read, repeatable or a comma list (default: all)")
		fs.StringVar(&o.from, "from", "earliest", "where to start: earliest, latest, a byte offset, an RFC 3339 time or @<unix ms>")
		fs.BoolVar(&o.follow, "follow", false, "keep waiting for new messages (until Ctrl-C)")
		fs.BoolVar(&o.asJSON, "json", false, "print one JSON object per message")
		fs.StringVarP(&o.format, "format", "f", "", "print each message with this kcat-style `format` (see above)")
		fs.Int64Var(&o.count, "count", 0, "stop after this many messages (0: no limit)")
		fs.Int64Var(&o.count, "max", 0, "same as --count")
		_ = fs.MarkHidden("max")
		fs.StringVar(&o.group, "group", "", "consume as a member of this consumer group, committing its offsets")
		fs.StringVar(&o.zk, "zk", "", "find the brokers in the cluster registered at this ZooKeeper `host:port[,...]` (needs --group)")
		fs.StringVar(&o.root, "root", cluster.DefaultRoot, "MetaQ's zkRoot (with --zk)")
		fs.StringVar(&o.id, "id", "", "consumer id in the group (default host-pid-random)")
		fs.BoolVar(&o.broadcast, "broadcast", false, "broadcast member: every message (needs --group)")
		fs.DurationVar(&o.session, "session-timeout", 30*time.Second, "ZooKeeper session timeout (with --zk): how long a killed member's partitions wait")
		fs.StringVar(&o.filter, "filter", "", "only the messages this `expression` matches, judged by the broker: 'TagA || TagB', or over key, tags, headers (docs/filters.md)")
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			return consume(e, &o)
		}
	})
}

// consume checks the flags and runs the one consume path: a Client of the
// broker at --addr, or of the cluster with --zk, with or without a group.
func consume(e *env, o *consumeOpts) error {
	switch {
	case o.topic == "" || strings.ContainsAny(o.topic, " \t\r\n/,"):
		return usagef("--topic is required (and must not contain spaces, / or ,)")
	case o.asJSON && o.format != "":
		return usagef("--json and -f do not go together")
	case o.count < 0:
		return usagef("--count must not be negative")
	case o.zk != "" && o.group == "":
		return usagef("--zk needs --group G: a consumer of a cluster is a group member (add --broadcast for every message)")
	case o.group == "" && (o.broadcast || o.id != ""):
		return usagef("--broadcast and --id need --group")
	case o.zk != "" && len(o.parts) > 0:
		return usagef("--partition does not apply with --zk: the group assigns partitions")
	case o.zk == "" && o.session != 30*time.Second:
		return usagef("--session-timeout needs --zk")
	}
	if o.zk != "" && !strings.HasPrefix(o.root, "/") {
		return usagef("--root must start with /, got %q", o.root)
	}
	from, err := parseResetTo("--from", o.from)
	if err != nil {
		return usagef("%v", err)
	}
	if o.group != "" && from.kind != "earliest" && from.kind != "latest" {
		return usagef("with --group, --from is earliest or latest (for partitions with no committed offset); to move a group, use `metaq group reset-offsets`")
	}
	pr, err := newPrinter(e, o)
	if err != nil {
		return err
	}
	if err := e.sec.prepare(); err != nil {
		return err
	}
	if o.group != "" {
		err = consumeGroup(e, o, from, pr)
	} else {
		err = consumeDirect(e, o, from, pr)
	}
	if ferr := pr.flush(); err == nil {
		err = ferr
	}
	if errors.Is(err, context.Canceled) && e.ctx.Err() != nil {
		return nil // Ctrl-C
	}
	return err
}

// clientOpts are the options every Client of the CLI has.
func clientOpts(e *env) []client.Opt {
	opts := []client.Opt{client.Logger(e.logger()), client.DialTimeout(e.timeout), client.RequestTimeout(e.timeout)}
	return append(opts, e.sec.clientOpts()...)
}

// consumeDirect reads partitions of the broker at --addr without a group,
// stopping at their ends unless --follow.
func consumeDirect(e *env, o *consumeOpts, from resetTo, pr *printer) error {
	adm, err := newAdmin(e)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	infos, err := adm.Topics(ctx)
	cancel()
	if err != nil {
		return err
	}
	idx := slices.IndexFunc(infos, func(t admin.Topic) bool { return t.Name == o.topic })
	if idx < 0 {
		return fmt.Errorf("unknown topic %q (not listed by the broker at %s)", o.topic, e.addr)
	}
	ti := infos[idx]
	parts := slices.Clone(o.parts)
	if len(parts) == 0 {
		for p := 0; p < ti.Partitions; p++ {
			parts = append(parts, int32(p))
		}
	}
	for _, p := range parts {
		if int(p) >= ti.Partitions {
			return usagef("partition %d out of range: topic %s has %d partitions", p, o.topic, ti.Partitions)
		}
	}
	bnd := make(map[int32]admin.PartitionOffsets)
	for _, b := range ti.Offsets {
		bnd[b.Partition] = b
	}
	// Where each partition starts; the Clients are grouped by start.
	starts := make(map[int32]int64)
	byStart := make(map[client.StartFrom][]int32)
	var order []client.StartFrom
	for _, p := range parts {
		b := bnd[p]
		var start int64
		sf := client.Earliest
		switch from.kind {
		case "earliest":
			start = b.Min
		case "latest":
			start, sf = b.Max, client.Latest
		case "offset":
			start = max(from.offset, b.Min)
			sf = client.AtOffset(start)
		case "time":
			tctx, cancel := groupCmdCtx(e)
			start, err = adm.OffsetForTime(tctx, o.topic, b.BrokerID, p, time.UnixMilli(from.ms))
			cancel()
			if err != nil {
				return fmt.Errorf("%s-%d: %w", o.topic, p, err)
			}
			sf = client.AtOffset(start)
		}
		if !o.follow && start >= b.Max {
			continue // nothing to read
		}
		starts[p] = start
		if _, ok := byStart[sf]; !ok {
			order = append(order, sf)
		}
		byStart[sf] = append(byStart[sf], p)
	}
	if len(starts) == 0 {
		return nil
	}
	var clients []*client.Client
	defer func() {
		for _, cl := range clients {
			ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
			_ = cl.Close(ctx)
			cancel()
		}
	}()
	for _, sf := range order {
		opts := append(clientOpts(e), client.Brokers(e.addr), client.ConsumePartitions(o.topic, byStart[sf]...),
			client.ConsumeFrom(sf), client.FetchMaxWait(500*time.Millisecond))
		if o.filter != "" {
			opts = append(opts, client.Filter(o.filter))
		}
		cl, err := client.New(opts...)
		if err != nil {
			return err
		}
		clients = append(clients, cl)
	}

	rctx, stop := context.WithCancel(e.ctx)
	defer stop()
	if o.follow {
		// New messages may trickle in: flush them within 100 ms.
		defer pr.flushEvery(100 * time.Millisecond)()
	} else {
		go stopAtEnds(rctx, stop, clients, o.topic, starts, bnd)
	}
	h := func(hctx context.Context, m *message.Message) error {
		if m.Offset < starts[m.Partition] {
			return nil // re-aligned to an earlier record start than asked
		}
		return pr.print(hctx, m, stop, false)
	}
	return runClients(rctx, clients, h)
}

// stopAtEnds calls stop once every partition's fetch position has reached
// the end it had when the command started.
func stopAtEnds(ctx context.Context, stop func(), clients []*client.Client, topic string,
	starts map[int32]int64, bnd map[int32]admin.PartitionOffsets) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		done := true
		for p := range starts {
			reached := false
			for _, cl := range clients {
				if pos, ok := cl.Position(topic, message.Partition{BrokerID: -1, Partition: p}); ok && pos >= bnd[p].Max {
					reached = true
				}
			}
			if !reached {
				done = false
				break
			}
		}
		if done {
			stop()
			return
		}
	}
}

// runClients runs Consume of every client with h until ctx ends or one
// fails; a stop by ctx is not an error.
func runClients(ctx context.Context, clients []*client.Client, h client.Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(clients))
	for _, cl := range clients {
		go func() {
			err := cl.Consume(ctx, h)
			if err != nil && ctx.Err() == nil {
				cancel()
			}
			errs <- err
		}()
	}
	var first error
	for range clients {
		if err := <-errs; err != nil && first == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, client.ErrClosed) {
			first = err
		}
	}
	return first
}

// consumeGroup is a member of --group, through the broker at --addr or
// the cluster at --zk, until Ctrl-C or --count.
func consumeGroup(e *env, o *consumeOpts, from resetTo, pr *printer) error {
	opts := clientOpts(e)
	if o.zk != "" {
		if err := zkTopicExists(e, o.zk, o.root, o.topic); err != nil {
			return err
		}
		opts = append(opts, client.ZooKeeper(o.zk, o.root), client.ZooKeeperSessionTimeout(o.session))
	} else {
		if _, err := topicPartitions(e, o.topic); err != nil {
			return err
		}
		// One line on stderr when the broker is lost and one when it is
		// back, without --log-level (issue 23).
		lw := newLinkWatch(e.ctx, e, e.addr)
		opts = append(opts, client.Brokers(e.addr), client.Logger(slog.New(watchHandler{inner: e.logger().Handler(), w: lw})))
	}
	if len(o.parts) > 0 {
		opts = append(opts, client.ConsumePartitions(o.topic, o.parts...))
	} else {
		opts = append(opts, client.ConsumeTopics(o.topic))
	}
	// Reject(Drop()): a reader that prints creates no retry topics (the
	// group default, docs/sdk.md); its handler fails only when it cannot
	// write, which ends the command.
	opts = append(opts, client.ConsumerGroup(o.group), client.FetchMaxWait(500*time.Millisecond), client.Reject(client.Drop()))
	if from.kind == "latest" {
		opts = append(opts, client.ConsumeFrom(client.Latest))
	}
	if o.broadcast {
		opts = append(opts, client.Broadcast())
	}
	if o.id != "" {
		opts = append(opts, client.ConsumerID(o.id))
	}
	if o.filter != "" {
		opts = append(opts, client.Filter(o.filter))
	}
	cl, err := client.New(opts...)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
		defer cancel()
		_ = cl.Close(ctx) // commits the last positions and leaves the group
	}()
	rctx, stop := context.WithCancel(e.ctx)
	defer stop()
	// A message counts as handled (and its position may be committed)
	// once it is written out, not while it sits in the buffer.
	return runClients(rctx, []*client.Client{cl}, func(hctx context.Context, m *message.Message) error {
		return pr.print(hctx, m, stop, true)
	})
}

// zkTopicExists reports an error unless a broker registered topic in the
// ZooKeeper cluster at connect under root.
func zkTopicExists(e *env, connect, root, topic string) error {
	adm, err := zkAdmin(e, connect, root)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	l, err := adm.Layout(ctx)
	if err != nil {
		return err
	}
	for _, t := range l.Topics {
		if t.Name == topic && len(t.Brokers) > 0 {
			return nil
		}
	}
	return fmt.Errorf("unknown topic %q: no broker registered it in ZooKeeper %s under %s (see `metaq cluster --zk %s`)",
		topic, connect, root, connect)
}

// printer writes consumed messages to stdout, one at a time.
type printer struct {
	mu     sync.Mutex
	out    *bufio.Writer
	enc    *json.Encoder
	asJSON bool
	format []fmtPart // nil: the body and "\n"
	count  int64
	max    int64 // 0: no limit
	done   bool
	err    error // the first write error
}

func newPrinter(e *env, o *consumeOpts) (*printer, error) {
	pr := &printer{out: bufio.NewWriterSize(e.stdout, 64<<10), asJSON: o.asJSON, max: o.count}
	pr.enc = json.NewEncoder(pr.out)
	pr.enc.SetEscapeHTML(false)
	if o.format != "" {
		f, err := parseFormat(o.format)
		if err != nil {
			return nil, usagef("-f: %v", err)
		}
		pr.format = f
	}
	return pr, nil
}

// print writes m unless --count was reached or ctx is done, calling stop
// when --count is reached or a write fails; flush writes it out at once.
// A message refused is not handled: the error keeps a group member from
// committing past it.
func (pr *printer) print(ctx context.Context, m *message.Message, stop func(), flush bool) error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.done || ctx.Err() != nil {
		return context.Canceled
	}
	err := pr.write(m)
	if err == nil && flush {
		err = pr.out.Flush()
	}
	if err != nil {
		pr.err, pr.done = err, true
		stop()
		return err
	}
	if pr.count++; pr.max > 0 && pr.count >= pr.max {
		pr.done = true
		stop()
	}
	return nil
}

func (pr *printer) write(m *message.Message) error {
	switch {
	case pr.asJSON:
		j := jsonMessage{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, MsgID: strconv.FormatInt(m.ID, 10),
			JSONContent: message.NewJSONContent(m)}
		if m.BrokerID != 0 {
			b := m.BrokerID
			j.Broker = &b
		}
		return pr.enc.Encode(&j)
	case pr.format != nil:
		_, err := pr.out.Write(appendFormat(nil, pr.format, m))
		return err
	}
	pr.out.Write(m.Body)
	return pr.out.WriteByte('\n')
}

// flush writes out what is buffered and returns the first write error.
func (pr *printer) flush() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if err := pr.out.Flush(); err != nil && pr.err == nil {
		pr.err = err
	}
	return pr.err
}

// flushEvery flushes the printer every d until the returned function is
// called.
func (pr *printer) flushEvery(d time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				pr.mu.Lock()
				pr.out.Flush()
				pr.mu.Unlock()
			}
		}
	}()
	return func() { close(done) }
}

// fmtPart is a piece of a -f format: literal text, or a field (verb).
type fmtPart struct {
	lit  string
	verb byte // 0: lit
}

// parseFormat compiles a kcat-style format string.
func parseFormat(s string) ([]fmtPart, error) {
	var parts []fmtPart
	var lit strings.Builder
	flushLit := func() {
		if lit.Len() > 0 {
			parts = append(parts, fmtPart{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+1 < len(s):
			i++
			switch v := s[i]; v {
			case '%':
				lit.WriteByte('%')
			case 't', 'p', 'o', 'k', 'K', 'h', 's', 'S', 'a', 'i', 'T', 'b':
				flushLit()
				parts = append(parts, fmtPart{verb: v})
			default:
				return nil, fmt.Errorf("unknown field %q (want %%t %%p %%o %%k %%K %%h %%s %%S %%a %%i %%T %%b or %%%%)", "%"+string(rune(v)))
			}
		case c == '%':
			return nil, errors.New("a format ends with a lone %")
		case c == '\\' && i+1 < len(s):
			i++
			switch v := s[i]; v {
			case 'n':
				lit.WriteByte('\n')
			case 'r':
				lit.WriteByte('\r')
			case 't':
				lit.WriteByte('\t')
			case '\\':
				lit.WriteByte('\\')
			default:
				lit.WriteByte('\\')
				lit.WriteByte(v)
			}
		default:
			lit.WriteByte(c)
		}
	}
	flushLit()
	return parts, nil
}

// appendFormat appends m as the format f says to dst.
func appendFormat(dst []byte, f []fmtPart, m *message.Message) []byte {
	for _, p := range f {
		switch p.verb {
		case 0:
			dst = append(dst, p.lit...)
		case 't':
			dst = append(dst, m.Topic...)
		case 'p':
			dst = strconv.AppendInt(dst, int64(m.Partition), 10)
		case 'o':
			dst = strconv.AppendInt(dst, m.Offset, 10)
		case 'k':
			dst = append(dst, m.Key...)
		case 'K':
			dst = strconv.AppendInt(dst, int64(len(m.Key)), 10)
		case 's':
			dst = append(dst, m.Body...)
		case 'S':
			dst = strconv.AppendInt(dst, int64(len(m.Body)), 10)
		case 'a':
			dst = append(dst, m.Attribute...)
		case 'i':
			dst = strconv.AppendInt(dst, m.ID, 10)
		case 'h':
			for i, h := range m.Headers {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, h.Key...)
				if h.Value != nil { // a null value: the key alone, as produce --header takes it
					dst = append(dst, '=')
					dst = append(dst, h.Value...)
				}
			}
		case 'T':
			dst = strconv.AppendInt(dst, m.Time().UnixMilli(), 10)
		case 'b':
			dst = strconv.AppendInt(dst, int64(m.BrokerID), 10)
		}
	}
	return dst
}
