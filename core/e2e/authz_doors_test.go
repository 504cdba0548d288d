package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The users of TestAuthzDoors: root is an admin; alice may publish and
// subscribe to orders* and use the billing* groups; bob may only publish
// (orders* and inbox) and use the shipping* groups. Nobody but root has a
// right on secret. Each password is the name + "-pw".
const authzUsers = `
[[auth.user]]
name = "root"
password_hash = %q
admin = true

[[auth.user]]
name = "alice"
password_hash = %q
publish = ["orders*"]
subscribe = ["orders*"]
groups = ["billing*"]

[[auth.user]]
name = "bob"
password_hash = %q
publish = ["orders*", "inbox"]
groups = ["shipping*"]
`

// secretBody is the message in topic secret that no door may show to
// alice or bob.
const secretBody = "top-secret-payload-7f3a"

// authzServer is a real metaq-server with auth, a plaintext and a TLS
// port, and HTTPS.
type authzServer struct {
	p                  *brokertest.Server
	plain, tlsAddr     string
	httpBase           string
	certs              *testsvc.Certs
	httpc              *http.Client
	tlsCfg             *tls.Config
	mu                 sync.Mutex
	conns              map[string]*client // door/user -> logged-in connection
	stopBeat, beatDone chan struct{}
}

// freePorts returns n distinct free 127.0.0.1 ports other than avoid (the
// caller retries when one is taken meanwhile: testsvc.StartOnFreePort,
// whose port, released before its start runs, the kernel may hand out
// again).
func freePorts(t testing.TB, n, avoid int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for len(out) < n && len(lns) < n+8 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns = append(lns, ln)
		if p := ln.Addr().(*net.TCPAddr).Port; p != avoid {
			out = append(out, p)
		}
	}
	require.Len(t, out, n, "free ports besides %d", avoid)
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

func startAuthzServer(t *testing.T) *authzServer {
	dir := t.TempDir()
	certs := testsvc.NewCerts(t)
	cf, kf, _ := certs.Server(t, "server")
	var hashes []any
	for _, u := range []string{"root", "alice", "bob"} {
		h, err := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		require.NoError(t, err)
		hashes = append(hashes, string(h))
	}
	s := &authzServer{certs: certs, conns: map[string]*client{}, tlsCfg: certs.ClientConfig(t, "")}
	require.NoError(t, testsvc.StartOnFreePort(func(port int) error {
		ps := freePorts(t, 2, port)
		config := filepath.Join(dir, "server.toml")
		toml := fmt.Sprintf(`data_dir = %q
host = "127.0.0.1"
journal_file_size = 1048576
port = %d
tls_port = %d
http_port = %d
num_partitions = 1

[tls]
cert_file = %q
key_file = %q
client_ca_file = %q

[auth]
enabled = true
failure_delay = 10
`, filepath.Join(dir, "data"), port, ps[0], ps[1], cf, kf, certs.CAFile) + fmt.Sprintf(authzUsers, hashes...) + `
[[topic]]
name = "orders"

[[topic]]
name = "secret"

[[topic]]
name = "inbox"
`
		if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
			return err
		}
		var err error
		s.p, err = brokertest.Launch(brokertest.ServerBinary(t), nil, "--config", config)
		if err != nil && s.p != nil {
			s.p.Kill()
			return fmt.Errorf("%w\n%s", err, s.p.Logs.String())
		}
		if err == nil {
			s.plain = s.p.Addr
			s.tlsAddr = "127.0.0.1:" + strconv.Itoa(ps[0])
			s.httpBase = "https://127.0.0.1:" + strconv.Itoa(ps[1])
		}
		return err
	}))
	t.Cleanup(func() {
		s.p.Kill()
		if t.Failed() {
			t.Logf("metaq-server log:\n%s", s.p.Logs.Tail(8<<10))
		}
	})
	require.Contains(t, s.p.Logs.String(), "metaq-server tls on "+s.tlsAddr)
	s.httpc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: s.tlsCfg}}
	return s
}

