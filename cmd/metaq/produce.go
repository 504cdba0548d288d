package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

const produceHelp = `
Send one message per line of stdin (or --file). The trailing "\n" (or "\r\n")
is not part of the message. At a terminal the command says on stderr that it
reads stdin. Messages are sent in input order and pipelined (many in flight
at once; the order is kept on each partition). A line longer than --max-size
is an error that names the line. With --zk the brokers are found in ZooKeeper (MetaQ's
layout under --root) and --partition is an index into the topic's partitions
across the cluster, sorted by broker id, then number. On success it prints nothing on
stdout (with --verbose one "msgId partition offset" line per message, in
input order; with --json one JSON object per message, its msgId a string)
and "sent N messages" on stderr. Any failed send makes the exit status 1.
With --file and stderr at a terminal, the progress shows on stderr.

--key, --header, --tag and --timestamp give every message a key, headers,
tags and a create time (the properties block of docs/protocol.md). --header
k=v is repeatable and splits at the first "=": the key is what comes before
it (UTF-8, no "="), the value every byte after it, taken as is (no escapes:
"a=b=c" is key "a", value "b=c"; "k=" an empty value; "k" alone a null
value). --tag T is repeatable (no spaces or control characters). No create
time is sent unless --timestamp is given (now, unix ms, or RFC 3339): a
message without one reads with its msgId's millisecond (the broker's append
time). Messages are sent by an idempotent producer (docs/sdk.md): a send
retried after a lost reply is stored once, and each message carries the
producer's id and sequence (16 bytes) in its properties block; with
--idempotence=false one without any of the flags above is sent byte for
byte as a MetaQ 1.4 client sends it.

--delay D (a Go duration: 30s, 5m, 2h) and --deliver-at T (RFC 3339) make
every message a delayed one (docs/delayed.md): the broker holds it and
appends it to its partition when it is due; the reply's offset is -1. A
time in the past means now. Delayed messages are sent one per put, without
the idempotent producer's id and sequence; cancel one with
metaq delayed cancel.

examples:
  echo hello | metaq produce --topic meta-test
  metaq produce --topic meta-test --key user42 --verbose < lines.txt
  metaq produce --topic meta-test --json < lines.txt
  metaq produce --topic meta-test --partition 2 --attribute tag-a --file lines.txt
  metaq produce --topic meta-test --key user42 --header trace=abc --header n=7 --tag TagA --timestamp now < lines.txt
  metaq produce --zk 127.0.0.1:2181 --topic meta-test < lines.txt
  echo later | metaq produce --topic meta-test --delay 30s --verbose
  echo at-nine | metaq produce --topic meta-test --deliver-at 2026-12-08T09:00:00+01:00
`

