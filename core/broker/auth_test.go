package broker

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/tlsio"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// testFailureDelay is auth.failure_delay in these tests (ms).
const testFailureDelay = 300

// testUsers are the [[auth.user]] of secureBroker; each password is the
// user's name + "-pw". alice has every right on orders*/billing-*; the
// no* users miss one of them; root is admin.
var testUsers = []conf.User{
	{Name: "alice", Publish: []string{"orders*"}, Subscribe: []string{"orders*"}, Groups: []string{"billing-*"}},
	{Name: "nopub", Subscribe: []string{"orders*"}, Groups: []string{"billing-*"}},
	{Name: "nosub", Publish: []string{"orders*"}, Groups: []string{"billing-*"}},
	{Name: "nogroup", Publish: []string{"orders*"}, Subscribe: []string{"orders*"}},
	{Name: "root", Admin: true},
	{Name: "certonly", Publish: []string{"orders*"}, Subscribe: []string{"orders*"}}, // no password
}

var (
	hashOnce   sync.Once
	hashedUser []conf.User
)

// hashedUsers returns testUsers with bcrypt hashes (MinCost, to keep the
// tests fast; the cost does not change the logic).
func hashedUsers(t testing.TB) []conf.User {
	hashOnce.Do(func() {
		for _, u := range testUsers {
			if u.Name != "certonly" {
				h, err := bcrypt.GenerateFromPassword([]byte(u.Name+"-pw"), bcrypt.MinCost)
				require.NoError(t, err)
				u.PasswordHash = string(h)
			}
			hashedUser = append(hashedUser, u)
		}
	})
	return hashedUser
}

// secureBroker starts a broker with auth on and a plaintext and a TLS
// listener (client certificates verified against certs' CA). logs gets
// its log lines.
func secureBroker(t testing.TB, certs *testsvc.Certs, logs *syncLog, failureDelay int) *Broker {
	t.Helper()
	cf, kf, _ := certs.Server(t, "server")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mod := func(cfg *conf.Config) {
		cfg.Host = "127.0.0.1"
		cfg.NumPartitions = conf.Default().NumPartitions
		cfg.Topics = []conf.Topic{{Name: "orders"}, {Name: "secret"}}
		cfg.TLS = conf.TLS{CertFile: cf, KeyFile: kf, ClientCAFile: certs.CAFile, MinVersion: "1.2"}
		cfg.Auth = conf.Auth{Enabled: true, FailureDelay: failureDelay, Users: hashedUsers(t)}
		cfg.Port, cfg.TLSPort = ln.Addr().(*net.TCPAddr).Port, tln.Addr().(*net.TCPAddr).Port
	}
	return fixture{mods: []func(*conf.Config){mod}, opts: Options{Logf: logs.Logf}, serve: func(b *Broker) error { return b.ServeListeners(ln, tln) }}.start(t)
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// authClient is a raw protocol connection for the auth tests.
type authClient struct {
	t   testing.TB
	nc  net.Conn
	dec *protocol.Decoder
	op  int32
	req protocol.Request
}

func dialAuth(t testing.TB, addr string, tc *tls.Config) *authClient {
	t.Helper()
	var nc net.Conn
	var err error
	if tc != nil {
		// As the SDK dials: reads buffered under the tls.Conn.
		var raw net.Conn
		if raw, err = net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
			c := tls.Client(tlsio.BufferReads(raw), tc)
			raw.SetDeadline(time.Now().Add(5 * time.Second))
			if err = c.Handshake(); err != nil {
				raw.Close()
			}
			nc = c
		}
	} else {
		nc, err = net.DialTimeout("tcp", addr, 5*time.Second)
	}
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(time.Minute))
	return &authClient{t: t, nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxBody: 8 << 20})}
}

