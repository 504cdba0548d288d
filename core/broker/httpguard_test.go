package broker

import (
	"encoding/json"
	"github.com/metaq-go/metaq/core/httpapi"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

// guardReq sends one request to b's HTTP listener with the given headers
// (a "Host" entry sets the Host header) and returns code and body.
func guardReq(t testing.TB, b *Broker, method, path, body string, hdr map[string]string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+b.HTTPAddr()+path, rd)
	require.NoError(t, err)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// authBroker starts a broker with [auth] on (testUsers: root is the
// admin) and topic t of 2 partitions holding a few messages in
// partition 0; logs gets its log lines.
func authBroker(t testing.TB, logs *syncLog) *Broker {
	t.Helper()
	cfg := testConfig()
	cfg.Host = "127.0.0.1"
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	cfg.NumPartitions = 2
	cfg.Topics = []conf.Topic{{Name: "t"}}
	cfg.Auth = conf.Auth{Enabled: true, FailureDelay: 0, Users: hashedUsers(t)}
	b, err := New(cfg, Options{Logf: logs.Logf})
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })
	c := dialAuth(t, b.Addr(), nil)
	code, msg := c.login("root", "root-pw")
	require.Equal(t, 200, code, msg)
	for range 3 {
		code, msg = c.put("t")
		require.Equal(t, 200, code, msg)
	}
	return b
}

// groupOffset is group g's committed offset of t's partition 0, from the
// API.
func groupOffset(t testing.TB, b *Broker, g string) int64 {
	t.Helper()
	code, body := guardReq(t, b, "GET", "/api/v1/groups/"+g+"?topic=t", "", map[string]string{"Authorization": basic("root", "root-pw")})
	require.Equal(t, 200, code, "%s", body)
	var out struct {
		Topics []httpapi.GroupTopic `json:"topics"`
	}
	require.NoError(t, json.Unmarshal(body, &out), "%s", body)
	return out.Topics[0].Partitions[0].Committed
}

