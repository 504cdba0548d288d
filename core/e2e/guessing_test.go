package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The guessing run's [auth] settings: 5 failures, then locks of 1 s and
// 2 s at most; failure_delay 100 ms keeps each connection's own pace.
const (
	guessMaxFailures  = 5
	guessLockout      = 1000 // ms
	guessMaxLockout   = 2000 // ms
	guessFailureDelay = 100  // ms
	guessConns        = 200
	guessFor          = 5 * time.Second
)

var guessLimits = security.LoginLimits{
	MaxFailures:   guessMaxFailures,
	Lockout:       guessLockout * time.Millisecond,
	MaxLockout:    guessMaxLockout * time.Millisecond,
	FailureWindow: time.Minute,
}

// guessBurst is how many checks the broker may have in flight when a first
// failure is counted: its bcrypt slots, GOMAXPROCS (the CPUs it sees).
func guessBurst() int { return max(runtime.NumCPU(), runtime.GOMAXPROCS(0)) }

// dialFromIP connects a raw client to addr from the loopback address ip:
// each 127.0.0.x is a source address of its own to the broker.
func dialFromIP(addr, ip string) (*client, error) {
	d := net.Dialer{Timeout: ioTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &client{nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxBody: 1 << 20})}, nil
}

// httpFromIP is an HTTP client whose connections come from ip.
func httpFromIP(ip string) *http.Client {
	d := net.Dialer{Timeout: ioTimeout, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 64,
		DialContext:         func(ctx context.Context, n, a string) (net.Conn, error) { return d.DialContext(ctx, n, a) },
	}}
}

// guessTally counts a guessing run's replies: checked (a wrong password
// the broker checked) and refused (the login limiter's refusal, unchecked).
type guessTally struct {
	mu               sync.Mutex
	checked, refused int
	other            []string
}

func (g *guessTally) add(user, reply string) {
	failed := `authentication failed for user "` + user + `"`
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case reply == failed:
		g.checked++
	case strings.HasPrefix(reply, failed+": too many failed logins, retry after "):
		g.refused++
	default:
		if len(g.other) < 5 {
			g.other = append(g.other, reply)
		}
	}
}

// check requires the run to stay within the documented rate: at most
// MaxChecks(span, burst) checked guesses, where span covers the run.
func (g *guessTally) check(t *testing.T, what string, conns int, span time.Duration) {
	t.Helper()
	limit := guessLimits.MaxChecks(span, guessBurst())
	t.Logf("%s: %d guesses checked, %d refused by the limiter in %v (documented bound %d; without the limiter about %d at one per failure_delay per connection)",
		what, g.checked, g.refused, span.Round(time.Millisecond), limit, int(span/(guessFailureDelay*time.Millisecond))*conns)
	require.Empty(t, g.other, "unexpected replies")
	require.Positive(t, g.checked)
	require.Positive(t, g.refused, "the limiter refused nothing")
	require.LessOrEqual(t, g.checked, limit, "%s: more guesses checked than the documented rate", what)
}

// serverStats reads `stats` on c.
func serverStats(t *testing.T, c *client) map[string]string {
	t.Helper()
	return parseStats(t, ok(t)(c.stats("")).Body)
}

func guessStat(t *testing.T, m map[string]string, key string) int {
	t.Helper()
	v, err := strconv.Atoi(m[key])
	require.NoError(t, err, "stats %s = %q", key, m[key])
	return v
}

// rawAuth sends auth PLAIN with msg (authzid NUL user NUL password) and
// opaque, and returns the reply frame's bytes as sent by the broker.
func rawAuth(t *testing.T, c *client, msg string, opaque int32) []byte {
	t.Helper()
	require.NoError(t, c.write([]byte("auth PLAIN "+strconv.Itoa(len(msg))+" "+strconv.Itoa(int(opaque))+"\r\n"+msg)))
	c.nc.SetReadDeadline(time.Now().Add(ioTimeout))
	br := bufio.NewReader(c.nc)
	head, err := br.ReadString('\n')
	require.NoError(t, err)
	f := strings.Fields(head) // result <code> <len> <opaque>
	require.Len(t, f, 4, "%q", head)
	n, err := strconv.Atoi(f[2])
	require.NoError(t, err)
	body := make([]byte, n)
	_, err = io.ReadFull(br, body)
	require.NoError(t, err)
	return append([]byte(head), body...)
}

