package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

var quietLog = Logger(slog.New(slog.NewTextHandler(io.Discard, nil)))

func newClient(tb testing.TB, opts ...Opt) *Client {
	tb.Helper()
	cl, err := New(append([]Opt{quietLog, DialTimeout(time.Second)}, opts...)...)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
	return cl
}

func brokerWithID(id int) func(*conf.Config) {
	return func(c *conf.Config) { c.BrokerID = id }
}

// TestClientOptionsRefused: an option that does not apply is an error
// from New that names it, never ignored.
func TestClientOptionsRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opts []Opt
		want string
	}{
		{"no discovery", nil, "Brokers(...) or ZooKeeper(...)"},
		{"both discoveries", []Opt{Brokers("127.0.0.1:1"), ZooKeeper("127.0.0.1:2", "")}, "do not go together"},
		{"bad address", []Opt{Brokers("nohost")}, "nohost"},
		{"zk option in direct mode", []Opt{Brokers("127.0.0.1:1"), ZooKeeperAuth("u", "p")}, "ZooKeeperAuth applies to ZooKeeper"},
		{"group without topics", []Opt{Brokers("127.0.0.1:1"), ConsumerGroup("g")}, "ConsumerGroup applies to consuming"},
		{"fetch option without topics", []Opt{Brokers("127.0.0.1:1"), FetchMaxBytes(1 << 20)}, "FetchMaxBytes applies to consuming"},
		{"broadcast without group", []Opt{Brokers("127.0.0.1:1"), ConsumeTopics("t"), Broadcast()}, "Broadcast needs a ConsumerGroup"},
		{"commit interval without group", []Opt{Brokers("127.0.0.1:1"), ConsumeTopics("t"), CommitInterval(time.Second)}, "CommitInterval applies to a ConsumerGroup"},
		{"partitions on two brokers", []Opt{Brokers("127.0.0.1:1", "127.0.0.1:2"), ConsumePartitions("t", 0)}, "exactly one broker"},
		{"layout without ordered", []Opt{Brokers("127.0.0.1:1"), PartitionLayout("t", map[int]int{0: 2})}, "PartitionLayout applies to Ordered"},
		{"ordered with retries", []Opt{Brokers("127.0.0.1:1"), Ordered(t.TempDir()), ProduceRetries(true)}, "do not go together"},
		{"spool with ordered", []Opt{Brokers("127.0.0.1:1"), Ordered(t.TempDir()), Spool(t.TempDir())}, "Spool and Ordered do not go together"},
		{"bad group", []Opt{Brokers("127.0.0.1:1"), ConsumeTopics("t"), ConsumerGroup("a b")}, "bad consumer group"},
		{"bad topic", []Opt{Brokers("127.0.0.1:1"), ConsumeTopics("a/b")}, "bad topic"},
		{"bad batching", []Opt{Brokers("127.0.0.1:1"), Batching(0, 1, 0)}, "Batching needs"},
		{"filter without topics", []Opt{Brokers("127.0.0.1:1"), Filter("TagA")}, "Filter applies to consuming"},
		{"filter too long", []Opt{Brokers("127.0.0.1:1"), ConsumeTopics("t"), Filter(strings.Repeat("x", 4097))}, "over the limit of 4096"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := New(tc.opts...)
			require.Error(t, err)
			require.Nil(t, cl)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// clientProduceN produces n messages with bodies "m<i>" through cl and returns
// their results.
func clientProduceN(t *testing.T, cl *Client, n int) []SendResult {
	t.Helper()
	res, _ := clientProduceMsgs(t, cl, n)
	return res
}

// clientProduceMsgs is clientProduceN that also returns the messages: a
// record's size is message.HeaderSize + msgs[i].DataLen() (the idempotent
// producer's field included once sent).
func clientProduceMsgs(t *testing.T, cl *Client, n int) ([]SendResult, []*message.Message) {
	t.Helper()
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = &message.Message{Topic: topic, Body: fmt.Appendf(nil, "m%d", i)}
	}
	res, err := cl.ProduceSync(ctxT(t, 20*time.Second), msgs...)
	require.NoError(t, err)
	return res, msgs
}

// collectBodies consumes with Messages until n distinct bodies arrived.
func collectBodies(t *testing.T, cl *Client, n int) map[string]*message.Message {
	t.Helper()
	got := make(map[string]*message.Message)
	for m, err := range cl.Messages(ctxT(t, 20*time.Second)) {
		require.NoError(t, err)
		require.NotContains(t, got, string(m.Body), "duplicate delivery")
		got[string(m.Body)] = m
		if len(got) == n {
			break
		}
	}
	require.Len(t, got, n)
	return got
}

// TestClientDirect produces, batched, to two brokers given directly and
// reads everything back with one consumer Client.
func TestClientDirect(t *testing.T) {
	t.Parallel()
	b1, b2 := startBroker(t, brokerWithID(1)), startBroker(t, brokerWithID(2))
	p := newClient(t, Brokers(b1.addr, b2.addr), Batching(64, 1<<20, time.Millisecond))
	res := clientProduceN(t, p, 400)
	brokers := map[int]int{}
	for _, r := range res {
		brokers[r.BrokerID]++
	}
	require.Equal(t, map[int]int{1: 200, 2: 200}, brokers, "round robin over the 8 partitions of both brokers")
	require.NoError(t, p.Flush(ctxT(t, 5*time.Second)))

	c := newClient(t, Brokers(b1.addr, b2.addr), ConsumeTopics(topic), FetchMaxWait(100*time.Millisecond))
	got := collectBodies(t, c, 400)
	for _, r := range res {
		m := got[fmt.Sprintf("m%d", indexOf(res, r))]
		require.NotNil(t, m)
		require.Equal(t, r.Offset, m.Offset)
		require.Equal(t, r.Partition, m.Partition)
	}
	parts := c.Assigned()
	require.Len(t, parts, 8)
	require.Equal(t, message.Partition{BrokerID: 1, Partition: 0}, parts[0])
}

func indexOf(res []SendResult, r SendResult) int {
	for i := range res {
		if res[i] == r {
			return i
		}
	}
	return -1
}

// TestClientDirectGroup: two members of one group (coordinated by the
// broker) share the partitions and together get every message once; after
// they commit and close, a new member resumes where they left off.
func TestClientDirectGroup(t *testing.T) {
	t.Parallel()
	br := startBroker(t, brokerWithID(3))
	p := newClient(t, Brokers(br.addr))
	clientProduceN(t, p, 200)

	var mu sync.Mutex
	seen := map[string]string{}
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	members := make([]*Client, 2)
	for i := range members {
		id := fmt.Sprintf("member-%d", i)
		members[i] = newClient(t, Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("g"),
			ConsumerID(id), HeartbeatInterval(100*time.Millisecond), FetchMaxWait(100*time.Millisecond))
		wg.Go(func() {
			_ = members[i].Consume(ctx, func(_ context.Context, m *message.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if prev, dup := seen[string(m.Body)]; dup {
					t.Errorf("%s delivered twice (to %s and %s)", m.Body, prev, id)
				}
				seen[string(m.Body)] = id
				return nil
			})
		})
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 200
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return len(members[0].Assigned()) == 2 && len(members[1].Assigned()) == 2
	}, 10*time.Second, 20*time.Millisecond, "the 4 partitions are shared 2 and 2")
	for _, m := range members {
		require.NoError(t, m.Commit(ctxT(t, 5*time.Second)))
	}
	cancel()
	wg.Wait()

	clientProduceN(t, p, 10) // m0..m9 again, after the committed positions
	c := newClient(t, Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("g"),
		HeartbeatInterval(100*time.Millisecond), FetchMaxWait(100*time.Millisecond))
	got := collectBodies(t, c, 10)
	for i := range 10 {
		require.Contains(t, got, fmt.Sprintf("m%d", i))
	}
}

