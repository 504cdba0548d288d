package client

import (
	"slices"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/offsets"
	"github.com/metaq-go/metaq/sdk/selector"
)

// Producing options. They apply in both discovery modes.

// Selector sets how Produce chooses a message's partition among the
// topic's partitions: s gets the list of (broker id, partition), sorted
// by broker id, then number, as MetaQ's selectors do, and returns an
// index into it. Default selector.HashByKey(): a message with a Key goes
// to the partition its key hashes to (selector.KeyIndex, as Kafka's default
// partitioner hashes a key), one without round robin as
// selector.RoundRobin() sends it; selector.HashByKey() with Ordered too.
// A plugin selector (selectors.Open) is one too.
func Selector(s selector.Selector) Opt {
	return optFunc(func(c *config) {
		if s == nil {
			c.errorf("Selector needs a selector.Selector")
		}
		c.selSet = true
		c.prodOpts = append(c.prodOpts, withSelector(s))
	})
}

// ProduceTimeout bounds each message's produce, retries included.
// Default 3 s.
func ProduceTimeout(d time.Duration) Opt {
	return optFunc(func(c *config) {
		if d <= 0 {
			c.errorf("ProduceTimeout must be positive")
		}
		c.prodOpts = append(c.prodOpts, withSendTimeout(d))
	})
}

// MaxBufferedMessages caps the messages produced and not yet
// acknowledged; Produce waits (within its ctx) for room, or with Spool
// writes the message to the spool instead. Default 1024, or 8 batches
// with Batching.
func MaxBufferedMessages(n int) Opt {
	return optFunc(func(c *config) {
		if n <= 0 {
			c.errorf("MaxBufferedMessages must be positive")
		}
		c.prodOpts = append(c.prodOpts, withMaxInFlight(n))
	})
}

// Batching packs messages bound for one partition into mput requests of
// at most maxMessages messages and maxBytes bytes, waiting at most linger
// for a batch to fill. Default off: each message is its own put.
func Batching(maxMessages, maxBytes int, linger time.Duration) Opt {
	return optFunc(func(c *config) {
		if maxMessages <= 0 || maxBytes <= 0 || linger < 0 {
			c.errorf("Batching needs maxMessages > 0, maxBytes > 0 and linger >= 0")
		}
		c.prodOpts = append(c.prodOpts, withBatching(maxMessages, maxBytes, linger))
	})
}

// ProduceRetries sets whether a message whose broker failed (refused,
// unreachable, connection lost, 403, 5xx) is retried within the produce
// timeout. Default true, false with Ordered. A message that may have
// reached its broker is retried on its partition and stored once (see
// Idempotence); one that did not reach it (a broker that could not be
// reached) is retried on another partition. With Idempotence(false) every
// retry may change the partition, and a retry after a lost connection may
// duplicate the message (at least once).
func ProduceRetries(on bool) Opt {
	return optFunc(func(c *config) {
		c.retrySet, c.retry = true, on
		c.prodOpts = append(c.prodOpts, withRetryOnFailure(on))
	})
}

// Idempotence sets whether the producer is idempotent (default true,
// Kafka's enable.idempotence): each message carries the Client's producer
// id for its partition and a sequence (docs/protocol.md, "Idempotent
// producer"), so that the broker stores a retried message once and answers
// the retry with the first copy's offset. Idempotence is per Client: a
// new Client (a restarted process) has new producer ids, and what it
// resends is not recognised as a retry. Idempotence(false) sends messages
// without a key, timestamp, tags or headers byte for byte as MetaQ 1.4
// clients do (docs/protocol.md, "What an older client sees").
func Idempotence(on bool) Opt {
	return optFunc(func(c *config) { c.prodOpts = append(c.prodOpts, withIdempotence(on)) })
}

// MaxMessageSize refuses, before sending, messages whose data (body and
// attribute) is larger. Default 1 MiB, the broker's default.
func MaxMessageSize(n int) Opt {
	return optFunc(func(c *config) {
		if n <= 0 {
			c.errorf("MaxMessageSize must be positive")
		}
		c.prodOpts = append(c.prodOpts, withMaxMessageSize(n))
	})
}

