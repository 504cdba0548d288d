package broker

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// waitClosed reads until the broker closes nc, returning what it sent and
// how long that took. A reset counts as closed: a client that writes
// after the broker closed (TestRequestTimeout's slow body) gets one.
func waitClosed(tb testing.TB, nc net.Conn, within time.Duration) (string, time.Duration) {
	tb.Helper()
	start := time.Now()
	nc.SetReadDeadline(start.Add(within))
	b, err := io.ReadAll(nc)
	if errors.Is(err, syscall.ECONNRESET) {
		err = nil
	}
	require.NoError(tb, err, "the broker did not close the connection within %v", within)
	return string(b), time.Since(start)
}

func TestMaxConnections(t *testing.T) {
	t.Parallel()
	b := startBrokerWith(t, func(c *conf.Config) { c.MaxConnections = 3 })
	var held []*rawClient
	for i := 0; i < 3; i++ {
		c := dialRaw(t, b.Addr())
		require.Equal(t, protocol.StatusOK, c.roundTrip(t, []byte("version 1\r\n")).Code)
		held = append(held, c)
	}
	over, err := net.Dial("tcp", b.Addr())
	require.NoError(t, err)
	defer over.Close()
	got, _ := waitClosed(t, over, 5*time.Second)
	require.Contains(t, got, "result 503 ")
	require.Contains(t, got, "max_connections 3")
	// The connections under the limit keep working, and one freed slot is
	// usable again.
	require.Equal(t, protocol.StatusOK, held[0].roundTrip(t, []byte("version 2\r\n")).Code)
	held[2].nc.Close()
	require.Eventually(t, func() bool { return b.stats.connections.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
	c := dialRaw(t, b.Addr())
	require.Equal(t, protocol.StatusOK, c.roundTrip(t, []byte("version 3\r\n")).Code)
	require.Equal(t, int64(1), b.stats.refusedConns.Load())
}

func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	b := startBrokerWith(t, func(c *conf.Config) { c.RequestTimeout = 300; c.IdleTimeout = 0 })
	// A half-sent header line.
	nc, err := net.Dial("tcp", b.Addr())
	require.NoError(t, err)
	defer nc.Close()
	_, err = nc.Write([]byte("put t 0 5 0"))
	require.NoError(t, err)
	got, took := waitClosed(t, nc, 10*time.Second)
	require.Contains(t, got, "result 504 ")
	require.Contains(t, got, "request_timeout")
	require.GreaterOrEqual(t, took, 250*time.Millisecond)

	// A body that never completes, sent slowly so each read alone is quick.
	nc2, err := net.Dial("tcp", b.Addr())
	require.NoError(t, err)
	defer nc2.Close()
	_, err = nc2.Write([]byte("put t 0 100 0 1\r\nab"))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20; i++ {
			time.Sleep(50 * time.Millisecond)
			if _, err := nc2.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	_, took = waitClosed(t, nc2, 10*time.Second)
	require.Less(t, took, 5*time.Second)
	<-done
	require.GreaterOrEqual(t, b.stats.timedOutConns.Load(), int64(2))
}

// Not parallel: it times the idle timeout (a stall of the package's other
// tests' making longer than it closes the connection).
func TestIdleTimeout(t *testing.T) {
	// 1 s: requests 150 ms apart stay well within it on a loaded machine
	// (at 400 ms a stalled sleep or reply let it close the connection).
	b := startBrokerWith(t, func(c *conf.Config) { c.IdleTimeout = 1000 })
	c := dialRaw(t, b.Addr())
	// Requests more often than the idle timeout keep the connection, over
	// three idle timeouts.
	start := time.Now()
	for i := 0; i < 20; i++ {
		require.Equal(t, protocol.StatusOK, c.roundTrip(t, []byte("version 1\r\n")).Code)
		time.Sleep(150 * time.Millisecond)
	}
	require.Greater(t, time.Since(start), 3*time.Second, "the requests span three idle timeouts")
	got, took := waitClosed(t, c.nc, 10*time.Second)
	require.Empty(t, got)
	require.GreaterOrEqual(t, took, 200*time.Millisecond)
}

func TestAcceptFlags(t *testing.T) {
	t.Parallel()
	no := false
	b := startBrokerWith(t, func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "t"}, {Name: "nopub", AcceptPublish: &no}, {Name: "nosub", AcceptSubscribe: &no}}
	})
	c := dialRaw(t, b.Addr())
	put := func(topic string) protocol.Request {
		return c.roundTrip(t, protocol.AppendPut(nil, topic, 0, 0, protocol.NoChecksum, 1, []byte("x")))
	}
	r := put("nopub")
	require.Equal(t, protocol.StatusForbidden, r.Code)
	require.Contains(t, string(r.Body), "accept_publish = false")
	require.Equal(t, protocol.StatusOK, put("nosub").Code)
	for _, frame := range []string{"get nosub g 0 0 1024 1\r\n", "offset nosub g 0 0 1\r\n"} {
		r = c.roundTrip(t, []byte(frame))
		require.Equal(t, protocol.StatusForbidden, r.Code, frame)
		require.Contains(t, string(r.Body), "accept_subscribe = false")
	}
	require.Equal(t, protocol.StatusNotFound, c.roundTrip(t, []byte("get nopub g 0 0 1024 1\r\n")).Code)
}

// TestBufferedBudget: connections that pipeline without reading their
// replies stop being read once the budget is spent, while a well-behaved
// client keeps its round trips.
func TestBufferedBudget(t *testing.T) {
	t.Parallel()
	const limit = 2 << 20
	b := startBrokerWith(t, func(c *conf.Config) { c.MaxBufferedBytes = limit })
	frame := []byte(strings.Repeat("stats config\r\n", 256))
	for i := 0; i < 8; i++ {
		nc, err := net.Dial("tcp", b.Addr())
		require.NoError(t, err)
		defer nc.Close()
		nc.(*net.TCPConn).SetReadBuffer(4096)
		go func() {
			nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
			for j := 0; j < 2000; j++ {
				if _, err := nc.Write(frame); err != nil {
					return
				}
			}
		}()
	}
	good := dialRaw(t, b.Addr())
	deadline := time.Now().Add(2 * time.Second)
	peak := int64(0)
	for time.Now().Before(deadline) {
		r := good.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, protocol.NoChecksum, 1, []byte("x")))
		require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
		peak = max(peak, b.budget.Used())
	}
	t.Logf("peak buffered %d bytes (limit %d)", peak, limit)
	// Replies are queued before the read loop checks the budget, so one
	// request's worth per connection may overshoot.
	require.Less(t, peak, int64(limit+9*64<<10))
}