// silentLogger discards the SDK's log output: the CLI reports errors itself.
var silentLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func cmdProduce(e *env) *cobra.Command {
	return leaf(e, "produce", "produce --topic T [--key K] [--header k=v]... [--tag T]... [--timestamp now|MS|RFC3339] [--delay D | --deliver-at RFC3339] [--partition P] [--attribute A] [--file F] [--idempotence=false] [--zk CONNECT] [--verbose|--json]", produceHelp, func(fs *pflag.FlagSet) func(args []string) error {
		topic := fs.String("topic", "", "topic to send to (required)")
		key := fs.String("key", "", "partition key: messages with the same key go to the same partition")
		headers := fs.StringArray("header", nil, "header `k=v` on every message (repeatable; splits at the first =, the value taken as is; k alone: a null value)")
		tags := fs.StringArray("tag", nil, "tag on every message (repeatable)")
		timestamp := fs.String("timestamp", "", "create time sent with every message: now (each message's send time), unix ms or RFC 3339 (default: none, the msgId's time)")
		delay := fs.Duration("delay", 0, "deliver every message this long after the broker accepts it (30s, 5m, 2h)")
		deliverAt := fs.String("deliver-at", "", "deliver every message at this RFC 3339 `time` (the past: now)")
		partition := fs.Int("partition", -1, "send every message to this partition (default: round robin, or by --key)")
		attribute := fs.String("attribute", "", "attribute string attached to every message")
		file := fs.String("file", "", "read messages from this file instead of stdin")
		verbose := fs.Bool("verbose", false, "print msgId, partition and offset of each message on stdout")
		asJSON := fs.Bool("json", false, "print each message's result as a JSON object on stdout")
		idem := fs.Bool("idempotence", true, "idempotent producer: a retried send is stored once (false: messages without the producer's id and sequence)")
		maxSize := fs.Int("max-size", message.DefaultMaxMessageSize, "longest accepted line in bytes")
		zkc := fs.String("zk", "", "send to the cluster registered at this ZooKeeper `host:port[,...]` instead of --addr")
		root := fs.String("root", cluster.DefaultRoot, "MetaQ's zkRoot (with --zk)")
		return func(args []string) error {
			if *topic == "" || strings.ContainsAny(*topic, " \r\n\t/,") {
				return usagef("--topic is required (and must not contain spaces, / or ,)")
			}
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			if *maxSize <= 0 {
				return usagef("--max-size must be positive")
			}
			if *zkc != "" && !strings.HasPrefix(*root, "/") {
				return usagef("--root must start with /, got %q", *root)
			}
			if *verbose && *asJSON {
				return usagef("--verbose and --json do not go together")
			}
			hasAttr := fs.Changed("attribute")
			props, err := parseProduceProps(*headers, *tags, *timestamp)
			if err != nil {
				return err
			}
			if props.delay, props.deliverAt, err = parseDelayFlags(*delay, *deliverAt); err != nil {
				return err
			}
			in := e.stdin
			var size int64 = -1
			if *file != "" {
				f, err := os.Open(*file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
				if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
					size = fi.Size()
				}
			} else if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				fmt.Fprintln(e.stderr, "metaq produce: reading messages from stdin, one per line (Ctrl-D ends)")
			}
			if err := e.sec.prepare(); err != nil {
				return err
			}
			opts := append(clientOpts(e), client.ProduceTimeout(e.timeout), client.MaxMessageSize(*maxSize), client.Idempotence(*idem))
			if *zkc != "" {
				if err := zkTopicExists(e, *zkc, *root, *topic); err != nil {
					return err
				}
				opts = append(opts, client.ZooKeeper(*zkc, *root))
			} else {
				n, err := topicPartitions(e, *topic)
				if err != nil {
					return err
				}
				if *partition >= n {
					return usagef("--partition %d out of range: topic %s has %d partitions (0..%d)", *partition, *topic, n, n-1)
				}
				opts = append(opts, client.Brokers(e.addr))
			}
			switch {
			case *partition >= 0:
				opts = append(opts, client.Selector(selector.Fixed(*partition)), client.ProduceRetries(false))
			case *key != "":
				opts = append(opts, client.Selector(selector.HashByKey()), client.ProduceRetries(false))
			}
			cl, err := client.New(opts...)
			if err != nil {
				return err
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
				defer cancel()
				_ = cl.Close(ctx)
			}()
			out := outText
			switch {
			case *verbose:
				out = outVerbose
			case *asJSON:
				out = outJSON
			}
			return produceLines(e, cl, in, size, produceSpec{topic: *topic, key: *key, attribute: *attribute, hasAttr: hasAttr,
				props: props, out: out, maxSize: *maxSize})
		}
	})
}

// produceProps are the headers, tags and create time of --header, --tag
// and --timestamp, given to every message.
type produceProps struct {
	headers message.Headers
	tags    []string
	now     bool      // --timestamp now: each message's send time
	ts      time.Time // a fixed --timestamp
	// delay and deliverAt are --delay and --deliver-at.
	delay     time.Duration
	deliverAt time.Time
}

// parseProduceProps reads --header, --tag and --timestamp and checks them
// against the properties limits (message.CheckProperties), so that a bad
// one is a usage error before anything is sent.
func parseProduceProps(headers, tags []string, timestamp string) (produceProps, error) {
	var p produceProps
	for _, h := range headers {
		k, v, ok := strings.Cut(h, "=")
		if k == "" {
			return p, usagef("--header %q: the key before = is empty", h)
		}
		var val []byte
		if ok {
			val = []byte(v) // "k=": empty, non-nil
		}
		p.headers = append(p.headers, message.Header{Key: k, Value: val})
	}
	p.tags = append(p.tags, tags...)
	switch timestamp {
	case "":
	case "now":
		p.now = true
	default:
		if ms, err := strconv.ParseInt(timestamp, 10, 64); err == nil {
			p.ts = time.UnixMilli(ms)
		} else if t, err := time.Parse(time.RFC3339Nano, timestamp); err == nil {
			p.ts = t
		} else {
			return p, usagef("--timestamp %q: want now, unix ms or RFC 3339 (2026-12-07T02:00:00Z)", timestamp)
		}
	}
	probe := &message.Message{Headers: p.headers, Tags: p.tags, Timestamp: p.ts}
	if err := probe.CheckProperties(); err != nil {
		return p, usagef("%v", err)
	}
	return p, nil
}