// Ordered is MetaQ's ordered producing: each message goes to the
// partition its key hashes to (or the Selector's choice) with no retry
// elsewhere, and a message whose partition is unavailable is kept,
// fsynced, in a local store under dir and resent in order when the
// partition is back, also after a restart (its result then says
// StoredLocally). Produce calls are sent one at a time, in call order.
// dir "" is ~/.meta_localmessage, MetaQ's directory (under os.TempDir()
// when there is no home directory).
func Ordered(dir string) Opt {
	return optFunc(func(c *config) { c.ordered, c.orderedDir = true, dir })
}

// Spool is MetaQ's async producer's local storage: a message whose send
// fails in a way a later resend may fix, or that finds MaxBufferedMessages
// messages in flight, is written, fsynced, to a spool journal under dir
// instead, and its promise gets success with a result whose Spooled is
// true: it has no broker offset yet (Partition, Offset, ID and BrokerID
// are -1, as MetaQ's ids are). A background resender sends the spooled
// messages later (backing off while no broker takes them, at once when a
// Produce succeeds) and removes each one only after a broker acknowledged
// it; New starts it, so a Client on the same dir resends what an earlier
// process spooled.
//
// Spooled: a send that failed after its retries (ProduceRetries, within
// ProduceTimeout) because no broker could be reached, its connection was
// lost, it timed out, no partition is listed (in ZooKeeper mode also a
// topic no broker publishes), or a broker replied 5xx. Not spooled (the
// promise gets the error): an invalid or oversized message, a topic that
// none of the brokers given to Brokers lists (when they all answer), a 4xx reply (403 included), a refused
// authentication, a selector's failure, and any failure once Produce's
// ctx is done.
//
// Delivery is at least once: a send that timed out or lost its
// connection may have been stored, and is stored again when resent; a
// crash between a resend's acknowledgement and its removal resends it
// after the restart. Spooled messages are resent after newer ones, in no
// particular order, to the partition the Selector chooses then (their Key
// is kept). A spooled message a broker refuses for good (its topic was
// removed, say) stays in the spool, retried and logged at error level.
// Flush waits for sends and spool writes, not for the spool to drain:
// SpoolBacklog counts what it holds. Close stops the resender (what it
// did not resend stays on disk) after writing every message spooled.
// One Client of a process may use a dir; other processes are not
// detected and must not share it. dir "" is ~/.metaq_async_storage
// (under os.TempDir() when there is no home directory). Spool and
// Ordered do not go together: Ordered has its own local store.
func Spool(dir string) Opt {
	return optFunc(func(c *config) { c.spool, c.spoolDir = true, dir })
}

// PartitionLayout fixes the partitions an Ordered Client hashes topic's
// keys over (broker id to partition count), so that a key keeps its
// partition across restarts whatever the cluster lists. Needs Ordered.
func PartitionLayout(topic string, partitionsByBroker map[int]int) Opt {
	return optFunc(func(c *config) {
		c.layouts = append(c.layouts, withPartitionLayout(topic, partitionsByBroker))
	})
}

// Consuming options.

// ConsumeTopics makes the Client consume these topics: every partition
// of each, or with ConsumerGroup this member's share.
func ConsumeTopics(topics ...string) Opt {
	return optFunc(func(c *config) {
		if len(topics) == 0 {
			c.errorf("ConsumeTopics needs at least one topic")
		}
		for _, t := range topics {
			if !slices.Contains(c.topics, t) {
				c.topics = append(c.topics, t)
			}
		}
	})
}

// ConsumePartitions makes the Client consume these partitions of topic
// on its one broker (Brokers with one address). With ConsumerGroup the
// group's offsets are used and committed, with no membership.
func ConsumePartitions(topic string, partitions ...int32) Opt {
	return optFunc(func(c *config) {
		if len(partitions) == 0 {
			c.errorf("ConsumePartitions needs at least one partition")
		}
		for _, p := range partitions {
			if p < 0 {
				c.errorf("ConsumePartitions: bad partition %d", p)
			}
		}
		c.parts[topic] = append(c.parts[topic], partitions...)
	})
}

