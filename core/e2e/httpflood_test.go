package e2e

import (
	"bufio"
	"crypto/tls"
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
)

// The HTTP listener under floods (issue 22, finding 4): connections that
// hold slots without credentials must not keep the probes, an
// authenticated scrape or an authenticated API call from answering.

var httpsLine = regexp.MustCompile(`serving HTTP on (https?)://(\S+) `)

// floodAnswer is how long each check may take while a flood is held: the
// issue's 1 s, with 2 s of slack for a loaded 2-core CI machine. Before
// the fix these checks waited for the 5 s header timeout at best and the
// 120 s idle timeout at worst.
const floodAnswer = 1*time.Second + 2*time.Second

// floodBroker is a real metaq-server with auth on (and TLS if asked) and
// its HTTP listener's address.
type floodBroker struct {
	p      *brokertest.Server
	scheme string
	http   string
	tls    *tls.Config // the clients' config with TLS, nil without
}

func startFloodBroker(t *testing.T, withTLS bool) *floodBroker {
	t.Helper()
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("admin-pw"), bcrypt.MinCost)
	require.NoError(t, err)
	top := "port = 0\n"
	fb := &floodBroker{}
	var certs *testsvc.Certs
	if withTLS {
		certs = testsvc.NewCerts(t)
		fb.tls = certs.ClientConfig(t, "")
	}
	var p *brokertest.Server
	launch := func(port int) error {
		tlsPart := ""
		if withTLS {
			cf, kf, _ := certs.Server(t, "server")
			tlsPart = fmt.Sprintf("tls_port = %d\n[tls]\ncert_file = %q\nkey_file = %q\n", port, cf, kf)
		}
		// http_read_header_timeout is raised from 5 s to 60 s: the silent
		// connections must then be closed by the cap alone, not by their
		// header timeout, however slow the machine.
		toml := fmt.Sprintf(`data_dir = %q
host = "127.0.0.1"
journal_file_size = 1048576
http_read_header_timeout = 60000
%s%s
[auth]
enabled = true
failure_delay = 200

[[auth.user]]
name = "admin"
password_hash = %q
admin = true

[[topic]]
name = "orders"
`, filepath.Join(dir, "data"), top, tlsPart, hash)
		config := filepath.Join(dir, "server.toml")
		if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
			return err
		}
		var err error
		p, err = brokertest.Launch(brokertest.ServerBinary(t), nil, "--config", config)
		if err != nil && p != nil {
			p.Kill()
			return fmt.Errorf("%w\n%s", err, p.Logs.String())
		}
		return err
	}
	if withTLS {
		require.NoError(t, testsvc.StartOnFreePort(launch))
	} else {
		require.NoError(t, launch(0))
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("metaq-server log:\n%s", p.Logs.Tail(8<<10))
		}
	})
	m := httpsLine.FindStringSubmatch(p.Logs.String())
	require.NotNil(t, m, "no HTTP line in:\n%s", p.Logs.String())
	fb.p, fb.scheme, fb.http = p, m[1], m[2]
	if withTLS {
		require.Equal(t, "https", fb.scheme)
	}
	return fb
}

// raiseNoFile makes room for n more descriptors in the test process.
func raiseNoFile(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	want := n + 1024
	if lim.Cur >= want {
		return
	}
	require.GreaterOrEqual(t, lim.Max, want, "RLIMIT_NOFILE hard limit too low for the flood (ulimit -Hn)")
	lim.Cur = want
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
}

// check runs the probes, an authenticated /metrics and an authenticated
// JSON API call, each on a connection of its own, each within
// floodAnswer; then logs in and puts over the protocol port. It returns
// the scrape.
func (fb *floodBroker) check(t *testing.T, what string) []byte {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: fb.tls}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: floodAnswer}
	var scrape []byte
	for _, c := range []struct {
		path string
		auth bool
	}{{"/healthz", false}, {"/readyz", false}, {"/metrics", true}, {"/api/v1/topics", true}} {
		req, err := http.NewRequest("GET", fb.scheme+"://"+fb.http+c.path, nil)
		require.NoError(t, err)
		if c.auth {
			req.SetBasicAuth("admin", "admin-pw")
		}
		start := time.Now()
		resp, err := hc.Do(req)
		require.NoError(t, err, "%s: GET %s", what, c.path)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		require.NoError(t, err, "%s: GET %s", what, c.path)
		require.Equal(t, 200, resp.StatusCode, "%s: GET %s: %s", what, c.path, body)
		require.Less(t, took, floodAnswer, "%s: GET %s", what, c.path)
		t.Logf("%s: GET %s answered in %v", what, c.path, took.Round(time.Millisecond))
		if c.path == "/metrics" {
			scrape = body
		}
		if c.path == "/api/v1/topics" {
			require.Contains(t, string(body), `"orders"`)
		}
	}
	// The protocol port is another listener; a login and a put there
	// answer too.
	start := time.Now()
	var cl *client
	var err error
	if fb.tls != nil {
		cl, err = dialTLSClient(fb.p.Addr, fb.tls)
	} else {
		cl, err = dialClient(fb.p.Addr)
	}
	require.NoError(t, err)
	defer cl.close()
	ok(t)(cl.auth("admin", "admin-pw"))
	ok(t)(cl.put("orders", 0, []byte("during "+what)))
	require.Less(t, time.Since(start), floodAnswer, "%s: protocol login and put", what)
	return scrape
}

