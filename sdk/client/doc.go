// Package client is the Go client for metaq-go brokers: a Producer, a
// Consumer and a small Admin, speaking MetaQ's text protocol (sdk/protocol)
// over one pipelined TCP connection per client.
//
// Every call takes a context; options are functional with usable defaults
// (MetaQ's: 3 s send timeout, 1 MiB fetches, 5 retries before a message is
// rejected). Close is idempotent and bounded by its context.
//
// # Producing
//
//	p, err := client.NewProducer("127.0.0.1:8123")
//	if err != nil { ... }
//	defer p.Close(context.Background())
//	res, err := p.Send(ctx, &message.Message{Topic: "meta-test", Body: []byte("hello")})
//	// res.Partition, res.Offset, res.ID
//
// SendAsync takes a callback and SendFuture returns a future; both keep up
// to WithMaxInFlight messages outstanding on the connection. WithBatching
// packs messages for the same partition into one mput request. The
// partition is chosen by a PartitionSelector (RoundRobin by default,
// Random, HashByKey, Fixed) from the partition count the broker reports
// in `stats topics`.
//
// A send that fails with ErrTimeout or ErrConnectionLost may still have been
// stored: MetaQ delivers at least once.
//
// NewClusterProducer finds brokers and partitions in ZooKeeper.
// NewOrderedProducer is MetaQ's ordered producer on top of it: each message
// goes to a fixed partition chosen by key (HashByKey by default, among the
// partitions declared with WithPartitionLayout), and when that partition is
// unavailable the message is kept, fsynced, in a local store
// (WithLocalStore, default ~/.meta_localmessage) and Send reports
// StoredLocally; later messages for the partition queue behind it and a
// background drainer resends them in order once the partition is back,
// also after a restart.
//
// # Consuming
//
//	c, err := client.NewConsumer("127.0.0.1:8123", "meta-test", client.WithStartFrom(client.Earliest))
//	if err != nil { ... }
//	defer c.Close(context.Background())
//	err = c.Consume(ctx, func(ctx context.Context, m *message.Message) error {
//		fmt.Printf("%d@%d: %s\n", m.Partition, m.Offset, m.Body)
//		return nil
//	})
//
// or, with an iterator:
//
//	for m, err := range c.Messages(ctx) { ... }
//
// Each partition is fetched by its own goroutine and delivered in order;
// Consume runs the handler for different partitions concurrently. A handler
// error retries the message, then hands it to the WithOnReject hook.
// Position reports how far each partition has been handled; an OffsetStore
// (WithOffsetStore) keeps positions across restarts.
//
// # Consumer groups
//
// In a cluster, NewClusterConsumer joins a consumer group through ZooKeeper
// (MetaQ's layout): the group's members share the topic's partitions of
// every broker, rebalance when members or brokers come and go, and hand a
// partition over only after committing its offset; WithBroadcast gives
// every member every message. Without ZooKeeper, a Consumer with WithGroup
// and WithGroupMembership lets the broker share its partitions among the
// group's members.
//
// Errors from the broker are *BrokerError values; compare them with
// errors.Is against ErrNoData, ErrInternal and the other code sentinels.
package client