// TestServerPasswordGuessing runs the real metaq-server with auth and the
// login limiter (issue 22, findings 5 and 11):
//   - 200 connections from one source guess a password for 5 s; the
//     guesses the broker checks stay within the documented rate, the rest
//     are refused unchecked, and the right password logs in once the lock
//     ends;
//   - 200 connections from 200 sources guess another user's: the per-user
//     count bounds them the same, while a client that logged in from its
//     own source before keeps logging in;
//   - HTTP basic auth, the same from 20 clients;
//   - an authzid the user may not assume, with the right password, is
//     answered byte for byte as a wrong password.
func TestServerPasswordGuessing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	users := ""
	for _, u := range []string{"alice", "bob", "carol", "dave", "root"} {
		h, err := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		require.NoError(t, err)
		users += fmt.Sprintf("[[auth.user]]\nname = %q\npassword_hash = %q\npublish = [\"orders\"]\nadmin = %v\n", u, h, u == "root")
	}
	config := filepath.Join(dir, "server.toml")
	// The connection limits are the slots tests' (slots_test.go): here
	// every guessing connection stays, unauthenticated, for the whole run.
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`auth_timeout = 0
max_unauthenticated_connections = 2000
max_unauthenticated_per_address = 1000

[auth]
enabled = true
failure_delay = %d
max_failures = %d
lockout = %d
max_lockout = %d
failure_window = 60000

%s
[[topic]]
name = "orders"
`, guessFailureDelay, guessMaxFailures, guessLockout, guessMaxLockout, users)), 0o600))
	p := startServer(t, config, filepath.Join(dir, "data"))
	m := httpLine.FindStringSubmatch(p.Logs.String())
	require.NotNil(t, m, "no HTTP line in:\n%s", p.Logs.String())
	httpAddr := m[1]

	root, err := dialFromIP(p.Addr, "127.0.0.9")
	require.NoError(t, err)
	defer root.close()
	ok(t)(root.auth("root", "root-pw"))

	// guessWire runs guessConns connections (from src(i)) that each send
	// wrong passwords for user until guessFor has passed; during, if not
	// nil, runs halfway through.
	guessWire := func(t *testing.T, user string, src func(i int) string, during func()) (*guessTally, time.Duration) {
		g := &guessTally{}
		clients := make([]*client, guessConns)
		for i := range clients {
			c, err := dialFromIP(p.Addr, src(i))
			require.NoError(t, err)
			defer c.close()
			clients[i] = c
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, guessConns)
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; time.Since(start) < guessFor; n++ {
					r, err := c.auth(user, fmt.Sprintf("guess-%d-%d", i, n))
					if err != nil {
						errs <- err
						return
					}
					g.add(user, string(r.Body))
				}
			}()
		}
		if during != nil {
			time.Sleep(guessFor / 2)
			during()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		return g, time.Since(start)
	}
	// loginAfterLock polls the right password from ip until the lock ends;
	// polls while locked are refused unchecked.
	loginAfterLock := func(t *testing.T, user, ip string) {
		c, err := dialFromIP(p.Addr, ip)
		require.NoError(t, err)
		defer c.close()
		deadline := time.Now().Add(guessMaxLockout*time.Millisecond + 10*time.Second)
		for {
			r, err := c.auth(user, user+"-pw")
			require.NoError(t, err)
			if r.Code == 200 {
				break
			}
			require.Contains(t, string(r.Body), "too many failed logins, retry after", "the right password was checked and refused")
			require.True(t, time.Now().Before(deadline), "still locked: %v", r)
			time.Sleep(100 * time.Millisecond)
		}
		ok(t)(c.put("orders", 0, []byte("after the lock")))
	}

	t.Run("one source", func(t *testing.T) {
		before := serverStats(t, root)
		g, took := guessWire(t, "alice", func(int) string { return "127.0.0.2" }, nil)
		g.check(t, "200 connections from one source", guessConns, took+time.Second)
		after := serverStats(t, root)
		require.Equal(t, g.checked, guessStat(t, after, "auth_failures")-guessStat(t, before, "auth_failures"))
		require.Equal(t, g.refused, guessStat(t, after, "auth_throttled")-guessStat(t, before, "auth_throttled"))
		loginAfterLock(t, "alice", "127.0.0.2")
	})

	t.Run("200 sources", func(t *testing.T) {
		// bob's own client logged in before the attack, from its source.
		own, err := dialFromIP(p.Addr, "127.0.0.250")
		require.NoError(t, err)
		defer own.close()
		ok(t)(own.auth("bob", "bob-pw"))
		// While the attack goes on (bob locked for every other source, as
		// the refusals from 200 sources with a handful checked show), bob's
		// own source logs in at once.
		during := func() {
			again, err := dialFromIP(p.Addr, "127.0.0.250")
			require.NoError(t, err)
			defer again.close()
			ok(t)(again.auth("bob", "bob-pw"))
			ok(t)(again.put("orders", 0, []byte("during the attack")))
		}
		g, took := guessWire(t, "bob", func(i int) string { return fmt.Sprintf("127.0.1.%d", i+1) }, during)
		g.check(t, "200 connections from 200 sources", guessConns, took+time.Second)
		loginAfterLock(t, "bob", "127.0.0.252")
	})

	t.Run("http basic auth", func(t *testing.T) {
		hc := httpFromIP("127.0.0.3")
		defer hc.CloseIdleConnections()
		basic := func(pass string) (int, string, error) {
			req, err := http.NewRequest("GET", "http://"+httpAddr+"/api/v1/topics", nil)
			if err != nil {
				return 0, "", err
			}
			req.SetBasicAuth("carol", pass)
			resp, err := hc.Do(req)
			if err != nil {
				return 0, "", err
			}
			defer resp.Body.Close()
			var e struct {
				Error string `json:"error"`
			}
			b, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != 200 {
				err = json.Unmarshal(b, &e)
			}
			return resp.StatusCode, e.Error, err
		}
		g := &guessTally{}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; time.Since(start) < guessFor; n++ {
					code, msg, err := basic(fmt.Sprintf("guess-%d-%d", i, n))
					if err == nil && code != 401 {
						err = fmt.Errorf("guess answered %d", code)
					}
					if err != nil {
						errs <- err
						return
					}
					g.add("carol", msg)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		g.check(t, "20 HTTP clients", 20, time.Since(start)+time.Second)
		deadline := time.Now().Add(guessMaxLockout*time.Millisecond + 10*time.Second)
		for {
			code, msg, err := basic("carol-pw")
			require.NoError(t, err)
			if code == 200 {
				break
			}
			require.Contains(t, msg, "too many failed logins, retry after")
			require.True(t, time.Now().Before(deadline), "still locked: %d %s", code, msg)
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("authzid", func(t *testing.T) {
		// dave with the right password, asking to act as root; and dave
		// with a wrong one: the same reply frame, the same delay at least.
		var frames [2][]byte
		for i, msg := range []string{"root\x00dave\x00dave-pw", "\x00dave\x00wrong"} {
			c, err := dialFromIP(p.Addr, fmt.Sprintf("127.0.0.%d", 4+i))
			require.NoError(t, err)
			start := time.Now()
			frames[i] = rawAuth(t, c, msg, 7)
			require.GreaterOrEqual(t, time.Since(start), guessFailureDelay*time.Millisecond)
			c.close()
		}
		require.Equal(t, "result 401 37 7\r\nauthentication failed for user \"dave\"", string(frames[0]))
		require.Equal(t, string(frames[0]), string(frames[1]))
		require.Contains(t, p.Logs.String(), `auth failed for user "dave": right password, but a user may only act as itself, not as "root"`)
	})
	require.NotContains(t, p.Logs.String(), "-pw")
}
