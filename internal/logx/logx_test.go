package logx

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTextFormat(t *testing.T) {
	var buf bytes.Buffer
	h, err := NewHandler(&buf, FormatText)
	require.NoError(t, err)
	var lv slog.LevelVar
	l := slog.New(Filter(h, &lv))
	l.Debug("hidden")
	l.Info("hello world", "a", 1, "b", "two words", "c", `q"uote`, slog.Group("g", "x", true))
	l.With("component", "broker").Warn("careful")
	lv.Set(slog.LevelDebug)
	l.Debug("now shown")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, buf.String())
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO  hello world a=1 b="two words" c="q\\"uote" g.x=true$`, lines[0])
	require.Regexp(t, `Z WARN  careful component=broker$`, lines[1])
	require.Regexp(t, `Z DEBUG now shown$`, lines[2])
}

func TestJSONFormat(t *testing.T) {
	var buf bytes.Buffer
	h, err := NewHandler(&buf, FormatJSON)
	require.NoError(t, err)
	var lv slog.LevelVar
	lv.Set(slog.LevelWarn)
	l := slog.New(Filter(h, &lv))
	l.Info("hidden")
	l.Warn("line\nbreak", "n", 3)
	l.Log(context.Background(), LevelTrace, "trace hidden")
	lv.Set(LevelTrace)
	l.Log(context.Background(), LevelTrace, "trace shown")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec))
	require.Equal(t, "WARN", rec["level"])
	require.Equal(t, "line\nbreak", rec["msg"])
	require.EqualValues(t, 3, rec["n"])
	require.True(t, strings.HasSuffix(rec["time"].(string), "Z"), rec["time"])
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &rec))
	require.Equal(t, "TRACE", rec["level"])
}

func TestParseLevel(t *testing.T) {
	for s, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError, "": slog.LevelInfo} {
		got, err := ParseLevel(s)
		require.NoError(t, err)
		require.Equal(t, want, got, s)
	}
	_, err := ParseLevel("loud")
	require.ErrorContains(t, err, `unknown log level "loud"`)
	_, err = NewHandler(&bytes.Buffer{}, "xml")
	require.ErrorContains(t, err, `unknown log format "xml"`)
}

func TestPrintf(t *testing.T) {
	var lines []string
	logf := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	var lv slog.LevelVar
	l := slog.New(Filter(PrintfHandler(logf), &lv))
	Printf(l, slog.LevelInfo)("store %s-%d: %s", "t", 0, `a "quoted" word`)
	Printf(l, slog.LevelDebug)("hidden %d", 1)
	l.Error("bad", "k", "v")
	require.Equal(t, []string{`store t-0: a "quoted" word`, "ERROR bad k=v"}, lines)
}

// TestLevels: the two loggers over one root each pass their own level,
// changed live by Set; Root prefers the handler, then the printf func.
func TestLevels(t *testing.T) {
	var got []string
	root := Root(nil, func(format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) })
	var lv Levels
	lv.Set("warn", "debug")
	own, plugin := lv.Loggers(root)
	own.Info("own info")
	own.Warn("own warn")
	plugin.Debug("plugin debug")
	lv.Set("info", "error")
	own.Info("own info 2")
	plugin.Warn("plugin warn")
	require.Len(t, got, 3, "%q", got)
	require.Contains(t, got[0], "own warn")
	require.Contains(t, got[1], "plugin debug")
	require.Contains(t, got[2], "own info 2")

	var buf bytes.Buffer
	h, err := NewHandler(&buf, FormatText)
	require.NoError(t, err)
	require.Equal(t, h, Root(h, func(string, ...any) { t.Fatal("printf used over a handler") }))
	require.Equal(t, slog.Default().Handler(), Root(nil, nil))
}
