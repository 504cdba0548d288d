package broker

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// putKeyed puts a message with key (none when "") to partition p of
// topic and returns its msgId and offset.
func putKeyed(t *testing.T, c *rawClient, topic string, p int32, key, body string) (int64, int64) {
	t.Helper()
	m := message.Message{Body: []byte(body), Headers: message.Headers{{Key: "h", Value: []byte("v")}}}
	if key != "" {
		m.Key = []byte(key)
	}
	d := m.AppendData(nil)
	r := c.roundTrip(t, protocol.AppendPut(nil, topic, p, m.Flag(), int64(message.Checksum(d)), 1, d))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	id, _, off, _, err := protocol.ParsePutResult(r.Body)
	require.NoError(t, err)
	return id, off
}

func findMessages(t *testing.T, h *httpClient, query url.Values) (int, httpapi.FindJSON, string) {
	t.Helper()
	code, body := h.get("/api/v1/messages?" + query.Encode())
	var out httpapi.FindJSON
	if code == 200 {
		require.NoError(t, json.Unmarshal(body, &out), "%s", body)
	}
	return code, out, string(body)
}

// TestFindMessagesAPI: GET /api/v1/messages finds records by key and by
// msgId, in one topic or all, newest first within limit, before and
// after the indexer caught up, with index_keys on and off.
func TestFindMessagesAPI(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run("index_keys="+strconv.FormatBool(on), func(t *testing.T) {
			b := startBroker(t, 0, func(c *conf.Config) { c.IndexKeys = on })
			c := dialRaw(t, b.Addr())
			h := newHTTPClient(t, b.HTTPAddr(), nil)
			type put struct{ id, off int64 }
			byKey := map[string][]put{}
			for i := 0; i < 40; i++ {
				k := fmt.Sprintf("order-%d", i%8)
				id, off := putKeyed(t, c, "t", int32(i%2), k, "body "+strconv.Itoa(i))
				byKey[k] = append(byKey[k], put{id, off})
			}
			putKeyed(t, c, "t", 0, "", "no key")
			check := func() {
				t.Helper()
				code, res, body := findMessages(t, h, url.Values{"topic": {"t"}, "key": {"order-3"}})
				require.Equal(t, 200, code, body)
				require.Len(t, res.Messages, 5, body)
				require.Equal(t, on, res.Indexed)
				for _, m := range res.Messages {
					require.Equal(t, "order-3", *m.Key)
					require.Equal(t, "t", m.Topic)
					require.Equal(t, 1, m.Partition) // i%8 == 3: odd
					require.Len(t, m.Headers, 1)
				}
				// By msgId, without a topic.
				want := byKey["order-5"][2]
				code, res, body = findMessages(t, h, url.Values{"id": {strconv.FormatInt(want.id, 10)}})
				require.Equal(t, 200, code, body)
				require.Len(t, res.Messages, 1, body)
				require.Equal(t, want.off, res.Messages[0].Offset)
				require.Equal(t, strconv.FormatInt(want.id, 10), res.Messages[0].MsgID)
				// limit keeps the newest.
				code, res, body = findMessages(t, h, url.Values{"key": {"order-0"}, "limit": {"2"}})
				require.Equal(t, 200, code, body)
				require.Len(t, res.Messages, 2, body)
				require.True(t, res.More)
				require.Equal(t, byKey["order-0"][4].off, res.Messages[1].Offset)
				code, res, body = findMessages(t, h, url.Values{"key": {"nobody"}})
				require.Equal(t, 200, code, body)
				require.Empty(t, res.Messages)
			}
			check()
			if on {
				// Once indexed, a lookup reads no log beyond its candidates.
				require.Eventually(t, func() bool {
					_, res, _ := findMessages(t, h, url.Values{"topic": {"t"}, "key": {"order-3"}})
					return res.ScannedBytes == 0
				}, 10*time.Second, 10*time.Millisecond)
				check()
				// The metrics: 41 messages, 40 with a key, all indexed.
				code, scrape := h.get("/metrics")
				require.Equal(t, 200, code)
				dir := strconv.Quote(b.config().DataDir)
				require.Eventually(t, func() bool {
					_, scrape = h.get("/metrics")
					return metricValue(t, scrape, `metaq_key_index_entries{data_dir=`+dir+`}`) == 81
				}, 10*time.Second, 10*time.Millisecond, "%s", scrape)
				require.Equal(t, 0.0, metricValue(t, scrape, `metaq_key_index_lag_bytes{data_dir=`+dir+`}`))
				require.GreaterOrEqual(t, metricValue(t, scrape, `metaq_key_index_bytes{data_dir=`+dir+`}`), 0.0)
			}
			for _, bad := range []url.Values{{}, {"key": {"a"}, "id": {"1"}}, {"id": {"x"}}, {"key": {"a"}, "limit": {"0"}}} {
				code, _, body := findMessages(t, h, bad)
				require.Equal(t, 400, code, "%v: %s", bad, body)
			}
			// A msgId of another broker: a miss that says where to ask.
			other := int64(1)<<22 | int64(b.config().BrokerID+1)<<12
			code, res, body := findMessages(t, h, url.Values{"id": {strconv.FormatInt(other, 10)}})
			require.Equal(t, 200, code, body)
			require.Empty(t, res.Messages)
			require.Contains(t, strings.Join(res.Notes, "\n"), fmt.Sprintf("ask broker %d", b.config().BrokerID+1))
			code, _, body = findMessages(t, h, url.Values{"key": {"a"}, "topic": {"nope"}})
			require.Equal(t, 404, code, body)
		})
	}
}

// TestFindMessagesAuth: GET /api/v1/messages needs a user; a named topic
// needs subscribe on it (403 otherwise); without a topic only the topics
// the user may subscribe to are searched.
func TestFindMessagesAuth(t *testing.T) {
	t.Parallel()
	b := authBroker(t, &syncLog{})
	v, err := b.topics.Get("t").Parts[0].Read(0, 4096)
	require.NoError(t, err)
	buf, err := v.ReadAll(nil)
	v.Release()
	require.NoError(t, err)
	rec, _, err := message.ParseRecord(buf, 0)
	require.NoError(t, err)
	path := "/api/v1/messages?id=" + strconv.FormatInt(rec.ID, 10)
	as := func(user string) map[string]string {
		return map[string]string{"Authorization": basic(user, user+"-pw")}
	}
	code, body := guardReq(t, b, "GET", path, "", nil)
	require.Equal(t, 401, code, "%s", body)
	code, body = guardReq(t, b, "GET", path+"&topic=t", "", as("alice"))
	require.Equal(t, 403, code, "%s", body)
	require.Contains(t, string(body), "alice")
	code, body = guardReq(t, b, "GET", path, "", as("alice"))
	require.Equal(t, 200, code, "%s", body)
	var res httpapi.FindJSON
	require.NoError(t, json.Unmarshal(body, &res))
	require.Empty(t, res.Messages, "alice may not read t")
	for _, p := range []string{path, path + "&topic=t"} {
		code, body = guardReq(t, b, "GET", p, "", as("root"))
		require.Equal(t, 200, code, "%s", body)
		require.NoError(t, json.Unmarshal(body, &res))
		require.Len(t, res.Messages, 1, "%s", body)
		require.Equal(t, int64(0), res.Messages[0].Offset)
	}
}
