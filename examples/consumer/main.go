// Command consumer reads messages from a metaq-go broker and prints them.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8123", "broker address")
	topic := flag.String("topic", "meta-test", "topic")
	group := flag.String("group", "", "consumer group (default: none, nothing is committed)")
	n := flag.Int("n", 0, "stop after this many messages (0: run until interrupted)")
	from := flag.String("from", "earliest", "where to start: earliest, latest or a byte offset")
	parts := flag.String("partitions", "", "comma-separated partitions (default: all)")
	quiet := flag.Bool("q", false, "print only the summary")
	flag.Parse()

	opts := []client.Opt{client.Brokers(*addr)}
	if *group != "" {
		opts = append(opts, client.ConsumerGroup(*group))
	}
	switch *from {
	case "earliest":
		opts = append(opts, client.ConsumeFrom(client.Earliest))
	case "latest":
		opts = append(opts, client.ConsumeFrom(client.Latest))
	default:
		off, err := strconv.ParseInt(*from, 10, 64)
		if err != nil {
			log.Fatalf("bad -from %q", *from)
		}
		opts = append(opts, client.ConsumeFrom(client.AtOffset(off)))
	}
	if *parts != "" {
		var ps []int32
		for _, s := range strings.Split(*parts, ",") {
			p, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				log.Fatalf("bad -partitions %q", *parts)
			}
			ps = append(ps, int32(p))
		}
		opts = append(opts, client.ConsumePartitions(*topic, ps...))
	} else {
		opts = append(opts, client.ConsumeTopics(*topic))
	}
	c, err := client.New(opts...)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	start := time.Now()
	count, bytes := 0, 0
	for m, err := range c.Messages(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		count++
		bytes += len(m.Body)
		if !*quiet {
			attr := ""
			if m.HasAttribute {
				attr = " attr=" + strconv.Quote(m.Attribute)
			}
			fmt.Printf("%s-%d@%d id=%d%s %q\n", m.Topic, m.Partition, m.Offset, m.ID, attr, truncate(m.Body, 80))
		}
		if *n > 0 && count == *n {
			break
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	el := time.Since(start)
	fmt.Printf("%d messages, %d bytes in %v\n", count, bytes, el.Round(time.Millisecond))
	for _, p := range c.Assigned() {
		if off, ok := c.Position(*topic, p); ok {
			fmt.Printf("partition %s: next offset %d\n", p, off)
		}
	}
	_ = c.Close(closeCtx)
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
