package e2e

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Issue 22, finding 3: unauthenticated connections must not take the
// slots of clients that log in (auth_timeout,
// max_unauthenticated_connections, max_unauthenticated_per_address).

// slotsServer is a real metaq-server with auth on, a plaintext and a TLS
// listener.
type slotsServer struct {
	p                         *brokertest.Server
	plain, tlsAddr, httpsAddr string
	certs                     *testsvc.Certs
}

var (
	tlsOnLine   = regexp.MustCompile(`metaq-server tls on (\S+)`)
	httpsOnLine = regexp.MustCompile(`serving HTTP on https://(\S+) `)
)

// startSlotsServer runs metaq-server with auth (user root, admin) and TLS,
// extra being more top-level settings.
func startSlotsServer(t *testing.T, extra string) *slotsServer {
	t.Helper()
	dir := t.TempDir()
	certs := testsvc.NewCerts(t)
	cf, kf, _ := certs.Server(t, "server")
	hash, err := bcrypt.GenerateFromPassword([]byte("root-pw"), bcrypt.MinCost)
	require.NoError(t, err)
	var p *brokertest.Server
	require.NoError(t, testsvc.StartOnFreePort(func(port int) error {
		// The TLS and HTTP ports: two more free ones, held until the
		// server starts (a clash is retried, as the plaintext one's).
		var ls []net.Listener
		defer func() {
			for _, l := range ls {
				l.Close()
			}
		}()
		// The plaintext port was released before start ran, so the kernel
		// may hand it out again here: such a listener is held (and
		// closed with the others) but not used.
		var free []int
		for len(free) < 2 && len(ls) < 8 {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			ls = append(ls, l)
			if lp := l.Addr().(*net.TCPAddr).Port; lp != port {
				free = append(free, lp)
			}
		}
		if len(free) < 2 {
			return fmt.Errorf("no two free ports besides %d", port)
		}
		tlsPort, httpPort := free[0], free[1]
		config := filepath.Join(dir, "server.toml")
		toml := fmt.Sprintf(`data_dir = %q
host = "127.0.0.1"
journal_file_size = 1048576
port = %d
tls_port = %d
http_port = %d
%s

[tls]
cert_file = %q
key_file = %q

[auth]
enabled = true
failure_delay = 100

[[auth.user]]
name = "root"
password_hash = %q
admin = true

[[topic]]
name = "orders"
`, filepath.Join(dir, "data"), port, tlsPort, httpPort, extra, cf, kf, hash)
		if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
			return err
		}
		for _, l := range ls {
			l.Close()
		}
		ls = nil
		p, err = brokertest.Launch(brokertest.ServerBinary(t), nil, "--config", config)
		if err != nil && p != nil {
			p.Kill()
			return fmt.Errorf("%w\n%s", err, p.Logs.String())
		}
		return err
	}))
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("metaq-server log:\n%s", p.Logs.Tail(8<<10))
		}
	})
	m := tlsOnLine.FindStringSubmatch(p.Logs.String())
	require.NotNil(t, m, "no TLS listener line in the log")
	h := httpsOnLine.FindStringSubmatch(p.Logs.String())
	require.NotNil(t, h, "no HTTPS listener line in the log")
	return &slotsServer{p: p, plain: p.Addr, tlsAddr: m[1], httpsAddr: h[1], certs: certs}
}

// healthz gets /healthz over HTTPS and fails unless it is 200 within
// ioTimeout.
func (s *slotsServer) healthz(t *testing.T, tc *tls.Config) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}, Timeout: ioTimeout}
	resp, err := c.Get("https://" + s.httpsAddr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}

// login dials addr (over TLS if tc is set), logs in as root and puts a
// message; it returns how long that took.
func (s *slotsServer) login(t *testing.T, addr string, tc *tls.Config) (*client, time.Duration) {
	t.Helper()
	start := time.Now()
	var c *client
	var err error
	if tc != nil {
		c, err = dialTLSClient(addr, tc)
	} else {
		c, err = dialClient(addr)
	}
	require.NoError(t, err)
	t.Cleanup(c.close)
	ok(t)(c.auth("root", "root-pw"))
	ok(t)(c.put("orders", 0, []byte("through the flood")))
	return c, time.Since(start)
}

// slotStat is a numeric line of `stats` read on c.
func slotStat(t *testing.T, c *client, key string) int64 {
	t.Helper()
	n, err := slotStatErr(c, key)
	require.NoError(t, err)
	return n
}