// TestClientStoreOffsetsIn: a group member of two brokers keeps its
// positions in the offsets.Store given, each under its broker's id, and a
// new member resumes from them.
func TestClientStoreOffsetsIn(t *testing.T) {
	t.Parallel()
	b1, b2 := startBroker(t, brokerWithID(5)), startBroker(t, brokerWithID(6))
	p := newClient(t, Brokers(b1.addr, b2.addr))
	res, msgs := clientProduceMsgs(t, p, 100)
	store := &memStore{offs: map[string]message.Position{}}
	opts := []Opt{Brokers(b1.addr, b2.addr), ConsumeTopics(topic), ConsumerGroup("g"),
		StoreOffsetsIn(store), HeartbeatInterval(100 * time.Millisecond), FetchMaxWait(100 * time.Millisecond)}
	c := newClient(t, opts...)
	var n atomic.Int64
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, func(context.Context, *message.Message) error { n.Add(1); return nil }) }()
	require.Eventually(t, func() bool { return n.Load() == 100 }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Commit(ctxT(t, 5*time.Second)))
	cancel()
	<-done
	require.NoError(t, c.Close(ctxT(t, 10*time.Second)))

	end := map[message.Partition]int64{} // the next offset of every partition
	for i, r := range res {
		part := message.Partition{BrokerID: r.BrokerID, Partition: r.Partition}
		end[part] = max(end[part], r.Offset+int64(message.HeaderSize+msgs[i].DataLen()))
	}
	store.mu.Lock()
	stored := map[message.Partition]int64{}
	for k, pos := range store.offs {
		require.Equal(t, topic, pos.Topic, k)
		stored[pos.Partition] = pos.Offset
	}
	store.mu.Unlock()
	require.Equal(t, end, stored, "every partition's position, under its broker's id")

	clientProduceN(t, p, 10) // m0..m9 again, after the committed positions
	got := collectBodies(t, newClient(t, opts...), 10)
	for i := range 10 {
		m := got[fmt.Sprintf("m%d", i)]
		require.NotNil(t, m, "m%d", i)
		require.GreaterOrEqual(t, m.Offset, stored[message.Partition{BrokerID: m.BrokerID, Partition: m.Partition}], "resumed at the stored position")
	}
}

