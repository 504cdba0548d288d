package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// brokerAddr is the broker the example uses. The test binary starts a
// real broker (with topic ex-admin) and points this at it.
var brokerAddr = "127.0.0.1:8123"

// Inspect a topic and a consumer group, then move the group back to the
// start with a dry run first.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Group audit reads three messages; two more arrive after it left.
	p, err := client.New(client.Brokers(brokerAddr))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	send := func(bodies ...string) {
		for _, s := range bodies {
			if _, err := p.ProduceSync(ctx, &message.Message{Topic: "ex-admin", Body: []byte(s)}); err != nil {
				log.Fatal(err)
			}
		}
	}
	send("one", "two", "three")
	// Reject(Drop()): no audit.retry and audit.dlq topics (the group
	// default creates them) in the listing below.
	cl, err := client.New(client.Brokers(brokerAddr), client.ConsumeTopics("ex-admin"), client.ConsumerGroup("audit"),
		client.Reject(client.Drop()))
	if err != nil {
		log.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	n := 0
	_ = cl.Consume(hctx, func(context.Context, *message.Message) error {
		if n++; n == 3 {
			stop()
		}
		return nil
	})
	if err := cl.Close(ctx); err != nil { // commits and leaves
		log.Fatal(err)
	}
	send("four", "five")

	acl, err := client.New(client.Brokers(brokerAddr))
	if err != nil {
		log.Fatal(err)
	}
	adm := admin.New(acl) // Close closes acl
	defer adm.Close()
	topics, err := adm.Topics(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range topics {
		for _, o := range t.Offsets {
			fmt.Printf("%s-%d: offsets [%d, %d), %d messages\n", t.Name, o.Partition, o.Min, o.Max, o.Messages)
		}
	}
	d, err := adm.DescribeGroup(ctx, "audit")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range d.Partitions {
		fmt.Printf("audit at %d: lag %d bytes, %d messages\n", *r.Committed, *r.Lag, *r.LagMessages)
	}
	plan, err := adm.ResetOffsets(ctx, "audit", admin.Earliest(), admin.ResetOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range plan.Partitions {
		fmt.Printf("dry run: %s-%d %d -> %d\n", r.Topic, r.Partition, *r.Current, r.New)
	}
	// (Offsets are bytes: a record is a 20-byte header, the idempotent
	// producer's 16 bytes and the body.)

	// Output:
	// ex-admin-0: offsets [0, 199), 5 messages
	// audit at 119: lag 80 bytes, 2 messages
	// dry run: ex-admin-0 119 -> 0
}

// Create a topic through the broker's HTTP admin API (found from its
// stats), give it more partitions, and delete it.
func ExampleAdmin_CreateTopic() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(brokerAddr))
	if err != nil {
		log.Fatal(err)
	}
	adm := admin.New(cl)
	defer adm.Close()

	t, err := adm.CreateTopic(ctx, "ex-orders", 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("created %s with %d partitions\n", t.Name, t.Partitions)
	alt, err := adm.AddPartitions(ctx, "ex-orders", 4)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("now %d partitions (was %d)\n", alt.New, alt.Old)
	_, err = adm.AddPartitions(ctx, "ex-orders", 3)
	var ae *admin.APIError
	if errors.As(err, &ae) {
		fmt.Println("fewer partitions refused with", ae.StatusCode)
	}
	if err := adm.DeleteTopic(ctx, "ex-orders", true); err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted")
	// Output:
	// created ex-orders with 2 partitions
	// now 4 partitions (was 2)
	// fewer partitions refused with 400
	// deleted
}

// List a broker's transactions: the open ones, then the XA branches it
// completed heuristically (CommitHeuristically, RollbackHeuristically)
// and has not been told to Forget.
func ExampleAdmin_Transactions() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(client.Brokers(brokerAddr))
	if err != nil {
		log.Fatal(err)
	}
	adm := admin.New(cl)
	defer adm.Close()

	txs, err := adm.Transactions(ctx, brokerAddr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d open (%d bytes buffered), %d heuristic\n", len(txs.Open), txs.BufferedBytes, len(txs.Heuristic))
	for _, t := range txs.Open {
		fmt.Println(t.Key, t.Type, t.State, t.Messages)
	}
	prepared, err := adm.PreparedTransactions(ctx, brokerAddr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("prepared:", len(prepared))
	// Output:
	// 0 open (0 bytes buffered), 0 heuristic
	// prepared: 0
}
