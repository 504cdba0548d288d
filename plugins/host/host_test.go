//go:build unix

package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/metaq-go/metaq/plugins"
)

// newSup returns a supervisor with fast health checks that logs into the
// returned buffer, closed at the end of the test.
func newSup(t *testing.T, opts Options) (*Supervisor, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "plugins", Level: hclog.Debug, Output: logs})
	}
	if opts.HealthInterval == 0 {
		opts.HealthInterval = 200 * time.Millisecond
	}
	s := NewSupervisor(opts)
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	})
	return s, logs
}

// selfSpec runs the test binary as a selector plugin, with the test's
// $GORACE configured (the host passes on no other variable), so that the
// plugin process exits as the test binary does (make test:
// atexit_sleep_ms=0, not the race detector's 1 s sleep at every exit).
func selfSpec(t *testing.T, name string, env ...string) Spec {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return Spec{Kind: plugins.KindSelector, Name: name, Path: exe, Env: append([]string{envRole + "=plugin", raceEnv()}, env...)}
}

// raceEnv is GORACE=$GORACE, for the plugins the tests start.
func raceEnv() string { return "GORACE=" + os.Getenv("GORACE") }

// echo calls the plugin's Echo with a timeout.
func echo(t *testing.T, p *Plugin, in string) (string, error) {
	t.Helper()
	raw, _, err := p.Client()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := raw.(echoAPI).Echo(ctx, wrapperspb.String(in))
	p.Observe(err)
	if err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

func requireAlive(t *testing.T, pid int) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	require.True(t, alive(pid), "pid %d should be running", pid)
}

func eventuallyGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	require.Eventually(t, func() bool { return !alive(pid) }, within, 10*time.Millisecond, "pid %d still running", pid)
}

func TestLaunchAndCall(t *testing.T) {
	s, logs := newSup(t, Options{})
	p, err := s.Launch(selfSpec(t, "echo", envEcho+"=METAQ_X", "METAQ_X=from-spec"), &testPlugin{})
	require.NoError(t, err)

	inf := p.Info()
	require.Equal(t, StateRunning, inf.State)
	require.Equal(t, uint64(1), inf.Generation)
	require.Equal(t, plugins.KindSelector, inf.Kind)
	require.Equal(t, "echo", inf.Name)
	require.Equal(t, 1, inf.Version)
	require.NotZero(t, inf.PID)
	requireAlive(t, inf.PID)

	got, err := echo(t, p, "pid")
	require.NoError(t, err)
	require.Equal(t, "pid "+itoa(inf.PID), got)
	got, err = echo(t, p, "env")
	require.NoError(t, err)
	require.Equal(t, "from-spec", got, "Spec.Env reaches the plugin")

	// A panic in a call is an error, not a dead plugin.
	_, err = echo(t, p, "panic")
	require.ErrorContains(t, err, "plugin panic: test panic")
	_, err = echo(t, p, "hi")
	require.NoError(t, err)
	inf = p.Info()
	require.Equal(t, int64(4), inf.Calls)
	require.Equal(t, int64(1), inf.Errors)
	require.Equal(t, int64(0), inf.Restarts)
	require.Equal(t, []Info{inf}, s.List())

	// Plugin stderr (hclog JSON) and synced stdout become log lines tagged
	// with the plugin's name.
	_, err = echo(t, p, "stdout:a line on stdout")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		l := logs.String()
		return strings.Contains(l, "[DEBUG] plugins.echo.stdout: a line on stdout") &&
			strings.Contains(l, "plugins.echo.") && strings.Contains(l, "panic in plugin call")
	}, 3*time.Second, 20*time.Millisecond, logs.String())
	require.Contains(t, logs.String(), "[INFO]  plugins.echo: plugin started")
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestKill9Restarts(t *testing.T) {
	s, logs := newSup(t, Options{})
	p, err := s.Launch(selfSpec(t, "victim"), &testPlugin{})
	require.NoError(t, err)
	_, err = echo(t, p, "hi")
	require.NoError(t, err)

	for round := 1; round <= 2; round++ {
		old := p.Info()
		require.NoError(t, syscall.Kill(old.PID, syscall.SIGKILL))
		killed := time.Now()

		// Calls fail fast with ErrUnavailable while it is down...
		sawDown := false
		for time.Since(killed) < 2*time.Second {
			_, gen, err := p.Client()
			if err != nil {
				require.ErrorIs(t, err, plugins.ErrUnavailable)
				sawDown = true
			} else if gen > old.Generation {
				break
			}
			time.Sleep(time.Millisecond)
		}
		require.True(t, sawDown, "Client never reported the plugin down")

		// ...and it is back within 1 s: a new process, the next generation.
		// (The plugin here is this test binary; under -race it starts several
		// times slower, so the budget doubles. filters' fault test checks the
		// 1 s with a real, uninstrumented plugin binary.)
		require.Eventually(t, func() bool {
			_, gen, err := p.Client()
			return err == nil && gen == old.Generation+1
		}, restartBudget()-time.Since(killed), 5*time.Millisecond, logs.String())
		t.Logf("round %d: back after %v", round, time.Since(killed))
		inf := p.Info()
		require.Equal(t, StateRunning, inf.State)
		require.NotEqual(t, old.PID, inf.PID)
		require.Equal(t, int64(round), inf.Restarts)
		got, err := echo(t, p, "pid")
		require.NoError(t, err)
		require.Equal(t, "pid "+itoa(inf.PID), got)
		eventuallyGone(t, old.PID, time.Second)
	}
}