// zkTwoBrokers starts ZooKeeper and brokers 1 and 2, registers topic
// with parts partitions on each under root, and returns the options of a
// client that finds them there.
func zkTwoBrokers(t *testing.T, root string, parts int) []Opt {
	t.Helper()
	zkAddr := testsvc.ZooKeeper(t)
	b1, b2 := startBroker(t, brokerWithID(1)), startBroker(t, brokerWithID(2))
	root = zkRoot(root)
	w := newZKWriter(t, zkAddr, root)
	w.registerBoth(1, b1.addr, parts)
	w.registerBoth(2, b2.addr, parts)
	return []Opt{ZooKeeper(zkAddr, root), ZooKeeperSessionTimeout(4 * time.Second)}
}

// TestClientZooKeeper produces batched through ZooKeeper discovery to two
// brokers, consumes as a group of two and as two broadcast members.
func TestClientZooKeeper(t *testing.T) {
	t.Parallel()
	zkOpts := zkTwoBrokers(t, "/client-zk", 4)

	p := newClient(t, append(zkOpts, Batching(64, 1<<20, time.Millisecond))...)
	res := clientProduceN(t, p, 400)
	brokers := map[int]int{}
	for _, r := range res {
		brokers[r.BrokerID]++
	}
	require.Equal(t, map[int]int{1: 200, 2: 200}, brokers)

	// A group of two shares the 8 partitions and gets everything once.
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(ctxT(t, 40*time.Second))
	var wg sync.WaitGroup
	for i := range 2 {
		m := newClient(t, append(zkOpts, ConsumeTopics(topic), ConsumerGroup("zg"),
			ConsumerID(fmt.Sprintf("m%d", i)), FetchMaxWait(100*time.Millisecond))...)
		wg.Go(func() {
			_ = m.Consume(ctx, func(_ context.Context, m *message.Message) error {
				mu.Lock()
				seen[string(m.Body)]++
				mu.Unlock()
				return nil
			})
		})
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 400
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	wg.Wait()
	for b, n := range seen {
		require.Equal(t, 1, n, "%s delivered %d times", b, n)
	}

	// Two broadcast members each get every message.
	for i := range 2 {
		c := newClient(t, append(zkOpts, ConsumeTopics(topic), ConsumerGroup("bg"), Broadcast(),
			ConsumerID(fmt.Sprintf("b%d", i)), FetchMaxWait(100*time.Millisecond))...)
		collectBodies(t, c, 400)
	}
}

// TestClientZooKeeperPosition: in ZooKeeper mode Position reads each
// assigned partition (named with its broker id) and reaches the
// partition's end once everything is handled.
func TestClientZooKeeperPosition(t *testing.T) {
	t.Parallel()
	zkOpts := zkTwoBrokers(t, "/client-zk-pos", 2)

	p := newClient(t, zkOpts...)
	ends := map[message.Partition]int64{} // past each partition's last record
	res, msgs := clientProduceMsgs(t, p, 100)
	for i, r := range res {
		mp := message.Partition{BrokerID: r.BrokerID, Partition: r.Partition}
		ends[mp] = max(ends[mp], r.Offset+int64(message.HeaderSize+msgs[i].DataLen()))
	}
	require.Len(t, ends, 4)

	c := newClient(t, append(zkOpts, ConsumeTopics(topic), ConsumerGroup("pos"), FetchMaxWait(50*time.Millisecond))...)
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, func(context.Context, *message.Message) error { return nil })
	}()
	require.Eventually(t, func() bool {
		for mp, end := range ends {
			if pos, ok := c.Position(topic, mp); !ok || pos != end {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "every partition's position reaches its end")
	require.ElementsMatch(t, []message.Partition{{BrokerID: 1, Partition: 0}, {BrokerID: 1, Partition: 1},
		{BrokerID: 2, Partition: 0}, {BrokerID: 2, Partition: 1}}, c.Assigned())
	_, ok := c.Position(topic, message.Partition{BrokerID: -1, Partition: 0})
	require.False(t, ok, "a ZooKeeper-mode position needs the broker id")
	_, ok = c.Position("other", message.Partition{BrokerID: 1, Partition: 0})
	require.False(t, ok)
	cancel()
	<-done
}

// TestClientOrdered: an Ordered Client sends one key's messages to one
// partition, in call order, through async Produce.
func TestClientOrdered(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	b1 := startBroker(t, brokerWithID(1))
	root := zkRoot("/client-ordered")
	w := newZKWriter(t, zkAddr, root)
	w.registerBoth(1, b1.addr, 4)
	p := newClient(t, ZooKeeper(zkAddr, root), Ordered(t.TempDir()))
	var mu sync.Mutex
	var parts []int32
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		p.Produce(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Key: []byte("k"), Body: fmt.Appendf(nil, "o%d", i)},
			func(r SendResult, err error) {
				defer wg.Done()
				require.NoError(t, err)
				mu.Lock()
				parts = append(parts, r.Partition)
				mu.Unlock()
			})
	}
	require.NoError(t, p.Flush(ctxT(t, 10*time.Second)))
	wg.Wait()
	require.Len(t, parts, 50)
	for _, q := range parts {
		require.Equal(t, parts[0], q, "one key, one partition")
	}
	c := newClient(t, Brokers(b1.addr), ConsumePartitions(topic, parts[0]), FetchMaxWait(100*time.Millisecond))
	i := 0
	for m, err := range c.Messages(ctxT(t, 20*time.Second)) {
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("o%d", i), string(m.Body), "in produce order")
		if i++; i == 50 {
			break
		}
	}
}

