package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// dlqBroker starts a broker (HTTP on a free port) with the topic orders
// (2 partitions) and the group billing's retry and dead-letter topics
// holding n dead letters from partition 1 of orders, and returns it with
// a wire client.
func dlqBroker(t *testing.T, n int, logs *syncLog) (*Broker, *authClient) {
	t.Helper()
	b := fixture{mods: []func(*conf.Config){func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "orders"}, {Name: "billing.retry"}, {Name: "billing.dlq", NumPartitions: ptr(1)}}
	}}, opts: Options{Logf: logs.Logf}}.start(t)
	require.NotEmpty(t, b.HTTPAddr())
	c := dialAuth(t, b.Addr(), nil)
	for i := range n {
		putDLQ(t, c, "billing.dlq", message.Message{Body: []byte("refund-" + itoa64(int64(i))), Key: []byte("customer-7"),
			Headers: message.Headers{{Key: "trace", Value: []byte("t" + itoa64(int64(i)))}, {Key: "metaq-origin-topic", Value: []byte("orders")},
				{Key: "metaq-origin-partition", Value: []byte("1")}, {Key: "metaq-origin-offset", Value: []byte("0")},
				{Key: "metaq-origin-id", Value: []byte("1")}, {Key: "metaq-last-error", Value: []byte("card declined")},
				{Key: "metaq-delivery-count", Value: []byte("16")}}})
	}
	return b, c
}

func putDLQ(t *testing.T, c *authClient, topic string, m message.Message) {
	t.Helper()
	code, msg := c.call(func(d []byte, op int32) []byte {
		return protocol.AppendPut(d, topic, 0, m.Flag(), -1, op, m.AppendData(nil))
	})
	require.Equal(t, 200, code, msg)
}

