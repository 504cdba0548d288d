package broker

import (
	"github.com/metaq-go/metaq/core/httpapi"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// dashGet GETs path through b's mux (no network) as user (none: "").
func dashDo(t testing.TB, h http.Handler, method, path string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := localReq(method, path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// TestDashboardPages renders every page of a broker with data, and sends
// the pages hostile parameters: each gets a clear 4xx page, never a 5xx.
func TestDashboardPages(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	c := dialAuth(t, b.Addr(), nil)
	for i := range 5 {
		code, msg := c.call(func(d []byte, op int32) []byte {
			return protocol.AppendPut(d, "t", 0, 0, -1, op, []byte("hello "+strings.Repeat("x", i)))
		})
		require.Equal(t, 200, code, msg)
	}
	code, msg := c.call(func(d []byte, op int32) []byte {
		return protocol.AppendPut(d, "t", 1, 0, -1, op, []byte(`<script>alert("x")</script>`))
	})
	require.Equal(t, 200, code, msg)
	code, msg = c.call(func(d []byte, op int32) []byte {
		return protocol.AppendCommit(d, "g1", []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: 0, MsgID: -1}}, op)
	})
	require.Equal(t, 200, code, msg)
	require.Eventually(t, func() bool { return b.topics.Get("t").Parts[0].MaxOffset() == 140 }, 10*time.Second, 5*time.Millisecond)
	b.web.srv.Sample(time.Now())
	h := b.newMux()

	for path, want := range map[string]string{
		"/ui/":                  "This broker",
		"/ui/topics":            `href="/ui/topics/t"`,
		"/ui/topics/t":          "Partitions",
		"/ui/topics/t/messages": "hello xxxx",
		"/ui/topics/t/messages?partition=0&format=hex": "68 65 6c 6c 6f",
		"/ui/groups":         `href="/ui/groups/g1"`,
		"/ui/groups/g1":      "lag-total",
		"/ui/config":         "num_partitions",
		"/ui/plugins":        "no plugins configured",
		"/ui/dlq":            "no dead-letter topics on this broker",
		"/ui/delayed":        `id="delayed-buckets"`,
		"/ui/static/dash.js": "auto-refresh",
	} {
		w := dashDo(t, h, "GET", path, nil, nil)
		require.Equal(t, 200, w.Code, "%s: %s", path, w.Body)
		require.Contains(t, w.Body.String(), want, path)
	}
	// Bodies are text, escaped: never markup.
	w := dashDo(t, h, "GET", "/ui/topics/t/messages?partition=1", nil, nil)
	require.Equal(t, 200, w.Code, "%s", w.Body)
	require.Contains(t, w.Body.String(), "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;")
	require.NotContains(t, w.Body.String(), "<script>alert")
	w = dashDo(t, h, "GET", "/", nil, nil)
	require.Equal(t, http.StatusFound, w.Code)
	require.Equal(t, "/ui/", w.Header().Get("Location"))

	max0 := b.topics.Get("t").Parts[0].MaxOffset()
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"/ui/topics/nope", 404, "no such topic"},
		{"/ui/topics/nope/messages", 404, "no such topic"},
		{"/ui/topics/t/messages?partition=abc", 400, "partition must be a number 0..1"},
		{"/ui/topics/t/messages?partition=-1", 400, "partition must be"},
		{"/ui/topics/t/messages?partition=2", 400, "partition must be"},
		{"/ui/topics/t/messages?partition=99999999999999999999999", 400, "partition must be"},
		{"/ui/topics/t/messages?offset=-5", 400, "offset must be"},
		{"/ui/topics/t/messages?offset=1e30", 400, "offset must be"},
		{"/ui/topics/t/messages?offset=99999999999999999999", 400, "offset must be"},
		{"/ui/topics/t/messages?offset=9223372036854775807", 416, "outside partition 0"},
		{"/ui/topics/t/messages?offset=" + itoa64(max0+1), 416, "outside partition 0"},
		{"/ui/topics/t/messages?offset=1", 422, "not the start of a valid record"},
		{"/ui/topics/t/messages?offset=7", 422, "not the start of a valid record"},
		{"/ui/topics/t/messages?count=0", 400, "count must be 1..100"},
		{"/ui/topics/t/messages?count=100000", 400, "count must be"},
		{"/ui/topics/t/messages?format=xml", 400, "format must be text or hex"},
		{"/ui/groups/bad%20group", 400, "group"},
		{"/ui/groups/g1?topic=nope", 404, "no such topic"},
		{"/ui/nope", 404, "no such page"},
	} {
		w := dashDo(t, h, "GET", tc.path, nil, nil)
		require.Equal(t, tc.code, w.Code, "%s: %s", tc.path, w.Body)
		require.Contains(t, w.Body.String(), tc.msg, tc.path)
		require.Contains(t, w.Header().Get("Content-Type"), "text/html", tc.path)
	}
	// At the end: an empty page, not an error.
	w = dashDo(t, h, "GET", "/ui/topics/t/messages?offset="+itoa64(max0), nil, nil)
	require.Equal(t, 200, w.Code, "%s", w.Body)
	require.Contains(t, w.Body.String(), "End of the partition")

	// Actions: a token and the same origin are needed.
	tok := csrfField.FindStringSubmatch(dashDo(t, h, "GET", "/ui/topics", nil, nil).Body.String())
	require.NotNil(t, tok)
	form := url.Values{"name": {"made"}, "partitions": {"3"}}
	w = dashDo(t, h, "POST", "/ui/topics", form, nil)
	require.Equal(t, 403, w.Code, "%s", w.Body)
	require.Contains(t, w.Body.String(), "CSRF token")
	form.Set("csrf", tok[1])
	w = dashDo(t, h, "POST", "/ui/topics", form, map[string]string{"Origin": "http://evil.example"})
	require.Equal(t, 403, w.Code, "%s", w.Body)
	require.Contains(t, w.Body.String(), "cross-origin")
	w = dashDo(t, h, "POST", "/ui/topics", form, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, 403, w.Code, "%s", w.Body)
	w = dashDo(t, h, "POST", "/ui/topics", form, map[string]string{"Origin": "http://localhost"}) // localReq's Host
	require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
	require.Len(t, b.topics.Get("made").Parts, 3)
	w = dashDo(t, h, "POST", "/ui/topics", form, nil)
	require.Equal(t, 409, w.Code, "%s", w.Body)
	for _, p := range []string{"0", "-1", "x", "100000"} {
		w = dashDo(t, h, "POST", "/ui/topics", url.Values{"csrf": {tok[1]}, "name": {"y"}, "partitions": {p}}, nil)
		require.Equal(t, 400, w.Code, "%s", w.Body)
	}
	w = dashDo(t, h, "POST", "/ui/topics", url.Values{"csrf": {tok[1]}, "name": {"bad/name"}}, nil)
	require.Equal(t, 400, w.Code, "%s", w.Body)
	w = dashDo(t, h, "POST", "/ui/topics/made/delete", url.Values{"csrf": {tok[1]}, "confirm": {"wrong"}}, nil)
	require.Equal(t, 400, w.Code, "%s", w.Body)
	w = dashDo(t, h, "POST", "/ui/topics/made/delete", url.Values{"csrf": {tok[1]}, "confirm": {"made"}, "delete_data": {"true"}}, nil)
	require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
	require.Nil(t, b.topics.Get("made"))
	w = dashDo(t, h, "GET", "/ui/topics/made", nil, nil)
	require.Equal(t, 404, w.Code)

	// Reset: the dry run writes nothing; Apply needs the dry run's plan.
	reset := url.Values{"csrf": {tok[1]}, "topic": {"t"}, "partition": {"0"}, "to": {"latest"}, "action": {"dryrun"}}
	w = dashDo(t, h, "POST", "/ui/groups/g1/reset", reset, nil)
	require.Equal(t, 200, w.Code, "%s", w.Body)
	plan := regexp.MustCompile(`name="plan" value="([0-9a-f]+)"`).FindStringSubmatch(w.Body.String())
	require.NotNil(t, plan)
	require.Equal(t, int64(0), committedOf(t, b, "g1", "t", 0))
	reset.Set("action", "apply")
	reset.Set("plan", "0000")
	w = dashDo(t, h, "POST", "/ui/groups/g1/reset", reset, nil)
	require.Equal(t, 409, w.Code, "%s", w.Body)
	require.Equal(t, int64(0), committedOf(t, b, "g1", "t", 0))
	reset.Set("plan", plan[1])
	w = dashDo(t, h, "POST", "/ui/groups/g1/reset", reset, nil)
	require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
	require.Equal(t, max0, committedOf(t, b, "g1", "t", 0))
	for _, tc := range []struct {
		set  map[string]string
		code int
	}{
		{map[string]string{"partition": "5"}, 400},
		{map[string]string{"partition": "x"}, 400},
		{map[string]string{"to": "nowhere"}, 400},
		{map[string]string{"to": "offset", "offset": "99999999999"}, 400},
		{map[string]string{"to": "offset", "offset": ""}, 400},
		{map[string]string{"topic": "nope"}, 404},
	} {
		f := url.Values{"csrf": {tok[1]}, "topic": {"t"}, "partition": {"0"}, "to": {"earliest"}, "action": {"dryrun"}}
		for k, v := range tc.set {
			f.Set(k, v)
		}
		w = dashDo(t, h, "POST", "/ui/groups/g1/reset", f, nil)
		require.Equal(t, tc.code, w.Code, "%v: %s", tc.set, w.Body)
	}
	// Skip.
	w = dashDo(t, h, "POST", "/ui/groups/g1/skip", url.Values{"csrf": {tok[1]}, "topic": {"t"}, "partition": {"1"}}, nil)
	require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
	w = dashDo(t, h, "POST", "/ui/groups/g1/skip", url.Values{"csrf": {tok[1]}, "topic": {"t"}}, nil)
	require.Equal(t, 400, w.Code, "%s", w.Body)
	w = dashDo(t, h, "GET", "/ui/groups/g1?skipped=x", nil, nil)
	require.Contains(t, w.Body.String(), "Skipped x")
}