// scrapeValue is the value of an unlabelled series in a scrape.
func scrapeValue(t *testing.T, scrape []byte, name string) float64 {
	t.Helper()
	for _, l := range strings.Split(string(scrape), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, l)
			return f
		}
	}
	t.Fatalf("no %s in the scrape", name)
	return 0
}

// heldConns are connections a flood holds open until the test ends.
type heldConns struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (h *heldConns) add(c net.Conn) {
	h.mu.Lock()
	h.conns = append(h.conns, c)
	h.mu.Unlock()
}

func (h *heldConns) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
	h.conns = nil
}

// bareFlood opens n TCP connections to addr that send nothing (with TLS:
// that never start the handshake), from 32 dialers, and holds them.
func bareFlood(t *testing.T, addr string, n int, held *heldConns) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range 32 {
		wg.Go(func() {
			for range next {
				c, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				held.add(c)
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs, "bare connects that failed")
}

// TestHTTPFloodKeepAlive: 256 keep-alive connections, each after one
// unauthenticated GET /healthz, are held open; the probes, an
// authenticated scrape, an authenticated API call and a protocol login
// still answer.
func TestHTTPFloodKeepAlive(t *testing.T) {
	t.Parallel()
	raiseNoFile(t, 512)
	fb := startFloodBroker(t, false)
	held := &heldConns{}
	defer held.closeAll()
	var wg sync.WaitGroup
	errs := make(chan error, 256)
	for range 256 {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", fb.http, 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			held.add(c)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				errs <- err
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Close {
				errs <- fmt.Errorf("GET /healthz: %d, close %v", resp.StatusCode, resp.Close)
			}
			c.SetDeadline(time.Time{})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	scrape := fb.check(t, "256 keep-alive connections held")
	require.GreaterOrEqual(t, scrapeValue(t, scrape, "metaq_http_connections"), 256.0, "the keep-alive connections are held")
	scrape = fb.check(t, "256 keep-alive connections held, again")
	require.Equal(t, 0.0, scrapeValue(t, scrape, "metaq_http_refused_total"))
}

// TestHTTPFloodBareConnects: 3,000 TCP connects that send nothing are
// held open (the cap is 512: most are closed to make room for the next);
// the same checks answer.
func TestHTTPFloodBareConnects(t *testing.T) {
	t.Parallel()
	raiseNoFile(t, 3200)
	fb := startFloodBroker(t, false)
	held := &heldConns{}
	defer held.closeAll()
	bareFlood(t, fb.http, 3000, held)
	scrape := fb.check(t, "3000 bare connects held")
	require.GreaterOrEqual(t, scrapeValue(t, scrape, "metaq_http_evicted_total"), 3000.0-512, "the bare connects filled the cap")
	require.LessOrEqual(t, scrapeValue(t, scrape, "metaq_http_connections"), 512.0)
	require.Equal(t, 0.0, scrapeValue(t, scrape, "metaq_http_refused_total"))
}

// TestHTTPFloodTLSBareConnects: with [tls], 3,000 connects that never
// start a TLS handshake are held open; the same checks answer over HTTPS
// and the TLS protocol port.
func TestHTTPFloodTLSBareConnects(t *testing.T) {
	t.Parallel()
	raiseNoFile(t, 3200)
	fb := startFloodBroker(t, true)
	held := &heldConns{}
	defer held.closeAll()
	bareFlood(t, fb.http, 3000, held)
	scrape := fb.check(t, "3000 bare TLS connects held")
	require.GreaterOrEqual(t, scrapeValue(t, scrape, "metaq_http_evicted_total"), 3000.0-512, "the bare connects filled the cap")
	require.LessOrEqual(t, scrapeValue(t, scrape, "metaq_http_connections"), 512.0)
}

// TestHTTPFloodSlowBodies: 1,000 connections each send a POST header
// without credentials that announces a 100,000-byte body, send one byte
// of it and hold the connection: the 401 comes at once and the connection
// is closed a moment later instead of waiting for the rest of the body
// for the 30 s read timeout. The same checks answer.
func TestHTTPFloodSlowBodies(t *testing.T) {
	t.Parallel()
	raiseNoFile(t, 1200)
	fb := startFloodBroker(t, false)
	held := &heldConns{}
	defer held.closeAll()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	next := make(chan struct{}, 1000)
	for range 1000 {
		next <- struct{}{}
	}
	close(next)
	for range 32 {
		wg.Go(func() {
			for range next {
				c, err := net.DialTimeout("tcp", fb.http, 10*time.Second)
				if err == nil {
					held.add(c)
					c.SetWriteDeadline(time.Now().Add(10 * time.Second))
					_, err = io.WriteString(c, "POST /api/v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	fb.check(t, "1000 slow bodies held")
	// Each was answered (401, or 503 busy) and closed, or closed for a
	// newcomer: none holds a slot for long.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		scrape := fb.check(t, "1000 slow bodies held, later")
		n := scrapeValue(t, scrape, "metaq_http_connections")
		if n <= 10 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%v HTTP connections still open", n)
	}
}
