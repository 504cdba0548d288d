// Package client is the Go client for metaq-go brokers: one Client,
// built by New with options, that produces and consumes in every mode.
//
//	cl, err := client.New(
//		client.Brokers("127.0.0.1:8123"),  // or client.ZooKeeper("zk1:2181,zk2:2181", "/meta")
//		client.ConsumeTopics("orders"),    // omit for a producer only
//		client.ConsumerGroup("billing"),   // omit to read every partition, committing nothing
//	)
//	if err != nil { ... }
//	defer cl.Close(ctx)
//
//	// Produce: async with a promise, or ProduceSync.
//	cl.Produce(ctx, &message.Message{Topic: "orders", Body: b}, func(r client.SendResult, err error) { ... })
//	res, err := cl.ProduceSync(ctx, msgs...)
//	err = cl.Flush(ctx)
//
//	// Consume: an iterator, or a handler.
//	for m, err := range cl.Messages(ctx) { ... }
//	err = cl.Consume(ctx, func(ctx context.Context, m *message.Message) error { ... })
//
// # Discovery
//
// Brokers talks to the brokers given, learning each one's broker id and
// partitions from `stats`. ZooKeeper follows MetaQ's registry: brokers
// and partitions that appear are used and those that vanish are dropped,
// with no restart. Every option works in both modes unless its
// documentation says otherwise, and an option that does not apply to the
// Client being built is an error from New, never ignored.
//
// # Producing
//
// A message's partition is chosen by the Selector among the topic's
// partitions, sorted by broker id then number (MetaQ's partition list);
// RoundRobin by default. Batching packs each partition's messages into
// mput requests. A message whose broker fails is retried on another
// partition within ProduceTimeout (ProduceRetries), so delivery is at
// least once: an error wrapping ErrTimeout or ErrConnectionLost leaves it
// unknown whether the message was stored. Ordered is MetaQ's ordered
// producer: fixed partitions by key and a local fsynced store for
// messages whose partition is unavailable. Spool is MetaQ's async
// producer's storage: a message that failed for want of a broker (or
// found MaxBufferedMessages full) is written, fsynced, to a local spool,
// its promise succeeds with a result that says Spooled, and it is resent
// in the background, at least once; SpoolBacklog counts what waits.
//
// # Consuming
//
// ConsumeTopics reads every partition of the topics, ConsumePartitions
// chosen partitions of one broker. With ConsumerGroup the members share
// the partitions (through the broker in direct mode, through ZooKeeper
// owner nodes in cluster mode, MetaQ's balancing) and commit their
// positions every CommitInterval, on release and on Close; Broadcast
// gives every member every message. Each partition is delivered in
// order, one message at a time; different partitions concurrently. A
// message the handler fails on is retried (HandlerRetries), then given to
// the Reject policy: for a group's members RetryTopics by default (the
// group's retry topic with backoff, then its dead-letter topic; Drop when
// the topics cannot be created), Drop otherwise (logged at error level),
// or RecoverLocally, MetaQ's local recovery store.
//
// # Transactions
//
// BeginTransaction starts a local transaction (MetaQ's): its messages
// are stored, all of them, only at Commit. It is pinned to the broker of
// its first message and to the Client's connection to it. XABroker is a
// broker's XA transactions, which txn/metaqbroker makes a txn.Resource
// for package txn's transaction manager.
//
// Errors from the broker are *BrokerError values; compare them with
// errors.Is against ErrNoData, ErrInternal and the other sentinels.
package client
