// Command cluster-consumer is a member of a consumer group in a metaq-go
// cluster: it finds the brokers in ZooKeeper, shares the topic's
// partitions with the group's other members (start several copies and
// watch them rebalance) and prints what it gets.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

func main() {
	zk := flag.String("zk", "127.0.0.1:2181", "ZooKeeper connect string")
	root := flag.String("root", "/meta", "MetaQ's zkRoot")
	topic := flag.String("topic", "meta-test", "topic")
	group := flag.String("group", "example-group", "consumer group")
	id := flag.String("id", "", "consumer id (default host-pid-random)")
	broadcast := flag.Bool("broadcast", false, "broadcast: get every message")
	strategy := flag.String("strategy", "default", "balance strategy: default or consist")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := []client.Opt{client.ZooKeeper(*zk, *root), client.ConsumeTopics(*topic),
		client.ConsumerGroup(*group), client.Balance(strings.ToUpper(*strategy))}
	if *id != "" {
		opts = append(opts, client.ConsumerID(*id))
	}
	if *broadcast {
		opts = append(opts, client.Broadcast())
	}
	c, err := client.New(opts...)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("member of group %s\n", *group)

	// Print the assignment whenever it changes.
	go func() {
		var last string
		for ctx.Err() == nil {
			if a := fmt.Sprint(c.Assigned()); a != last {
				fmt.Printf("assigned %s\n", a)
				last = a
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	var n atomic.Int64
	err = c.Consume(ctx, func(_ context.Context, m *message.Message) error {
		n.Add(1)
		fmt.Printf("broker %d partition %d offset %d: %s\n", m.BrokerID, m.Partition, m.Offset, m.Body)
		return nil
	})
	if cerr := c.Close(context.Background()); cerr != nil {
		log.Print(cerr)
	}
	fmt.Printf("%d messages; %v\n", n.Load(), err)
}
