package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

// onePartition gives t1 one partition, so that a consumer reads every
// message in the order the broker stored it.
func onePartition(c *conf.Config) { c.NumPartitions = 1 }

// puller reads a consumer Client's messages one at a time.
type puller struct {
	t    *testing.T
	next func() (*message.Message, error, bool)
	stop func()
}

func pull(t *testing.T, cl *Client) *puller {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	next, stop := iter.Pull2(cl.Messages(ctx))
	p := &puller{t: t, next: next, stop: func() { stop(); cancel() }}
	t.Cleanup(p.stop)
	return p
}

// bodies reads the next n messages' bodies, in order.
func (p *puller) bodies(n int) []string {
	p.t.Helper()
	var out []string
	for range n {
		m, err, ok := p.next()
		require.True(p.t, ok, "consumer stopped")
		require.NoError(p.t, err)
		out = append(out, string(m.Body))
	}
	return out
}

func txMsgs(prefix string, n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = &message.Message{Topic: topic, Body: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	return msgs
}

// TestTransactionDirect: a committed transaction's messages appear
// together, in put order, with the ids Produce returned, after a plain
// message produced while the transaction was open; a rolled-back one's
// never appear; a consumer never sees either before the commit.
func TestTransactionDirect(t *testing.T) {
	t.Parallel()
	b := startBroker(t, onePartition, brokerWithID(7))
	p := newClient(t, Brokers(b.addr))
	c := newClient(t, Brokers(b.addr), ConsumeTopics(topic), FetchMaxWait(50*time.Millisecond))
	in := pull(t, c)
	ctx := ctxT(t, 20*time.Second)

	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(tx.Key(), "TX:"), tx.Key())
	id, err := protocol.ParseTxKey([]byte(tx.Key()))
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f.:]+-[0-9]{13}-[0-9]+$`, id.Session, "MetaQ's sessionId <localIP>-<startMillis>-<seq>")
	require.Equal(t, -1, tx.BrokerID())
	msgs := txMsgs("c", 3)
	res, err := tx.Produce(ctx, msgs[:2]...)
	require.NoError(t, err)
	require.Equal(t, 7, tx.BrokerID())
	more, err := tx.Produce(ctx, msgs[2])
	require.NoError(t, err)
	res = append(res, more...)
	for _, r := range res {
		require.Equal(t, int64(-1), r.Offset, "nothing stored before commit")
		require.Equal(t, 7, r.BrokerID)
		require.Positive(t, r.ID)
	}
	// While the transaction is open, a plain message is stored and is the
	// first thing the consumer sees.
	_, err = p.ProduceSync(ctx, &message.Message{Topic: topic, Body: []byte("plain-1")})
	require.NoError(t, err)
	require.Equal(t, []string{"plain-1"}, in.bodies(1))
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, tx.Commit(ctx), ErrTransactionDone)
	_, err = tx.Produce(ctx, msgs[0])
	require.ErrorIs(t, err, ErrTransactionDone)

	// Rolled back: never seen. The marker after it comes right after the
	// committed messages.
	rb, err := p.BeginTransaction(ctx, TxTimeout(10*time.Second))
	require.NoError(t, err)
	require.NotEqual(t, tx.Key(), rb.Key())
	_, err = rb.Produce(ctx, txMsgs("r", 4)...)
	require.NoError(t, err)
	require.NoError(t, rb.Rollback(ctx))
	require.ErrorIs(t, rb.Rollback(ctx), ErrTransactionDone)
	_, err = p.ProduceSync(ctx, &message.Message{Topic: topic, Body: []byte("plain-2")})
	require.NoError(t, err)

	var got []*message.Message
	for range 4 {
		m, err, ok := in.next()
		require.True(t, ok)
		require.NoError(t, err)
		got = append(got, m)
	}
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, string(m.Body))
	}
	require.Equal(t, []string{"c-0", "c-1", "c-2", "plain-2"}, bodies)
	for i := range 3 {
		require.Equal(t, res[i].ID, got[i].ID, "the commit keeps the put's id")
	}
	require.Equal(t, got[0].Offset+int64(message.HeaderSize+3), got[1].Offset, "one contiguous batch")

	// Two transactions open at once on the same connection: one commits,
	// the other rolls back; only the first's messages are stored.
	t1, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	t2, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	_, err = t1.Produce(ctx, &message.Message{Topic: topic, Body: []byte("one-0")})
	require.NoError(t, err)
	_, err = t2.Produce(ctx, &message.Message{Topic: topic, Body: []byte("two-0")})
	require.NoError(t, err)
	_, err = t1.Produce(ctx, &message.Message{Topic: topic, Body: []byte("one-1")})
	require.NoError(t, err)
	t1.mu.Lock()
	t2.mu.Lock()
	require.Same(t, t1.w, t2.w, "one connection")
	t2.mu.Unlock()
	t1.mu.Unlock()
	require.NoError(t, t2.Rollback(ctx))
	require.NoError(t, t1.Commit(ctx))
	_, err = p.ProduceSync(ctx, &message.Message{Topic: topic, Body: []byte("plain-3")})
	require.NoError(t, err)
	require.Equal(t, []string{"one-0", "one-1", "plain-3"}, in.bodies(3))

	// A transaction with no message commits (and rolls back) nothing.
	empty, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	require.NoError(t, empty.Commit(ctx))
	empty, err = p.BeginTransaction(ctx)
	require.NoError(t, err)
	require.NoError(t, empty.Rollback(ctx))
}

// TestTransactionFailures: a refused put makes the transaction
// rollback-only; a lost connection rolls it back on the broker; bad
// options and messages are refused before anything is sent.
func TestTransactionFailures(t *testing.T) {
	t.Parallel()
	b := startBroker(t, onePartition, func(c *conf.Config) { c.TxMaxBytes = 1024 })
	p := newClient(t, Brokers(b.addr))
	c := newClient(t, Brokers(b.addr), ConsumeTopics(topic), FetchMaxWait(50*time.Millisecond))
	in := pull(t, c)
	ctx := ctxT(t, 20*time.Second)

	_, err := p.BeginTransaction(ctx, TxTimeout(90*time.Second))
	require.ErrorContains(t, err, "TxTimeout")
	_, err = p.BeginTransaction(ctx, TxTimeout(time.Millisecond))
	require.ErrorContains(t, err, "TxTimeout")

	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	_, err = tx.Produce(ctx, &message.Message{Body: []byte("no topic")})
	require.ErrorIs(t, err, ErrInvalidMessage)
	_, err = tx.Produce(ctx, &message.Message{Topic: topic, Body: []byte("small")})
	require.NoError(t, err, "an invalid message leaves the transaction open")
	_, err = tx.Produce(ctx, &message.Message{Topic: topic, Body: make([]byte, 2000)})
	require.ErrorIs(t, err, ErrInternal, "over tx_max_bytes")
	require.ErrorContains(t, err, "tx_max_bytes")
	_, err = tx.Produce(ctx, &message.Message{Topic: topic, Body: []byte("after")})
	require.ErrorContains(t, err, "rollback-only")
	err = tx.Commit(ctx)
	require.ErrorIs(t, err, ErrTransactionRolledBack)
	require.ErrorContains(t, err, "tx_max_bytes")

	// The connection goes: the broker rolls the transaction back.
	lost, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	_, err = lost.Produce(ctx, &message.Message{Topic: topic, Body: []byte("lost")})
	require.NoError(t, err)
	lost.mu.Lock()
	w := lost.w
	lost.mu.Unlock()
	w.fail(errors.New("test: connection cut"))
	err = lost.Commit(ctx)
	require.ErrorIs(t, err, ErrTransactionRolledBack)
	require.ErrorIs(t, err, ErrConnectionLost)

	// A new transaction works on the redialled connection.
	ok, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	_, err = ok.Produce(ctx, &message.Message{Topic: topic, Body: []byte("ok")})
	require.NoError(t, err)
	require.NoError(t, ok.Commit(ctx))
	require.Equal(t, []string{"ok"}, in.bodies(1), "nothing of the failed transactions is stored")
	// The broker let go of every one of them (the lost connection's at
	// its close).
	require.Eventually(t, func() bool {
		st, err := brokerStats(ctx, b.addr, "transactions")
		return err == nil && strings.Contains(st, "open 0 ")
	}, 10*time.Second, 10*time.Millisecond)
}

// TestTransactionZooKeeper: in ZooKeeper mode a transaction is pinned to
// the broker of its first message; a topic that broker does not serve
// fails with ErrTransactionBroker and leaves the transaction usable.
func TestTransactionZooKeeper(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/client-tx-%d", time.Now().UnixNano())
	addrs := map[int]string{}
	for id := 1; id <= 2; id++ {
		topics := []string{topic}
		if id == 2 {
			topics = append(topics, "only2")
		}
		br := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Topics(topics...), brokertest.Partitions(2),
			brokertest.ZooKeeper(zkAddr, root, id), brokertest.Edit(func(c *conf.Config) {
				c.ZooKeeper.SessionTimeout, c.ZooKeeper.ConnectionTimeout = 4000, 5000
			}))
		addrs[id] = br.Addr()
	}
	zkOpts := []Opt{ZooKeeper(zkAddr, root), ZooKeeperSessionTimeout(5 * time.Second)}
	ctx := ctxT(t, 30*time.Second)
	p := newClient(t, zkOpts...)
	cp, _, err := p.producer()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ps, err := cp.Partitions(ctx, topic)
		return err == nil && len(ps) == 4
	}, 20*time.Second, 20*time.Millisecond)

	// Pinned to broker 2 by its first message.
	tx, err := p.BeginTransaction(ctx)
	require.NoError(t, err)
	res, err := tx.Produce(ctx, &message.Message{Topic: "only2", Body: []byte("o")})
	require.NoError(t, err)
	require.Equal(t, 2, res[0].BrokerID)
	res, err = tx.Produce(ctx, txMsgs("z", 6)...)
	require.NoError(t, err)
	parts := map[int32]bool{}
	for _, r := range res {
		require.Equal(t, 2, r.BrokerID, "every message goes to the transaction's broker")
		parts[r.Partition] = true
	}
	require.Len(t, parts, 2, "the selector still spreads over that broker's partitions")
	require.NoError(t, tx.Commit(ctx))

	// Pinned to broker 1 (Fixed(0): the first of the sorted list).
	f := newClient(t, append(zkOpts, Selector(selector.Fixed(0)))...)
	tx, err = f.BeginTransaction(ctx)
	require.NoError(t, err)
	res, err = tx.Produce(ctx, txMsgs("f", 2)...)
	require.NoError(t, err)
	require.Equal(t, 1, res[0].BrokerID)
	_, err = tx.Produce(ctx, &message.Message{Topic: "only2", Body: []byte("x")})
	require.ErrorIs(t, err, ErrTransactionBroker)
	require.ErrorContains(t, err, "only2")
	require.NoError(t, tx.Commit(ctx), "ErrTransactionBroker leaves the transaction open")

	// What was committed is stored: z-* on broker 2, f-* on broker 1.
	for id, want := range map[int][]string{2: {"z-0", "z-1", "z-2", "z-3", "z-4", "z-5"}, 1: {"f-0", "f-1"}} {
		c := newClient(t, Brokers(addrs[id]), ConsumeTopics(topic), FetchMaxWait(50*time.Millisecond))
		got := collectBodies(t, c, len(want))
		for _, w := range want {
			require.Contains(t, got, w)
		}
	}
}
