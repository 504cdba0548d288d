package broker

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// limitedBroker starts a plaintext broker with auth on, failure_delay 0,
// the login limiter at max_failures 2, lockout 300 ms (max 600 ms), and
// its HTTP listener.
func limitedBroker(t *testing.T, logs *syncLog, edits ...func(*conf.Config)) *Broker {
	t.Helper()
	cfg := testConfig()
	cfg.Host = "127.0.0.1"
	cfg.DataDir = t.TempDir()
	cfg.Topics = []conf.Topic{{Name: "orders"}}
	cfg.Auth = conf.Auth{Enabled: true, Users: hashedUsers(t), MaxFailures: 2, Lockout: 300, MaxLockout: 600, FailureWindow: 60000}
	for _, e := range edits {
		e(cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg.Port = ln.Addr().(*net.TCPAddr).Port
	b, err := New(cfg, Options{Logf: logs.Logf})
	require.NoError(t, err)
	require.NoError(t, b.ServeListeners(ln, nil))
	t.Cleanup(func() { b.Close() })
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, b.ServeHTTP(hln))
	return b
}

// dialFrom connects to addr from the loopback address ip (127.0.0.x: each
// is a source of its own to the limiter).
func authDialFrom(t *testing.T, addr, ip string) *authClient {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	nc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(time.Minute))
	return &authClient{t: t, nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxBody: 8 << 20})}
}

// basicFrom sends GET path with basic auth from ip; it returns the code,
// the body and the Retry-After header.
func basicFrom(t *testing.T, addr, ip, user, pass, path string) (int, string, string) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) { return d.DialContext(ctx, network, a) }}}
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	require.NoError(t, err)
	req.SetBasicAuth(user, pass)
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body), resp.Header.Get("Retry-After")
}

const throttledText = `: too many failed logins, retry after 1s`

// TestLoginLimiterWire runs the login limiter through the broker: failures
// on the wire lock the user for HTTP too and the other way round, a locked
// attempt is refused unchecked (the right password too) with the failure's
// text, counted in auth_throttled and metaq_auth_throttled_total, and the
// right password logs in once the lock ends.
func TestLoginLimiterWire(t *testing.T) {
	// Not parallel: the lock it checks lasts 300 ms.
	logs := &syncLog{}
	b := limitedBroker(t, logs)
	root := authDialFrom(t, b.Addr(), "127.0.0.9")
	code, body := root.login("root", "root-pw")
	require.Equal(t, 200, code, body)

	// Two wrong passwords on the wire from two sources lock alice.
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		code, body = authDialFrom(t, b.Addr(), ip).login("alice", "wrong")
		require.Equal(t, 401, code)
		require.Equal(t, `authentication failed for user "alice"`, body)
	}
	require.Contains(t, logs.String(), `auth failed for user "alice": the password does not match; too many failed logins (source 127.0.0.3), locked: user for 300ms`)
	c := authDialFrom(t, b.Addr(), "127.0.0.4")
	code, body = c.login("alice", "alice-pw")
	require.Equal(t, 401, code)
	require.Equal(t, `authentication failed for user "alice"`+throttledText, body, "the right password is refused unchecked while locked")
	code, body = c.put("orders")
	require.Equal(t, 401, code, body)
	// HTTP basic auth shares the count: refused too, with Retry-After.
	code, body, retry := basicFrom(t, b.HTTPAddr(), "127.0.0.5", "alice", "alice-pw", "/metrics")
	require.Equal(t, 401, code)
	requireJSONError(t, []byte(body), 401, `authentication failed for user "alice"`+throttledText)
	require.Equal(t, "1", retry)
	require.Equal(t, 2, statValue(t, root, "auth_failures"))
	require.Equal(t, 2, statValue(t, root, "auth_throttled"))

	// Once the lock ends the right password works, and is unaffected.
	require.Eventually(t, func() bool { return b.users.Logins().Refused("alice", "127.0.0.4:1") == 0 }, 10*time.Second, 10*time.Millisecond)
	code, body = c.login("alice", "alice-pw")
	require.Equal(t, 200, code, body)
	code, body = c.put("orders")
	require.Equal(t, 200, code, body)

	// HTTP failures lock the wire: two from one source lock that source.
	for range 2 {
		code, body, _ = basicFrom(t, b.HTTPAddr(), "127.0.0.6", "nobody", "x", "/metrics")
		require.Equal(t, 401, code)
		requireJSONError(t, []byte(body), 401, `authentication failed for user "nobody"`)
	}
	code, body = authDialFrom(t, b.Addr(), "127.0.0.6").login("nopub", "nopub-pw")
	require.Equal(t, 401, code)
	require.Equal(t, `authentication failed for user "nopub"`+throttledText, body)

	h := newHTTPClient(t, b.HTTPAddr(), nil)
	code, scrape := h.as("root", "root-pw").get("/metrics")
	require.Equal(t, 200, code, "%s", scrape)
	require.Equal(t, 3.0, metricValue(t, scrape, "metaq_auth_throttled_total"))
	require.Equal(t, 4.0, metricValue(t, scrape, "metaq_auth_failures_total"))
	require.NotContains(t, logs.String(), "alice-pw")
}