// slotStatErr is slotStat for a require.Eventually condition (which runs
// on another goroutine).
func slotStatErr(c *client, key string) (int64, error) {
	r, err := c.stats("")
	if err != nil {
		return 0, err
	}
	if r.Code != 200 {
		return 0, fmt.Errorf("stats: %v", r)
	}
	for _, l := range strings.Split(string(r.Body), "\r\n") {
		if v, found := strings.CutPrefix(l, key+" "); found {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in stats", key)
}

// statIs reports whether stats key of c satisfies want (for Eventually).
func statIs(c *client, key string, want func(int64) bool) func() bool {
	return func() bool {
		n, err := slotStatErr(c, key)
		return err == nil && want(n)
	}
}

// openIdle opens n TCP connections to target from the loopback addresses
// 127.0.0.1 .. 127.0.0.<sources>, in turn, and returns them (closed at
// the end of the test). With tc set, each completes a TLS handshake.
// None sends anything else.
func openIdle(t *testing.T, n, sources int, target string, tc *tls.Config) []net.Conn {
	t.Helper()
	const workers = 32
	conns := make([]net.Conn, n)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%sources))}
				d := &net.Dialer{Timeout: ioTimeout, LocalAddr: src}
				var nc net.Conn
				var err error
				if tc != nil {
					nc, err = tls.DialWithDialer(d, "tcp", target, tc)
				} else {
					nc, err = d.Dial("tcp", target)
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d from %v: %w", i, src.IP, err)
					return
				}
				conns[i] = nc
			}
		}()
	}
	wg.Wait()
	close(errs)
	t.Cleanup(func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	})
	require.NoError(t, <-errs)
	return conns
}

// TestServerUnauthenticatedFlood runs the flood against the real
// metaq-server (auth on, TLS on, default caps: max_connections 10000, so
// 1000 unauthenticated in all and 100 per address): 10,000 idle
// connections that never authenticate, from 50 loopback addresses —
// 500 with a completed TLS handshake, 6,500 plaintext, 3,000 bare TCP
// connections to the TLS port. While they are open, root logs in and puts
// within 1 s on the plaintext and on the TLS port. Then, with those
// closed, 3,000 bare connects to the TLS port: a TLS login still takes
// under 1 s.
func TestServerUnauthenticatedFlood(t *testing.T) {
	t.Parallel()
	raiseNoFile(t, 10000+3000+200)
	s := startSlotsServer(t, "auth_timeout = 60000")
	tc := s.certs.ClientConfig(t, "")

	// An admin connection logged in before the flood watches it (and is
	// never closed to make room: it is authenticated).
	admin, _ := s.login(t, s.plain, nil)
	// accepted waits until the broker accepted n more connections than
	// when base was taken: each is either held unauthenticated or was
	// closed to make room.
	accepted := func() int64 {
		return slotStat(t, admin, "unauth_connections") + slotStat(t, admin, "unauth_evicted")
	}
	waitAccepted := func(base, n int64) {
		require.Eventually(t, func() bool {
			u, err1 := slotStatErr(admin, "unauth_connections")
			e, err2 := slotStatErr(admin, "unauth_evicted")
			return err1 == nil && err2 == nil && u+e >= base+n
		}, 30*time.Second, 20*time.Millisecond, "the broker did not accept the %d connections", n)
	}

	start := time.Now()
	base := accepted()
	var held []net.Conn
	held = append(held, openIdle(t, 500, 50, s.tlsAddr, tc)...)
	held = append(held, openIdle(t, 6500, 50, s.plain, nil)...)
	held = append(held, openIdle(t, 3000, 50, s.tlsAddr, nil)...)
	require.Len(t, held, 10000)
	waitAccepted(base, 10000)
	t.Logf("10,000 connections opened and accepted in %v", time.Since(start).Round(time.Millisecond))

	_, took := s.login(t, s.plain, nil)
	t.Logf("plaintext login and put: %v", took)
	require.Less(t, took, time.Second, "plaintext login and put during the flood")
	_, took = s.login(t, s.tlsAddr, tc)
	t.Logf("TLS login and put: %v", took)
	require.Less(t, took, time.Second, "TLS login and put during the flood")
	s.healthz(t, tc)

	// The broker holds at most max_unauthenticated_connections of them;
	// the rest were closed oldest first.
	require.LessOrEqual(t, slotStat(t, admin, "unauth_connections"), int64(1000))
	require.GreaterOrEqual(t, slotStat(t, admin, "unauth_evicted"), int64(9000))
	ok(t)(admin.put("orders", 0, []byte("watched the flood")))
	require.Eventually(t, statIs(admin, "curr_connections", func(n int64) bool { return n <= 1002 }), 10*time.Second, 50*time.Millisecond)
	require.Zero(t, slotStat(t, admin, "refused_connections"))
	// Logged once a minute per source address, not once per connection.
	lines := strings.Count(s.p.Logs.String(), "unauthenticated connection closed to make room")
	require.Greater(t, lines, 0)
	require.LessOrEqual(t, lines, 100, "eviction log lines are throttled per address")
	// The oldest connections were closed: the first TLS one reads EOF.
	held[0].SetReadDeadline(time.Now().Add(ioTimeout))
	_, err := held[0].Read(make([]byte, 1))
	require.Error(t, err)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the oldest connection is still open")

	for _, nc := range held {
		nc.Close()
	}
	require.Eventually(t, statIs(admin, "unauth_connections", func(n int64) bool { return n == 0 }), 10*time.Second, 50*time.Millisecond)

	// 3,000 bare connects to the TLS port, from 30 addresses.
	base = accepted()
	bare := openIdle(t, 3000, 30, s.tlsAddr, nil)
	waitAccepted(base, 3000)
	_, took = s.login(t, s.tlsAddr, tc)
	t.Logf("TLS login and put during 3,000 bare connects: %v", took)
	require.Less(t, took, time.Second, "TLS login and put during the bare connects")
	s.healthz(t, tc)
	require.LessOrEqual(t, slotStat(t, admin, "unauth_connections"), int64(1000))
	for _, nc := range bare {
		nc.Close()
	}

	// Finding 10b: 200 bare connects to the HTTPS port fail their
	// handshakes; each is counted, and one line is logged (one address).
	before := slotStat(t, admin, "tls_handshake_failures")
	for range 200 {
		nc, err := net.DialTimeout("tcp", s.httpsAddr, ioTimeout)
		require.NoError(t, err)
		nc.Close()
	}
	require.Eventually(t, statIs(admin, "tls_handshake_failures", func(n int64) bool { return n >= before+200 }), 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, strings.Count(s.p.Logs.String(), "http: TLS handshake from 127.0.0.1:"), "HTTPS handshake failures are logged once a minute per address")
	s.healthz(t, tc)
}

