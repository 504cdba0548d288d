package client

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// spoolProduce produces msgs with Produce, waits for every promise (Flush
// first) and returns the results and errors in the order of msgs.
func spoolProduce(t *testing.T, cl *Client, msgs []*message.Message) ([]SendResult, []error) {
	t.Helper()
	res := make([]SendResult, len(msgs))
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	ctx := ctxT(t, 30*time.Second)
	for i, m := range msgs {
		wg.Add(1)
		cl.Produce(ctx, m, func(r SendResult, err error) {
			res[i], errs[i] = r, err
			wg.Done()
		})
	}
	require.NoError(t, cl.Flush(ctx))
	wg.Wait() // Flush returned: every promise has run
	return res, errs
}

// spoolMsgs returns messages of topic t1 with bodies prefix-from .. prefix-(to-1).
func spoolMsgs(prefix string, from, to int) []*message.Message {
	var out []*message.Message
	for i := from; i < to; i++ {
		out = append(out, &message.Message{Topic: topic, Body: fmt.Appendf(nil, "%s-%d", prefix, i)})
	}
	return out
}

// requireSpooled checks that every message was spooled.
func requireSpooled(t *testing.T, res []SendResult, errs []error) {
	t.Helper()
	for i := range res {
		require.NoError(t, errs[i], "message %d", i)
		require.Equal(t, SendResult{Topic: topic, Partition: -1, Offset: -1, ID: -1, BrokerID: -1, Spooled: true}, res[i], "message %d", i)
		require.True(t, res[i].StoredLocally())
	}
}