func itoa64(v int64) string { return strconv.FormatInt(v, 10) }

// committedOf reads group's committed offset of topic partition p from
// the offset store.
func committedOf(t testing.TB, b *Broker, group, topic string, p int) int64 {
	t.Helper()
	offs, err := b.offsets.Committed(t.Context(), group, topic, len(b.topics.Get(topic).Parts))
	require.NoError(t, err)
	return offs[p]
}

// TestDashboardAuth: with [auth], pages need a user, actions an admin,
// and a user sees only the groups it may use.
func TestDashboardAuth(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 1000, func(c *conf.Config) {
		c.Auth = conf.Auth{Enabled: true, FailureDelay: 10, Users: hashedUsers(t)}
	})
	h := b.newMux()
	w := dashDo(t, h, "GET", "/ui/topics", nil, nil)
	require.Equal(t, 401, w.Code)
	require.NotEmpty(t, w.Header().Get("WWW-Authenticate"))
	asUser := func(user, pass string) map[string]string {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth(user, pass)
		return map[string]string{"Authorization": r.Header.Get("Authorization")}
	}
	require.Contains(t, w.Header().Get("Content-Type"), "text/html", "the dashboard's 401 is a page")
	require.Contains(t, w.Body.String(), "authentication required")
	w = dashDo(t, h, "GET", "/ui/topics", nil, asUser("alice", "alice-pw"))
	require.Equal(t, 200, w.Code, "%s", w.Body)
	// A non-admin sees the forms, each saying that it is refused.
	require.Contains(t, w.Body.String(), "Create a topic")
	require.Contains(t, w.Body.String(), "Only an admin can do this: you are signed in as alice")
	tok := csrfField.FindStringSubmatch(w.Body.String())
	require.NotNil(t, tok)
	for _, a := range []struct {
		path string
		form url.Values
	}{
		{"/ui/topics", url.Values{"name": {"x"}}},
		{"/ui/topics/t/delete", url.Values{"confirm": {"t"}}},
		{"/ui/topics/t/partitions", url.Values{"partitions": {"3"}, "ack_ordering": {"yes"}}},
		{"/ui/groups/billing-a/reset", url.Values{"topic": {"t"}, "to": {"earliest"}, "action": {"dryrun"}}},
		{"/ui/groups/billing-a/reset", url.Values{"topic": {"t"}, "to": {"earliest"}, "action": {"apply"}, "plan": {"00"}}},
		{"/ui/groups/billing-a/skip", url.Values{"topic": {"t"}, "partition": {"0"}}},
	} {
		a.form.Set("csrf", tok[1])
		w = dashDo(t, h, "POST", a.path, a.form, asUser("alice", "alice-pw"))
		require.Equal(t, 403, w.Code, "%s: %s", a.path, w.Body)
		require.Contains(t, w.Header().Get("Content-Type"), "text/html", a.path)
		require.Contains(t, w.Body.String(), `user &#34;alice&#34; may not POST `+a.path+` (admin only)`, a.path)
	}
	require.Len(t, b.topics.Get("t").Parts, 2)
	require.NotNil(t, b.topics.Get("t"))
	w = dashDo(t, h, "GET", "/ui/topics", nil, asUser("root", "root-pw"))
	require.Equal(t, 200, w.Code)
	require.Contains(t, w.Body.String(), "Create a topic")
	require.NotContains(t, w.Body.String(), "Only an admin")
	tok = csrfField.FindStringSubmatch(w.Body.String())
	require.NotNil(t, tok)
	// Another user's token is refused.
	other := b.web.srv.CSRFToken("alice")
	hdr := asUser("root", "root-pw")
	w = dashDo(t, h, "POST", "/ui/topics", url.Values{"name": {"x"}, "csrf": {other}}, hdr)
	require.Equal(t, 403, w.Code, "%s", w.Body)
	w = dashDo(t, h, "POST", "/ui/topics", url.Values{"name": {"x"}, "csrf": {tok[1]}}, hdr)
	require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
	w = dashDo(t, h, "GET", "/ui/config", nil, hdr)
	require.Contains(t, w.Body.String(), template.HTMLEscapeString(conf.Redacted))
	require.NotContains(t, w.Body.String(), "$2a$")
}

