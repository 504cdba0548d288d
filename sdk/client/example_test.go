package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

func ExampleProducer() {
	p, err := client.NewProducer("127.0.0.1:8123", client.WithSelector(client.HashByKey()))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := p.Send(ctx, &message.Message{Topic: "meta-test", Body: []byte("hello"), Key: []byte("order-1")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored in partition %d at offset %d with id %d\n", res.Partition, res.Offset, res.ID)
}

func ExampleProducer_SendAsync() {
	p, err := client.NewProducer("127.0.0.1:8123", client.WithBatching(256, 0, 5*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 1000 {
		m := &message.Message{Topic: "meta-test", Body: fmt.Appendf(nil, "message %d", i)}
		p.SendAsync(context.Background(), m, func(res client.SendResult, err error) {
			if err != nil {
				log.Printf("send failed: %v", err)
			}
		})
	}
	// Close waits for every callback (up to 10 s here).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
}

func ExampleConsumer_Consume() {
	c, err := client.NewConsumer("127.0.0.1:8123", "meta-test", client.WithGroup("example"),
		client.WithStartFrom(client.Earliest))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Consume(ctx, func(ctx context.Context, m *message.Message) error {
		fmt.Printf("%s-%d@%d: %s\n", m.Topic, m.Partition, m.Offset, m.Body)
		return nil
	})
	log.Println("consume ended:", err)
}

func ExampleConsumer_Messages() {
	c, err := client.NewConsumer("127.0.0.1:8123", "meta-test", client.WithPartitions(0))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	n := 0
	for m, err := range c.Messages(context.Background()) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(m.Body))
		if n++; n == 10 {
			break
		}
	}
	fmt.Println("next offset:", c.Position(0))
}

func ExampleAdmin_Topics() {
	a, err := client.NewAdmin("127.0.0.1:8123")
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	topics, err := a.Topics(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range topics {
		fmt.Println(t.Name, t.Partitions, t.MessageCount)
	}
}