// ConsumerGroup makes the Client a member of group g: the group's
// members share each topic's partitions (through ZooKeeper owner nodes,
// or in direct mode through the broker), and positions are committed to
// the brokers' offset store every CommitInterval, on release and on
// Close. Without a group the Client reads every partition and commits
// nothing.
func ConsumerGroup(g string) Opt {
	return consumerOption("ConsumerGroup", func(c *config) {
		if !validToken(g) || strings.ContainsAny(g, "/,") {
			c.errorf("bad consumer group %q", g)
		}
		c.group = g
	})
}

// Broadcast makes every member of the ConsumerGroup get every message:
// as in MetaQ, each member consumes under its own group
// "<group>-<ConsumerID or host name>" and keeps its own offsets.
func Broadcast() Opt {
	return consumerOption("Broadcast", func(c *config) { c.broadcast = true })
}

// Filter makes the brokers send this Client only the messages expr
// matches, for every topic it consumes: RocketMQ's tag form (`TagA ||
// TagB`, `*` for all) or an expression over the key, tags, headers and
// attribute (`tag == "TagA" && header("region") == "eu"`, `has_tag("x")`,
// `key == "k1"`, `header("n") in ("1", "2")`; docs/filters.md). The broker
// compiles it once per connection and skips the other messages, moving the
// positions past them, so a group member commits past what it was not
// sent; with a server.toml filter for the group too, a message must pass
// both. It is registered again on every new connection (a reconnect, a
// failover). A bad expression stops the consumer with ErrBadFilter and the
// broker's message (with the column); a broker without consumer filters
// stops it with ErrFilterUnsupported. Default none.
func Filter(expr string) Opt {
	return consumerOption("Filter", func(c *config) {
		if len(expr) > maxFilterLen {
			c.errorf("Filter: expression of %d bytes, over the limit of %d", len(expr), maxFilterLen)
		}
		c.cOpts = append(c.cOpts, withFilter(expr))
	})
}

// maxFilterLen is the longest Filter expression a broker takes.
const maxFilterLen = 4096

// ConsumeFrom sets where a partition with no committed offset starts:
// Earliest (the default), Latest or AtOffset(n).
func ConsumeFrom(s StartFrom) Opt { return consumerPass("ConsumeFrom", withStartFrom(s)) }

// FetchMaxBytes sets the size of each get, which also bounds the largest
// record that can be read until FetchMaxBytesLimit. Default 1 MiB.
func FetchMaxBytes(n int) Opt {
	return consumerOption("FetchMaxBytes", func(c *config) {
		if n <= 0 {
			c.errorf("FetchMaxBytes must be positive")
		}
		c.cOpts = append(c.cOpts, withMaxFetchSize(n))
	})
}

// FetchMaxBytesLimit lets a get grow up to n bytes for a record larger
// than FetchMaxBytes. Default 16 MiB.
func FetchMaxBytesLimit(n int) Opt {
	return consumerOption("FetchMaxBytesLimit", func(c *config) {
		if n <= 0 {
			c.errorf("FetchMaxBytesLimit must be positive")
		}
		c.cOpts = append(c.cOpts, withMaxFetchSizeLimit(n))
	})
}

// FetchMaxWait caps the pause between empty gets of a partition that is
// caught up. Default 5 s.
func FetchMaxWait(d time.Duration) Opt {
	return consumerOption("FetchMaxWait", func(c *config) {
		if d <= 0 {
			c.errorf("FetchMaxWait must be positive")
		}
		c.cOpts = append(c.cOpts, withMaxFetchDelay(d))
	})
}

// CommitInterval sets how often a group member commits its positions
// (0: only on release, Close and Commit). Default 5 s. Needs
// ConsumerGroup.
func CommitInterval(d time.Duration) Opt {
	return consumerOption("CommitInterval", func(c *config) {
		c.groupOnly = append(c.groupOnly, "CommitInterval")
		if d < 0 {
			c.errorf("CommitInterval must not be negative")
		}
		c.cOpts = append(c.cOpts, withCommitInterval(d))
	})
}