func TestHungPluginIsRestarted(t *testing.T) {
	s, logs := newSup(t, Options{HealthInterval: 100 * time.Millisecond, HealthTimeout: 200 * time.Millisecond})
	p, err := s.Launch(selfSpec(t, "hung"), &testPlugin{})
	require.NoError(t, err)
	old := p.Info()
	require.NoError(t, syscall.Kill(old.PID, syscall.SIGSTOP))
	require.Eventually(t, func() bool {
		_, gen, err := p.Client()
		return err == nil && gen == 2
	}, 3*time.Second, 10*time.Millisecond, logs.String())
	require.Contains(t, p.Info().LastError, "health check failed")
	eventuallyGone(t, old.PID, time.Second)
	_, err = echo(t, p, "hi")
	require.NoError(t, err)
}

func TestCrashLoopBacksOff(t *testing.T) {
	dir := t.TempDir()
	fail, starts := filepath.Join(dir, "fail"), filepath.Join(dir, "starts")
	s, logs := newSup(t, Options{RestartMin: 20 * time.Millisecond, RestartMax: 200 * time.Millisecond})
	p, err := s.Launch(selfSpec(t, "flaky", envFailFile+"="+fail, envStarts+"="+starts), &testPlugin{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(fail, nil, 0o644))
	require.NoError(t, syscall.Kill(p.Info().PID, syscall.SIGKILL))

	// While starts keep failing it stays "restarting", with backoff: over
	// 1.5 s at most ~12 attempts (20, 40, 80, 160, then 100..200 ms apart,
	// plus the time each failing start takes), never a busy loop.
	time.Sleep(1500 * time.Millisecond)
	inf := p.Info()
	require.Equal(t, StateRestarting, inf.State)
	require.Zero(t, inf.PID)
	require.Contains(t, inf.LastError, "plugin flaky")
	_, _, err = p.Client()
	require.ErrorIs(t, err, plugins.ErrUnavailable)
	b, _ := os.ReadFile(starts)
	n := strings.Count(string(b), "\n") - 1 // minus the first, good start
	require.GreaterOrEqual(t, n, 2, "restart attempts")
	require.LessOrEqual(t, n, 16, "restart attempts")

	// Once the binary works again, it comes back.
	require.NoError(t, os.Remove(fail))
	require.Eventually(t, func() bool {
		_, gen, err := p.Client()
		return err == nil && gen == 2
	}, 2*time.Second, 10*time.Millisecond, logs.String())
	require.Equal(t, int64(1), p.Info().Restarts)
}

func TestCloseLeavesNoProcess(t *testing.T) {
	s, _ := newSup(t, Options{})
	var pids []int
	var ps []*Plugin
	for _, name := range []string{"a", "b", "c"} {
		p, err := s.Launch(selfSpec(t, name), &testPlugin{})
		require.NoError(t, err)
		pids = append(pids, p.Info().PID)
		ps = append(ps, p)
	}
	start := time.Now()
	require.NoError(t, s.Close())
	require.Less(t, time.Since(start), 3*time.Second, "kills run in parallel")
	for _, pid := range pids {
		if runtime.GOOS == "linux" {
			require.False(t, alive(pid), "pid %d survived Close", pid)
		}
	}
	for _, p := range ps {
		_, _, err := p.Client()
		require.ErrorIs(t, err, plugins.ErrUnavailable)
		require.Equal(t, StateStopped, p.Info().State)
	}
	require.NoError(t, s.Close(), "idempotent")
	_, err := s.Launch(selfSpec(t, "late"), &testPlugin{})
	require.ErrorIs(t, err, ErrClosed)
}

func TestCloseKillsHungPlugin(t *testing.T) {
	s, _ := newSup(t, Options{HealthInterval: time.Minute, KillTimeout: 500 * time.Millisecond})
	p, err := s.Launch(selfSpec(t, "stuck"), &testPlugin{})
	require.NoError(t, err)
	pid := p.Info().PID
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	start := time.Now()
	require.NoError(t, s.Close())
	require.Less(t, time.Since(start), 2*time.Second)
	eventuallyGone(t, pid, time.Second)
}

func TestStartErrors(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	good := fileSHA256(exe)
	wrong := hex.EncodeToString(make([]byte, sha256.Size))
	missing := filepath.Join(t.TempDir(), "nope")

	cases := []struct {
		name     string
		spec     Spec
		sentinel error
		msg      string
	}{
		{"missing binary", Spec{Kind: plugins.KindFilter, Name: "ghost", Path: missing}, ErrNotFound,
			"plugin ghost: binary " + missing + " not found (build it with make)"},
		{"directory", Spec{Kind: plugins.KindFilter, Name: "dir", Path: t.TempDir()}, ErrNotFound, "is not an executable file"},
		{"sha256 mismatch", withSHA(selfSpec(t, "tampered"), wrong), ErrChecksum,
			"plugin tampered: sha256 mismatch: refusing to run " + exe + " (want " + wrong + ", got " + good + ")"},
		{"stdout before serve", selfSpec(t, "chatty", envMode+"=stdout"), ErrStdout,
			`plugin chatty wrote to stdout before serving: "hello from init" (plugins must not print to stdout)`},
		{"net/rpc", selfSpec(t, "old", envMode+"=netrpc"), ErrNotGRPC,
			"plugin old: only gRPC plugins are supported: " + exe + " speaks netrpc"},
		{"wrong kind", selfSpec(t, "mixup", envKind+"=filter"), plugins.ErrWrongKind,
			"plugin mixup: " + exe + " is a filter plugin, not a selector plugin"},
		{"exits at once", selfSpec(t, "quitter", envFailFile+"="+exe), ErrHandshake,
			"plugin quitter: " + exe + " exited before the handshake"},
		{"not a plugin", Spec{Kind: plugins.KindFilter, Name: "sh", Path: "/bin/true"}, ErrHandshake, "exited before the handshake"},
	}
	s, _ := newSup(t, Options{StartTimeout: 5 * time.Second})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.Launch(tc.spec, &testPlugin{})
			require.Nil(t, p)
			require.ErrorIs(t, err, tc.sentinel)
			var se *StartError
			require.True(t, errors.As(err, &se))
			require.Equal(t, tc.spec.Name, se.Name)
			require.Contains(t, err.Error(), tc.msg)
		})
	}
	require.Empty(t, s.List(), "failed launches are not supervised")

	// The right sha256 (any case) is accepted.
	p, err := s.Launch(withSHA(selfSpec(t, "signed"), strings.ToUpper(good)), &testPlugin{})
	require.NoError(t, err)
	_, err = echo(t, p, "hi")
	require.NoError(t, err)
}

