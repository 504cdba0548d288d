package broker

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/stretchr/testify/require"
)

// startBroker runs an in-process broker on a free 127.0.0.1 port.
func startBroker(tb testing.TB, threshold int) *Broker {
	tb.Helper()
	cfg := conf.Default()
	cfg.Port = 0
	cfg.DataDir = tb.TempDir()
	cfg.NumPartitions = 2
	cfg.UnflushThreshold = threshold
	cfg.Topics = []conf.Topic{{Name: "t"}}
	b, err := New(cfg, Options{Logf: func(string, ...any) {}})
	require.NoError(tb, err)
	require.NoError(tb, b.Start())
	tb.Cleanup(func() { b.Close() })
	return b
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
				require.Eventually(t, func() bool { return b.topics["t"].parts[1].MaxOffset() == 50 }, 5*time.Second, time.Millisecond)
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
