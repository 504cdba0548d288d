package selectors_test

import (
	"bytes"
	"context"
	"github.com/metaq-go/metaq/internal/testsvc"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/metaq-go/metaq/selectors"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// count returns how many lines contain sub.
func (s *syncBuffer) count(sub string) int {
	return strings.Count(s.String(), sub)
}

func testLogger(t testing.TB) (hclog.Logger, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	return hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Info, Output: buf}), buf
}

// helperSpec is a spec that runs this test binary as the plugin impl.
func helperSpec(t testing.TB, impl string, env ...string) *selectors.Plugin {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return &selectors.Plugin{Name: "helper-" + impl, Path: exe,
		Env: append([]string{helperEnv + "=" + impl, "GORACE=" + os.Getenv("GORACE")}, env...)}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// openHelper opens the helper plugin impl through Open (private supervisor).
func openHelper(t testing.TB, impl string, mod func(*selectors.OpenOptions)) selectors.Selector {
	t.Helper()
	opts := selectors.OpenOptions{Plugin: helperSpec(t, impl)}
	if mod != nil {
		mod(&opts)
	}
	if opts.Logger == nil {
		opts.Logger, _ = testLogger(t)
	}
	s, err := selectors.Open(ctxT(t, 30*time.Second), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawAdapter launches spec and returns the bare gRPC adapter: no timeout,
// no checks, no fallback, so the conformance suite sees the plugin itself.
func rawAdapter(t *testing.T, pl *selectors.Plugin) selector.Selector {
	t.Helper()
	spec := &host.Spec{Kind: plugins.KindSelector, Name: pl.Name, Path: pl.Path, Args: pl.Args, Env: pl.Env}
	log, _ := testLogger(t)
	sup := host.NewSupervisor(host.Options{Logger: log})
	t.Cleanup(func() { _ = sup.Close() })
	p, err := sup.Launch(*spec, &selectors.GRPCPlugin{})
	require.NoError(t, err)
	raw, _, err := p.Client()
	require.NoError(t, err)
	s, ok := raw.(selector.Selector)
	require.True(t, ok, "dispensed %T", raw)
	return s
}

// buildExamplePlugin builds examples/selector-plugin into t.TempDir().
func buildExamplePlugin(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "selector-plugin")
	testsvc.GoBuildTo(t, "github.com/metaq-go/metaq/examples/selector-plugin", dst)
	return dst
}

// pidOf reads the pid a helper plugin wrote.
func pidOf(t *testing.T, file string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(string(b))
		return err == nil && pid > 0
	}, 10*time.Second, 10*time.Millisecond)
	return pid
}