func basic(user, pass string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

// TestHTTPCSRF: the JSON API refuses what a page of another site can send
// (issue 22, finding 2): a text/plain form body that parses as JSON with
// a duplicate key, Sec-Fetch-Site cross-site or same-site, a foreign
// Origin or Referer; it needs Content-Type application/json for bodies.
// What programs send (no Origin, no Sec-Fetch-Site) passes.
func TestHTTPCSRF(t *testing.T) {
	t.Parallel()
	logs := &syncLog{}
	b := authBroker(t, logs)
	self := "http://" + b.HTTPAddr()
	admin := func(h map[string]string) map[string]string {
		out := map[string]string{"Authorization": basic("root", "root-pw")}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	jsonCT := map[string]string{"Content-Type": "application/json"}
	// The reproducer: every part of it is refused by itself.
	code, body := guardReq(t, b, "POST", "/api/v1/topics", "{\"name\":\"=\",\"name\":\"x\"}\r\n",
		admin(map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}))
	require.Equal(t, 403, code, "%s", body)
	requireJSONError(t, body, 403, "cross-site request (Sec-Fetch-Site cross-site)")
	code, body = guardReq(t, b, "POST", "/api/v1/topics", "{\"name\":\"=\",\"name\":\"x\"}\r\n", admin(map[string]string{"Content-Type": "text/plain"}))
	require.Equal(t, 415, code, "%s", body)
	requireJSONError(t, body, 415, `Content-Type application/json is required for POST, got "text/plain"`)
	code, body = guardReq(t, b, "POST", "/api/v1/topics", "{\"name\":\"=\",\"name\":\"x\"}\r\n", admin(jsonCT))
	require.Equal(t, 400, code, "%s", body)
	requireJSONError(t, body, 400, `duplicate key "name"`)
	code, body = guardReq(t, b, "POST", "/api/v1/topics", `{"name":"x","NAME":"="}`, admin(jsonCT))
	require.Equal(t, 400, code, "%s", body)
	requireJSONError(t, body, 400, `duplicate key "NAME"`)
	code, body = guardReq(t, b, "POST", "/api/v1/topics", `{"name":"x"}`, admin(nil))
	require.Equal(t, 415, code, "%s", body)
	requireJSONError(t, body, 415, "none was given")
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx", "text/json"} {
		code, body = guardReq(t, b, "POST", "/api/v1/topics", `{"name":"x"}`, admin(map[string]string{"Content-Type": ct}))
		require.Equal(t, 415, code, "%s: %s", ct, body)
	}
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
		{"Origin": "http://evil.example"},
		{"Origin": "http://127.0.0.1:1"},
		{"Origin": "null"},
		{"Referer": "http://evil.example/page"},
	} {
		h["Content-Type"] = "application/json"
		code, body = guardReq(t, b, "POST", "/api/v1/topics", `{"name":"x"}`, admin(h))
		require.Equal(t, 403, code, "%v: %s", h, body)
		// Reads too: a cross-site GET could not read the reply, and is refused all the same.
		code, body = guardReq(t, b, "GET", "/api/v1/topics", "", admin(h))
		require.Equal(t, 403, code, "%v: %s", h, body)
	}
	code, body = guardReq(t, b, "GET", "/api/v1/topics/x", "", admin(nil))
	require.Equal(t, 404, code, "no request above created topic x: %s", body)

	// Offsets: a cross-site reset (form body, then fetch with JSON) changes nothing.
	code, body = guardReq(t, b, "POST", "/api/v1/groups/g1/offsets", `{"topic":"t","to":"latest"}`, admin(jsonCT))
	require.Equal(t, 200, code, "%s", body)
	latest := groupOffset(t, b, "g1")
	require.Positive(t, latest)
	for _, h := range []map[string]string{
		{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"},
		{"Content-Type": "text/plain"},
		{"Content-Type": "application/json", "Origin": "http://evil.example"},
	} {
		for _, p := range []string{"/api/v1/groups/g1/offsets", "/api/v1/groups/g1/skip"} {
			code, body = guardReq(t, b, "POST", p, `{"topic":"t","to":"earliest","partition":0}`, admin(h))
			require.Contains(t, []int{403, 415}, code, "%v: %s", h, body)
		}
	}
	require.Equal(t, latest, groupOffset(t, b, "g1"), "offsets moved")
	code, body = guardReq(t, b, "DELETE", "/api/v1/topics/t", "", admin(map[string]string{"Sec-Fetch-Site": "cross-site"}))
	require.Equal(t, 403, code, "%s", body)

	// What passes: no Origin (curl, metaq), this broker's own Origin,
	// same-origin and none, charset parameters.
	for i, h := range []map[string]string{
		{"Content-Type": "application/json"},
		{"Content-Type": "application/json; charset=utf-8", "Origin": self, "Sec-Fetch-Site": "same-origin"},
		{"Content-Type": "Application/JSON", "Sec-Fetch-Site": "none"},
		{"Content-Type": "application/json", "Referer": self + "/ui/topics"},
	} {
		name := "ok" + strconv.Itoa(i)
		code, body = guardReq(t, b, "POST", "/api/v1/topics", `{"name":"`+name+`"}`, admin(h))
		require.Equal(t, 201, code, "%v: %s", h, body)
		code, body = guardReq(t, b, "DELETE", "/api/v1/topics/"+name, "", admin(h))
		require.Equal(t, 200, code, "%v: %s", h, body)
	}
	// Dashboard pages may be linked from anywhere; the probes answer all.
	code, body = guardReq(t, b, "GET", "/ui/topics", "", admin(map[string]string{"Sec-Fetch-Site": "cross-site"}))
	require.Equal(t, 200, code, "%s", body)
	code, body = guardReq(t, b, "GET", "/healthz", "", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"})
	require.Equal(t, 200, code, "%s", body)
	// The dashboard's forms: refused cross-site by the same check.
	code, body = guardReq(t, b, "POST", "/ui/topics", "name=x&csrf=bad", admin(map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}))
	require.Equal(t, 403, code, "%s", body)
	require.Contains(t, string(body), "cross-origin request")
}

