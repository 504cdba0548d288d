package host

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// HCLog returns an hclog.Logger that writes through l: go-plugin's own
// lines and each plugin's output (its hclog JSON on stderr, parsed by
// go-plugin, and what it prints after serving) become records of the
// program's one slog logger, with the logger's name (hclog's @module,
// "plugins.<name>") in a "module" attribute and hclog's key/value pairs
// as attributes. There is no second time stamp or level. Trace maps to
// logx.LevelTrace (below Debug).
//
// level is the hclog level below which lines are dropped before they reach
// l (SetLevel changes it, for every logger derived from this one); l's own
// handler may filter further.
func HCLog(l *slog.Logger, level hclog.Level) hclog.Logger {
	lv := new(atomic.Int32)
	lv.Store(int32(level))
	return &hcBridge{l: l, level: lv}
}

type hcBridge struct {
	l     *slog.Logger
	level *atomic.Int32 // shared by the loggers derived with Named and With
	name  string
	args  []any
}

var _ hclog.Logger = (*hcBridge)(nil)

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *hcBridge) enabled(l hclog.Level) bool {
	if l == hclog.Off || hclog.Level(h.level.Load()) == hclog.Off {
		return false
	}
	if l == hclog.NoLevel {
		l = hclog.Info
	}
	return l >= hclog.Level(h.level.Load()) && h.l.Enabled(context.Background(), slogLevel(l))
}

func (h *hcBridge) Log(level hclog.Level, msg string, args ...any) {
	if !h.enabled(level) {
		return
	}
	attrs := make([]any, 0, 2+len(h.args)+len(args))
	if h.name != "" {
		attrs = append(attrs, slog.String("module", h.name))
	}
	attrs = append(attrs, pairs(h.args)...)
	attrs = append(attrs, pairs(args)...)
	h.l.Log(context.Background(), slogLevel(level), msg, attrs...)
}

// pairs turns hclog's alternating key, value arguments into slog
// attributes (an odd last value gets the key "EXTRA_VALUE_AT_END", as
// hclog does; errors and Stringers are rendered as text).
func pairs(args []any) []any {
	out := make([]any, 0, (len(args)+1)/2)
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			out = append(out, slog.Any("EXTRA_VALUE_AT_END", args[i]))
			break
		}
		k, ok := args[i].(string)
		if !ok {
			k = fmt.Sprint(args[i])
		}
		v := args[i+1]
		switch tv := v.(type) {
		case error:
			v = tv.Error()
		case hclog.Format:
			v = fmt.Sprintf(tv[0].(string), tv[1:]...)
		case fmt.Stringer:
			v = tv.String()
		}
		out = append(out, slog.Any(k, v))
	}
	return out
}

func (h *hcBridge) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcBridge) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcBridge) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcBridge) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcBridge) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcBridge) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hcBridge) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hcBridge) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hcBridge) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hcBridge) IsError() bool { return h.enabled(hclog.Error) }

func (h *hcBridge) ImpliedArgs() []any { return h.args }

func (h *hcBridge) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

func (h *hcBridge) Name() string { return h.name }

func (h *hcBridge) Named(name string) hclog.Logger {
	c := *h
	if h.name != "" {
		c.name = h.name + "." + name
	} else {
		c.name = name
	}
	return &c
}

func (h *hcBridge) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

func (h *hcBridge) SetLevel(level hclog.Level) { h.level.Store(int32(level)) }
func (h *hcBridge) GetLevel() hclog.Level      { return hclog.Level(h.level.Load()) }

func (h *hcBridge) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hcBridge) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	lvl := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		lvl = opts.ForceLevel
	}
	return writerFunc(func(p []byte) (int, error) {
		for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
			if line != "" {
				h.Log(lvl, line)
			}
		}
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