// TestDashboardAlterPartitions: the topic page's form changes the
// partition count through AddPartitions (the admin API's path), after
// the keyed-ordering warning is acknowledged; bad forms get a 4xx page
// and change nothing.
func TestDashboardAlterPartitions(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	h := b.newMux()
	w := dashDo(t, h, "GET", "/ui/topics/t", nil, nil)
	require.Equal(t, 200, w.Code, "%s", w.Body)
	body := w.Body.String()
	require.Contains(t, body, `id="alter-topic"`)
	require.Contains(t, body, template.HTMLEscapeString(httpapi.KeyedOrderingWarning))
	tok := csrfField.FindStringSubmatch(body)
	require.NotNil(t, tok)
	alter := func(topic string, f url.Values) *httptest.ResponseRecorder {
		f.Set("csrf", tok[1])
		return dashDo(t, h, "POST", "/ui/topics/"+topic+"/partitions", f, nil)
	}
	for _, tc := range []struct {
		topic string
		form  url.Values
		code  int
		msg   string
	}{
		{"t", url.Values{"partitions": {"4"}}, 400, "acknowledges the warning"},
		{"t", url.Values{"partitions": {"4"}, "ack_ordering": {"no"}}, 400, "acknowledges the warning"},
		{"t", url.Values{"partitions": {"x"}, "ack_ordering": {"yes"}}, 400, "partitions must be"},
		{"t", url.Values{"partitions": {"0"}, "ack_ordering": {"yes"}}, 400, "partitions must be"},
		{"t", url.Values{"partitions": {"99999999999999999999"}, "ack_ordering": {"yes"}}, 400, "partitions must be"},
		{"t", url.Values{"partitions": {"1"}, "ack_ordering": {"yes"}}, 400, "removing partitions is not supported"},
		{"nope", url.Values{"partitions": {"4"}, "ack_ordering": {"yes"}}, 404, "no such topic"},
	} {
		w := alter(tc.topic, tc.form)
		require.Equal(t, tc.code, w.Code, "%v: %s", tc.form, w.Body)
		require.Contains(t, w.Body.String(), tc.msg, "%v", tc.form)
		require.Contains(t, w.Header().Get("Content-Type"), "text/html")
	}
	require.Len(t, b.topics.Get("t").Parts, 2, "refused forms change nothing")

	w = alter("t", url.Values{"partitions": {"5"}, "ack_ordering": {"yes"}})
	require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
	require.Equal(t, "/ui/topics/t?altered=2", w.Header().Get("Location"))
	require.Len(t, b.topics.Get("t").Parts, 5)
	w = dashDo(t, h, "GET", "/ui/topics/t?altered=2", nil, nil)
	require.Contains(t, w.Body.String(), "Topic t now has 5 partitions (was 2). Warning: "+template.HTMLEscapeString(httpapi.KeyedOrderingWarning))
	// The API and topics.toml see it.
	w = dashDo(t, h, "GET", "/api/v1/topics/t", nil, nil)
	require.Contains(t, w.Body.String(), `"partitions": 5,`)
	tf, err := os.ReadFile(b.topicBook.Path())
	require.NoError(t, err)
	require.Contains(t, string(tf), "num_partitions = 5")
	// The same count again: nothing changes.
	w = alter("t", url.Values{"partitions": {"5"}, "ack_ordering": {"yes"}})
	require.Equal(t, http.StatusSeeOther, w.Code, "%s", w.Body)
	w = dashDo(t, h, "GET", w.Header().Get("Location"), nil, nil)
	require.Contains(t, w.Body.String(), "already has 5 partitions")
}