func withSHA(s Spec, sum string) Spec { s.SHA256 = sum; return s }

func TestUnknownKind(t *testing.T) {
	s, _ := newSup(t, Options{})
	_, err := s.Launch(Spec{Kind: "txn", Name: "x", Path: "/bin/true"}, &testPlugin{})
	require.ErrorContains(t, err, `unknown kind "txn"`)
}

func TestLineLogger(t *testing.T) {
	var out syncBuffer
	w := &lineLogger{log: hclog.New(&hclog.LoggerOptions{Name: "p.stdout", Level: hclog.Debug, Output: &out})}
	_, _ = io.WriteString(w, "one\r\ntw")
	_, _ = io.WriteString(w, "o\nthree")
	require.Contains(t, out.String(), "p.stdout: one\n")
	require.Contains(t, out.String(), "p.stdout: two\n")
	require.NotContains(t, out.String(), "three")
	_, _ = io.WriteString(w, strings.Repeat("x", maxLogLine))
	require.Contains(t, out.String(), "threexxx")
}

func TestBackoff(t *testing.T) {
	s := NewSupervisor(Options{RestartMin: 10 * time.Millisecond, RestartMax: time.Second})
	p := newPlugin(s, Spec{Name: "b"}, nil)
	for n, want := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 4: 80 * time.Millisecond, 8: time.Second, 100: time.Second} {
		for range 20 {
			d := p.backoff(n)
			require.GreaterOrEqual(t, d, want/2, "n=%d", n)
			require.LessOrEqual(t, d, want, "n=%d", n)
		}
	}
}