// spoolTopicCount is the number of messages of t1 the broker at addr stores.
func spoolTopicCount(t *testing.T, addr string) int64 {
	t.Helper()
	a, err := newBrokerAdmin(addr)
	require.NoError(t, err)
	defer a.Close()
	ts, err := a.Topics(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	for _, ti := range ts {
		if ti.Name == topic {
			return ti.MessageCount
		}
	}
	t.Fatalf("the broker at %s does not list %s", addr, topic)
	return 0
}

// requireDeliveredOnce checks that the broker at addr stores exactly the
// messages of want (by body), each once, and returns them by body.
func requireDeliveredOnce(t *testing.T, addr string, want []*message.Message) map[string]*message.Message {
	t.Helper()
	n := spoolTopicCount(t, addr)
	c := newClient(t, Brokers(addr), ConsumeTopics(topic), FetchMaxWait(100*time.Millisecond))
	got := make(map[string]*message.Message)
	dups := 0
	for m, err := range c.Messages(ctxT(t, 30*time.Second)) {
		require.NoError(t, err)
		if _, dup := got[string(m.Body)]; dup {
			dups++
		}
		got[string(m.Body)] = m
		if len(got) == len(want) {
			break
		}
	}
	for _, m := range want {
		require.Contains(t, got, string(m.Body), "lost")
	}
	require.Len(t, got, len(want), "only the messages sent")
	// The broker's count tells the copies read from those not read yet.
	t.Logf("%d messages sent, %d stored (%d duplicates)", len(want), n, n-int64(len(want)))
	require.Zero(t, dups, "no send timed out: exactly once")
	require.Equal(t, int64(len(want)), n, "no send timed out: exactly once")
	return got
}

// requireSpoolEmpty checks that the spool journal in dir holds nothing.
func requireSpoolEmpty(t *testing.T, dir string) {
	t.Helper()
	st, err := acquireRecoverStore(dir, spoolQuietLogger)
	require.NoError(t, err)
	defer st.release()
	require.Zero(t, st.count())
}

var spoolQuietLogger = slog.New(slog.DiscardHandler)

// TestClientSpoolBrokerDown: with the broker stopped, Produce calls
// succeed as spooled (those past MaxBufferedMessages at once, the others
// after their ProduceTimeout); once the broker is back on the same
// address and data, every message arrives exactly once and the spool is
// empty.
func TestClientSpoolBrokerDown(t *testing.T) {
	t.Parallel()
	br := runBrokerAt(t, brokerConfig(t, brokerWithID(7)), stableAddr(t), broker.Options{})
	dir := t.TempDir()
	p := newClient(t, Brokers(br.addr), Spool(dir), ProduceTimeout(2*time.Second), MaxBufferedMessages(16))
	before := spoolMsgs("before", 0, 10)
	res, errs := spoolProduce(t, p, before)
	for i := range res {
		require.NoError(t, errs[i])
		require.False(t, res[i].Spooled)
		require.Equal(t, 7, res[i].BrokerID)
	}
	require.Zero(t, p.SpoolBacklog())

	require.NoError(t, br.b.Close())
	down := spoolMsgs("down", 0, 100)
	res, errs = spoolProduce(t, p, down)
	requireSpooled(t, res, errs)
	require.Equal(t, 100, p.SpoolBacklog())
	fi, err := os.Stat(filepath.Join(dir, recoverJournalName))
	require.NoError(t, err)
	require.Positive(t, fi.Size())

	cfg := *br.cfg
	runBrokerAt(t, &cfg, br.addr, broker.Options{})
	require.Eventually(t, func() bool { return p.SpoolBacklog() == 0 }, 30*time.Second, 10*time.Millisecond)
	after := spoolMsgs("after", 0, 5)
	res, errs = spoolProduce(t, p, after)
	for i := range res {
		require.NoError(t, errs[i])
		require.False(t, res[i].Spooled)
	}
	requireDeliveredOnce(t, br.addr, append(append(before, down...), after...))
	require.NoError(t, p.Close(ctxT(t, 10*time.Second)))
	requireSpoolEmpty(t, dir)
}

// TestClientSpoolRestart: Client A spools while its broker is down (it
// never reached it) and closes; Client B on the same dir resends what A
// spooled when the broker is up, with the messages' keys: each lands on
// the partition its key hashes to.
func TestClientSpoolRestart(t *testing.T) {
	t.Parallel()
	br := runBrokerAt(t, brokerConfig(t, brokerWithID(8)), stableAddr(t), broker.Options{})
	cfg := *br.cfg
	require.NoError(t, br.b.Close())
	dir := t.TempDir()
	opts := []Opt{Brokers(br.addr), Spool(dir), ProduceTimeout(500 * time.Millisecond), Selector(selector.HashByKey())}

	a := newClient(t, opts...)
	_, err := New(append([]Opt{quietLog}, opts...)...)
	require.ErrorContains(t, err, "in use by another Client", "one Client of a process per spool")
	msgs := spoolMsgs("r", 0, 30)
	for i, m := range msgs {
		m.Key = fmt.Appendf(nil, "key-%d", i%5)
	}
	res, errs := spoolProduce(t, a, msgs)
	requireSpooled(t, res, errs)
	require.NoError(t, a.Close(ctxT(t, 10*time.Second)))
	require.Equal(t, 30, a.SpoolBacklog(), "left on disk")

	b := newClient(t, opts...)
	require.Equal(t, 30, b.SpoolBacklog(), "found on restart")
	runBrokerAt(t, &cfg, br.addr, broker.Options{})
	require.Eventually(t, func() bool { return b.SpoolBacklog() == 0 }, 30*time.Second, 10*time.Millisecond)
	got := requireDeliveredOnce(t, br.addr, msgs)
	for _, m := range msgs {
		require.EqualValues(t, selector.KeyIndex(m.Key, 4), got[string(m.Body)].Partition, "%s: the key was kept", m.Body)
	}
	require.NoError(t, b.Close(ctxT(t, 10*time.Second)))
	requireSpoolEmpty(t, dir)
}

// TestClientSpoolRefusals: what a resend would not fix is not spooled:
// the promise gets the error.
func TestClientSpoolRefusals(t *testing.T) {
	t.Parallel()
	br := startBroker(t, func(c *conf.Config) { c.MaxMessageSize = 1024 })
	dir := t.TempDir()
	p := newClient(t, Brokers(br.addr), Spool(dir), ProduceTimeout(500*time.Millisecond), MaxMessageSize(4096))
	msgs := []*message.Message{
		{Topic: topic, Body: make([]byte, 2048)},  // over the broker's max_message_size: 400
		{Topic: topic, Body: make([]byte, 8192)},  // over MaxMessageSize
		{Topic: "nosuchtopic", Body: []byte("x")}, // no broker lists it
		{Body: []byte("no topic")},
	}
	res, errs := spoolProduce(t, p, msgs)
	require.ErrorIs(t, errs[0], ErrBadRequest)
	require.ErrorIs(t, errs[1], ErrInvalidMessage)
	require.ErrorIs(t, errs[2], ErrUnknownTopic)
	require.ErrorIs(t, errs[3], ErrInvalidMessage)
	for i := range res {
		require.False(t, res[i].Spooled, "message %d", i)
	}
	require.Zero(t, p.SpoolBacklog())
	r, err := p.ProduceSync(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Body: []byte("ok")})
	require.NoError(t, err)
	require.False(t, r[0].Spooled)
	require.NoError(t, p.Close(ctxT(t, 10*time.Second)))
	requireSpoolEmpty(t, dir)

	// A spool New cannot open is its error.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	cl, err := New(quietLog, Brokers(br.addr), Spool(file))
	require.ErrorContains(t, err, "spool")
	require.Nil(t, cl)
}