// apply gives m the headers, tags and create time (shared, never modified).
func (p *produceProps) apply(m *message.Message) {
	m.Headers, m.Tags = p.headers, p.tags
	m.Delay, m.DeliverAt = p.delay, p.deliverAt
	switch {
	case p.now:
		m.Timestamp = time.Now()
	case !p.ts.IsZero():
		m.Timestamp = p.ts
	}
}

// What produce prints per message.
const (
	outText    = iota // nothing
	outVerbose        // "msgId partition offset"
	outJSON           // a jsonResult
)

// produceSpec is what produce sends and prints.
type produceSpec struct {
	topic, key, attribute string
	hasAttr               bool
	props                 produceProps
	out                   int
	maxSize               int
}

// jsonResult is one produced message in `produce --json`.
type jsonResult struct {
	MsgID     string `json:"msgId"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	BrokerID  int    `json:"brokerId"`
	Line      int    `json:"line"`
}

// produceLines sends one message per line of in through cl, pipelined:
// the Client keeps the lines' order on each partition (it retries on
// another partition only after a failure, and --key/--partition turn
// retries off). It prints the results (--verbose, in acknowledgement
// order) and the failures.
// size is the input's size in bytes for the progress line (-1: unknown,
// no progress).
func produceLines(e *env, cl *client.Client, in io.Reader, size int64, sp produceSpec) error {
	topic, key, attribute, hasAttr := sp.topic, sp.key, sp.attribute, sp.hasAttr
	var mu sync.Mutex // the promises run on the Client's goroutine
	var sent, failed int
	out := bufio.NewWriter(e.stdout)
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), sp.maxSize+2)
	line := 0
	var readErr error
	var read int64
	var pr *progress
	if size > 0 {
		pr = newProgress(e, "produce")
		defer pr.done()
	}
	for sc.Scan() {
		if e.ctx.Err() != nil {
			readErr = e.ctx.Err()
			break
		}
		line++
		b := sc.Bytes()
		if read += int64(len(b)) + 1; pr != nil {
			mu.Lock()
			pr.update("%d lines, %d%% of the file read, %d acknowledged", line, min(100, read*100/size), sent)
			mu.Unlock()
		}
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
		m := &message.Message{Topic: topic, Body: append([]byte(nil), b...)}
		if key != "" {
			m.Key = []byte(key)
		}
		if hasAttr {
			m.Attribute, m.HasAttribute = attribute, true
		}
		sp.props.apply(m)
		n := line
		cl.Produce(e.ctx, m, func(res client.SendResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if failed <= 10 {
					fmt.Fprintf(e.stderr, "metaq produce: line %d: %v\n", n, err)
				}
				return
			}
			sent++
			switch sp.out {
			case outVerbose:
				fmt.Fprintf(out, "%d %d %d\n", res.ID, res.Partition, res.Offset)
			case outJSON:
				_ = enc.Encode(jsonResult{MsgID: strconv.FormatInt(res.ID, 10), Topic: res.Topic, Partition: res.Partition,
					Offset: res.Offset, BrokerID: res.BrokerID, Line: n})
			}
		})
	}
	fctx, cancel := context.WithTimeout(context.Background(), e.timeout+5*time.Second)
	if err := cl.Flush(fctx); err != nil && readErr == nil {
		readErr = fmt.Errorf("waiting for the acknowledgements: %w", err)
	}
	cancel()
	pr.done()
	mu.Lock()
	defer mu.Unlock()
	if err := sc.Err(); err != nil && readErr == nil {
		readErr = fmt.Errorf("reading input after line %d: %w", line, err)
		if errors.Is(err, bufio.ErrTooLong) {
			readErr = fmt.Errorf("line %d is longer than %d bytes, the --max-size limit; raise --max-size to send it (the broker's own limit is max_message_size in its server.toml)", line+1, sp.maxSize)
		}
	}
	if err := out.Flush(); err != nil && readErr == nil {
		readErr = err
	}
	if failed > 10 {
		fmt.Fprintf(e.stderr, "metaq produce: ... %d more failures\n", failed-10)
	}
	if failed > 0 {
		fmt.Fprintf(e.stderr, "sent %d messages, %d failed\n", sent, failed)
		return fmt.Errorf("%d of %d messages failed", failed, sent+failed)
	}
	fmt.Fprintf(e.stderr, "sent %d messages\n", sent)
	return readErr
}
