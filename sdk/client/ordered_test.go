package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

func newOrdered(t *testing.T, zkAddr, root, base string, opts ...prodOption) *orderedProducer {
	t.Helper()
	all := []prodOption{quiet, withZKRoot(root), withZKSessionTimeout(4 * time.Second),
		withDialTimeout(time.Second), withLocalStore(base)}
	p, err := openOrderedProducer(ctxT(t, 20*time.Second), zkAddr, append(all, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// keySelector maps a message's key to a layout index.
type keySelector map[string]int

func (s keySelector) Select(_ context.Context, _ string, ps []message.Partition, m *message.Message) (int, error) {
	i, ok := s[string(m.Key)]
	if !ok || i >= len(ps) {
		return 0, fmt.Errorf("no partition for key %q", m.Key)
	}
	return i, nil
}

func orderedSend(t *testing.T, p *orderedProducer, key, body string) SendResult {
	t.Helper()
	r, err := p.Send(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Key: []byte(key), Body: []byte(body)})
	require.NoError(t, err, body)
	return r
}

// readPartition reads partition part of the broker at addr from the start
// until the message whose body is last, and returns the bodies in order.
func readPartition(t *testing.T, addr string, part int32, last string) []string {
	t.Helper()
	c := newConsumer(t, addr, withPartitions(part))
	var got []string
	for m, err := range c.Messages(ctxT(t, 30*time.Second)) {
		require.NoError(t, err, "read so far: %q", got)
		got = append(got, string(m.Body))
		if string(m.Body) == last {
			break
		}
	}
	return got
}

func seqBodies(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// TestOrderedProducerBrokerDownAndBack sends key "a" to partition 2-1 and
// key "b" to 1-0. Broker 2 stops and leaves ZooKeeper: "a" messages go to
// the local store (StoredLocally, in order) while "b" ones still reach
// broker 1. Broker 2 comes back (same data, new port): the backlog drains
// while more "a" messages are sent, and partition 1 of broker 2 then holds
// exactly a-0..a-44 and "end", in order, with nothing lost or repeated.
func TestOrderedProducerBrokerDownAndBack(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/op-down")
	b1, b2 := startBroker(t), startBroker(t)
	w := newZKWriter(t, zkAddr, root)
	w.register(1, "m", b1.addr, 4)
	w.register(2, "m", b2.addr, 4)
	base := t.TempDir()
	p := newOrdered(t, zkAddr, root, base, withSelector(keySelector{"a": 5, "b": 0}),
		withPartitionLayout(topic, map[int]int{1: 4, 2: 4}))

	for i := range 5 {
		r := orderedSend(t, p, "a", fmt.Sprintf("a-%d", i))
		require.False(t, r.StoredLocally())
		require.Equal(t, 2, r.BrokerID)
		require.EqualValues(t, 1, r.Partition)
		require.GreaterOrEqual(t, r.Offset, int64(0))
	}

	require.NoError(t, b2.b.Close())
	w.unregister(2)
	for i := 5; i < 25; i++ {
		start := time.Now()
		r := orderedSend(t, p, "a", fmt.Sprintf("a-%d", i))
		require.True(t, r.StoredLocally(), "a-%d", i)
		require.Equal(t, SendResult{Topic: topic, Partition: 1, BrokerID: 2, Offset: -1, ID: -1}, r)
		require.Less(t, time.Since(start), 5*time.Second)
		rb := orderedSend(t, p, "b", fmt.Sprintf("b-%d", i))
		require.False(t, rb.StoredLocally(), "broker 1 is up")
		require.Equal(t, 1, rb.BrokerID)
	}
	require.Equal(t, 20, p.Backlog(topic))
	fi, err := os.Stat(filepath.Join(base, "t1@2-1", recoverJournalName))
	require.NoError(t, err)
	require.Positive(t, fi.Size())

	b2b := runBroker(t, b2.cfg) // same data directory, new port
	w.register(2, "m", b2b.addr, 4)
	// Once the drain has begun, a new message waits for a backlog of at
	// most 20 to finish (rechecking every 100 ms, 3 times) or joins it.
	require.Eventually(t, func() bool { return p.Backlog(topic) < 20 }, 30*time.Second, time.Millisecond)
	stored := 0
	for i := 25; i < 45; i++ {
		if orderedSend(t, p, "a", fmt.Sprintf("a-%d", i)).StoredLocally() {
			stored++
		}
	}
	t.Logf("%d of the messages sent while the backlog drained joined it", stored)
	require.Eventually(t, func() bool { return p.Backlog(topic) == 0 }, 30*time.Second, 20*time.Millisecond)
	r := orderedSend(t, p, "a", "end")
	require.False(t, r.StoredLocally())

	want := append(seqBodies("a", 0, 45), "end")
	require.Equal(t, want, readPartition(t, b2b.addr, 1, "end"))
	require.Equal(t, append(seqBodies("b", 5, 25), "b-end"), func() []string {
		orderedSend(t, p, "b", "b-end")
		return readPartition(t, b1.addr, 0, "b-end")
	}())
}

// TestOrderedProducerRestartDrainsBacklog stores messages while no broker
// is registered, closes the producer (the backlog stays on disk), and a
// new producer on the same directory sends them, in order, once the broker
// registers, before anything newer.
func TestOrderedProducerRestartDrainsBacklog(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/op-restart")
	w := newZKWriter(t, zkAddr, root)
	base := t.TempDir()
	opts := []prodOption{withSelector(selector.Fixed(2)), withPartitionLayout(topic, map[int]int{1: 4})}

	p1 := newOrdered(t, zkAddr, root, base, opts...)
	for i := range 10 {
		r := orderedSend(t, p1, "", fmt.Sprintf("m-%d", i))
		require.True(t, r.StoredLocally())
		require.EqualValues(t, 2, r.Partition)
	}
	require.Equal(t, 10, p1.Backlog(topic))
	// A second producer on the same directory is refused while p1 is open.
	_, err := openOrderedProducer(ctxT(t, 10*time.Second), zkAddr, quiet, withZKRoot(root),
		withLocalStore(base))
	require.Error(t, err)
	require.NoError(t, p1.Close(ctxT(t, 10*time.Second)))

	p2 := newOrdered(t, zkAddr, root, base, opts...)
	require.Equal(t, 10, p2.Backlog(topic), "backlog found on restart")
	r := orderedSend(t, p2, "", "m-10")
	require.True(t, r.StoredLocally(), "queued behind the backlog")

	b := startBroker(t)
	w.register(1, "m", b.addr, 4)
	require.Eventually(t, func() bool { return p2.Backlog(topic) == 0 }, 30*time.Second, 20*time.Millisecond)
	require.False(t, orderedSend(t, p2, "", "end").StoredLocally())
	require.Equal(t, append(seqBodies("m", 0, 11), "end"), readPartition(t, b.addr, 2, "end"))
}

// TestOrderedProducerTornStoreTail appends half a record to a store, as a
// crash mid-append would: the next producer cuts it and sends the whole
// records only.
func TestOrderedProducerTornStoreTail(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/op-torn")
	w := newZKWriter(t, zkAddr, root)
	base := t.TempDir()
	opts := []prodOption{withSelector(selector.Fixed(0)), withPartitionLayout(topic, map[int]int{1: 4})}

	p1 := newOrdered(t, zkAddr, root, base, opts...)
	for i := range 3 {
		require.True(t, orderedSend(t, p1, "", fmt.Sprintf("m-%d", i)).StoredLocally())
	}
	require.NoError(t, p1.Close(ctxT(t, 10*time.Second)))

	path := filepath.Join(base, "t1@1-0", recoverJournalName)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	whole := fi.Size()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	// A header announcing 100 bytes, and 10 of them.
	_, err = f.Write([]byte{0, 0, 0, 100, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	require.NoError(t, err)
	require.NoError(t, f.Close())

	p2 := newOrdered(t, zkAddr, root, base, opts...)
	require.Equal(t, 3, p2.Backlog(topic))
	fi, err = os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, whole, fi.Size(), "torn tail cut")

	b := startBroker(t)
	w.register(1, "m", b.addr, 4)
	require.Eventually(t, func() bool { return p2.Backlog(topic) == 0 }, 30*time.Second, 20*time.Millisecond)
	require.False(t, orderedSend(t, p2, "", "end").StoredLocally())
	require.Equal(t, []string{"m-0", "m-1", "m-2", "end"}, readPartition(t, b.addr, 0, "end"))
}

// gateBroker is a fake broker that stores puts in memory, or refuses them
// with the status code in code (0: accept).
type gateBroker struct {
	ln   net.Listener
	code atomic.Int32
	mu   sync.Mutex
	got  []string
	wg   sync.WaitGroup
}

func startGate(t *testing.T) *gateBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gateBroker{ln: ln}
	var conns sync.Map
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				defer c.Close()
				g.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
		g.wg.Wait()
	})
	return g
}

func (g *gateBroker) serve(c net.Conn) {
	dec := protocol.NewDecoder(c, protocol.Limits{MaxBody: 8 << 20})
	var r protocol.Request
	for {
		if err := dec.Decode(&r); err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) && !pe.Fatal {
				_, _ = c.Write(protocol.AppendResult(nil, pe.Code, pe.Msg, pe.Opaque))
				continue
			}
			return // EOF, closed, or a fatal protocol error
		}
		if r.Op != protocol.OpPut {
			_, _ = c.Write(protocol.AppendResult(nil, protocol.StatusBadRequest, "unsupported", r.Opaque))
			continue
		}
		if code := int(g.code.Load()); code != 0 {
			_, _ = c.Write(protocol.AppendResult(nil, code, "refused", r.Opaque))
			continue
		}
		_, _, body, _ := message.SplitData(r.Flag, r.Body)
		g.mu.Lock()
		g.got = append(g.got, string(body))
		n := int64(len(g.got))
		g.mu.Unlock()
		res := protocol.AppendPutResultBody(nil, n, r.Partition, n*100)
		_, _ = c.Write(protocol.AppendResult(nil, protocol.StatusOK, string(res), r.Opaque))
	}
}