// TestHTTPHostCheck: with [auth] off a request whose Host is not a name of
// the broker gets 421 (issue 22, finding 9: DNS rebinding), on the API,
// pprof and the dashboard; the probes answer every name; with [auth] on
// the check is not made.
func TestHTTPHostCheck(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) { c.Host = "127.0.0.1" })
	_, port, err := net.SplitHostPort(b.HTTPAddr())
	require.NoError(t, err)
	jsonCT := func(host string) map[string]string {
		return map[string]string{"Host": host, "Content-Type": "application/json"}
	}
	for _, host := range []string{"evil.example", "evil.example:" + port, "127.0.0.1.evil.example", "localhost.evil.example:" + port, "broker1.example.com"} {
		code, body := guardReq(t, b, "POST", "/api/v1/topics", `{"name":"rebound"}`, jsonCT(host))
		require.Equal(t, 421, code, "%s: %s", host, body)
		requireJSONError(t, body, 421, "is not a name of this broker")
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/api/v1/topics", "/ui/topics", "/metrics", "/nope"} {
			code, body = guardReq(t, b, "GET", p, "", map[string]string{"Host": host})
			require.Equal(t, 421, code, "%s %s: %s", host, p, body)
		}
		code, body = guardReq(t, b, "DELETE", "/api/v1/topics/t", "", map[string]string{"Host": host})
		require.Equal(t, 421, code, "%s: %s", host, body)
		for _, p := range []string{"/healthz", "/readyz"} {
			code, body = guardReq(t, b, "GET", p, "", map[string]string{"Host": host})
			require.Equal(t, 200, code, "%s %s: %s", host, p, body)
		}
	}
	require.False(t, b.topicOpen("rebound"))
	require.True(t, b.topicOpen("t"))
	for i, host := range []string{"localhost", "localhost:" + port, "LOCALHOST.:" + port, "127.0.0.1:" + port, "127.0.0.1", "[::1]:" + port, "[::1]", "10.1.2.3:" + port} {
		code, body := guardReq(t, b, "GET", "/debug/pprof/cmdline", "", map[string]string{"Host": host})
		require.Equal(t, 200, code, "%s: %s", host, body)
		name := "h" + strconv.Itoa(i)
		code, body = guardReq(t, b, "POST", "/api/v1/topics", `{"name":"`+name+`"}`, jsonCT(host))
		require.Equal(t, 201, code, "%s: %s", host, body)
	}
	// http_allowed_hosts, and the bind name.
	b2 := startBroker(t, 0, func(c *conf.Config) {
		c.Host = "localhost"
		c.HTTPAllowedHosts = []string{"broker1.example.com", "Broker2.Example.com."}
	})
	for _, host := range []string{"broker1.example.com", "BROKER1.example.com:8120", "broker2.example.com", "localhost"} {
		code, body := guardReq(t, b2, "GET", "/api/v1/topics", "", map[string]string{"Host": host})
		require.Equal(t, 200, code, "%s: %s", host, body)
	}
	code, body := guardReq(t, b2, "GET", "/api/v1/topics", "", map[string]string{"Host": "broker3.example.com"})
	require.Equal(t, 421, code, "%s", body)
	b3 := startBroker(t, 0, func(c *conf.Config) { c.HTTPAllowedHosts = []string{"*"} })
	code, body = guardReq(t, b3, "GET", "/api/v1/topics", "", map[string]string{"Host": "anything.example"})
	require.Equal(t, 200, code, "%s", body)
	// [auth] on: credentials decide, not the Host.
	ab := authBroker(t, &syncLog{})
	code, body = guardReq(t, ab, "GET", "/api/v1/topics", "", map[string]string{"Host": "evil.example"})
	require.Equal(t, 401, code, "%s", body)
	code, body = guardReq(t, ab, "GET", "/api/v1/topics", "", map[string]string{"Host": "evil.example", "Authorization": basic("root", "root-pw")})
	require.Equal(t, 200, code, "%s", body)
}

// TestHTTPErrorLength: error replies quote at most 64 bytes of a bad name
// (issue 22, finding 10c): an 800 KB name gives a short reply on every
// path that echoes one.
func TestHTTPErrorLength(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	huge := strings.Repeat("n", 800<<10)
	long := strings.Repeat("p", 12<<10) // a path fits in the 16 KB header limit
	jsonCT := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/api/v1/topics", `{"name":"` + huge + `"}`},
		{"POST", "/api/v1/topics", `{"name":"x\u0000` + huge + `"}`},
		{"POST", "/api/v1/groups/g1/offsets", `{"topic":"` + huge + `","to":"latest"}`},
		{"POST", "/api/v1/groups/g1/offsets", `{"topic":"t","to":"` + huge + `"}`},
		{"POST", "/api/v1/groups/g1/skip", `{"topic":"` + huge + `","partition":0}`},
		{"POST", "/api/v1/topics", `{"name":"a","` + huge + `":1}`},
		{"POST", "/api/v1/topics/" + long + "/partitions", `{"num_partitions":3}`},
		{"GET", "/api/v1/topics/" + long, ""},
		{"DELETE", "/api/v1/topics/" + long, ""},
		{"DELETE", "/api/v1/topics/t?delete_data=" + long, ""},
		{"GET", "/api/v1/groups/" + long, ""},
		{"GET", "/api/v1/groups/g1?topic=" + long, ""},
		{"GET", "/api/v1/groups/" + strings.Repeat("%01", 3000), ""},
		{"GET", "/" + long, ""},
		{"POST", "/api/v1/" + long, `{}`},
		{"GET", "/ui/topics/" + long, ""},
		{"GET", "/ui/topics/t/messages?partition=" + long, ""},
		{"GET", "/ui/groups/" + long, ""},
		{"GET", "/ui/" + long, ""},
	} {
		h := map[string]string{}
		if tc.body != "" {
			h = jsonCT
		}
		code, body := guardReq(t, b, tc.method, tc.path, tc.body, h)
		require.GreaterOrEqual(t, code, 400, "%s %.80s", tc.method, tc.path)
		require.Less(t, code, 500, "%s %.80s: %.300s", tc.method, tc.path, body)
		limit := 1024
		if strings.HasPrefix(tc.path, "/ui/") {
			limit = 4096 // the page around the message
		}
		require.Less(t, len(body), limit, "%s %.80s: %d bytes: %.300s", tc.method, tc.path, len(body), body)
		require.NotContains(t, string(body), strings.Repeat("n", 65))
		require.NotContains(t, string(body), strings.Repeat("p", 65))
	}
}

