package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// zkWriter writes the §5 nodes a broker would, for the brokers of a test.
type zkWriter struct {
	t    testing.TB
	c    *zk.Conn
	root string
}

func newZKWriter(t testing.TB, addr, root string) *zkWriter {
	c, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &zkWriter{t: t, c: c, root: root}
}

func (w *zkWriter) mkdirs(path string) {
	p := ""
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		p += "/" + part
		if _, err := w.c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			require.NoError(w.t, err)
		}
	}
}

// register writes ids/<id>/master (or slave0 for role "s0") and
// topics-pub/t1/<id>-<role> with {"numParts":n,"broker":"<id>-m"}.
func (w *zkWriter) register(id int, role, addr string, n int) {
	w.mkdirs(zkpath.Broker(w.root, id))
	leaf, name := zkpath.Master(w.root, id), zkpath.MasterName(id)
	if role != "m" {
		leaf, name = zkpath.Slave(w.root, id, 0), zkpath.BrokerName{ID: id, Slave: 0}
	}
	_, err := w.c.Create(leaf, []byte("meta://"+addr), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(w.t, err)
	w.mkdirs(zkpath.TopicsPub.Topic(w.root, topic))
	_, err = w.c.Create(zkpath.TopicsPub.Node(w.root, topic, name), zkpath.TopicData{NumParts: n, Broker: zkpath.MasterName(id).String()}.Bytes(),
		zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(w.t, err)
}

func (w *zkWriter) unregister(id int) {
	require.NoError(w.t, w.c.Delete(zkpath.TopicsPub.Node(w.root, topic, zkpath.MasterName(id)), -1))
	require.NoError(w.t, w.c.Delete(zkpath.Master(w.root, id), -1))
}

type ack struct {
	broker int
	part   int32
	off    int64
	body   string
}

// loader sends from several goroutines until stopped, recording acks.
type loader struct {
	mu     sync.Mutex
	acks   []ack
	errs   []error
	stop   chan struct{}
	wg     sync.WaitGroup
	seq    atomic.Int64
	counts map[int]int
}

func startLoad(t *testing.T, p *clusterProducer, workers int) *loader {
	l := &loader{stop: make(chan struct{}), counts: map[int]int{}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				body := fmt.Sprintf("m-%d", l.seq.Add(1))
				r, err := p.Send(context.Background(), &message.Message{Topic: topic, Body: []byte(body)})
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				} else {
					l.acks = append(l.acks, ack{r.BrokerID, r.Partition, r.Offset, body})
					l.counts[r.BrokerID]++
				}
				l.mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

func (l *loader) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *loader) count(id int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[id]
}

func (l *loader) snapshot() ([]ack, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ack(nil), l.acks...), append([]error(nil), l.errs...)
}

// verifyOn checks that every ack naming broker id is readable there, at
// the acked partition and offset, with the sent body.
func verifyOn(t *testing.T, br *testBroker, id int, acks []ack) {
	t.Helper()
	want := map[pos]string{}
	for _, a := range acks {
		if a.broker == id {
			want[pos{a.part, a.off}] = a.body
		}
	}
	if len(want) == 0 {
		return
	}
	c := newConsumer(t, br.addr)
	found := 0
	for m, err := range c.Messages(ctxT(t, 30*time.Second)) {
		require.NoError(t, err)
		if body, ok := want[pos{m.Partition, m.Offset}]; ok {
			require.Equal(t, body, string(m.Body), "broker %d %d@%d", id, m.Partition, m.Offset)
			found++
			if found == len(want) {
				break
			}
		}
	}
	require.Equal(t, len(want), found, "acked messages missing on broker %d", id)
}

func startClusterProducer(t *testing.T, zkAddr, root string, opts ...prodOption) *clusterProducer {
	t.Helper()
	base := []prodOption{quiet, withZKRoot(root), withZKSessionTimeout(4 * time.Second),
		withDialTimeout(time.Second)}
	p, err := openClusterProducer(ctxT(t, 20*time.Second), zkAddr, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// TestClusterProducerAddRemoveBroker runs load against broker 1, adds
// broker 2's znodes (its partitions get used with no restart), then
// removes them and closes broker 2 (sends move to broker 1). A slave node
// (3-s0) pointing at a third broker is never used. Every acked message is
// readable on the broker and partition its ack names.
func TestClusterProducerAddRemoveBroker(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/cp-add")
	b1, b2, b3 := startBroker(t), startBroker(t), startBroker(t)
	w := newZKWriter(t, zkAddr, root)
	w.register(1, "m", b1.addr, 4)
	w.register(3, "s0", b3.addr, 4)
	p := startClusterProducer(t, zkAddr, root)

	ps, err := p.Partitions(ctxT(t, 10*time.Second), topic)
	require.NoError(t, err)
	require.Len(t, ps, 4)

	l := startLoad(t, p, 4)
	require.Eventually(t, func() bool { return l.count(1) > 50 }, 10*time.Second, 10*time.Millisecond)
	w.register(2, "m", b2.addr, 4)
	require.Eventually(t, func() bool { return l.count(2) > 50 }, 10*time.Second, 10*time.Millisecond)
	ps, err = p.Partitions(ctxT(t, 10*time.Second), topic)
	require.NoError(t, err)
	require.Equal(t, allParts(1, 4, 2, 4), ps)

	w.unregister(2)
	// Sends stop going to broker 2 once the view has dropped it.
	var n2 int
	require.Eventually(t, func() bool {
		c := l.count(2)
		if c == n2 {
			return true
		}
		n2 = c
		return false
	}, 10*time.Second, 300*time.Millisecond)
	acks, _ := l.snapshot()
	verifyOn(t, b2, 2, acks)
	require.NoError(t, b2.b.Close())
	n1 := l.count(1)
	require.Eventually(t, func() bool { return l.count(1) > n1+50 }, 10*time.Second, 10*time.Millisecond)
	l.halt()

	acks, errs := l.snapshot()
	require.Empty(t, errs)
	require.Zero(t, l.count(3), "a slave was written to")
	require.Equal(t, n2, l.count(2))
	verifyOn(t, b1, 1, acks)
}

// TestClusterProducerRetriesOnDeadBroker kills broker 2 mid-stream while
// its znodes stay (as before its session expires): every send still
// succeeds within the send timeout, retried on broker 1. Without retries
// a send to the dead broker fails.
func TestClusterProducerRetriesOnDeadBroker(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/cp-kill")
	b1, b2 := startBroker(t), startBroker(t)
	w := newZKWriter(t, zkAddr, root)
	w.register(1, "m", b1.addr, 4)
	w.register(2, "m", b2.addr, 4)
	sendTimeout := 3 * time.Second
	p := startClusterProducer(t, zkAddr, root, withSendTimeout(sendTimeout))
	noRetry := startClusterProducer(t, zkAddr, root, withRetryOnFailure(false), withSelector(selector.Fixed(4)))

	l := startLoad(t, p, 4)
	require.Eventually(t, func() bool { return l.count(2) > 50 && l.count(1) > 50 }, 10*time.Second, 10*time.Millisecond)
	r, err := noRetry.Send(ctxT(t, 5*time.Second), &message.Message{Topic: topic, Body: []byte("fixed")})
	require.NoError(t, err)
	require.Equal(t, 2, r.BrokerID)

	killed := time.Now()
	require.NoError(t, b2.b.Close())
	n1 := l.count(1)
	require.Eventually(t, func() bool { return l.count(1) > n1+200 }, 10*time.Second, 10*time.Millisecond)
	l.halt()
	acks, errs := l.snapshot()
	require.Empty(t, errs, "sends failed although broker 1 was up")
	require.Less(t, time.Since(killed), 10*time.Second)
	verifyOn(t, b1, 1, acks)

	start := time.Now()
	_, err = noRetry.Send(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Body: []byte("fixed")})
	require.Error(t, err)
	require.Less(t, time.Since(start), sendTimeout+time.Second)
}