func (g *gateBroker) seqBodies() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.got...)
}

// TestOrderedProducerForbiddenAndSaveAll: a 403 (partition closed) sends
// the message to the local store and it is resent once the broker accepts
// again; a 500 is an error unless withSaveToLocalWhenFailed is on.
func TestOrderedProducerForbiddenAndSaveAll(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := zkRoot("/op-403")
	g := startGate(t)
	w := newZKWriter(t, zkAddr, root)
	w.register(1, "m", g.ln.Addr().String(), 1)
	opts := []prodOption{withSelector(selector.Fixed(0)), withPartitionLayout(topic, map[int]int{1: 1})}
	p := newOrdered(t, zkAddr, root, t.TempDir(), opts...)

	require.False(t, orderedSend(t, p, "", "m-0").StoredLocally())
	g.code.Store(protocol.StatusForbidden)
	for i := 1; i < 4; i++ {
		require.True(t, orderedSend(t, p, "", fmt.Sprintf("m-%d", i)).StoredLocally())
	}
	g.code.Store(0)
	// Right away: either queued behind the backlog or sent after it drained.
	orderedSend(t, p, "", "m-4")
	require.Eventually(t, func() bool { return p.Backlog(topic) == 0 }, 20*time.Second, 20*time.Millisecond)
	require.False(t, orderedSend(t, p, "", "m-5").StoredLocally())
	require.Equal(t, seqBodies("m", 0, 6), g.seqBodies())

	g.code.Store(protocol.StatusInternalError)
	_, err := p.Send(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Body: []byte("x")})
	require.ErrorIs(t, err, ErrInternal)
	require.Zero(t, p.Backlog(topic))

	all := newOrdered(t, zkAddr, root, t.TempDir(), append(opts, withSaveToLocalWhenFailed(true))...)
	require.True(t, orderedSend(t, all, "", "s-0").StoredLocally())
	require.True(t, orderedSend(t, all, "", "s-1").StoredLocally())
	g.code.Store(0)
	require.Eventually(t, func() bool { return all.Backlog(topic) == 0 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, append(seqBodies("m", 0, 6), "s-0", "s-1"), g.seqBodies())
}
