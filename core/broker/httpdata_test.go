package broker

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// rawHTTP sends a request as a MetaQ HTTP client would: the body as is,
// no JSON content type. It returns the status, Content-Type and body.
func (h *httpClient) raw(method, path string, body []byte) (int, string, []byte) {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	require.NoError(h.t, err)
	if h.user != "" {
		req.SetBasicAuth(h.user, h.pass)
	}
	resp, err := h.c.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// TestHTTPMetaQEndpoints drives MetaQ's jettyBroker interface (reference
// §14): /put, /get and /offset with their query parameters, the meta code
// as the HTTP status, the bodies as the wire's.
func TestHTTPMetaQEndpoints(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	h := newHTTPClient(t, b.HTTPAddr(), nil)

	// put: the body is the message data; the reply is the put's result.
	var offs []int64
	for i := range 3 {
		data := []byte("hello " + strconv.Itoa(i))
		code, ct, body := h.raw("POST", "/put?topic=t&partition=1&flag=0&length="+strconv.Itoa(len(data)), data)
		require.Equal(t, 200, code, "%s", body)
		require.Contains(t, ct, "text/plain")
		f := strings.Fields(string(body)) // msgId partition offset
		require.Len(t, f, 3, "%s", body)
		require.Equal(t, "1", f[1])
		off, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		offs = append(offs, off)
	}
	require.Equal(t, int64(0), offs[0])
	// With a checksum: a wrong one is refused by the broker (its code).
	data := []byte("checked")
	code, _, body := h.raw("POST", "/put?topic=t&partition=1&flag=0&length=7&checksum="+strconv.Itoa(int(message.Checksum(data))), data)
	require.Equal(t, 200, code, "%s", body)
	code, _, body = h.raw("POST", "/put?topic=t&partition=1&flag=0&length=7&checksum=1", data)
	require.NotEqual(t, 200, code, "%s", body)

	// get: the records as the wire's value reply.
	code, ct, body := h.raw("GET", "/get?topic=t&partition=1&group=g&offset=0&maxsize=65536", nil)
	require.Equal(t, 200, code, "%s", body)
	require.Equal(t, "application/octet-stream", ct)
	it := message.NewIterator(body, 0, 0)
	var got []string
	for it.Next() {
		m, err := it.Record().Message("t", 1)
		require.NoError(t, err)
		got = append(got, string(m.Body))
	}
	require.NoError(t, it.Err())
	require.Equal(t, []string{"hello 0", "hello 1", "hello 2", "checked"}, got)
	// Nothing at the end yet: the broker's 404, its text.
	code, ct, body = h.raw("GET", "/get?topic=t&partition=1&group=g&offset="+strconv.Itoa(len(body))+"&maxsize=1024", nil)
	require.Equal(t, 404, code, "%s", body)
	require.Contains(t, ct, "text/plain")
	require.Contains(t, string(body), "Could not find message at position")

	// offset: the broker's answer for a time offset or position.
	code, _, body = h.raw("GET", "/offset?topic=t&partition=1&group=g&offset=0", nil)
	require.Equal(t, 200, code, "%s", body)

	// Bad parameters: 400 with the reason; a name that would break the
	// request line never reaches the broker.
	for _, q := range []string{
		"/put?topic=t&partition=0&flag=0",                      // no length
		"/put?topic=t%20x&partition=0&flag=0&length=1",         // space
		"/put?topic=t%0d%0aquit&partition=0&flag=0&length=1",   // CRLF
		"/get?topic=t&partition=x&group=g&offset=0&maxsize=10", // not a number
		"/get?topic=t&partition=0&offset=0&maxsize=10",         // no group
		"/offset?topic=t&partition=0&group=g",                  // no offset
	} {
		code, _, body = h.raw("POST", q, []byte("x"))
		require.Equal(t, 400, code, "%s: %s", q, body)
	}
	// A body shorter than length.
	code, _, body = h.raw("POST", "/put?topic=t&partition=0&flag=0&length=10", []byte("short"))
	require.Equal(t, 400, code, "%s", body)
	// A partition out of range: the broker's refusal, its code.
	code, _, body = h.raw("POST", "/put?topic=t&partition=9&flag=0&length=1", []byte("x"))
	require.Equal(t, 500, code, "%s", body)
	// The broker still serves the wire protocol and HTTP.
	c := dialAuth(t, b.Addr(), nil)
	code, rb := c.put("t")
	require.Equal(t, 200, code, rb)

	// Per endpoint: requests, errors, durations; promtool accepts them.
	code, scrape := h.get("/metrics")
	require.Equal(t, 200, code, "%s", scrape)
	require.Equal(t, 10.0, metricValue(t, scrape, `metaq_http_data_requests_total{endpoint="put"}`))
	require.Equal(t, 6.0, metricValue(t, scrape, `metaq_http_data_errors_total{endpoint="put"}`))
	require.Equal(t, 4.0, metricValue(t, scrape, `metaq_http_data_requests_total{endpoint="get"}`))
	require.Equal(t, 2.0, metricValue(t, scrape, `metaq_http_data_request_duration_seconds_count{endpoint="offset"}`))
	require.Equal(t, 0.0, metricValue(t, scrape, `metaq_http_data_requests_total{endpoint="events"}`))
	require.Empty(t, testsvc.PromtoolCheckMetrics(t, scrape), "promtool check metrics")
}

// produceJSON posts a produce body and decodes its reply.
func produceJSON(t *testing.T, h *httpClient, path string, body any) (int, httpapi.ProduceReply, []byte) {
	t.Helper()
	js, err := json.Marshal(body)
	require.NoError(t, err)
	code, rb := h.do("POST", path, bytes.NewReader(js))
	var rep httpapi.ProduceReply
	if code < 300 || bytes.Contains(rb, []byte(`"offsets"`)) {
		require.NoError(t, json.Unmarshal(rb, &rep), "%s", rb)
	}
	return code, rep, rb
}

// TestHTTPProduceBase64InPlace: values in format binary are decoded
// straight into the mput body; a bad one (of a length base64 allows, the
// first of its partition's run) fails alone and the others are stored
// as given, paddings included.
func TestHTTPProduceBase64InPlace(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	vals := [][]byte{{}, {1}, {1, 2}, {1, 2, 3}, bytes.Repeat([]byte{0xfe}, 1000)}
	recs := []map[string]any{{"value": "!!!!"}}
	for _, v := range vals {
		recs = append(recs, map[string]any{"value": base64.StdEncoding.EncodeToString(v)})
	}
	recs = append(recs, map[string]any{"value": "AA=A"})
	code, rep, rb := produceJSON(t, h, "/api/v1/data/topics/t/partitions/1/records", map[string]any{"format": "binary", "records": recs})
	require.Equal(t, 200, code, "%s", rb)
	require.Len(t, rep.Offsets, len(vals)+2)
	for _, k := range []int{0, len(vals) + 1} {
		require.Equal(t, 400, rep.Offsets[k].ErrorCode, "%s", rb)
		require.Contains(t, rep.Offsets[k].Error, "record "+strconv.Itoa(k)+": value: not base64 (format binary): illegal base64 data at input byte")
	}
	c := dialAuth(t, b.Addr(), nil)
	code, data := c.call(func(d []byte, op int32) []byte { return protocol.AppendGet(d, "t", "g", 1, 0, 65536, op) })
	require.Equal(t, 200, code, data)
	it := message.NewIterator([]byte(data), 0, 0)
	for k, v := range vals {
		require.True(t, it.Next(), "record %d", k)
		require.Equal(t, *rep.Offsets[k+1].Offset, it.Record().Offset)
		require.Equal(t, v, it.Record().Data, "record %d", k)
	}
	require.False(t, it.Next())

	// A record with a bad value and a bad timestamp: the value's error,
	// named first as when the value was decoded before the rest.
	code, rep, rb = produceJSON(t, h, "/api/v1/data/topics/t/partitions/1/records", map[string]any{"format": "binary", "records": []map[string]any{{"value": "!!!!", "timestamp": -1}, {"value": "AAAA", "timestamp": -1}}})
	require.Equal(t, 400, code, "%s", rb)
	require.Contains(t, rep.Offsets[0].Error, "record 0: value: not base64", "%s", rb)
	require.Contains(t, rep.Offsets[1].Error, "record 1: timestamp must be positive", "%s", rb)

	// Every record bad: nothing is sent, the reply is the first's error.
	code, rep, rb = produceJSON(t, h, "/api/v1/data/topics/t/partitions/1/records", map[string]any{"format": "binary", "records": []map[string]any{{"value": "!!!!"}, {"value": "AAAA===="}}})
	require.Equal(t, 400, code, "%s", rb)
	require.Len(t, rep.Offsets, 2)
}

// TestHTTPRecords produces records with keys, headers, tags and
// timestamps in the three formats, reads them back over HTTP and over
// the wire, and long-polls for a record produced while waiting.
func TestHTTPRecords(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	h := newHTTPClient(t, b.HTTPAddr(), nil)

	hv := "v1"
	code, rep, rb := produceJSON(t, h, "/api/v1/data/topics/t/partitions/0/records", map[string]any{
		"records": []map[string]any{
			{"key": "k1", "value": map[string]any{"n": 1}, "headers": []map[string]any{{"key": "h1", "value": hv}, {"key": "h2", "value": nil}}, "tags": []string{"a", "b"}, "timestamp": 1700000000000},
			{"value": []int{1, 2, 3}},
		},
	})
	require.Equal(t, 200, code, "%s", rb)
	require.Len(t, rep.Offsets, 2)
	require.Equal(t, int64(0), *rep.Offsets[0].Offset)
	require.Equal(t, int32(0), *rep.Offsets[0].Partition)
	require.Greater(t, *rep.Offsets[1].Offset, int64(0))
	require.Equal(t, *rep.Offsets[0].MsgID+1, *rep.Offsets[1].MsgID)

	code, rep, rb = produceJSON(t, h, "/api/v1/data/topics/t/partitions/0/records", map[string]any{
		"format": "binary",
		"records": []map[string]any{
			{"key": base64.StdEncoding.EncodeToString([]byte{0, 1}), "value": base64.StdEncoding.EncodeToString([]byte{0xff, 0, 0xfe})},
			{"value": "not base64!"},
		},
	})
	require.Equal(t, 200, code, "%s", rb)
	require.NotNil(t, rep.Offsets[0].Offset)
	require.Equal(t, 400, rep.Offsets[1].ErrorCode, "%s", rb)
	require.Contains(t, rep.Offsets[1].Error, "record 1: value: not base64")

	// Over the wire: the JSON value's text, the key, headers, tags, time.
	c := dialAuth(t, b.Addr(), nil)
	code, data := c.call(func(d []byte, op int32) []byte { return protocol.AppendGet(d, "t", "g", 0, 0, 65536, op) })
	require.Equal(t, 200, code, data)
	it := message.NewIterator([]byte(data), 0, 0)
	require.True(t, it.Next())
	m, err := it.Record().Message("t", 0)
	require.NoError(t, err)
	require.Equal(t, `{"n":1}`, string(m.Body))
	require.Equal(t, `"k1"`, string(m.Key)) // format json: the key's JSON text
	require.Equal(t, []string{"a", "b"}, m.Tags)
	require.Equal(t, int64(1700000000000), m.Timestamp.UnixMilli())
	require.Len(t, m.Headers, 2)
	require.Equal(t, "h1", m.Headers[0].Key)
	require.Nil(t, m.Headers[1].Value)

	// Over HTTP, as text: the third record (binary) is not UTF-8.
	code, rb = h.get("/api/v1/data/topics/t/partitions/0/records?format=text&offset=0")
	require.Equal(t, 406, code, "%s", rb)
	code, rb = h.get("/api/v1/data/topics/t/partitions/0/records?format=binary&offset=0")
	require.Equal(t, 200, code, "%s", rb)
	var rr httpapi.ReadReply
	require.NoError(t, json.Unmarshal(rb, &rr))
	require.Len(t, rr.Records, 3)
	require.Equal(t, `"`+base64.StdEncoding.EncodeToString([]byte{0xff, 0, 0xfe})+`"`, string(rr.Records[2].Value))
	require.Equal(t, int64(1700000000000), rr.Records[0].Timestamp)
	require.Equal(t, "v1", *rr.Records[0].Headers[0].Value)
	end := rr.NextOffset

	// A long poll at the end returns nothing after its timeout...
	start := time.Now()
	code, rb = h.get("/api/v1/data/topics/t/partitions/0/records?timeout_ms=300&offset=" + strconv.FormatInt(end, 10))
	require.Equal(t, 200, code, "%s", rb)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	require.Contains(t, string(rb), `"records":[]`)
	// ... or the record produced while it waits.
	go func() {
		time.Sleep(200 * time.Millisecond)
		produceJSON(t, h, "/api/v1/data/topics/t/partitions/0/records", map[string]any{"format": "text", "records": []map[string]any{{"value": "late"}}})
	}()
	code, rb = h.get("/api/v1/data/topics/t/partitions/0/records?format=text&timeout_ms=10000&offset=" + strconv.FormatInt(end, 10))
	require.Equal(t, 200, code, "%s", rb)
	require.NoError(t, json.Unmarshal(rb, &rr))
	require.Len(t, rr.Records, 1, "%s", rb)
	require.Equal(t, `"late"`, string(rr.Records[0].Value))

	// A key picks the partition as the Go client's default selector.
	code, rep, rb = produceJSON(t, h, "/api/v1/data/topics/t/records", map[string]any{"format": "text", "records": []map[string]any{{"key": "abc", "value": "x"}, {"key": "abc", "value": "y"}}})
	require.Equal(t, 200, code, "%s", rb)
	require.Equal(t, *rep.Offsets[0].Partition, *rep.Offsets[1].Partition)

	// Errors: clear 4xx JSON.
	code, rb = h.do("POST", "/api/v1/data/topics/t/records", strings.NewReader(`{"records":[]}`))
	requireJSONError(t, rb, 400, "at least one record")
	require.Equal(t, 400, code)
	code, rb = h.do("POST", "/api/v1/data/topics/t/records", strings.NewReader(`{"format":"xml","records":[{"value":1}]}`))
	require.Equal(t, 400, code, "%s", rb)
	code, _, rb = produceJSON(t, h, "/api/v1/data/topics/nosuch/records", map[string]any{"records": []map[string]any{{"value": 1}}})
	require.Equal(t, 500, code, "%s", rb)
	require.Contains(t, string(rb), "do not accept topic")
	code, rb = h.do("POST", "/api/v1/data/topics/t/records", strings.NewReader(`{"records":[{"value":"`+strings.Repeat("x", httpapi.MaxBody)+`"}]}`))
	require.Equal(t, 413, code, "%s", rb[:min(len(rb), 200)])
	code, rb = h.get("/api/v1/data/topics/t/partitions/0/records?offset=x")
	require.Equal(t, 400, code, "%s", rb)
}

// sseEvent is one event of a stream.
type sseEvent struct{ id, event, data string }

// readEvents reads n events (comments and retry skipped) from r.
func readEvents(t *testing.T, r *bufio.Reader, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	var ev sseEvent
	for len(out) < n {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.event != "" {
				out = append(out, ev)
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
	return out
}

// TestHTTPEvents follows a partition as Server-Sent Events: records
// already there, one produced while streaming, then a resume from
// Last-Event-ID.
func TestHTTPEvents(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	produce := func(vals ...string) {
		var recs []map[string]any
		for _, v := range vals {
			recs = append(recs, map[string]any{"value": v})
		}
		code, _, rb := produceJSON(t, h, "/api/v1/data/topics/t/partitions/1/records", map[string]any{"format": "text", "records": recs})
		require.Equal(t, 200, code, "%s", rb)
	}
	produce("a", "b")
	open := func(lastID string) (*http.Response, *bufio.Reader) {
		req, err := http.NewRequest("GET", h.base+"/api/v1/data/topics/t/partitions/1/events?format=text", nil)
		require.NoError(t, err)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := (&http.Client{}).Do(req)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		return resp, bufio.NewReader(resp.Body)
	}
	resp, rd := open("")
	evs := readEvents(t, rd, 2)
	produce("c")
	evs = append(evs, readEvents(t, rd, 1)...)
	resp.Body.Close()
	var vals []string
	for _, e := range evs {
		require.Equal(t, "record", e.event)
		var cr httpapi.ConsumedRecord
		require.NoError(t, json.Unmarshal([]byte(e.data), &cr))
		vals = append(vals, string(cr.Value))
	}
	require.Equal(t, []string{`"a"`, `"b"`, `"c"`}, vals)
	// Resume after b: c, then what comes next.
	resp, rd = open(evs[1].id)
	defer resp.Body.Close()
	produce("d")
	evs = readEvents(t, rd, 2)
	require.Contains(t, evs[0].data, `"value":"c"`)
	require.Contains(t, evs[1].data, `"value":"d"`)

	// A stream of a topic that is not there is a JSON error, no stream.
	code, rb := h.get("/api/v1/data/topics/nosuch/partitions/0/events")
	require.GreaterOrEqual(t, code, 400, "%s", rb)
}

// TestHTTPEventsOutliveWriteTimeout: an event stream lasts as long as its
// client stays, past the listener's write timeout (a second here), idle
// stretches kept alive by comments every http_event_keepalive; it still
// delivers what is produced after them, and the listener closing ends it.
func TestHTTPEventsOutliveWriteTimeout(t *testing.T) {
	t.Parallel()
	const writeTimeout = time.Second
	b := startBroker(t, 0, func(c *conf.Config) {
		c.HTTPWriteTimeout, c.HTTPEventKeepAlive = int(writeTimeout/time.Millisecond), 200
	})
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	produce := func(v string) {
		code, _, rb := produceJSON(t, h, "/api/v1/data/topics/t/partitions/0/records",
			map[string]any{"format": "text", "records": []map[string]any{{"value": v}}})
		require.Equal(t, 200, code, "%s", rb)
	}
	produce("a")
	start := time.Now()
	resp, err := http.Get(h.base + "/api/v1/data/topics/t/partitions/0/events?format=text")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		rd := bufio.NewReader(resp.Body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSuffix(line, "\n")
		}
	}()
	next := func(within time.Duration) (string, bool) {
		select {
		case l, ok := <-lines:
			return l, ok
		case <-time.After(within):
			t.Fatalf("no line from the stream in %v", within)
			return "", false
		}
	}
	// Wait for a, then idle for three write timeouts: comments only.
	var datas []string
	keepAlives := 0
	for time.Since(start) < 3*writeTimeout {
		l, ok := next(5 * time.Second)
		require.True(t, ok, "the stream ended after %v", time.Since(start))
		switch {
		case l == ": keep-alive":
			keepAlives++
		case strings.HasPrefix(l, "data: "):
			datas = append(datas, l)
		}
	}
	require.Len(t, datas, 1)
	require.Contains(t, datas[0], `"value":"a"`)
	require.GreaterOrEqual(t, keepAlives, 5, "keep-alive comments in %v", time.Since(start))
	// Past the old limit the stream still delivers.
	produce("b")
	for {
		l, ok := next(5 * time.Second)
		require.True(t, ok, "the stream ended after %v", time.Since(start))
		if strings.HasPrefix(l, "data: ") {
			require.Contains(t, l, `"value":"b"`)
			break
		}
	}
	// The listener closing ends the stream at once, not after the
	// shutdown's wait.
	closed := time.Now()
	b.closeHTTP()
	for {
		if _, ok := next(5 * time.Second); !ok {
			break
		}
	}
	require.Less(t, time.Since(closed), 3*time.Second)
}

// TestHTTPDataAuth checks the data plane under [auth] and TLS: basic auth
// and client certificates against the same users, the rights the wire
// enforces (publish, subscribe), 401 without a user.
func TestHTTPDataAuth(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	b := secureBroker(t, certs, &syncLog{}, 0)
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, b.ServeHTTP(hln))
	pem, err := os.ReadFile(certs.CAFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	h := newHTTPClient(t, b.HTTPAddr(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	recs := map[string]any{"format": "text", "records": []map[string]any{{"value": "x"}}}

	code, _, rb := produceJSON(t, h, "/api/v1/data/topics/orders/partitions/0/records", recs)
	require.Equal(t, 401, code, "%s", rb)
	code, _, rb = produceJSON(t, h.as("alice", "alice-pw"), "/api/v1/data/topics/orders/partitions/0/records", recs)
	require.Equal(t, 200, code, "%s", rb)
	code, _, rb = produceJSON(t, h.as("alice", "alice-pw"), "/api/v1/data/topics/secret/partitions/0/records", recs)
	require.Equal(t, 403, code, "%s", rb)
	code, _, rb = produceJSON(t, h.as("nopub", "nopub-pw"), "/api/v1/data/topics/orders/partitions/0/records", recs)
	require.Equal(t, 403, code, "%s", rb)
	code, rb = h.as("nopub", "nopub-pw").get("/api/v1/data/topics/orders/partitions/0/records?format=text")
	require.Equal(t, 200, code, "%s", rb)
	require.Contains(t, string(rb), `"x"`)
	code, rb = h.as("nosub", "nosub-pw").get("/api/v1/data/topics/orders/partitions/0/records")
	require.Equal(t, 403, code, "%s", rb)
	code, _, rb = h.as("nosub", "nosub-pw").raw("GET", "/get?topic=orders&partition=0&group=billing-1&offset=0&maxsize=1024", nil)
	require.Equal(t, 403, code, "%s", rb)
	code, _, rb = h.as("alice", "alice-pw").raw("POST", "/put?topic=orders&partition=0&flag=0&length=1", []byte("y"))
	require.Equal(t, 200, code, "%s", rb)
	code, _, rb = h.as("alice", "wrong").raw("POST", "/put?topic=orders&partition=0&flag=0&length=1", []byte("y"))
	require.Equal(t, 401, code, "%s", rb)

	// A client certificate naming a user.
	ccf, ckf := certs.Client(t, "certonly", "certonly")
	cert, err := tls.LoadX509KeyPair(ccf, ckf)
	require.NoError(t, err)
	hc := newHTTPClient(t, b.HTTPAddr(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}})
	code, _, rb = produceJSON(t, hc, "/api/v1/data/topics/orders/partitions/0/records", recs)
	require.Equal(t, 200, code, "%s", rb)
}

// hjson sends a JSON request and decodes a 2xx reply into out (if not nil).
func hjson(t *testing.T, h *httpClient, method, path string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		js, err := json.Marshal(in)
		require.NoError(t, err)
		body = bytes.NewReader(js)
	} else if method == "POST" {
		body = strings.NewReader("")
	}
	code, rb := h.do(method, path, body)
	if code < 300 && out != nil {
		require.NoError(t, json.Unmarshal(rb, out), "%s", rb)
	}
	if code >= 300 {
		t.Logf("%s %s: %d %s", method, path, code, rb)
	}
	return code
}

// TestHTTPConsumerGroup runs two HTTP consumer instances and a wire
// member in one group: the broker's local groups split the partitions
// between them, fetched records are committed to the offset store, a
// deleted instance's partitions go to the others, and what it did not
// commit is read again (at least once).
func TestHTTPConsumerGroup(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) { c.NumPartitions = 3 })
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	for p := range 3 {
		var recs []map[string]any
		for i := range 5 {
			recs = append(recs, map[string]any{"value": strconv.Itoa(p*100 + i)})
		}
		code, _, rb := produceJSON(t, h, "/api/v1/data/topics/t/partitions/"+strconv.Itoa(p)+"/records", map[string]any{"format": "text", "records": recs})
		require.Equal(t, 200, code, "%s", rb)
	}
	create := func() string {
		var cr httpapi.CreateConsumerReply
		require.Equal(t, 200, hjson(t, h, "POST", "/api/v1/data/consumers/g1", map[string]any{"format": "text"}, &cr))
		require.Equal(t, 204, hjson(t, h, "POST", cr.BaseURI+"/subscription", map[string]any{"topics": []string{"t"}}, nil))
		return cr.BaseURI
	}
	owned := func(base string) []httpapi.TopicPartition {
		var a httpapi.AssignmentsReply
		require.Equal(t, 200, hjson(t, h, "GET", base+"/assignments", nil, &a))
		return a.Partitions
	}
	a := create()
	require.Len(t, owned(a), 3)
	bb := create()
	// A wire member of the same group.
	w := dialAuth(t, b.Addr(), nil)
	code, body := w.call(func(d []byte, op int32) []byte { return protocol.AppendJoin(d, "g1", "t", "wire-1", "default", op) })
	require.Equal(t, 200, code, body)
	gen, _, _ := strings.Cut(body, " ")
	require.Eventually(t, func() bool {
		// The wire member acknowledges its views as the SDK does.
		code, body = w.call(func(d []byte, op int32) []byte {
			g, _ := strconv.ParseInt(gen, 10, 64)
			return protocol.AppendHeartbeat(d, "g1", "t", "wire-1", g, op)
		})
		gen, _, _ = strings.Cut(body, " ")
		wire := strings.TrimSpace(body[len(gen):])
		return len(owned(a)) == 1 && len(owned(bb)) == 1 && wire != "" && !strings.Contains(wire, ",")
	}, 15*time.Second, 300*time.Millisecond)
	leave := func() {
		w.call(func(d []byte, op int32) []byte { return protocol.AppendLeave(d, "g1", "t", "wire-1", op) })
	}
	leave()

	fetch := func(base string) []string {
		var rr httpapi.ReadReply
		require.Equal(t, 200, hjson(t, h, "GET", base+"/records?timeout_ms=200", nil, &rr))
		var vals []string
		for _, r := range rr.Records {
			vals = append(vals, string(r.Value))
		}
		return vals
	}
	// Once the wire member left, a and b own all three between them, each
	// at least one (the balance of two members; a sum of 3 alone can be a
	// moment of the rebalance, a holding all three and b none yet, after
	// which b's share moves: then b's partitions below were none).
	require.Eventually(t, func() bool {
		na, nb := len(owned(a)), len(owned(bb))
		return na >= 1 && nb >= 1 && na+nb == 3
	}, 15*time.Second, 100*time.Millisecond)
	seen := map[string]bool{}
	for range 10 {
		for _, v := range append(fetch(a), fetch(bb)...) {
			require.False(t, seen[v], "record %s twice", v)
			seen[v] = true
		}
		if len(seen) == 15 {
			break
		}
	}
	require.Len(t, seen, 15)
	// a commits; b does not and is deleted: its partitions go to a, which
	// reads their records again.
	var cm httpapi.CommitReply
	require.Equal(t, 200, hjson(t, h, "POST", a+"/offsets", nil, &cm))
	require.NotEmpty(t, cm.Offsets)
	bParts := owned(bb)
	require.Equal(t, 204, hjson(t, h, "DELETE", bb, nil, nil))
	require.Equal(t, 404, hjson(t, h, "GET", bb+"/assignments", nil, nil))
	require.Eventually(t, func() bool { return len(owned(a)) == 3 }, 15*time.Second, 100*time.Millisecond)
	again := 0
	for range 5 {
		again += len(fetch(a))
	}
	require.Equal(t, 5*len(bParts), again)
	// The committed offsets are in the offset store, as the wire reads them.
	code, body = w.call(func(d []byte, op int32) []byte {
		return protocol.AppendFetch(d, "g1", []protocol.OffsetEntry{{Topic: cm.Offsets[0].Topic, Partition: cm.Offsets[0].Partition}}, op)
	})
	require.Equal(t, 200, code, body)
	require.Contains(t, body, " "+strconv.FormatInt(cm.Offsets[0].Offset, 10)+" ")
	require.Equal(t, 204, hjson(t, h, "DELETE", a, nil, nil))
}

