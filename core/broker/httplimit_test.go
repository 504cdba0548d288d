package broker

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

// TestHTTPFloodLocal: with http_max_connections = 16, 200 bare connects
// held open do not keep /healthz, /readyz or /metrics from answering, and
// /metrics and stats count the evictions.
func TestHTTPFloodLocal(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) {
		c.HTTPMaxConnections = conf.MinHTTPMaxConnections
		c.HTTPReadHeaderTimeout = 60000 // only the cap closes the silent connections
	})
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.DialTimeout("tcp", b.HTTPAddr(), 5*time.Second)
		require.NoError(t, err)
		held = append(held, c)
	}
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		code, body := h.get(p)
		require.Equal(t, 200, code, "%s: %s", p, body)
	}
	_, scrape := h.get("/metrics")
	require.GreaterOrEqual(t, metricValue(t, scrape, "metaq_http_evicted_total"), 180.0)
	require.LessOrEqual(t, metricValue(t, scrape, "metaq_http_connections"), 16.0)
	require.Equal(t, 0.0, metricValue(t, scrape, "metaq_http_refused_total"))

	c := dialAuth(t, b.Addr(), nil)
	code, body := c.stats("")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "http_evicted ")
	require.True(t, strings.Contains(body, "http_connections "), body)
}

// TestHTTPTimeoutsFromConfig: http_read_header_timeout closes a connection
// that sends nothing, http_idle_timeout an idle keep-alive one.
func TestHTTPTimeoutsFromConfig(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) {
		c.HTTPReadHeaderTimeout = 300
		c.HTTPIdleTimeout = 300
	})
	closedWithin := func(c net.Conn, r *bufio.Reader) time.Duration {
		t.Helper()
		start := time.Now()
		c.SetReadDeadline(start.Add(10 * time.Second))
		_, err := r.ReadByte()
		require.ErrorIs(t, err, io.EOF, "closed by the server, not by the test's deadline")
		return time.Since(start)
	}
	silent, err := net.DialTimeout("tcp", b.HTTPAddr(), 5*time.Second)
	require.NoError(t, err)
	defer silent.Close()
	took := closedWithin(silent, bufio.NewReader(silent))
	require.GreaterOrEqual(t, took, 250*time.Millisecond)
	t.Logf("silent connection closed after %v", took)

	idle, err := net.DialTimeout("tcp", b.HTTPAddr(), 5*time.Second)
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	r := bufio.NewReader(idle)
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.False(t, resp.Close)
	took = closedWithin(idle, r)
	require.GreaterOrEqual(t, took, 250*time.Millisecond)
	t.Logf("idle keep-alive connection closed after %v", took)
}