// call sends the frame encode appends and returns the reply's code and body.
func (c *authClient) call(encode func(dst []byte, opaque int32) []byte) (int, string) {
	c.t.Helper()
	c.op++
	_, err := c.nc.Write(encode(nil, c.op))
	require.NoError(c.t, err)
	require.NoError(c.t, c.dec.Decode(&c.req))
	require.Equal(c.t, c.op, c.req.Opaque, "reply to another request: %s %d %q", c.req.Op, c.req.Code, c.req.Body)
	return c.req.Code, string(c.req.Body)
}

func (c *authClient) login(user, password string) (int, string) {
	return c.call(func(d []byte, op int32) []byte { return protocol.AppendAuthPlain(d, user, password, op) })
}

func (c *authClient) put(topic string) (int, string) {
	return c.call(func(d []byte, op int32) []byte { return protocol.AppendPut(d, topic, 0, 0, -1, op, []byte("m")) })
}

func (c *authClient) get(topic string) (int, string) {
	return c.call(func(d []byte, op int32) []byte { return protocol.AppendGet(d, topic, "billing-1", 0, 0, 1024, op) })
}

func (c *authClient) offset(topic string) (int, string) {
	return c.call(func(d []byte, op int32) []byte { return protocol.AppendOffset(d, topic, "billing-1", 0, 0, op) })
}

func (c *authClient) stats(item string) (int, string) {
	return c.call(func(d []byte, op int32) []byte { return protocol.AppendStats(d, item, op) })
}

func (c *authClient) commit(group, topic string) (int, string) {
	return c.call(func(d []byte, op int32) []byte {
		return protocol.AppendCommit(d, group, []protocol.OffsetEntry{{Topic: topic, Partition: 0, Offset: 0, MsgID: -1}}, op)
	})
}

func (c *authClient) fetch(group, topic string) (int, string) {
	return c.call(func(d []byte, op int32) []byte {
		return protocol.AppendFetch(d, group, []protocol.OffsetEntry{{Topic: topic, Partition: 0}}, op)
	})
}

func (c *authClient) join(group, topic string) (int, string) {
	return c.call(func(d []byte, op int32) []byte { return protocol.AppendJoin(d, group, topic, "m1", "default", op) })
}

func (c *authClient) leave(group, topic string) (int, string) {
	return c.call(func(d []byte, op int32) []byte { return protocol.AppendLeave(d, group, topic, "m1", op) })
}