// TestServerAuthTimeout checks auth_timeout on the real metaq-server: a
// plaintext connection and a TLS one that never log in are answered
// "result 401 ... authentication timeout" and closed; a TCP connection to
// the TLS port that never handshakes is closed; one that logged in stays.
func TestServerAuthTimeout(t *testing.T) {
	t.Parallel()
	s := startSlotsServer(t, "auth_timeout = 500")
	tc := s.certs.ClientConfig(t, "")
	admin, _ := s.login(t, s.plain, nil)

	readAll := func(nc net.Conn) (string, time.Duration) {
		start := time.Now()
		nc.SetReadDeadline(start.Add(ioTimeout))
		b, err := io.ReadAll(nc)
		if errors.Is(err, syscall.ECONNRESET) {
			err = nil
		}
		require.NoError(t, err, "not closed within %v", ioTimeout)
		return string(b), time.Since(start)
	}
	dialed := time.Now() // the broker's clock starts after this (at accept)
	plain, err := net.Dial("tcp", s.plain)
	require.NoError(t, err)
	defer plain.Close()
	overTLS, err := tls.Dial("tcp", s.tlsAddr, tc)
	require.NoError(t, err)
	defer overTLS.Close()
	bare, err := net.Dial("tcp", s.tlsAddr)
	require.NoError(t, err)
	defer bare.Close()

	got, _ := readAll(plain)
	require.Regexp(t, `^result 401 \d+ 0\r\nauthentication timeout \(auth_timeout 500 ms\)$`, got)
	require.GreaterOrEqual(t, time.Since(dialed), 500*time.Millisecond, "closed before auth_timeout")
	got, _ = readAll(overTLS)
	require.Contains(t, got, "authentication timeout (auth_timeout 500 ms)")
	got, _ = readAll(bare)
	require.Empty(t, got)

	ok(t)(admin.put("orders", 0, []byte("still here")))
	require.Equal(t, int64(3), slotStat(t, admin, "auth_timeouts"))
	require.Equal(t, int64(1), slotStat(t, admin, "tls_handshake_failures"))
	require.Zero(t, slotStat(t, admin, "unauth_connections"))
	var r reply
	r, err = admin.call(protocol.AppendVersion(nil, 99), 99)
	require.NoError(t, err)
	require.Equal(t, 200, r.Code)
}
