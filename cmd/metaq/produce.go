package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

const produceHelp = `
Send one message per line of stdin (or --file). The trailing "\n" (or "\r\n")
is not part of the message. Messages are pipelined on one connection; the
command waits for every acknowledgement. On success it prints nothing on
stdout (with --verbose one "msgId partition offset" line per message, in
input order) and "sent N messages" on stderr. Any failed send makes the
exit status 1.

examples:
  echo hello | metaq produce --topic meta-test
  metaq produce --topic meta-test --key user42 --verbose < lines.txt
  metaq produce --topic meta-test --partition 2 --attribute tag-a --file lines.txt
`

// silentLogger discards the SDK's log output: the CLI reports errors itself.
var silentLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func cmdProduce(e *env, args []string) error {
	fs := newFlagSet(e, "produce", "produce --topic T [--key K] [--partition P] [--attribute A] [--file F] [--verbose]", produceHelp)
	topic := fs.String("topic", "", "topic to send to (required)")
	key := fs.String("key", "", "partition key: messages with the same key go to the same partition")
	partition := fs.Int("partition", -1, "send every message to this partition (default: round robin, or by --key)")
	attribute := fs.String("attribute", "", "attribute string attached to every message")
	file := fs.String("file", "", "read messages from this file instead of stdin")
	verbose := fs.Bool("verbose", false, "print msgId, partition and offset of each message on stdout")
	maxSize := fs.Int("max-size", message.DefaultMaxMessageSize, "longest accepted line in bytes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *topic == "" || strings.ContainsAny(*topic, " \r\n\t") {
		return usagef("--topic is required (and must not contain spaces)")
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	hasAttr := false
	fs.Visit(func(f *flag.Flag) { hasAttr = hasAttr || f.Name == "attribute" })

	in := e.stdin
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	if err := checkBroker(e); err != nil {
		return err
	}
	opts := []client.ProducerOption{client.WithLogger(silentLogger), client.WithSendTimeout(e.timeout),
		client.WithDialTimeout(e.timeout), client.WithRequestTimeout(e.timeout), client.WithMaxMessageSize(*maxSize)}
	switch {
	case *partition >= 0:
		opts = append(opts, client.WithSelector(client.Fixed(*partition)))
	case *key != "":
		opts = append(opts, client.WithSelector(client.HashByKey()))
	}
	p, err := client.NewProducer(e.addr, opts...)
	if err != nil {
		return err
	}
	defer p.Close(context.Background())

	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	n, err := p.Partitions(ctx, *topic)
	cancel()
	if err != nil {
		if errors.Is(err, client.ErrUnknownTopic) {
			return fmt.Errorf("unknown topic %q (not listed by the broker at %s)", *topic, e.addr)
		}
		return err
	}
	if *partition >= n {
		return usagef("--partition %d out of range: topic %s has %d partitions (0..%d)", *partition, *topic, n, n-1)
	}

	// The printer takes the futures in input order, so --verbose output and
	// error reports follow the input even though replies may not.
	type pending struct {
		line int
		f    *client.SendFuture
	}
	queue := make(chan pending, 1024)
	var sent, failed int
	var wg sync.WaitGroup
	wg.Add(1)
	out := bufio.NewWriter(e.stdout)
	go func() {
		defer wg.Done()
		for pd := range queue {
			res, err := pd.f.Wait(context.Background())
			if err != nil {
				failed++
				if failed <= 10 {
					fmt.Fprintf(e.stderr, "metaq produce: line %d: %v\n", pd.line, err)
				}
				continue
			}
			sent++
			if *verbose {
				fmt.Fprintf(out, "%d %d %d\n", res.ID, res.Partition, res.Offset)
			}
		}
	}()

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), *maxSize+2)
	line := 0
	var readErr error
	for sc.Scan() {
		if e.ctx.Err() != nil {
			readErr = e.ctx.Err()
			break
		}
		line++
		b := sc.Bytes()
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
		m := &message.Message{Topic: *topic, Body: append([]byte(nil), b...)}
		if *key != "" {
			m.Key = []byte(*key)
		}
		if hasAttr {
			m.Attribute, m.HasAttribute = *attribute, true
		}
		queue <- pending{line: line, f: p.SendFuture(e.ctx, m)}
	}
	if err := sc.Err(); err != nil && readErr == nil {
		readErr = fmt.Errorf("reading input after line %d: %w", line, err)
	}
	close(queue)
	wg.Wait()
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
