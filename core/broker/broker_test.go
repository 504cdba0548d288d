package broker

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/stretchr/testify/require"
)

// startBroker runs an in-process broker on a free 127.0.0.1 port; each of
// with may change the configuration first.
func startBroker(tb testing.TB, threshold int, with ...func(*conf.Config)) *Broker {
	tb.Helper()
	return startBrokerWith(tb, func(c *conf.Config) {
		c.UnflushThreshold = threshold
		for _, f := range with {
			f(c)
		}
	})
}

// startBrokerWith runs an in-process broker on a free 127.0.0.1 port, with
// topic "t" of 2 partitions and the config changes edit makes
// (fixture_test.go).
func startBrokerWith(tb testing.TB, edit func(*conf.Config)) *Broker {
	tb.Helper()
	return fixture{mods: []func(*conf.Config){edit}}.start(tb)
}

type rawClient struct {
	nc  net.Conn
	bw  *bufio.Writer
	dec *protocol.Decoder
}

func dialRaw(tb testing.TB, addr string) *rawClient {
	tb.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(tb, err)
	tb.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(2 * time.Minute))
	return &rawClient{nc: nc, bw: bufio.NewWriterSize(nc, 256<<10), dec: protocol.NewDecoder(nc, protocol.Limits{MaxBody: 8 << 20})}
}

func TestPutGetRoundTrip(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int{0, 1} {
		t.Run("threshold="+strconv.Itoa(threshold), func(t *testing.T) {
			b := startBroker(t, threshold)
			c := dialRaw(t, b.Addr())
			data := []byte("hello")
			c.bw.Write(protocol.AppendPut(nil, "t", 1, 0, int64(message.Checksum(data)), 7, data))
			c.bw.Write(protocol.AppendPut(nil, "t", 1, 0, -1, 8, data))
			require.NoError(t, c.bw.Flush())
			offsets := map[int32]int64{}
			var req protocol.Request
			for i := 0; i < 2; i++ {
				require.NoError(t, c.dec.Decode(&req))
				require.Equal(t, protocol.StatusOK, req.Code, string(req.Body))
				_, p, off, _, err := protocol.ParsePutResult(req.Body)
				require.NoError(t, err)
				require.Equal(t, int32(1), p)
				offsets[req.Opaque] = off
			}
			require.Len(t, offsets, 2)
			if threshold > 0 { // readable after the flush
				require.Eventually(t, func() bool { return b.topics.Get("t").Parts[1].MaxOffset() == 50 }, 5*time.Second, time.Millisecond)
			}
			c.bw.Write(protocol.AppendGet(nil, "t", "g", 1, 0, 1024, 9))
			require.NoError(t, c.bw.Flush())
			require.NoError(t, c.dec.Decode(&req))
			require.Equal(t, protocol.OpValue, req.Op)
			it := message.NewIterator(req.Body, 0, 0)
			n := 0
			for it.Next() {
				require.Equal(t, "hello", string(it.Record().Data))
				n++
			}
			require.NoError(t, it.Err())
			require.Equal(t, 2, n)
		})
	}
}

// benchPut measures pipelined puts through the broker from one connection.
func benchPut(b *testing.B, threshold, size, batch int) {
	br := startBroker(b, threshold)
	c := dialRaw(b, br.Addr())
	data := bytes.Repeat([]byte("x"), size)
	var frame []byte
	if batch == 1 {
		frame = protocol.AppendPut(nil, "t", 0, 0, int64(message.Checksum(data)), 1, data)
	} else {
		var body []byte
		for i := 0; i < batch; i++ {
			body = protocol.AppendMPutEntry(body, 0, int32(message.Checksum(data)), data)
		}
		frame = protocol.AppendMPutHeader(nil, "t", 0, len(body), batch, 1)
		frame = append(frame, body...)
	}
	const window = 512
	sem := make(chan struct{}, window)
	var wg sync.WaitGroup
	wg.Add(1)
	errs := make(chan error, 1)
	go func() {
		defer wg.Done()
		var req protocol.Request
		for i := 0; i < b.N; i++ {
			if err := c.dec.Decode(&req); err != nil || req.Code != protocol.StatusOK {
				errs <- err
				return
			}
			<-sem
		}
	}()
	b.ReportAllocs()
	b.SetBytes(int64(size * batch))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sem <- struct{}{}
		c.bw.Write(frame)
		if len(sem) == cap(sem) || i == b.N-1 {
			c.bw.Flush()
		} else if c.bw.Buffered() > 64<<10 {
			c.bw.Flush()
		}
	}
	c.bw.Flush()
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkBrokerPut(b *testing.B) {
	b.Run("groupcommit/size=1024/batch=1", func(b *testing.B) { benchPut(b, 0, 1024, 1) })
	b.Run("threshold/size=100/batch=1", func(b *testing.B) { benchPut(b, 100000, 100, 1) })
	b.Run("threshold/size=100/batch=256", func(b *testing.B) { benchPut(b, 100000, 100, 256) })
}

