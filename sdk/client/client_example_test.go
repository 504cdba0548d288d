package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// brokerAddr is the broker the examples use. The test binary starts a
// real broker (with the examples' topics) and points this at it.
var brokerAddr = "127.0.0.1:8123"

// The quick start: produce three messages, then read them back.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, err := client.New(client.Brokers(brokerAddr))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	for _, s := range []string{"one", "two", "three"} {
		if _, err := p.ProduceSync(ctx, &message.Message{Topic: "ex-quick", Body: []byte(s)}); err != nil {
			log.Fatal(err)
		}
	}

	c, err := client.New(client.Brokers(brokerAddr), client.ConsumeTopics("ex-quick"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	n := 0
	for m, err := range c.Messages(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s at offset %d\n", m.Body, m.Offset)
		if n++; n == 3 {
			break
		}
	}
	// Offsets are bytes: each record is a 20-byte header, the idempotent
	// producer's 16 bytes (its id and the message's sequence) and the body.

	// Output:
	// one at offset 0
	// two at offset 39
	// three at offset 78
}

// Produce is asynchronous: the promise runs with each outcome, and Flush
// (or Close) waits for all of them. Batching packs each partition's
// messages into mput requests.
func ExampleClient_Produce() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(brokerAddr), client.Batching(256, 1<<20, 5*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close(ctx)
	stored := 0
	for i := range 1000 {
		m := &message.Message{Topic: "ex-produce", Body: fmt.Appendf(nil, "message %d", i)}
		cl.Produce(ctx, m, func(res client.SendResult, err error) {
			if err != nil {
				log.Printf("produce failed: %v", err)
				return
			}
			stored++ // promises run one at a time
		})
	}
	if err := cl.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored:", stored)
	// Output: stored: 1000
}

// A consumer group member: the group's members share the partitions, and
// positions are committed every 5 s, on release and on Close, so that the
// next member resumes where this one stopped.
func ExampleConsumerGroup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.New(client.Brokers(brokerAddr))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.ProduceSync(ctx, &message.Message{Topic: "ex-group", Body: []byte("order 1 paid")}); err != nil {
		log.Fatal(err)
	}

	cl, err := client.New(client.Brokers(brokerAddr), client.ConsumeTopics("ex-group"), client.ConsumerGroup("billing"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close(ctx)
	hctx, stop := context.WithCancel(ctx)
	err = cl.Consume(hctx, func(_ context.Context, m *message.Message) error {
		fmt.Printf("billing got %q\n", m.Body)
		stop() // one message is enough for the example
		return nil
	})
	fmt.Println("consume returned:", err)
	// Output:
	// billing got "order 1 paid"
	// consume returned: context canceled
}

// Ordered producing: one key's messages go to one partition, in call
// order; while that partition is unavailable they wait in a local
// fsynced store and are resent in order.
func ExampleOrdered() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(brokerAddr), client.Ordered(exampleDir("ordered")))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close(ctx)
	var parts []int32
	for _, step := range []string{"created", "paid", "shipped"} {
		res, err := cl.ProduceSync(ctx, &message.Message{Topic: "ex-ordered", Key: []byte("order-7"), Body: []byte(step)})
		if err != nil {
			log.Fatal(err)
		}
		parts = append(parts, res[0].Partition)
	}
	fmt.Println("one partition:", parts[0] == parts[1] && parts[1] == parts[2])
	// Output: one partition: true
}

// Broadcast: every member of the group gets every message (each member
// keeps its own offsets, under "<group>-<ConsumerID>").
func ExampleBroadcast() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.New(client.Brokers(brokerAddr))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.ProduceSync(ctx, &message.Message{Topic: "ex-broadcast", Body: []byte("config changed")}); err != nil {
		log.Fatal(err)
	}
	for _, member := range []string{"cache-a", "cache-b"} {
		cl, err := client.New(client.Brokers(brokerAddr), client.ConsumeTopics("ex-broadcast"),
			client.ConsumerGroup("caches"), client.Broadcast(), client.ConsumerID(member))
		if err != nil {
			log.Fatal(err)
		}
		for m, err := range cl.Messages(ctx) {
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("%s: %s\n", member, m.Body)
			break
		}
		cl.Close(ctx)
	}
	// Output:
	// cache-a: config changed
	// cache-b: config changed
}

// Acknowledged consumption (docs/sdk.md): positions move only past what
// the handler acked; Rollback delivers the rest again.
func ExampleManualAck() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.New(client.Brokers(brokerAddr))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.ProduceSync(ctx, &message.Message{Topic: "ex-ack", Body: []byte("job 1")},
		&message.Message{Topic: "ex-ack", Body: []byte("job 2")}); err != nil {
		log.Fatal(err)
	}

	cl, err := client.New(client.Brokers(brokerAddr), client.ConsumeTopics("ex-ack"), client.ConsumerGroup("workers"),
		client.ManualAck(100), client.Reject(client.Drop()))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close(ctx)
	hctx, stop := context.WithCancel(ctx)
	rolledBack := false
	err = cl.ConsumeAcked(hctx, func(_ context.Context, d *client.Delivery) error {
		fmt.Printf("got %q\n", d.Message.Body)
		switch {
		case string(d.Message.Body) == "job 1":
			return d.Ack() // done: the position moves past it
		case !rolledBack:
			rolledBack = true
			return cl.Rollback() // job 2 not done: deliver it again
		default:
			stop() // enough for the example
			return d.Ack()
		}
	})
	fmt.Println("consume returned:", err)
	// Output:
	// got "job 1"
	// got "job 2"
	// got "job 2"
	// consume returned: context canceled
}