// TestLoginLimiterHTTPCache checks that the cache of verified basic-auth
// credentials does not get past a lock: cached right credentials from a
// locked pair are refused like any attempt, and accepted once it ends.
func TestLoginLimiterHTTPCache(t *testing.T) {
	t.Parallel()
	// A lockout that outlasts the attempts below: at 300 ms it ended
	// before the third on a loaded machine (bcrypt under -race).
	b := limitedBroker(t, &syncLog{}, func(c *conf.Config) { c.Auth.Lockout, c.Auth.MaxLockout = 3000, 6000 })
	addr := b.HTTPAddr()
	code, body, _ := basicFrom(t, addr, "127.0.0.2", "nosub", "nosub-pw", "/metrics")
	require.Equal(t, 200, code, body) // cached now
	for range 2 {
		code, _, _ = basicFrom(t, addr, "127.0.0.2", "nosub", "guess", "/metrics")
		require.Equal(t, 401, code)
	}
	code, body, retry := basicFrom(t, addr, "127.0.0.2", "nosub", "nosub-pw", "/metrics")
	require.Equal(t, 401, code, "cached credentials passed a lock")
	require.Contains(t, []string{"1", "2", "3"}, retry, "Retry-After: the seconds left of a 3 s lock")
	requireJSONError(t, []byte(body), 401, `authentication failed for user "nosub": too many failed logins, retry after `+retry+"s")
	// The pair is trusted (it logged in), yet its own failures lock it.
	require.Eventually(t, func() bool { return b.users.Logins().Refused("nosub", "127.0.0.2:1") == 0 }, 20*time.Second, 10*time.Millisecond)
	code, body, _ = basicFrom(t, addr, "127.0.0.2", "nosub", "nosub-pw", "/metrics")
	require.Equal(t, 200, code, body)
}

// TestLoginAuthzidCountsAsFailure checks finding 11 against the limiter: an
// authzid the user may not assume, with the right password, is answered
// and counted as a wrong password, so that no sequence of attempts tells
// them apart.
func TestLoginAuthzidCountsAsFailure(t *testing.T) {
	t.Parallel()
	logs := &syncLog{}
	// A lockout long enough to outlast the attempts below: at 300 ms it
	// ended before the third one on a loaded machine (bcrypt under -race).
	b := limitedBroker(t, logs, func(c *conf.Config) { c.Auth.Lockout, c.Auth.MaxLockout = 30000, 60000 })
	retryIn := regexp.MustCompile(`retry after [0-9]+s$`)
	authzid := func(c *authClient) (int, string) {
		return c.call(func(d []byte, op int32) []byte {
			msg := "root\x00alice\x00alice-pw"
			return append(d, "auth PLAIN "+strconv.Itoa(len(msg))+" "+strconv.Itoa(int(op))+"\r\n"+msg...)
		})
	}
	c := authDialFrom(t, b.Addr(), "127.0.0.2")
	w := authDialFrom(t, b.Addr(), "127.0.0.3")
	for range 2 {
		code, body := authzid(c)
		require.Equal(t, 401, code)
		require.Equal(t, `authentication failed for user "alice"`, body)
	}
	// alice is locked now, for the right password with an authzid too.
	code, body := authzid(c)
	require.Equal(t, 401, code)
	require.Regexp(t, `^authentication failed for user "alice": too many failed logins, retry after (30|29)s$`, body)
	code, wbody := w.login("alice", "wrong")
	require.Equal(t, 401, code)
	require.Equal(t, retryIn.ReplaceAllString(body, ""), retryIn.ReplaceAllString(wbody, ""), "the same but for the seconds left")
	require.Contains(t, logs.String(), `right password, but a user may only act as itself, not as "root"`)
}

// TestLoginLimiterReload checks that a Reload applies new limits to the
// next attempt (the counts are kept) and reports them.
func TestLoginLimiterReload(t *testing.T) {
	t.Parallel()
	// A lockout that outlasts the third attempt on a loaded machine
	// (bcrypt under -race): at 300 ms it could end before it.
	b := limitedBroker(t, &syncLog{}, func(c *conf.Config) { c.Auth.Lockout, c.Auth.MaxLockout = 3000, 6000 })
	c := authDialFrom(t, b.Addr(), "127.0.0.2")
	for range 2 {
		code, _ := c.login("alice", "wrong")
		require.Equal(t, 401, code)
	}
	code, body := c.login("alice", "alice-pw")
	require.Equal(t, 401, code)
	require.Contains(t, body, "too many failed logins")

	next := *b.config()
	next.Auth.MaxFailures, next.Auth.Lockout, next.Auth.MaxLockout = 3, 4000, 8000
	rep, err := b.Reload(&next)
	require.NoError(t, err)
	require.Contains(t, rep.Applied, "auth.max_failures 2 -> 3")
	require.Contains(t, rep.Applied, "auth.lockout 3000 -> 4000")
	require.Contains(t, rep.Applied, "auth.max_lockout 6000 -> 8000")
	// Two failures are under the new limit of 3: the right password works.
	code, body = c.login("alice", "alice-pw")
	require.Equal(t, 200, code, body)

	// max_failures = 0 turns the limiter off.
	off := *b.config()
	off.Auth.MaxFailures = 0
	_, err = b.Reload(&off)
	require.NoError(t, err)
	for range 5 {
		code, body = c.login("nopub", "wrong")
		require.Equal(t, 401, code)
		require.Equal(t, `authentication failed for user "nopub"`, body)
	}
	code, body = c.login("nopub", "nopub-pw")
	require.Equal(t, 200, code, body)
}