// TestOpenTopicOffLock: while an auto-created topic's partitions are being
// opened (held up by the open hook), puts and gets of an already open
// topic complete, and a second put to the opening topic waits for the same
// open instead of opening it again.
func TestOpenTopicOffLock(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	release := make(chan struct{})
	var opens sync.Map // topic -> *atomic count
	cfg := testConfig()
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	cfg.NumPartitions = 1
	cfg.AutoCreateTopics = true
	cfg.Topics = []conf.Topic{{Name: "t"}}
	b, err := newBroker(cfg, Options{Logf: t.Logf}, knobs{openHook: func(name string) {
		n, _ := opens.LoadOrStore(name, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if name == "slow" {
			close(entered)
			<-release
		}
	}})
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })

	put := func(c *rawClient, topic string, opaque int32) protocol.Request {
		data := []byte("m-" + topic)
		_, err := c.bw.Write(protocol.AppendPut(nil, topic, 0, 0, -1, opaque, data))
		require.NoError(t, err)
		require.NoError(t, c.bw.Flush())
		var r protocol.Request
		require.NoError(t, c.dec.Decode(&r))
		r.Body = append([]byte(nil), r.Body...)
		return r
	}
	slowReplies := make(chan protocol.Request, 2)
	for i := range 2 {
		c := dialRaw(t, b.Addr())
		go func() {
			var r protocol.Request
			_, err := c.bw.Write(protocol.AppendPut(nil, "slow", 0, 0, -1, int32(i), []byte("m-slow")))
			if err == nil {
				err = c.bw.Flush()
			}
			if err == nil {
				err = c.dec.Decode(&r)
			}
			if err != nil {
				r.Body = []byte(err.Error())
			}
			slowReplies <- r
		}()
		if i == 0 {
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the open of topic slow did not start")
			}
		}
	}

	// Topic "slow" is opening (and b.mu is free): "t" works meanwhile.
	c := dialRaw(t, b.Addr())
	c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	for i := range 3 {
		r := put(c, "t", int32(100+i))
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	}
	_, err = c.bw.Write(protocol.AppendGet(nil, "t", "g", 0, 0, 1024, 200))
	require.NoError(t, err)
	require.NoError(t, c.bw.Flush())
	var r protocol.Request
	require.NoError(t, c.dec.Decode(&r))
	require.Equal(t, protocol.OpValue, r.Op)
	n := 0
	for it := message.NewIterator(r.Body, 0, 0); it.Next(); n++ {
	}
	require.Equal(t, 3, n)
	select {
	case r := <-slowReplies:
		t.Fatalf("a put to the opening topic completed before its open: %d %s", r.Code, r.Body)
	default:
	}

	// Both puts to "slow" have reached the broker (and wait for its open).
	require.Eventually(t, func() bool { return b.stats.cmdPut.Load() == 5 }, 30*time.Second, time.Millisecond)
	close(release)
	for range 2 {
		select {
		case r := <-slowReplies:
			require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
		case <-time.After(30 * time.Second):
			t.Fatal("puts to topic slow did not complete after its open")
		}
	}
	n1, _ := opens.Load("slow")
	require.Equal(t, int32(1), n1.(*atomic.Int32).Load(), "two concurrent puts opened the topic twice")
	slow := b.topics.Get("slow")
	require.Equal(t, int64(2*(message.HeaderSize+len("m-slow"))), slow.Parts[0].MaxOffset())
}
