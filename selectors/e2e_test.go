package selectors_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/metaq-go/metaq/selectors"
)

const topic = "t1"

var quiet = client.Logger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// startBroker runs a real broker on 127.0.0.1 with topic t1 (4 partitions)
// and returns its address.
func startBroker(t testing.TB) string {
	t.Helper()
	return brokertest.Start(t, brokertest.Topics(topic), brokertest.Partitions(4), smallJournal).Addr()
}

func newProducer(t testing.TB, addr string, sel selector.Selector) *client.Client {
	t.Helper()
	p, err := client.New(client.Brokers(addr), quiet, client.Selector(sel))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// produceOne sends m alone through p.
func produceOne(ctx context.Context, p *client.Client, m *message.Message) (client.SendResult, error) {
	res, err := p.ProduceSync(ctx, m)
	if err != nil {
		return client.SendResult{}, err
	}
	return res[0], nil
}

// readPartition reads n messages of partition part from the start.
func readPartition(t *testing.T, addr string, part int32, n int) []*message.Message {
	t.Helper()
	c, err := client.New(client.Brokers(addr), quiet, client.ConsumePartitions(topic, part), client.FetchMaxWait(50*time.Millisecond))
	require.NoError(t, err)
	defer func() { _ = c.Close(context.Background()) }()
	var got []*message.Message
	if n == 0 {
		return nil
	}
	for m, err := range c.Messages(ctxT(t, 20*time.Second)) {
		require.NoError(t, err)
		got = append(got, m)
		if len(got) == n {
			break
		}
	}
	require.Len(t, got, n)
	return got
}

// TestProducerPluginSelector sends through a plugin selector and reads the
// partitions back: every message is where the plugin put it.
func TestProducerPluginSelector(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	sel := openHelper(t, "byattr", nil) // attribute "p<N>" -> partition N
	p := newProducer(t, addr, sel)
	ctx := ctxT(t, 30*time.Second)

	const n = 64
	want := make(map[int32][]string)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		part := int32((i * 7 / 3) % 4)
		body := "m" + strconv.Itoa(i)
		msgs[i] = &message.Message{Topic: topic, Body: []byte(body), Attribute: fmt.Sprintf("p%d", part), HasAttribute: true}
		want[part] = append(want[part], body)
	}
	res, err := p.ProduceSync(ctx, msgs...)
	require.NoError(t, err)
	require.Len(t, res, n)
	for i, r := range res {
		require.Equal(t, msgs[i].Attribute, fmt.Sprintf("p%d", r.Partition), "message %d", i)
		require.Equal(t, r.Partition, msgs[i].Partition)
	}
	r, err := produceOne(ctx, p, &message.Message{Topic: topic, Body: []byte("single"), Attribute: "p2", HasAttribute: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, r.Partition)
	want[2] = append(want[2], "single")

	for part := range int32(4) {
		got := readPartition(t, addr, part, len(want[part]))
		bodies := make([]string, len(got))
		for i, m := range got {
			bodies[i] = string(m.Body)
			require.Equal(t, fmt.Sprintf("p%d", part), m.Attribute)
		}
		require.Equal(t, want[part], bodies, "partition %d, in send order", part)
	}
	require.Zero(t, selectors.Fallbacks(sel))
}

// TestProducerBuiltinSelector: the builtin hash keeps a key on one
// partition, through the same adapter.
func TestProducerBuiltinSelector(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	sel, err := selectors.Open(ctxT(t, 10*time.Second), selectors.OpenOptions{Name: selectors.NameHash})
	require.NoError(t, err)
	p := newProducer(t, addr, sel)
	ctx := ctxT(t, 30*time.Second)
	msgs := make([]*message.Message, 40)
	for i := range msgs {
		msgs[i] = &message.Message{Topic: topic, Body: []byte("x"), Key: []byte("order-" + strconv.Itoa(i%5))}
	}
	res, err := p.ProduceSync(ctx, msgs...)
	require.NoError(t, err)
	byKey := map[string]int32{}
	for i, r := range res {
		k := string(msgs[i].Key)
		if prev, ok := byKey[k]; ok {
			require.Equal(t, prev, r.Partition, "key %s", k)
		}
		byKey[k] = r.Partition
		single, err := produceOne(ctx, p, &message.Message{Topic: topic, Body: []byte("y"), Key: msgs[i].Key})
		require.NoError(t, err)
		require.Equal(t, r.Partition, single.Partition, "one message and a batch agree for key %s", k)
	}
}

// TestFailurePolicyPluginKilled kills the plugin process while a producer
// uses it: messages go round robin and no send fails.
func TestFailurePolicyPluginKilled(t *testing.T) {
	t.Parallel()
	addr := startBroker(t)
	log, logs := testLogger(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	sel := openHelper(t, "last", func(o *selectors.OpenOptions) {
		o.Plugin.Env = append(o.Plugin.Env, helperPIDEnv+"="+pidFile)
		o.Logger = log
	})
	p := newProducer(t, addr, sel)
	ctx := ctxT(t, 30*time.Second)
	batch := func() []*message.Message {
		msgs := make([]*message.Message, 8)
		for i := range msgs {
			msgs[i] = &message.Message{Topic: topic, Body: []byte("b" + strconv.Itoa(i))}
		}
		return msgs
	}
	counts := func(res []client.SendResult) map[int32]int {
		c := map[int32]int{}
		for _, r := range res {
			c[r.Partition]++
		}
		return c
	}
	res, err := p.ProduceSync(ctx, batch()...)
	require.NoError(t, err)
	require.Equal(t, map[int32]int{3: 8}, counts(res), "the plugin's choice")

	require.NoError(t, syscall.Kill(pidOf(t, pidFile), syscall.SIGKILL))
	deadline := time.Now().Add(10 * time.Second)
	for selectors.Fallbacks(sel) == 0 {
		require.True(t, time.Now().Before(deadline), "no fallback within 10 s of the kill")
		_, err := p.ProduceSync(ctx, batch()...)
		require.NoError(t, err, "a dead selector plugin must not fail sends")
	}
	_, err = produceOne(ctx, p, &message.Message{Topic: topic, Body: []byte("single")})
	require.NoError(t, err)
	require.Equal(t, 1, logs.count("choosing round robin"), "logged once per burst: %s", logs)

	// The supervisor restarts the plugin (a new process, a new client) and
	// the selector uses it again.
	require.Eventually(t, func() bool {
		res, err := p.ProduceSync(ctx, batch()...)
		require.NoError(t, err)
		return counts(res)[3] == 8
	}, 10*time.Second, 20*time.Millisecond, "the restarted plugin is used again")
	require.Equal(t, 1, logs.count("selector plugin recovered"), "%s", logs)
}

// smallJournal gives the brokers 4 MiB journal files, not 64 MiB: a broker
// pre-writes and fdatasyncs its journal file and two spares when it starts,
// and these tests commit far less than one file.
var smallJournal = brokertest.Edit(func(c *conf.Config) { c.JournalFileSize = 4 << 20 })