// conn returns user's logged-in connection over the plaintext ("tcp") or
// the TLS ("tls") port.
func (s *authzServer) conn(t *testing.T, door, user string) *client {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[door+"/"+user]; c != nil {
		return c
	}
	var c *client
	if door == "tls" {
		c = dialTLS(t, s.tlsAddr, s.tlsCfg)
	} else {
		c = dial(t, s.plain)
	}
	ok(t)(c.auth(user, user+"-pw"))
	s.conns[door+"/"+user] = c
	return c
}

// get does an HTTPS GET as user and returns the status and body.
func (s *authzServer) get(t *testing.T, user, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", s.httpBase+path, nil)
	require.NoError(t, err)
	req.SetBasicAuth(user, user+"-pw")
	resp, err := s.httpc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// seed puts messages to every topic, commits offsets for billing (orders,
// secret) and shipping (orders), and keeps root a member of each of
// those groups (heartbeats) so that stats groups lists them.
func (s *authzServer) seed(t *testing.T) {
	root := s.conn(t, "tcp", "root")
	for i := range 3 {
		mustPut(t, root, "orders", 0, []byte("order-"+strconv.Itoa(i)))
	}
	mustPut(t, root, "secret", 0, []byte(secretBody))
	mustPut(t, root, "inbox", 0, []byte("hello"))
	commit := func(group, topic string) {
		op := root.nextOpaque()
		ok(t)(root.call(protocol.AppendCommit(nil, group, []protocol.OffsetEntry{{Topic: topic, Partition: 0, Offset: 0, MsgID: -1}}, op), op))
	}
	commit("billing", "orders")
	commit("billing", "secret")
	commit("shipping", "orders")

	type member struct{ group, topic string }
	members := []member{{"billing", "orders"}, {"billing", "secret"}, {"shipping", "orders"}}
	mc := dial(t, s.plain)
	ok(t)(mc.auth("root", "root-pw"))
	gens := make([]int64, len(members))
	for i, m := range members {
		op := mc.nextOpaque()
		r := ok(t)(mc.call(protocol.AppendJoin(nil, m.group, m.topic, "m1", "default", op), op))
		gen, _, err := protocol.ParseGroupView(r.Body)
		require.NoError(t, err)
		gens[i] = gen
	}
	s.stopBeat, s.beatDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.beatDone)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stopBeat:
				return
			case <-tick.C:
			}
			for i, m := range members {
				op := mc.nextOpaque()
				r, err := mc.call(protocol.AppendHeartbeat(nil, m.group, m.topic, "m1", gens[i], op), op)
				if err != nil {
					return
				}
				if r.Code != protocol.StatusOK { // removed (a heartbeat late under load): join again
					op = mc.nextOpaque()
					if r, err = mc.call(protocol.AppendJoin(nil, m.group, m.topic, "m1", "default", op), op); err != nil {
						return
					}
				}
				if gen, _, err := protocol.ParseGroupView(r.Body); err == nil {
					gens[i] = gen
				}
			}
		}
	}()
	t.Cleanup(func() { close(s.stopBeat); mc.close(); <-s.beatDone })
}

// A verdict is what a door answered: allowed, or denied with a text.
type verdict struct {
	allowed bool
	text    string // the denial's text
}

func (v verdict) String() string {
	if v.allowed {
		return "allowed"
	}
	return "denied: " + v.text
}

// tcpVerdict reads a protocol reply: 403 is a denial, anything but 401 is
// allowed (a get past the data is 404, still allowed).
func tcpVerdict(t *testing.T, r reply, err error) verdict {
	t.Helper()
	require.NoError(t, err)
	require.NotEqual(t, protocol.StatusUnauthorized, r.Code, "%v", r)
	if r.Op == protocol.OpResult && r.Code == protocol.StatusForbidden {
		return verdict{text: string(r.Body)}
	}
	return verdict{allowed: true}
}

