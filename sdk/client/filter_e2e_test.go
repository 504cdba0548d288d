package client

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// filterTags is the tag of message i of the filter tests: TagA for every
// tenth, TagB for the one after, TagC for the others.
func filterTags(i int) []string {
	switch i % 10 {
	case 0:
		return []string{"TagA"}
	case 1:
		return []string{"TagB"}
	}
	return []string{"TagC"}
}

// produceTagged produces n messages "m<i>" with filterTags to topic
// through cl.
func produceTagged(t *testing.T, cl *Client, topic string, from, n int) {
	t.Helper()
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = &message.Message{Topic: topic, Body: fmt.Appendf(nil, "m%d", from+i), Tags: filterTags(from + i)}
	}
	_, err := cl.ProduceSync(ctxT(t, 20*time.Second), msgs...)
	require.NoError(t, err)
}

// wantTagged are the bodies of the messages in [from, from+n) that
// "TagA || TagB" keeps.
func wantTagged(from, n int) map[string]bool {
	want := map[string]bool{}
	for i := from; i < from+n; i++ {
		if i%10 <= 1 {
			want["m"+strconv.Itoa(i)] = true
		}
	}
	return want
}

// TestClientFilterDirectGroup: two members of a direct-mode group with
// Filter("TagA || TagB") share the partitions and together get exactly the
// matching messages, once; the positions they commit are past the skipped
// ones, so a new member gets only what is produced after.
func TestClientFilterDirectGroup(t *testing.T) {
	t.Parallel()
	br := startBroker(t, brokerWithID(3))
	p := newClient(t, Brokers(br.addr))
	produceTagged(t, p, topic, 0, 200)

	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	members := make([]*Client, 2)
	for i := range members {
		members[i] = newClient(t, Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("g"), Filter("TagA || TagB"),
			ConsumerID(fmt.Sprintf("member-%d", i)), HeartbeatInterval(100*time.Millisecond), FetchMaxWait(100*time.Millisecond))
		wg.Go(func() {
			_ = members[i].Consume(ctx, func(_ context.Context, m *message.Message) error {
				mu.Lock()
				defer mu.Unlock()
				seen[string(m.Body)]++
				return nil
			})
		})
	}
	want := wantTagged(0, 200)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= len(want)
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return len(members[0].Assigned()) == 2 && len(members[1].Assigned()) == 2
	}, 10*time.Second, 20*time.Millisecond)
	for _, m := range members {
		require.NoError(t, m.Commit(ctxT(t, 5*time.Second)))
	}
	cancel()
	wg.Wait()
	mu.Lock()
	for b, n := range seen {
		require.True(t, want[b], "%s does not match the filter", b)
		require.Equal(t, 1, n, "%s delivered %d times", b, n)
	}
	require.Len(t, seen, len(want))
	mu.Unlock()

	produceTagged(t, p, topic, 200, 20)
	c := newClient(t, Brokers(br.addr), ConsumeTopics(topic), ConsumerGroup("g"), Filter("TagA || TagB"),
		HeartbeatInterval(100*time.Millisecond), FetchMaxWait(100*time.Millisecond))
	got := collectBodies(t, c, 4)
	for b := range got {
		require.True(t, wantTagged(200, 20)[b], "%s: resumed past the committed positions and filtered", b)
	}
}