// TestDashboardMessageProps: the messages page shows a message's key,
// create time, tags and headers, escaped as text (hostile bytes never make
// markup), binary values in hex with a marker; a message without them
// shows "none".
func TestDashboardMessageProps(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	c := dialAuth(t, b.Addr(), nil)
	m := &message.Message{Topic: "t", Body: []byte("with-props"), Key: []byte(`<b>k1</b>`),
		Timestamp: time.UnixMilli(1_765_000_000_123), Tags: []string{"TagA", "<i>"},
		Headers: message.Headers{{Key: "trace", Value: []byte(`"><script>alert(1)</script>`)}, {Key: "bin", Value: []byte{0xff, 0x00, '<'}},
			{Key: "null", Value: nil}, {Key: "rtl\u202e", Value: []byte("x\x1by")}}}
	for _, msg := range []*message.Message{m, {Topic: "t", Body: []byte("plain")}} {
		code, s := c.call(func(d []byte, op int32) []byte {
			return protocol.AppendPut(d, "t", 1, msg.Flag(), -1, op, msg.AppendData(nil))
		})
		require.Equal(t, 200, code, s)
	}
	w := dashDo(t, b.newMux(), "GET", "/ui/topics/t/messages?partition=1", nil, nil)
	require.Equal(t, 200, w.Code, "%s", w.Body)
	page := w.Body.String()
	for _, want := range []string{
		`<dt>key</dt><dd class="key"><code>&lt;b&gt;k1&lt;/b&gt;</code></dd>`,
		`<dt>time</dt><dd class="ts">2025-12-06T05:46:40.123Z</dd>`,
		`<code class="tag">TagA</code> <code class="tag">&lt;i&gt;</code>`,
		`<dt class="hk">trace</dt><dd class="hv"><code>&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;</code></dd>`,
		`<dt class="hk">bin</dt><dd class="hv"><span class="muted">hex</span> <code class="hex">ff003c</code></dd>`,
		`<dt class="hk">null</dt><dd class="hv"><span class="muted">null</span></dd>`,
		`<dt class="hk">&#34;rtl\u202e&#34;</dt><dd class="hv"><span class="muted">hex</span> <code class="hex">781b79</code></dd>`,
		"with-props", "plain",
	} {
		require.Contains(t, page, want)
	}
	require.NotContains(t, page, "<script>alert")
	require.NotContains(t, page, "\u202e")
	require.Equal(t, 1, strings.Count(page, `<dl class="props">`), "only the message with properties has them")
}