// apiVerdict reads a JSON API reply: 200 allowed, 403 denied with its
// error text.
func apiVerdict(t *testing.T, code int, body string) verdict {
	t.Helper()
	switch code {
	case http.StatusOK:
		return verdict{allowed: true}
	case http.StatusForbidden:
		var e struct {
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		return verdict{text: e.Error}
	}
	t.Fatalf("API answered %d: %s", code, body)
	return verdict{}
}

var uiErrorText = regexp.MustCompile(`(?s)<p[^>]*id="error"[^>]*>(.*?)</p>`)

// uiVerdict reads a dashboard page: 200 allowed, 403 denied with the
// error page's message.
func uiVerdict(t *testing.T, code int, body string) verdict {
	t.Helper()
	switch code {
	case http.StatusOK:
		return verdict{allowed: true}
	case http.StatusForbidden:
		m := uiErrorText.FindStringSubmatch(body)
		require.NotNil(t, m, "no error message in the page:\n%s", body)
		return verdict{text: html.UnescapeString(strings.TrimSpace(m[1]))}
	}
	t.Fatalf("dashboard answered %d: %s", code, body)
	return verdict{}
}

// TestAuthzDoors: one authorization path for every door (issue 22,
// findings 1 and 8). The real metaq-server with [auth], a plaintext and a
// TLS port and HTTPS; root (admin), alice (publish and subscribe orders*,
// groups billing*) and bob (publish only, groups shipping*). For each user
// and resource — message browsing, a topic's description, message counts,
// a group's lag and offsets on a topic, the configuration, plugins — the
// plaintext port, the TLS port, the JSON API and the dashboard give the
// same verdict, and a denial reads the same on each door that names the
// resource (`user "alice" may not subscribe to topic "secret"`). Every
// listing (stats topics, offsets, partitions, groups, members; GET
// /api/v1/topics and /api/v1/groups; /ui/topics and /ui/groups; /metrics)
// names exactly the topics and groups the user may see.
func TestAuthzDoors(t *testing.T) {
	t.Parallel()
	s := startAuthzServer(t)
	s.seed(t)
	users := []string{"root", "alice", "bob"}

	// A door asks for a resource as a user; nil means the door has no
	// such request.
	type door func(t *testing.T, user string) verdict
	tcp := func(item func(c *client) (reply, error)) [2]door {
		var out [2]door
		for i, d := range []string{"tcp", "tls"} {
			out[i] = func(t *testing.T, user string) verdict {
				r, err := item(s.conn(t, d, user))
				return tcpVerdict(t, r, err)
			}
		}
		return out
	}
	stats := func(item string) [2]door {
		return tcp(func(c *client) (reply, error) { return c.stats(item) })
	}
	api := func(path string) door {
		return func(t *testing.T, user string) verdict {
			code, body := s.get(t, user, path)
			return apiVerdict(t, code, body)
		}
	}
	ui := func(path string) door {
		return func(t *testing.T, user string) verdict {
			code, body := s.get(t, user, path)
			return uiVerdict(t, code, body)
		}
	}
	fetch := func(group, topic string) [2]door {
		return tcp(func(c *client) (reply, error) {
			op := c.nextOpaque()
			return c.call(protocol.AppendFetch(nil, group, []protocol.OffsetEntry{{Topic: topic, Partition: 0}}, op), op)
		})
	}
	get := func(topic string) [2]door {
		return tcp(func(c *client) (reply, error) { return c.get(topic, 0, 0, 1<<20) })
	}
	// sameText: the doors naming a topic or group must give the same
	// denial; admin-only operations are named per door ("run stats
	// config", "GET /ui/config") and end in "(admin only)".
	type row struct {
		resource string
		tcp      [2]door
		api, ui  door
		allowed  map[string]bool
		adminOp  bool
	}
	yes := func(us ...string) map[string]bool {
		m := map[string]bool{}
		for _, u := range us {
			m[u] = true
		}
		return m
	}
	rows := []row{
		{resource: "messages of orders", tcp: get("orders"), ui: ui("/ui/topics/orders/messages?partition=0"), allowed: yes("root", "alice")},
		{resource: "messages of secret", tcp: get("secret"), ui: ui("/ui/topics/secret/messages?partition=0"), allowed: yes("root")},
		{resource: "messages of inbox", tcp: get("inbox"), ui: ui("/ui/topics/inbox/messages?partition=0"), allowed: yes("root")},
		{resource: "topic orders", tcp: stats("orders"), api: api("/api/v1/topics/orders"), ui: ui("/ui/topics/orders"), allowed: yes("root", "alice", "bob")},
		{resource: "topic secret", tcp: stats("secret"), api: api("/api/v1/topics/secret"), ui: ui("/ui/topics/secret"), allowed: yes("root")},
		{resource: "topic inbox", tcp: stats("inbox"), api: api("/api/v1/topics/inbox"), ui: ui("/ui/topics/inbox"), allowed: yes("root", "bob")},
		{resource: "topic nosuch (no existence oracle)", tcp: stats("nosuch"), api: nil, ui: nil, allowed: yes("root")},
		{resource: "count of orders", tcp: stats("count:orders:0:0"), allowed: yes("root", "alice")},
		{resource: "count of secret", tcp: stats("count:secret:0:0"), allowed: yes("root")},
		{resource: "count of inbox", tcp: stats("count:inbox:0:0"), allowed: yes("root")},
		{resource: "lag of billing on orders", tcp: fetch("billing", "orders"), api: api("/api/v1/groups/billing?topic=orders"),
			ui: ui("/ui/groups/billing?topic=orders"), allowed: yes("root", "alice")},
		{resource: "lag of billing on secret", tcp: fetch("billing", "secret"), api: api("/api/v1/groups/billing?topic=secret"),
			ui: ui("/ui/groups/billing?topic=secret"), allowed: yes("root")},
		{resource: "lag of shipping on orders", tcp: fetch("shipping", "orders"), api: api("/api/v1/groups/shipping?topic=orders"),
			ui: ui("/ui/groups/shipping?topic=orders"), allowed: yes("root")},
		{resource: "group billing", api: api("/api/v1/groups/billing"), ui: ui("/ui/groups/billing"), allowed: yes("root", "alice")},
		{resource: "group shipping", api: api("/api/v1/groups/shipping"), ui: ui("/ui/groups/shipping"), allowed: yes("root", "bob")},
		{resource: "config", tcp: stats("config"), ui: ui("/ui/config"), allowed: yes("root"), adminOp: true},
		{resource: "plugins", tcp: stats("plugins"), api: api("/api/v1/plugins"), ui: ui("/ui/plugins"), allowed: yes("root"), adminOp: true},
		{resource: "transactions", tcp: stats("transactions"), allowed: yes("root"), adminOp: true},
	}
	for _, r := range rows {
		for _, u := range users {
			var got []string
			var texts []string
			check := func(name string, d door) {
				if d == nil {
					return
				}
				v := d(t, u)
				got = append(got, name+" "+v.String())
				require.Equal(t, r.allowed[u], v.allowed, "%s as %s through %s: %s", r.resource, u, name, v)
				if !v.allowed {
					require.Contains(t, v.text, `user "`+u+`" may not `, "%s as %s through %s", r.resource, u, name)
					if r.adminOp {
						require.True(t, strings.HasSuffix(v.text, "(admin only)"), "%s as %s through %s: %s", r.resource, u, name, v.text)
					} else {
						texts = append(texts, v.text)
					}
				}
			}
			check("tcp", r.tcp[0])
			check("tls", r.tcp[1])
			check("api", r.api)
			check("dashboard", r.ui)
			for _, x := range texts {
				require.Equal(t, texts[0], x, "%s as %s: the doors word the denial differently: %v", r.resource, u, got)
			}
			t.Logf("%-36s %-5s %s", r.resource, u, strings.Join(got, "; "))
		}
	}

	// Listings: each door names exactly the topics and group positions
	// the user may see.
	wantTopics := map[string][]string{"root": {"inbox", "orders", "secret"}, "alice": {"orders"}, "bob": {"inbox", "orders"}}
	wantGroups := map[string][]string{"root": {"billing/orders", "billing/secret", "shipping/orders"}, "alice": {"billing/orders"}, "bob": nil}
	for _, u := range users {
		for _, d := range []string{"tcp", "tls"} {
			c := s.conn(t, d, u)
			require.Equal(t, wantTopics[u], firstWords(ok(t)(c.stats("topics")).Body), "stats topics as %s over %s", u, d)
			require.Equal(t, wantTopics[u], firstWords(ok(t)(c.stats("offsets")).Body), "stats offsets as %s over %s", u, d)
			require.Equal(t, wantTopics[u], firstWords(ok(t)(c.stats("partitions")).Body), "stats partitions as %s over %s", u, d)
			// The members heartbeat; one removed for a late heartbeat
			// under load joins again, so the group lists are awaited.
			for _, item := range []string{"groups", "members"} {
				deadline := time.Now().Add(20 * time.Second)
				for {
					last := groupPairs(ok(t)(c.stats(item)).Body)
					if slices.Equal(wantGroups[u], last) {
						break
					}
					require.True(t, time.Now().Before(deadline), "stats %s as %s over %s: %v, want %v", item, u, d, last, wantGroups[u])
					time.Sleep(50 * time.Millisecond)
				}
			}
			sum := parseStats(t, ok(t)(c.stats("")).Body)
			require.Equal(t, strconv.Itoa(len(wantTopics[u])), sum["topics"], "stats topics count as %s", u)
		}
		code, body := s.get(t, u, "/api/v1/topics")
		require.Equal(t, 200, code, body)
		var ts struct {
			Topics []struct {
				Name string `json:"name"`
			} `json:"topics"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &ts))
		var names []string
		for _, x := range ts.Topics {
			names = append(names, x.Name)
		}
		require.Equal(t, wantTopics[u], names, "GET /api/v1/topics as %s", u)

		code, body = s.get(t, u, "/api/v1/groups")
		require.Equal(t, 200, code, body)
		var gs struct {
			Groups []struct {
				Group string `json:"group"`
				Topic string `json:"topic"`
			} `json:"groups"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &gs))
		var pairs []string
		for _, g := range gs.Groups {
			pairs = append(pairs, g.Group+"/"+g.Topic)
		}
		require.Equal(t, wantGroups[u], pairs, "GET /api/v1/groups as %s", u)

		code, body = s.get(t, u, "/ui/topics")
		require.Equal(t, 200, code, body)
		require.Equal(t, wantTopics[u], matches(uiTopicRow, body), "/ui/topics as %s", u)
		code, body = s.get(t, u, "/ui/groups")
		require.Equal(t, 200, code, body)
		var uiPairs []string
		for _, m := range uiGroupRow.FindAllStringSubmatch(body, -1) {
			uiPairs = append(uiPairs, html.UnescapeString(m[1])+"/"+html.UnescapeString(m[2]))
		}
		require.Equal(t, wantGroups[u], uiPairs, "/ui/groups as %s", u)

		code, body = s.get(t, u, "/metrics")
		require.Equal(t, 200, code, body)
		var mt []string
		for _, m := range metricTopic.FindAllStringSubmatch(body, -1) {
			if len(mt) == 0 || mt[len(mt)-1] != m[1] {
				mt = appendUnique(mt, m[1])
			}
		}
		require.ElementsMatch(t, wantTopics[u], mt, "topics in /metrics as %s", u)
		require.Contains(t, body, "metaq_connections ", "the broker's health is every user's")

		// An admin sees the group pages' lag for every topic, a user only
		// for the topics they may subscribe to.
		code, body = s.get(t, u, "/api/v1/groups/billing")
		if u == "bob" {
			require.Equal(t, 403, code, body)
			continue
		}
		require.Equal(t, 200, code, body)
		var desc struct {
			Topics []struct {
				Topic string `json:"topic"`
			} `json:"topics"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &desc))
		var dt []string
		for _, x := range desc.Topics {
			dt = append(dt, x.Topic)
		}
		want := map[string][]string{"root": {"orders", "secret"}, "alice": {"orders"}}[u]
		require.Equal(t, want, dt, "GET /api/v1/groups/billing as %s", u)
	}

	// Finding 1, as reported: alice browses secret on the dashboard.
	code, body := s.get(t, "alice", "/ui/topics/secret/messages?partition=0")
	require.Equal(t, 403, code, body)
	require.NotContains(t, body, secretBody)
	require.Contains(t, html.UnescapeString(body), `user "alice" may not subscribe to topic "secret"`)
	r := got(t)(s.conn(t, "tcp", "alice").get("secret", 0, 0, 1<<20))
	require.Equal(t, 403, r.Code)
	require.Equal(t, `user "alice" may not subscribe to topic "secret"`, string(r.Body))
	code, body = s.get(t, "root", "/ui/topics/secret/messages?partition=0")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, secretBody, "an admin browses it")

	// Finding 8's four items.
	code, body = s.get(t, "alice", "/ui/config")
	require.Equal(t, 403, code, body)
	require.NotContains(t, body, "shipping", "no other user's ACLs")
	require.NotContains(t, body, "bob")
	require.Contains(t, html.UnescapeString(body), `user "alice" may not GET /ui/config (admin only)`)
	code, body = s.get(t, "alice", "/api/v1/groups/billing?topic=secret")
	require.Equal(t, 403, code, body)
	require.NotContains(t, body, "committed_offset")
	require.Contains(t, body, `user \"alice\" may not subscribe to topic \"secret\"`)
	code, body = s.get(t, "alice", "/api/v1/groups")
	require.Equal(t, 200, code, body)
	require.NotContains(t, body, "secret")
	require.NotContains(t, body, "shipping")
	r = got(t)(s.conn(t, "tls", "alice").stats("count:secret:0:0"))
	require.Equal(t, 403, r.Code)
	require.Equal(t, `user "alice" may not subscribe to topic "secret"`, string(r.Body))
	require.NotContains(t, string(r.Body), "messages")

	// The topic page links to the messages only for a subscriber.
	for u, want := range map[string]bool{"root": true, "alice": true, "bob": false} {
		code, body := s.get(t, u, "/ui/topics/orders")
		require.Equal(t, 200, code, body)
		require.Equal(t, want, strings.Contains(body, `/ui/topics/orders/messages?partition=0`), "browse link for %s", u)
	}

	// bob publishes through the doors he has: a producer learns the
	// partitions from stats topics.
	bc := s.conn(t, "tls", "bob")
	mustPut(t, bc, "inbox", 0, []byte("from bob"))
	require.Contains(t, string(ok(t)(bc.stats("topics")).Body), "inbox partitions 1 ")
}

var (
	uiTopicRow  = regexp.MustCompile(`<tr data-topic="([^"]*)">`)
	uiGroupRow  = regexp.MustCompile(`<tr><td><a href="/ui/groups/[^"]*">([^<]*)</a></td><td>([^<]*)</td>`)
	metricTopic = regexp.MustCompile(`\{[^}]*topic="([^"]*)"`)
)

func matches(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// firstWords is the distinct first word of each line of a stats body
// (the topic), in order.
func firstWords(body []byte) []string {
	var out []string
	for _, l := range strings.Split(string(body), "\r\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] == "STATS" || f[0] == "END" {
			continue
		}
		out = appendUnique(out, f[0])
	}
	return out
}

// groupPairs is the distinct "group/topic" of each line of stats groups or
// stats members.
func groupPairs(body []byte) []string {
	var out []string
	for _, l := range strings.Split(string(body), "\r\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] == "STATS" || f[0] == "END" {
			continue
		}
		out = appendUnique(out, f[0]+"/"+f[1])
	}
	return out
}