// TestClientSpoolZooKeeper: in ZooKeeper mode, with the topic's only
// broker gone from the cluster, Produce calls succeed as spooled; a
// broker registering again (the same id and data, a new port) gets every
// message exactly once and the spool empties.
func TestClientSpoolZooKeeper(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/client-spool")
	cfg := brokerConfig(t)
	var br *brokertest.Broker
	start := func() string {
		c := *cfg
		c.Port = 0
		b := brokertest.Start(t, smallJournal(), brokertest.Config(&c), brokertest.ZooKeeper(zkAddr, root, 3), brokertest.Quiet())
		t.Cleanup(func() { _ = b.Close() })
		br = b
		return b.Addr()
	}
	addr := start()
	dir := t.TempDir()
	p := newClient(t, ZooKeeper(zkAddr, root), ZooKeeperSessionTimeout(4*time.Second), Spool(dir),
		ProduceTimeout(time.Second))
	before := spoolMsgs("zbefore", 0, 10)
	res, errs := spoolProduce(t, p, before)
	for i := range res {
		require.NoError(t, errs[i])
		require.False(t, res[i].Spooled)
		require.Equal(t, 3, res[i].BrokerID)
	}

	require.NoError(t, br.Close())
	down := spoolMsgs("zdown", 0, 50)
	res, errs = spoolProduce(t, p, down)
	requireSpooled(t, res, errs)
	require.Equal(t, 50, p.SpoolBacklog())

	addr2 := start()
	require.NotEqual(t, addr, addr2)
	require.Eventually(t, func() bool { return p.SpoolBacklog() == 0 }, 30*time.Second, 10*time.Millisecond)
	requireDeliveredOnce(t, addr2, append(before, down...))
	require.NoError(t, p.Close(ctxT(t, 10*time.Second)))
	requireSpoolEmpty(t, dir)
}

// TestClientSpoolFlushDuringResends: a Flush while the brokers are down
// and the spool is resending waits about one send timeout for the
// resends, not one per resend. Flush holds every in-flight slot that
// frees until it has them all; resends that each waited for a slot then
// took the one left in turn, one send timeout each, so that Flush took
// as many send timeouts as a round has resends (a make test saw the
// 50-message Flush of TestClientSpoolZooKeeper time out after 30 s).
func TestClientSpoolFlushDuringResends(t *testing.T) {
	t.Parallel()
	// A broker that never answers: every send and resend fails after its
	// ProduceTimeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	const timeout = 500 * time.Millisecond
	dir := t.TempDir()
	p := newClient(t, Brokers(ln.Addr().String()), Spool(dir), ProduceTimeout(timeout), MaxBufferedMessages(16))
	cp, _, err := p.producer()
	require.NoError(t, err)

	// One slot stands for a message in flight; a Flush takes the others.
	cp.sem <- struct{}{}
	flushed := make(chan error, 1)
	go func() { flushed <- p.Flush(ctxT(t, 30*time.Second)) }()
	require.Eventually(t, func() bool { return len(cp.sem) == cap(cp.sem) }, 10*time.Second, time.Millisecond)
	// Messages produced meanwhile find no slot: spooled at once, and the
	// resender starts a round of 8 resends (half the window).
	res, errs := make([]SendResult, 8), make([]error, 8)
	var wg sync.WaitGroup
	for i, m := range spoolMsgs("r", 0, 8) {
		wg.Add(1)
		p.Produce(ctxT(t, 10*time.Second), m, func(r SendResult, err error) { res[i], errs[i] = r, err; wg.Done() })
	}
	wg.Wait()
	requireSpooled(t, res, errs)
	time.Sleep(300 * time.Millisecond) // the round's resends wait for slots

	start := time.Now()
	<-cp.sem // the message in flight completes
	select {
	case err := <-flushed:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Flush did not return")
	}
	took := time.Since(start)
	t.Logf("Flush returned %v after the last message's slot was freed (send timeout %v)", took.Round(time.Millisecond), timeout)
	require.Less(t, took, 4*timeout, "Flush waited for the resends one after another")
}