// summary returns the `stats` value of key, read on a root connection.
func statValue(t testing.TB, c *authClient, key string) int {
	t.Helper()
	code, body := c.stats("")
	require.Equal(t, 200, code, body)
	for _, l := range strings.Split(body, "\r\n") {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in stats:\n%s", key, body)
	return 0
}

// TestAuth is the table test of authentication and authorization over
// plaintext, TLS, and TLS with a client certificate standing in for the
// password.
func TestAuth(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	logs := &syncLog{}
	b := secureBroker(t, certs, logs, testFailureDelay)
	defer func() {
		if t.Failed() {
			t.Logf("broker log:\n%s", logs.String())
		}
	}()

	type transport struct {
		name string
		addr string
		tls  *tls.Config
		// cn is the client certificate's CN, "" for none.
		cn string
	}
	transports := []transport{
		{"plaintext", b.Addr(), nil, ""},
		{"tls", b.TLSAddr(), certs.ClientConfig(t, ""), ""},
		{"mtls", b.TLSAddr(), nil, "alice"},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			// connect returns a connection logged in as user (by password,
			// or by the certificate on mtls).
			connect := func(t *testing.T, user string) *authClient {
				tc := tr.tls
				if tr.name == "mtls" {
					tc = certs.ClientConfig(t, user)
				}
				c := dialAuth(t, tr.addr, tc)
				if tr.name != "mtls" && user != "" {
					code, body := c.login(user, user+"-pw")
					require.Equal(t, 200, code, body)
					require.Empty(t, body)
				}
				return c
			}

			t.Run("right password", func(t *testing.T) {
				c := connect(t, "alice")
				code, body := c.put("orders")
				require.Equal(t, 200, code, body)
				code, body = c.get("orders")
				require.Equal(t, 200, code, body)
				code, body = c.offset("orders")
				require.Equal(t, 200, code, body)
				code, body = c.commit("billing-1", "orders")
				require.Equal(t, 200, code, body)
				code, body = c.fetch("billing-1", "orders")
				require.Equal(t, 200, code, body)
				code, body = c.join("billing-1", "orders")
				require.Equal(t, 200, code, body)
				code, body = c.leave("billing-1", "orders")
				require.Equal(t, 200, code, body)
				code, body = c.stats("")
				require.Equal(t, 200, code, body)
				// Outside alice's lists.
				code, body = c.put("secret")
				require.Equal(t, 403, code, body)
				require.Contains(t, body, `user "alice" may not publish to topic "secret"`)
				code, _ = c.get("secret")
				require.Equal(t, 403, code)
				code, _ = c.commit("other", "orders")
				require.Equal(t, 403, code)
			})

			t.Run("wrong password", func(t *testing.T) {
				root := connect(t, "root")
				before := statValue(t, root, "auth_failures")
				for _, tc := range []struct{ user, password, want string }{
					{"alice", "wrong", `authentication failed for user "alice"`},
					{"nobody", "nobody-pw", `authentication failed for user "nobody"`},
					{"certonly", "", `authentication failed for user "certonly"`},
				} {
					c := dialAuth(t, tr.addr, tr.tls)
					if tr.name == "mtls" {
						c = dialAuth(t, tr.addr, certs.ClientConfig(t, ""))
					}
					start := time.Now()
					code, body := c.login(tc.user, tc.password)
					took := time.Since(start)
					require.Equal(t, 401, code, body)
					require.Equal(t, tc.want, body)
					require.GreaterOrEqual(t, took, testFailureDelay*time.Millisecond, "401 came before failure_delay")
					t.Logf("%s: 401 after %v (failure_delay %d ms)", tc.user, took, testFailureDelay)
					code, _ = c.put("orders")
					require.Equal(t, 401, code)
				}
				require.Equal(t, before+3, statValue(t, root, "auth_failures"))
				require.NotContains(t, logs.String(), "nobody-pw")
				require.Contains(t, logs.String(), `auth failed for user "nobody"`)
			})

			t.Run("no auth", func(t *testing.T) {
				tc := tr.tls
				if tr.name == "mtls" {
					tc = certs.ClientConfig(t, "stranger") // CN names no user
				}
				c := dialAuth(t, tr.addr, tc)
				for _, f := range []func() (int, string){
					func() (int, string) { return c.put("orders") },
					func() (int, string) { return c.get("orders") },
					func() (int, string) { return c.stats("") },
					func() (int, string) { return c.commit("billing-1", "orders") },
				} {
					code, body := f()
					require.Equal(t, 401, code, body)
					require.Equal(t, "authentication required: send auth PLAIN first", body)
				}
				code, body := c.call(protocol.AppendVersion)
				require.Equal(t, 200, code, body)
				// A password still works on that connection.
				code, body = c.login("alice", "alice-pw")
				require.Equal(t, 200, code, body)
				code, body = c.put("orders")
				require.Equal(t, 200, code, body)
			})

			t.Run("missing permission", func(t *testing.T) {
				type op struct {
					name string
					run  func(c *authClient) (int, string)
				}
				publish := op{"put", func(c *authClient) (int, string) { return c.put("orders") }}
				subscribe := []op{
					{"get", func(c *authClient) (int, string) { return c.get("orders") }},
					{"offset", func(c *authClient) (int, string) { return c.offset("orders") }},
				}
				group := []op{
					{"commit", func(c *authClient) (int, string) { return c.commit("billing-1", "orders") }},
					{"fetch", func(c *authClient) (int, string) { return c.fetch("billing-1", "orders") }},
					{"join", func(c *authClient) (int, string) { return c.join("billing-1", "orders") }},
					{"leave", func(c *authClient) (int, string) { return c.leave("billing-1", "orders") }},
				}
				admin := []op{
					{"stats config", func(c *authClient) (int, string) { return c.stats("config") }},
					{"stats reset", func(c *authClient) (int, string) { return c.stats("reset") }},
				}
				open := op{"stats", func(c *authClient) (int, string) { return c.stats("topics") }}
				cases := []struct {
					user          string
					denied, works []op
				}{
					{"nopub", []op{publish}, append(append([]op{open}, subscribe...), group...)},
					// Group commands name a topic too: without subscribe they are refused.
					{"nosub", append(append([]op{}, subscribe...), group...), []op{publish, open}},
					{"nogroup", group, append([]op{publish, open}, subscribe...)},
					{"alice", append(append([]op{}, admin...), op{"stats switchover", func(c *authClient) (int, string) { return c.stats("switchover") }}),
						append(append([]op{publish, open}, subscribe...), group...)},
					{"root", nil, append(append(append([]op{publish, open}, subscribe...), group...), admin...)},
				}
				for _, tc := range cases {
					t.Run(tc.user, func(t *testing.T) {
						c := connect(t, tc.user)
						for _, o := range tc.denied {
							code, body := o.run(c)
							require.Equal(t, 403, code, "%s: %s", o.name, body)
							require.Contains(t, body, `user "`+tc.user+`" may not`)
						}
						for _, o := range tc.works {
							code, body := o.run(c)
							require.Contains(t, []int{200, 404}, code, "%s: %s", o.name, body)
						}
					})
				}
			})
		})
	}

	t.Run("protocol", func(t *testing.T) {
		c := dialAuth(t, b.Addr(), nil)
		code, body := c.call(func(d []byte, op int32) []byte {
			d = append(d, "auth SCRAM-SHA-256 4 "+strconv.Itoa(int(op))+"\r\nabcd"...)
			return d
		})
		require.Equal(t, 401, code)
		require.Equal(t, `unsupported SASL mechanism "SCRAM-SHA-256": only PLAIN is supported`, body)
		code, body = c.call(func(d []byte, op int32) []byte {
			msg := "root\x00alice\x00alice-pw"
			return append(d, "auth PLAIN "+strconv.Itoa(len(msg))+" "+strconv.Itoa(int(op))+"\r\n"+msg...)
		})
		// Refused exactly as a wrong password (no authzid oracle); only
		// the broker's log says why.
		require.Equal(t, 401, code)
		require.Equal(t, `authentication failed for user "alice"`, body)
		require.Contains(t, logs.String(), `auth failed for user "alice": right password, but a user may only act as itself, not as "root"`)
		// The authzid may name the user itself.
		code, body = c.call(func(d []byte, op int32) []byte {
			msg := "alice\x00alice\x00alice-pw"
			return append(d, "auth PLAIN "+strconv.Itoa(len(msg))+" "+strconv.Itoa(int(op))+"\r\n"+msg...)
		})
		require.Equal(t, 200, code, body)
		// A failed auth drops the earlier authentication.
		code, _ = c.login("alice", "bad")
		require.Equal(t, 401, code)
		code, _ = c.put("orders")
		require.Equal(t, 401, code)
		require.False(t, bytes.Contains([]byte(logs.String()), []byte("alice-pw")))
	})
}

// TestAuthFailureDelayEndsWithConnection checks that a connection closed
// while its failed auth waits does not keep the broker waiting.
func TestAuthFailureDelayEndsWithConnection(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	b := secureBroker(t, certs, &syncLog{}, 60000)
	c := dialAuth(t, b.Addr(), nil)
	_, err := c.nc.Write(protocol.AppendAuthPlain(nil, "alice", "wrong", 1))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	c.nc.Close()
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("broker close waited for the failure delay")
	}
}