// TestHTTPConsumerLimits checks http_consumer_timeout (an instance not
// used is deleted) and http_max_consumers (503 beyond).
func TestHTTPConsumerLimits(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) { c.HTTPConsumerTimeout = 1000; c.HTTPMaxConsumers = 1 })
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	var cr httpapi.CreateConsumerReply
	require.Equal(t, 200, hjson(t, h, "POST", "/api/v1/data/consumers/g", nil, &cr))
	require.Equal(t, 503, hjson(t, h, "POST", "/api/v1/data/consumers/g", nil, nil))
	time.Sleep(3 * time.Second) // a request would reset its timer: wait past it, then ask
	code, body := h.get(cr.BaseURI + "/assignments")
	require.Equal(t, 404, code, "%s", body)
	require.Equal(t, 200, hjson(t, h, "POST", "/api/v1/data/consumers/g", nil, &cr))
	require.Equal(t, 400, hjson(t, h, "POST", "/api/v1/data/consumers/g%20x", nil, nil))
}

// TestHTTPDataHostile holds every request slot with event streams and a
// put whose body drips: newcomers get 503 at once, the probes and the
// wire protocol go on, and the slots come back when the streams end.
func TestHTTPDataHostile(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) { c.HTTPMaxConnections = conf.MinHTTPMaxConnections })
	addr := b.HTTPAddr()
	h := newHTTPClient(t, addr, nil)
	// 16 connections: 12 request slots, 6 per address; 127.0.0.1 is one.
	var streams []net.Conn
	for range 8 {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		_, err = nc.Write([]byte("GET /api/v1/data/topics/t/partitions/0/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
		require.NoError(t, err)
		streams = append(streams, nc)
	}
	// A put whose body never completes holds a slot too (until the 30 s
	// read timeout); it is counted among the address's.
	slow, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer slow.Close()
	_, err = slow.Write([]byte("POST /put?topic=t&partition=0&flag=0&length=1000 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nabc"))
	require.NoError(t, err)
	busy := 0
	for _, nc := range streams {
		line, err := bufio.NewReader(nc).ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "HTTP/1.1 503") {
			busy++
		} else {
			require.True(t, strings.HasPrefix(line, "HTTP/1.1 200"), line)
		}
	}
	require.GreaterOrEqual(t, busy, 2, "streams beyond the address's slots are refused")
	code, body := h.get("/api/v1/data/topics/t/partitions/0/records")
	require.Equal(t, 503, code, "%s", body)
	code, _ = h.get("/healthz")
	require.Equal(t, 200, code)
	c := dialAuth(t, b.Addr(), nil)
	code, rb := c.put("t")
	require.Equal(t, 200, code, rb)
	// The streams end (the clients go away): the slots come back.
	for _, nc := range streams {
		nc.Close()
	}
	require.Eventually(t, func() bool {
		code, _ := h.get("/api/v1/data/topics/t/partitions/0/records")
		return code == 200
	}, 10*time.Second, 100*time.Millisecond)
}

