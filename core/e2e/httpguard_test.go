package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
)

var httpsGuardLine = regexp.MustCompile(`serving HTTP on https://(\S+) `)

// TestServerCSRFCurl runs issue 22's reproducer with curl against the real
// metaq-server with [auth] and [tls]: a text/plain body that parses as
// JSON with a duplicate key, sent as a cross-site request by an admin, is
// refused (403); without Sec-Fetch-Site, refused for its type (415); as
// application/json, refused for the duplicate key (400). No topic is
// created until a well-formed request, which the audit log records with
// the user and the remote address.
func TestServerCSRFCurl(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		if testsvc.InCI() {
			t.Fatalf("curl is needed: %v", err)
		}
		t.Skipf("curl not installed: %v", err)
	}
	dir := t.TempDir()
	certs := testsvc.NewCerts(t)
	cf, kf, _ := certs.Server(t, "server")
	hash, err := bcrypt.GenerateFromPassword([]byte("root-pw"), bcrypt.MinCost)
	require.NoError(t, err)
	config := filepath.Join(dir, "server.toml")
	var p *brokertest.Server
	require.NoError(t, testsvc.StartOnFreePort(func(port int) error {
		toml := fmt.Sprintf(`data_dir = %q
host = "127.0.0.1"
journal_file_size = 1048576
port = 0
tls_port = %d

[tls]
cert_file = %q
key_file = %q

[auth]
enabled = true
failure_delay = 10

[[auth.user]]
name = "root"
password_hash = %q
admin = true

[[topic]]
name = "orders"
`, filepath.Join(dir, "data"), port, cf, kf, hash)
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
	}))
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("metaq-server log:\n%s", p.Logs.Tail(8<<10))
		}
	})
	m := httpsGuardLine.FindStringSubmatch(p.Logs.String())
	require.NotNil(t, m, "no HTTPS line in:\n%s", p.Logs.String())
	base := "https://" + m[1]
	run := func(args ...string) (string, string) {
		t.Helper()
		args = append([]string{"-sS", "--max-time", "20", "--cacert", certs.CAFile, "-u", "root:root-pw", "-w", "\n%{http_code}"}, args...)
		out, err := exec.Command(curl, args...).CombinedOutput()
		require.NoError(t, err, "curl %v: %s", args, out)
		s := strings.TrimSpace(string(out))
		i := strings.LastIndexByte(s, '\n')
		require.Positive(t, i, "%s", s)
		return s[i+1:], s[:i]
	}
	repro := "{\"name\":\"=\",\"name\":\"x\"}\r\n"
	code, body := run("--data-binary", repro, "-H", "Content-Type: text/plain", "-H", "Sec-Fetch-Site: cross-site", base+"/api/v1/topics")
	require.Equal(t, "403", code, body)
	require.Contains(t, body, "cross-site request")
	code, body = run("--data-binary", repro, "-H", "Content-Type: text/plain", base+"/api/v1/topics")
	require.Equal(t, "415", code, body)
	code, body = run("--data-binary", repro, "-H", "Content-Type: application/json", base+"/api/v1/topics")
	require.Equal(t, "400", code, body)
	require.Contains(t, body, `duplicate key \"name\"`)
	code, body = run("--data-binary", repro, "-H", "Content-Type: application/json", "-H", "Origin: https://evil.example", base+"/api/v1/topics")
	require.Equal(t, "403", code, body)
	for _, name := range []string{"x", "="} {
		code, body = run(base + "/api/v1/topics/" + name)
		require.Equal(t, "404", code, "topic %q: %s", name, body)
	}
	code, body = run("--data-binary", `{"name":"x"}`, "-H", "Content-Type: application/json; charset=utf-8", base+"/api/v1/topics")
	require.Equal(t, "201", code, body)
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`component=audit user=root remote=127\.0\.0\.1:\d+ via=api action=topic.create topic=x partitions=1`).MatchString(p.Logs.String())
	}, 5*time.Second, 20*time.Millisecond, "no audit line in:\n%s", p.Logs.String())
	require.Equal(t, 1, strings.Count(p.Logs.String(), "component=audit"), "only the change is audited")
}

// TestServerHostCheck: the real metaq-server with [auth] off answers only
// its own names (issue 22, finding 9): a DNS-rebinding-like Host gets 421
// on the API and pprof and creates nothing; /healthz answers it.
func TestServerHostCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "server.toml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf("data_dir = %q\nhttp_allowed_hosts = [\"broker1.example.com\"]\n[[topic]]\nname = \"h\"\n", filepath.Join(dir, "data"))), 0o644))
	p, err := brokertest.Launch(brokertest.ServerBinary(t), nil, "--config", config, "--port", "0", "--host", "127.0.0.1")
	require.NoError(t, err)
	t.Cleanup(p.Kill)
	m := httpLine.FindStringSubmatch(p.Logs.String())
	require.NotNil(t, m, "no HTTP line in:\n%s", p.Logs.String())
	do := func(method, path, host, body string) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, "http://"+m[1]+path, rd)
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"evil.example", "evil.example:" + strings.Split(m[1], ":")[1]} {
		code, body := do("POST", "/api/v1/topics", host, `{"name":"rebound"}`)
		require.Equal(t, 421, code, body)
		code, body = do("GET", "/debug/pprof/", host, "")
		require.Equal(t, 421, code, body)
		code, body = do("DELETE", "/api/v1/topics/h", host, "")
		require.Equal(t, 421, code, body)
		code, body = do("GET", "/healthz", host, "")
		require.Equal(t, 200, code, body)
	}
	code, body := do("GET", "/api/v1/topics/rebound", "localhost", "")
	require.Equal(t, 404, code, body)
	code, body = do("GET", "/api/v1/topics/h", "broker1.example.com", "")
	require.Equal(t, 200, code, body)
	code, body = do("GET", "/debug/pprof/cmdline", m[1], "")
	require.Equal(t, 200, code, body)
}
