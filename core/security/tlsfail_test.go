package security

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/logx"
)

// testLog collects log lines.
type testLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *testLog) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHTTPErrorLogThrottle checks the HTTP server's ErrorLog: TLS
// handshake errors are counted and throttled per address; other lines
// pass through.
func TestHTTPErrorLogThrottle(t *testing.T) {
	t.Parallel()
	logs := &testLog{}
	lg := slog.New(logx.PrintfHandler(logs.Logf))
	f := NewTLSFailures(lg)
	el := f.ErrorLog(slog.NewLogLogger(lg.With("component", "http").Handler(), slog.LevelWarn))
	for i := range 10 {
		el.Printf("http: TLS handshake error from 10.0.0.1:%d: EOF", 40000+i)
	}
	el.Printf("http: TLS handshake error from [2001:db8::1]:443: tls: first record does not look like a TLS handshake")
	el.Printf("http: Accept error: too many open files; retrying in 5ms")
	require.EqualValues(t, 11, f.Count("http"))
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "TLS handshake from 10.0.0.1:"), out)
	require.Contains(t, out, `http: TLS handshake from [2001:db8::1]:443 failed: "tls: first record does not look like a TLS handshake"`)
	require.Contains(t, out, "http: Accept error: too many open files")
}