// TestAuditLog: every admin change through the API and the dashboard is
// logged with component=audit, the user and the remote address (issue 22,
// finding 10a).
func TestAuditLog(t *testing.T) {
	t.Parallel()
	logs := &syncLog{}
	b := authBroker(t, logs)
	root := map[string]string{"Authorization": basic("root", "root-pw"), "Content-Type": "application/json"}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/api/v1/topics", `{"name":"audited","num_partitions":2}`},
		{"POST", "/api/v1/topics/audited/partitions", `{"num_partitions":3}`},
		{"POST", "/api/v1/groups/g1/offsets", `{"topic":"t","to":"latest"}`},
		{"POST", "/api/v1/groups/g1/offsets", `{"topic":"t","to":"earliest","partition":0}`},
		{"POST", "/api/v1/groups/g1/offsets", `{"topic":"t","to":"latest","dry_run":true}`},
		{"POST", "/api/v1/groups/g1/skip", `{"topic":"t","partition":0}`},
		{"DELETE", "/api/v1/topics/audited?delete_data=true", ""},
	} {
		code, body := guardReq(t, b, r.method, r.path, r.body, root)
		require.Less(t, code, 300, "%s %s: %s", r.method, r.path, body)
	}
	// The dashboard's form.
	code, body := guardReq(t, b, "POST", "/ui/topics", "name=fromui&partitions=1&csrf="+b.web.srv.CSRFToken("root"),
		map[string]string{"Authorization": basic("root", "root-pw"), "Content-Type": "application/x-www-form-urlencoded"})
	require.Equal(t, 303, code, "%s", body)

	var audit []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "component=audit") {
			audit = append(audit, l)
		}
	}
	require.Len(t, audit, 7, "one line per change, none for the dry run:\n%s", strings.Join(audit, "\n"))
	for _, l := range audit {
		require.Contains(t, l, "user=root")
		require.Regexp(t, `remote=127\.0\.0\.1:\d+`, l)
	}
	want := []string{
		`audit: topic.create component=audit user=root remote=127.0.0.1:\d+ via=api action=topic.create topic=audited partitions=2`,
		`action=topic.partitions topic=audited partitions_before=2 partitions=3`,
		`action=group.reset group=g1 topic=t to=latest partitions=2 offsets="p0:-1->\d+ p1:-1->0"`,
		`action=group.reset group=g1 topic=t to=earliest partitions=1 offsets="?p0:\d+->0"?`,
		`action=group.skip group=g1 topic=t to="latest \(skip\)" partitions=1 offsets="?p0:0->\d+"?`,
		`action=topic.delete topic=audited delete_data=true`,
		`via=dashboard action=topic.create topic=fromui partitions=1`,
	}
	for i, w := range want {
		require.Regexp(t, w, audit[i])
	}
}

// TestAuditAuthOff: with [auth] off the user is "-".
func TestAuditAuthOff(t *testing.T) {
	t.Parallel()
	logs := &syncLog{}
	cfg := testConfig()
	cfg.Host, cfg.Port, cfg.DataDir = "127.0.0.1", 0, t.TempDir()
	cfg.Topics = []conf.Topic{{Name: "t"}}
	b, err := New(cfg, Options{Logf: logs.Logf})
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })
	code, body := guardReq(t, b, "POST", "/api/v1/topics", `{"name":"anon"}`, map[string]string{"Content-Type": "application/json"})
	require.Equal(t, 201, code, "%s", body)
	require.Regexp(t, `component=audit user=- remote=127\.0\.0\.1:\d+ via=api action=topic.create topic=anon`, logs.String())
}
