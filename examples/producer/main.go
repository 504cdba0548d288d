// Command producer sends -n messages to a metaq-go broker and prints where
// each batch of results landed.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8123", "broker address")
	topic := flag.String("topic", "meta-test", "topic")
	n := flag.Int("n", 10, "number of messages")
	size := flag.Int("size", 0, "pad each body to this many bytes (0: just the text)")
	async := flag.Bool("async", false, "send asynchronously (pipelined)")
	batch := flag.Int("batch", 0, "batch up to this many messages per partition into one mput (implies -async)")
	key := flag.String("key", "", "partition by this key (hash selector)")
	attr := flag.String("attr", "", "attribute to attach to each message")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	opts := []client.Opt{client.Brokers(*addr)}
	if *key != "" {
		opts = append(opts, client.Selector(selector.HashByKey()), client.ProduceRetries(false))
	}
	if *batch > 0 {
		opts = append(opts, client.Batching(*batch, 1<<20, 5*time.Millisecond))
		*async = true
	}
	p, err := client.New(opts...)
	if err != nil {
		log.Fatal(err)
	}

	start := time.Now()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < *n && ctx.Err() == nil; i++ {
		body := fmt.Appendf(nil, "hello %d", i)
		if len(body) < *size {
			body = append(body, make([]byte, *size-len(body))...)
		}
		m := &message.Message{Topic: *topic, Body: body}
		if *key != "" {
			m.Key = []byte(*key)
		}
		if *attr != "" {
			m.Attribute, m.HasAttribute = *attr, true
		}
		if !*async {
			rs, err := p.ProduceSync(ctx, m)
			if err != nil {
				log.Printf("send %d: %v", i, err)
				failed.Add(1)
				continue
			}
			ok.Add(1)
			if res := rs[0]; *n <= 100 {
				fmt.Printf("sent %d: broker %d partition %d offset %d id %d\n", i, res.BrokerID, res.Partition, res.Offset, res.ID)
			}
			continue
		}
		wg.Add(1)
		p.Produce(ctx, m, func(_ client.SendResult, err error) {
			defer wg.Done()
			if err != nil {
				failed.Add(1)
				return
			}
			ok.Add(1)
		})
	}
	wg.Wait()
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(closeCtx); err != nil {
		log.Print(err)
	}
	el := time.Since(start)
	fmt.Printf("%d sent, %d failed in %v (%.0f msg/s)\n", ok.Load(), failed.Load(), el.Round(time.Millisecond),
		float64(ok.Load())/el.Seconds())
	if failed.Load() > 0 {
		os.Exit(1)
	}
}