// restartBudget is how long a killed plugin may take to be back.
func restartBudget() time.Duration {
	if raceEnabled {
		return 2 * time.Second
	}
	return time.Second
}

// TestEnvAllowList: a plugin gets PATH, HOME, TMPDIR and LANG from the host
// (those that are set), its configured env (which overrides them) and
// go-plugin's handshake variables, and nothing else of the host's
// environment; an unpinned plugin runs the configured path itself.
func TestEnvAllowList(t *testing.T) {
	t.Setenv("METAQ_TEST_SECRET", "hunter2")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TMPDIR", "")
	require.NoError(t, os.Unsetenv("TMPDIR")) // restored by t.Setenv
	s, _ := newSup(t, Options{})
	spec := selfSpec(t, "env", "METAQ_CONFIGURED=yes", "HOME=/plugin-home")
	p, err := s.Launch(spec, &testPlugin{})
	require.NoError(t, err)

	out, err := echo(t, p, "environ")
	require.NoError(t, err)
	env := map[string]string{}
	for _, kv := range strings.Split(out, "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	require.NotContains(t, env, "METAQ_TEST_SECRET", "the host's secret leaked into the plugin")
	require.NotContains(t, env, "TMPDIR", "an unset allowed variable stays unset")
	require.Equal(t, os.Getenv("PATH"), env["PATH"])
	require.Equal(t, "C.UTF-8", env["LANG"])
	require.Equal(t, "/plugin-home", env["HOME"], "configured env overrides the host's")
	require.Equal(t, "yes", env["METAQ_CONFIGURED"])
	require.Equal(t, "plugin", env[envRole])
	require.Equal(t, plugins.Handshake.MagicCookieValue, env[plugins.Handshake.MagicCookieKey])
	for k := range env {
		switch {
		case k == "PATH", k == "HOME", k == "LANG", k == "METAQ_CONFIGURED", k == envRole,
			k == "GORACE", // configured by selfSpec
			k == plugins.Handshake.MagicCookieKey, strings.HasPrefix(k, "PLUGIN_"):
		default:
			t.Errorf("plugin environment has %s, which is neither allowed nor configured", k)
		}
	}

	got, err := echo(t, p, "exe")
	require.NoError(t, err)
	require.Equal(t, spec.Path, got, "without a pin the configured path runs")
}