// StoreOffsetsIn keeps the group's positions in s instead of the
// brokers' offset store: each topic's consumer of each broker loads and
// commits the positions of its partitions (message.Position, with the
// broker's id) in one call. Needs ConsumerGroup.
func StoreOffsetsIn(s offsets.Store) Opt {
	return consumerOption("StoreOffsetsIn", func(c *config) {
		if s == nil {
			c.errorf("StoreOffsetsIn needs a store")
		}
		c.storeSet = true
		c.cOpts = append(c.cOpts, withOffsetStore(s, 0))
	})
}

// HandlerRetries sets how often a message whose handler failed is
// retried, backoff apart, before the RejectPolicy gets it. Default 5,
// 100 ms.
func HandlerRetries(n int, backoff time.Duration) Opt {
	return consumerOption("HandlerRetries", func(c *config) {
		if n < 0 || backoff < 0 {
			c.errorf("HandlerRetries needs n >= 0 and backoff >= 0")
		}
		c.cOpts = append(c.cOpts, withRetries(n, backoff))
	})
}

// Reject sets what happens to a message its handler failed on after the
// retries: RetryTopics (the default of a ConsumerGroup's members that
// consume ConsumeTopics, not Broadcast: RetryTopics(RetryOptions{}), which
// falls back to Drop() when Consume cannot create the group's retry and
// dead-letter topics), Drop() (the default otherwise: it is logged at
// error level and skipped), RecoverLocally(dir) (kept on disk and handed to the handler
// again later, MetaQ's policy), RetryTopics(o) (sent to the group's
// retry topic and redelivered with backoff, then to its dead-letter
// topic: docs/retry.md), RetryInPlace(max) (never rejected: retried
// in place, its partition waiting, as ordered consumption needs), or a
// RejectFunc.
func Reject(p RejectPolicy) Opt {
	return consumerOption("Reject", func(c *config) {
		if p == nil {
			c.errorf("Reject needs a policy")
		}
		c.retryOpts, c.rejectSet = nil, true
		if rp, ok := p.(retryTopics); ok {
			c.retryOpts = &rp.o // the Client makes the policy (buildConsumers)
			return
		}
		c.cOpts = append(c.cOpts, withRejectPolicy(p))
	})
}

// MessageIDCache sets how many message ids a consuming Client remembers
// to drop a redelivered message within this member: MetaQ 1.4.6's
// MessageIdCache, an LRU of the ids (per topic) its handler returned nil
// for, or its Messages loop went on from. A message fetched again whose id
// is in it (after an offset reset, a partition that comes back to this
// member, a commit that failed, a slave promoted after a failover, which
// serves the master's ids) is not handed to the handler again: its
// position moves past it and DuplicatesDropped counts it. A message whose
// handler failed is not remembered, so it is retried as before. Default
// DefaultMessageIDCacheSize (4096; on, as in MetaQ); 0 turns it off. Ids
// are remembered per Client, not across restarts, and a replay from the
// RecoverLocally store is not checked against them.
func MessageIDCache(size int) Opt {
	return consumerOption("MessageIDCache", func(c *config) {
		if size < 0 {
			c.errorf("MessageIDCache needs a size >= 0")
		}
		c.idCache = size
	})
}

// Balance sets the group's partition assignment strategy: "DEFAULT"
// (MetaQ's, partitions in numeric order) or "CONSIST" (consistent
// hashing). Needs ConsumerGroup.
func Balance(strategy string) Opt {
	return groupPass("Balance", withBalanceStrategy(strategy))
}

// ConsumerID sets this member's id in its group. Default
// "<host>-<pid>-<random>".
func ConsumerID(id string) Opt { return groupPass("ConsumerID", withConsumerID(id)) }

// HeartbeatInterval sets how often a direct-mode group member renews its
// membership with the broker. Default 1 s.
func HeartbeatInterval(d time.Duration) Opt {
	return groupPass("HeartbeatInterval", withHeartbeatInterval(d))
}

// groupPass is a consumer option that needs ConsumerGroup.
func groupPass(name string, o consOption) Opt {
	return consumerOption(name, func(c *config) {
		c.groupOnly = append(c.groupOnly, name)
		c.cOpts = append(c.cOpts, o)
	})
}