// TestClientPosition: Position moves past records a fetch skipped, so a
// reader started inside the last record of a partition learns that it
// is at the end although no message arrives.
func TestClientPosition(t *testing.T) {
	t.Parallel()
	br := startBroker(t)
	p := newClient(t, Brokers(br.addr), Selector(selector.Fixed(0)))
	res, msgs := clientProduceMsgs(t, p, 3)
	last, lastMsg := res[0], msgs[0]
	res, msgs = clientProduceMsgs(t, p, 3)
	for i, r := range res {
		if r.Offset > last.Offset {
			last, lastMsg = r, msgs[i]
		}
	}
	end := last.Offset + int64(message.HeaderSize+lastMsg.DataLen())

	c := newClient(t, Brokers(br.addr), ConsumePartitions(topic, 0),
		ConsumeFrom(AtOffset(last.Offset+1)), FetchMaxWait(50*time.Millisecond))
	_, ok := c.Position(topic, message.Partition{BrokerID: -1, Partition: 0})
	require.False(t, ok, "before consuming")
	ctx, cancel := context.WithCancel(ctxT(t, 20*time.Second))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, func(_ context.Context, m *message.Message) error {
			// Reading from inside a record re-aligns at an earlier record
			// start: what comes before the start offset is the reader's to skip.
			if m.Offset > last.Offset {
				return fmt.Errorf("unexpected message at %d", m.Offset)
			}
			return nil
		})
	}()
	var pos int64
	for i := 0; i < 400 && pos != end; i++ {
		time.Sleep(25 * time.Millisecond)
		pos, _ = c.Position(topic, message.Partition{BrokerID: -1, Partition: 0})
	}
	require.Equal(t, end, pos, "the position passes the record the start offset fell inside")
	_, ok = c.Position("other", message.Partition{BrokerID: -1, Partition: 0})
	require.False(t, ok)
	cancel()
	<-done
}

// TestClientProduceKeepsOrder: messages produced one after another, with
// no failure, arrive on their partition in call order, the first ones
// (sent while the Client learns the topic and connects) included.
func TestClientProduceKeepsOrder(t *testing.T) {
	t.Parallel()
	br := startBroker(t, brokerWithID(4))
	p := newClient(t, Brokers(br.addr), Selector(selector.Fixed(2)))
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		p.Produce(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Body: fmt.Appendf(nil, "k%d", i)},
			func(_ SendResult, err error) {
				require.NoError(t, err)
				wg.Done()
			})
	}
	require.NoError(t, p.Flush(ctxT(t, 10*time.Second)))
	wg.Wait()
	c := newClient(t, Brokers(br.addr), ConsumePartitions(topic, 2), FetchMaxWait(100*time.Millisecond))
	i := 0
	for m, err := range c.Messages(ctxT(t, 20*time.Second)) {
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("k%d", i), string(m.Body))
		if i++; i == 300 {
			break
		}
	}
}