// TestDashboardDLQAPI: GET /api/v1/dlq lists the dead-letter topics with
// their depth past the replay position; POST
// /api/v1/groups/{group}/dlq/replay dry-runs and replays to the origin
// topic (fresh ids, bookkeeping headers gone, the origin partition) or
// the retry topic, never twice; the page's form needs the CSRF token;
// errors are clear; GET /api/v1/delayed buckets the pending delayed
// messages by due time.
func TestDashboardDLQAPI(t *testing.T) {
	t.Parallel()
	logs := &syncLog{}
	b, c := dlqBroker(t, 3, logs)
	h := b.newMux()
	api := func(method, path, body string) (int, string) {
		t.Helper()
		req := localReq(method, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	var list []httpapi.DLQTopic
	code, body := api("GET", "/api/v1/dlq", "")
	require.Equal(t, 200, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list, 1, body)
	require.Equal(t, httpapi.DLQTopic{Group: "billing", Topic: "billing.dlq", PositionGroup: "billing.dlq-replay", Messages: 3, Pending: 3,
		Retry: 0, Partitions: list[0].Partitions}, list[0])

	var rep httpapi.DLQReplayReply
	code, body = api("POST", "/api/v1/groups/billing/dlq/replay", `{"dry_run": true}`)
	require.Equal(t, 200, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.Equal(t, 3, rep.Count)
	require.Equal(t, "retry", rep.To, "the default target: the group's retry topic")
	require.Equal(t, "billing.retry", rep.Messages[0].To)
	require.Len(t, rep.Messages, 3)
	require.Equal(t, "card declined", rep.Messages[0].LastError)
	require.Zero(t, b.topics.Get("orders").Parts[1].MessageCount(), "a dry run sends nothing")

	code, body = api("POST", "/api/v1/groups/billing/dlq/replay", `{"to": "origin", "limit": 2}`)
	require.Equal(t, 200, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.Equal(t, 2, rep.Count, body)
	require.Eventually(t, func() bool { return b.topics.Get("orders").Parts[1].MessageCount() == 2 }, 5*time.Second, 5*time.Millisecond)
	code, body = api("GET", "/api/v1/dlq", "")
	require.Equal(t, 200, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Equal(t, int64(1), list[0].Pending, body)
	require.Regexp(t, `audit: group.dlq_replay component=audit user=- remote=\S+ via=api action=group.dlq_replay group=billing to=origin messages=2`, logs.String())
	require.NotContains(t, logs.String(), "messages=3", "a dry run is not audited")
	code, body = api("POST", "/api/v1/groups/billing/dlq/replay", `{"to": "retry"}`)
	require.Equal(t, 200, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.Equal(t, 1, rep.Count, body)
	code, body = api("POST", "/api/v1/groups/billing/dlq/replay", `{}`)
	require.Equal(t, 200, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.Zero(t, rep.Count, "replayed twice: %s", body)

	// What was sent: to orders partition 1 (the origin partition) with the
	// key and the user's header only; to billing.retry with the origin
	// headers and without the delivery count.
	read := func(topic string, p int32) []message.Message {
		t.Helper()
		code, raw := c.call(func(d []byte, op int32) []byte { return protocol.AppendGet(d, topic, "x", p, 0, 1<<20, op) })
		if code == protocol.StatusNotFound {
			return nil // empty
		}
		require.Equal(t, 200, code, raw)
		var out []message.Message
		it := message.NewIterator([]byte(raw), 0, 0)
		for it.Next() {
			m, err := it.Record().Message(topic, p)
			require.NoError(t, err)
			out = append(out, m)
		}
		return out
	}
	got := read("orders", 1)
	require.Len(t, got, 2)
	require.Equal(t, "refund-0", string(got[0].Body))
	require.Equal(t, "customer-7", string(got[0].Key))
	require.Equal(t, message.Headers{{Key: "trace", Value: []byte("t0")}}, got[0].Headers)
	retried := append(read("billing.retry", 0), read("billing.retry", 1)...)
	require.Len(t, retried, 1)
	o, _ := retried[0].Headers.String("metaq-origin-topic")
	_, dc := retried[0].Headers.String("metaq-delivery-count")
	require.True(t, o == "orders" && !dc, "%v", retried[0].Headers)

	// The form: without the CSRF token, refused; a dry run with it.
	w := dashDo(t, h, "POST", "/ui/dlq/billing/replay", url.Values{"to": {"origin"}}, nil)
	require.Equal(t, http.StatusForbidden, w.Code, w.Body.String())
	pg := dashDo(t, h, "GET", "/ui/dlq", nil, nil)
	require.Equal(t, 200, pg.Code, pg.Body.String())
	tok := csrfField.FindStringSubmatch(pg.Body.String())
	require.NotNil(t, tok, pg.Body.String())
	w = dashDo(t, h, "POST", "/ui/dlq/billing/replay", url.Values{"csrf": {tok[1]}, "to": {"origin"}}, nil)
	require.Equal(t, 200, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), "Dry run: replaying <b>0</b> of 0")

	// Errors.
	for _, tc := range []struct {
		path, body string
		code       int
		msg        string
	}{
		{"/api/v1/groups/nobody/dlq/replay", `{}`, 404, "no dead-letter topic"},
		{"/api/v1/groups/billing/dlq/replay", `{"to": "elsewhere"}`, 400, "want origin or retry"},
		{"/api/v1/groups/billing/dlq/replay", `{"limit": -1}`, 400, "limit"},
		{"/api/v1/groups/bad%20group/dlq/replay", `{}`, 400, "group"},
	} {
		code, body := api("POST", tc.path, tc.body)
		require.Equal(t, tc.code, code, "%s %s: %s", tc.path, tc.body, body)
		require.Contains(t, body, tc.msg)
	}
	putDLQ(t, c, "billing.dlq", message.Message{Body: []byte("stray")})
	code, body = api("POST", "/api/v1/groups/billing/dlq/replay", `{}`)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "has no metaq-origin-topic header")

	// Delayed messages by due time.
	for _, d := range []time.Duration{20 * time.Second, 5 * time.Minute, 2 * time.Hour, 50 * time.Hour} {
		putDLQ(t, c, "orders", message.Message{Body: []byte("later"), Delay: d})
	}
	require.Eventually(t, func() bool {
		_, body := api("GET", "/api/v1/delayed", "")
		var dp httpapi.DelayedPage
		return json.Unmarshal([]byte(body), &dp) == nil && dp.Pending == 4 && len(dp.Buckets) == 5 &&
			dp.Buckets[0].Messages == 1 && dp.Buckets[1].Messages == 1 && dp.Buckets[2].Messages == 0 &&
			dp.Buckets[3].Messages == 1 && dp.Buckets[4].Messages == 1
	}, 10*time.Second, 20*time.Millisecond)
}

// TestDashboardBrowserDLQ opens the dead letters and delayed pages in a
// real browser: the dead-letter topic with its counts, a replay's dry run
// then the replay (the pending count drops to 0 and the messages are on
// the origin topic), and the delayed messages by due-time bucket.
func TestDashboardBrowserDLQ(t *testing.T) {
	t.Parallel()
	chrome := testsvc.Chromium(t)
	b, c := dlqBroker(t, 3, &syncLog{})
	for _, d := range []time.Duration{30 * time.Second, 3 * time.Minute, 3 * time.Hour, 72 * time.Hour} {
		putDLQ(t, c, "orders", message.Message{Body: []byte("later"), Delay: d})
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelC := chromedp.NewContext(actx)
	defer cancelC()
	require.NoError(t, chromedp.Do(bctx))
	ctx, cancelT := context.WithTimeout(bctx, 60*time.Second)
	defer cancelT()
	tab := &browserTab{ctx: ctx}
	base := "http://" + b.HTTPAddr()
	shot := func(name string) { // METAQ_SCREENSHOTS: docs/dashboard's pictures
		t.Helper()
		if dir := os.Getenv(screenshotsEnv); dir != "" {
			buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			require.NoError(t, err)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644))
		}
	}

	tab.open(t, base+"/ui/dlq", "#dlq")
	require.Equal(t, "3", strings.TrimSpace(tab.text(t, `tr[data-group="billing"] td.messages`)))
	require.Equal(t, "3", strings.TrimSpace(tab.text(t, `tr[data-group="billing"] td.pending`)))
	shot("dlq")
	// To the origin topic (chosen): the dry run says every group of it handles them.
	tab.run(t, chromedp.SetValue(chromedp.CSS(`tr[data-group="billing"] select[name="to"]`), "origin"),
		chromedp.Click(chromedp.CSS(`tr[data-group="billing"] button.replay-dry`)), chromedp.WaitVisible(chromedp.CSS("#dry-run")))
	require.Contains(t, tab.text(t, "#dry-run"), "to their origin topics")
	require.Contains(t, tab.text(t, "#origin-note"), "Every consumer group of the origin topics handles these messages again, not only billing")
	// The default: the group's retry topic.
	tab.open(t, base+"/ui/dlq", "#dlq")
	tab.run(t, chromedp.Click(chromedp.CSS(`tr[data-group="billing"] button.replay-dry`)), chromedp.WaitVisible(chromedp.CSS("#dry-run")))
	require.Contains(t, tab.text(t, "#dry-run"), "replaying 3 of 3 pending dead letters of billing.dlq to the group's retry topic")
	require.Contains(t, tab.text(t, "#replay-sample"), "card declined")
	retried := func() (n int64) {
		for _, p := range b.topics.Get("billing.retry").Parts {
			n += p.MessageCount()
		}
		return n
	}
	require.Zero(t, retried(), "the dry run sent nothing")
	shot("dlq-replay")
	tab.run(t, chromedp.Click(chromedp.CSS("#apply-replay")))
	require.Eventually(t, func() bool {
		loc, err := chromedp.Run(ctx, chromedp.Location())
		return err == nil && strings.Contains(loc, "replayed=3")
	}, 15*time.Second, 20*time.Millisecond)
	require.Contains(t, tab.text(t, "#flash"), "Replayed 3 dead letters of billing")
	require.Equal(t, "0", strings.TrimSpace(tab.text(t, `tr[data-group="billing"] td.pending`)))
	require.Equal(t, "3", strings.TrimSpace(tab.text(t, `tr[data-group="billing"] td.messages`)))
	require.Equal(t, int64(3), retried(), "the dead letters are in billing.retry")
	require.Zero(t, b.topics.Get("orders").Parts[1].MessageCount(), "nothing sent to orders")

	tab.open(t, base+"/ui/delayed", "#delayed-buckets")
	require.Equal(t, "4", tab.text(t, "#delayed-pending"))
	shot("delayed")
	rows := tab.text(t, "#delayed-buckets")
	for _, want := range []string{"< 1 min\t1", "1–10 min\t1", "10 min–1 h\t0", "1 h–1 day\t1", "> 1 day\t1"} {
		require.Contains(t, rows, want)
	}
}
