package host

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/logx"
)

// TestHCLogBridge runs a real plugin process with the slog bridge as the
// supervisor's logger: go-plugin's lines and the plugin's own output
// (hclog JSON on its stderr, and what it prints on stdout) arrive as JSON
// records of the one slog handler, with the plugin's name as an
// attribute, no second time stamp, and debug lines hidden at info.
func TestHCLogBridge(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			out := &syncBuffer{}
			h, err := logx.NewHandler(out, logx.FormatJSON)
			require.NoError(t, err)
			var lv slog.LevelVar
			lv.Set(level)
			s, _ := newSup(t, Options{Logger: HCLog(slog.New(logx.Filter(h, &lv)), hclog.Trace).Named("plugins")})
			p, err := s.Launch(selfSpec(t, "echo"), &testPlugin{})
			require.NoError(t, err)
			_, err = echo(t, p, "stdout:a line on stdout")
			require.NoError(t, err)
			_, err = echo(t, p, "panic")
			require.Error(t, err)
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "panic in plugin call") },
				3*time.Second, 10*time.Millisecond, out.String())
			if level == slog.LevelDebug {
				require.Eventually(t, func() bool { return strings.Contains(out.String(), "a line on stdout") },
					3*time.Second, 10*time.Millisecond, out.String())
			}
			require.NoError(t, s.Close())

			sawStarted := false
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var rec map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &rec), "not JSON: %q", line)
				msg, _ := rec["msg"].(string)
				require.NotRegexp(t, `^\d{4}-\d\d-\d\d`, msg, "a time stamp inside the message")
				require.NotContains(t, msg, "[INFO]")
				if level == slog.LevelInfo {
					require.NotEqual(t, "DEBUG", rec["level"], "debug line at info: %s", line)
				}
				if msg == "plugin started" {
					sawStarted = true
					require.Equal(t, "plugins.echo", rec["module"], line)
				}
				if strings.Contains(msg, "a line on stdout") {
					require.Equal(t, "plugins.echo.stdout", rec["module"], line)
				}
			}
			require.True(t, sawStarted, out.String())
		})
	}
}

// TestHCLogBridgeLevels checks the bridge's own level and its mapping.
func TestHCLogBridgeLevels(t *testing.T) {
	out := &syncBuffer{}
	h, err := logx.NewHandler(out, logx.FormatText)
	require.NoError(t, err)
	l := HCLog(slog.New(h), hclog.Info)
	l.Debug("hidden")
	l.Info("shown", "k", "v w", "err", errTest{})
	l.Named("a").Named("b").With("x", 1).Warn("warned", "odd")
	require.False(t, l.IsDebug())
	l.SetLevel(hclog.Trace)
	require.True(t, l.IsTrace())
	l.Trace("traced")
	l.StandardLogger(nil).Print("from the standard logger")
	got := out.String()
	require.NotContains(t, got, "hidden")
	require.Contains(t, got, `INFO  shown k="v w" err=boom`)
	require.Contains(t, got, "WARN  warned module=a.b x=1 EXTRA_VALUE_AT_END=odd")
	require.Contains(t, got, "TRACE traced")
	require.Contains(t, got, "INFO  from the standard logger")
}

type errTest struct{}

func (errTest) Error() string { return "boom" }