// TestHTTPMetaQPutLimit: a /put's body is bounded by max_message_size,
// not the listener's 1 MiB for other bodies: a message of up to it is
// stored and read back whole, a length over it is answered 413 naming
// the limit; with the default, 1 MiB is the limit
// as for other bodies.
func TestHTTPMetaQPutLimit(t *testing.T) {
	t.Parallel()
	const maxMsg = 3 << 20
	b := startBroker(t, 0, func(c *conf.Config) { c.MaxMessageSize, c.MaxTransferSize = maxMsg, maxMsg+4096 })
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	data := bytes.Repeat([]byte("0123456789abcdef"), 2<<20/16)
	code, _, body := h.raw("POST", "/put?topic=t&partition=0&flag=0&length="+strconv.Itoa(len(data)), data)
	require.Equal(t, 200, code, "%s", body)
	code, _, body = h.raw("GET", "/get?topic=t&partition=0&group=g&offset=0&maxsize="+strconv.Itoa(maxMsg+4096), nil)
	require.Equal(t, 200, code, "%s", body)
	it := message.NewIterator(body, 0, 0)
	require.True(t, it.Next(), "%v", it.Err())
	require.Equal(t, data, it.Record().Data)

	code, _, body = h.raw("POST", "/put?topic=t&partition=0&flag=0&length="+strconv.Itoa(maxMsg+1), []byte("x"))
	require.Equal(t, 413, code, "%s", body)
	require.Contains(t, string(body), "max_message_size")
	// Other bodies keep the listener's 1 MiB.
	code, rb := h.do("POST", "/api/v1/data/topics/t/records", strings.NewReader(`{"records":[{"value":"`+strings.Repeat("x", httpapi.MaxBody)+`"}]}`))
	require.Equal(t, 413, code, "%s", rb)

	d := startBroker(t, 0)
	hd := newHTTPClient(t, d.HTTPAddr(), nil)
	code, _, body = hd.raw("POST", "/put?topic=t&partition=0&flag=0&length="+strconv.Itoa(httpapi.MaxBody+1), []byte("x"))
	require.Equal(t, 413, code, "%s", body)
	require.Contains(t, string(body), strconv.Itoa(httpapi.MaxBody)+" bytes (max_message_size)")
}

// TestHTTPProduceKeepsConn: the produce handler keeps its in-process
// connection for the next request of the same user (one connection for
// three produces); one the broker closed meanwhile is not used.
func TestHTTPProduceKeepsConn(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	recs := map[string]any{"format": "text", "records": []map[string]any{{"value": "x"}}}
	locals := func() (n int, last *conn) {
		b.connsMu.Lock()
		defer b.connsMu.Unlock()
		for c := range b.conns {
			if c.local != nil {
				n, last = n+1, c
			}
		}
		return n, last
	}
	for range 3 {
		code, _, rb := produceJSON(t, h, "/api/v1/data/topics/t/partitions/0/records", recs)
		require.Equal(t, 200, code, "%s", rb)
		n, _ := locals()
		require.Equal(t, 1, n)
	}
	_, c := locals()
	c.close()
	code, _, rb := produceJSON(t, h, "/api/v1/data/topics/t/partitions/0/records", recs)
	require.Equal(t, 200, code, "%s", rb)
	require.Eventually(t, func() bool { n, c2 := locals(); return n == 1 && c2 != c }, 10*time.Second, 10*time.Millisecond)
}