// TestClientFilterZooKeeper: a ZooKeeper-mode group member with a header
// and tag expression gets exactly the matching messages of both brokers.
func TestClientFilterZooKeeper(t *testing.T) {
	t.Parallel()
	zkOpts := zkTwoBrokers(t, "/client-zk-filter", 4)

	p := newClient(t, zkOpts...)
	msgs := make([]*message.Message, 100)
	for i := range msgs {
		msgs[i] = &message.Message{Topic: topic, Body: fmt.Appendf(nil, "m%d", i), Tags: filterTags(i)}
		msgs[i].Headers.Add("region", []string{"eu", "us"}[i%2])
	}
	res, err := p.ProduceSync(ctxT(t, 20*time.Second), msgs...)
	require.NoError(t, err)
	brokers := map[int]bool{}
	for _, r := range res {
		brokers[r.BrokerID] = true
	}
	require.Len(t, brokers, 2)

	c := newClient(t, append(zkOpts, ConsumeTopics(topic), ConsumerGroup("zg"), FetchMaxWait(100*time.Millisecond),
		Filter(`tag in ("TagA", "TagB") && header("region") == "eu"`))...)
	got := collectBodies(t, c, 10) // m0, m10, ..., m90: TagA and eu (TagB messages are odd: us)
	for b, m := range got {
		require.Equal(t, []string{"TagA"}, m.Tags, b)
		v, _ := m.Headers.String("region")
		require.Equal(t, "eu", v, b)
	}
	for m, err := range c.Messages(ctxT(t, 500*time.Millisecond)) {
		if err != nil {
			break // the deadline
		}
		// The message the first loop broke out at is redelivered.
		require.Contains(t, got, string(m.Body), "nothing else matches")
	}
}

// TestConsumerFilterReconnect: the filter is registered again on the new
// connection after the old one broke, before the first get on it.
func TestConsumerFilterReconnect(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Edit(func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "t"}}
	}))
	p, err := newBrokerProducer(b.Addr(), quiet, withSelector(selector.Fixed(0)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(ctxT(t, 10*time.Second)) })
	for i := range 200 {
		_, err := p.Send(ctxT(t, 10*time.Second), &message.Message{Topic: "t", Body: fmt.Appendf(nil, "m%d", i), Tags: filterTags(i)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
		}
		return nc, err
	}
	c := consumerAt(t, b.Addr(), withPartitions(0), withFilter("TagA || TagB"), withMaxFetchSize(200), withDialer(dial))
	want := wantTagged(0, 200)
	got := map[string]bool{}
	for m, err := range c.Messages(ctxT(t, 20*time.Second)) {
		require.NoError(t, err)
		require.True(t, want[string(m.Body)], "%s does not match the filter", m.Body)
		require.False(t, got[string(m.Body)], "%s twice", m.Body)
		got[string(m.Body)] = true
		if len(got) == 10 {
			mu.Lock()
			for _, nc := range conns {
				nc.Close()
			}
			mu.Unlock()
		}
		if len(got) == len(want) {
			break
		}
	}
	require.Len(t, got, len(want))
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(conns), 2, "reconnected")
}

// TestConsumerFilterRefused: a bad expression stops the consumer with
// ErrBadFilter and the broker's column; a broker without the filter
// command (an older one, faked) with ErrFilterUnsupported.
func TestConsumerFilterRefused(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Edit(func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "t"}}
	}))
	c := consumerAt(t, b.Addr(), withPartitions(0), withFilter("TagA ||"))
	for _, err := range c.Messages(ctxT(t, 10*time.Second)) {
		require.ErrorIs(t, err, ErrBadFilter)
		require.Contains(t, err.Error(), "col 8: expected a field")
		break
	}

	old := oldBroker(t)
	c = consumerAt(t, old, withPartitions(0), withFilter(`header("n") > 5`))
	for _, err := range c.Messages(ctxT(t, 10*time.Second)) {
		require.ErrorIs(t, err, ErrFilterUnsupported)
		require.Contains(t, err.Error(), `unknown command \"filter\"`)
		break
	}
}

// oldBroker serves one connection as a broker without the filter command
// does: every request line is an unknown command, answered 400 with the
// line's last token as the opaque (0 if it is no number).
func oldBroker(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					tok := strings.Split(strings.TrimRight(line, "\r\n"), " ")
					if len(tok) == 1 && tok[0] == "" {
						continue // an empty line
					}
					op, err := strconv.Atoi(tok[len(tok)-1])
					if err != nil {
						op = 0
					}
					body := "unknown command " + strconv.Quote(tok[0])
					if _, err := fmt.Fprintf(nc, "result 400 %d %d\r\n%s", len(body), op, body); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
