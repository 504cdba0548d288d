// Package logx is the one way metaq-go's programs log: log/slog, with a
// human-readable text format or JSON lines, and levels that can change
// while the program runs (SIGHUP).
//
// A program builds one root handler with NewHandler (it passes every
// level) and wraps it with Filter for each audience whose level is set on
// its own: the broker's lines at log_level, plugin output at
// plugin_log_level. Code that still logs printf-style gets a func from
// Printf.
//
// The text format is one line per record:
//
//	2026-12-01T19:40:00.123Z INFO  broker 0 listening on 127.0.0.1:8123 component=broker
//
// the time in UTC with milliseconds, the level padded to five columns, the
// message as is, then the attributes as key=value (values quoted when they
// hold spaces, quotes or '='). JSON is slog's JSONHandler: one object per
// line with "time", "level", "msg" and the attributes.
package logx

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Formats accepted by NewHandler (server.toml log_format).
const (
	FormatText = "text"
	FormatJSON = "json"
)

// LevelTrace is below Debug: go-plugin's Trace lines map to it.
const LevelTrace = slog.LevelDebug - 4

// ParseLevel parses a log_level value: debug, info, warn (or warning),
// error, and trace (below debug). Case does not matter.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace":
		return LevelTrace, nil
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
}

// NewHandler returns the root handler writing format ("text", "json"; ""
// is text) to w. It passes every level: wrap it with Filter.
func NewHandler(w io.Writer, format string) (slog.Handler, error) {
	switch format {
	case FormatText, "":
		return &textHandler{out: &lockedWriter{w: w}}, nil
	case FormatJSON:
		return slog.NewJSONHandler(w, &slog.HandlerOptions{
			Level: LevelTrace - 4,
			ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && a.Key == slog.TimeKey {
					a.Value = slog.TimeValue(a.Value.Time().UTC())
				}
				if len(groups) == 0 && a.Key == slog.LevelKey {
					a.Value = slog.StringValue(levelName(a.Value.Any().(slog.Level)))
				}
				return a
			},
		}), nil
	}
	return nil, fmt.Errorf("unknown log format %q (want text or json)", format)
}

// Filter returns h passing only records at lv or above. lv is read on
// every record, so a *slog.LevelVar changes the level live.
func Filter(h slog.Handler, lv slog.Leveler) slog.Handler {
	if f, ok := h.(*filter); ok {
		h = f.h
	}
	return &filter{h: h, lv: lv}
}

type filter struct {
	h  slog.Handler
	lv slog.Leveler
}

func (f *filter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.lv.Level() && f.h.Enabled(ctx, l)
}
func (f *filter) Handle(ctx context.Context, r slog.Record) error { return f.h.Handle(ctx, r) }
func (f *filter) WithAttrs(as []slog.Attr) slog.Handler {
	return &filter{h: f.h.WithAttrs(as), lv: f.lv}
}
func (f *filter) WithGroup(name string) slog.Handler {
	return &filter{h: f.h.WithGroup(name), lv: f.lv}
}

// Printf returns a printf-style func that logs each call to l at level
// (formatting only when the level is enabled).
func Printf(l *slog.Logger, level slog.Level) func(format string, args ...any) {
	return func(format string, args ...any) {
		if !l.Enabled(context.Background(), level) {
			return
		}
		l.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}

// PrintfHandler returns a handler that turns each record into one call of
// logf, without a time stamp (logf's sink adds its own): the message,
// preceded by the level unless it is INFO, followed by the attributes.
// Tests use it to collect a broker's lines.
func PrintfHandler(logf func(format string, args ...any)) slog.Handler {
	return &textHandler{logf: logf}
}

// levelName is the level's name, with Trace for LevelTrace.
func levelName(l slog.Level) string {
	if l <= LevelTrace {
		return "TRACE"
	}
	return l.String()
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// textHandler is the text format (package doc); with logf set it writes
// no time and no INFO.
type textHandler struct {
	out    *lockedWriter
	logf   func(string, ...any)
	attrs  []byte // preformatted " k=v" pairs from WithAttrs
	prefix string // group prefix, "g." per WithGroup
}

func (h *textHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	buf := make([]byte, 0, 128)
	lvl := levelName(r.Level)
	if h.logf == nil {
		t := r.Time
		if t.IsZero() {
			t = time.Now()
		}
		buf = t.UTC().AppendFormat(buf, "2006-01-02T15:04:05.000Z07:00")
		buf = append(buf, ' ')
		buf = append(buf, lvl...)
		for i := len(lvl); i < 6; i++ {
			buf = append(buf, ' ')
		}
	} else if r.Level != slog.LevelInfo {
		buf = append(buf, lvl...)
		buf = append(buf, ' ')
	}
	buf = append(buf, strings.TrimRight(r.Message, "\n")...)
	buf = append(buf, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		buf = appendAttr(buf, h.prefix, a)
		return true
	})
	if h.logf != nil {
		h.logf("%s", buf)
		return nil
	}
	buf = append(buf, '\n')
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := h.out.w.Write(buf)
	return err
}

func (h *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]byte(nil), h.attrs...)
	for _, a := range as {
		c.attrs = appendAttr(c.attrs, h.prefix, a)
	}
	return &c
}

func (h *textHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}

// appendAttr appends " key=value" (groups flattened to "g.key").
func appendAttr(buf []byte, prefix string, a slog.Attr) []byte {
	v := a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return buf
	}
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, ga := range v.Group() {
			buf = appendAttr(buf, p, ga)
		}
		return buf
	}
	buf = append(buf, ' ')
	buf = append(buf, prefix...)
	buf = append(buf, a.Key...)
	buf = append(buf, '=')
	var s string
	switch v.Kind() {
	case slog.KindTime:
		s = v.Time().UTC().Format(time.RFC3339Nano)
	default:
		s = v.String()
	}
	if needsQuote(s) {
		return strconv.AppendQuote(buf, s)
	}
	return append(buf, s...)
}

func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	if !utf8.ValidString(s) {
		return true
	}
	return bytes.ContainsAny([]byte(s), " \t\r\n\"=\\") || strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}

// Levels are a program's two levels over one root handler (Loggers): its
// own lines' (log_level) and its plugins' (plugin_log_level). Both are
// LevelVars, so Set changes them live (a reload).
type Levels struct{ own, plugin slog.LevelVar }

// Set sets the two levels from their configured names (ParseLevel's level
// even when the name is bad: the configuration was validated before).
func (l *Levels) Set(own, plugin string) {
	lv, _ := ParseLevel(own)
	l.own.Set(lv)
	pl, _ := ParseLevel(plugin)
	l.plugin.Set(pl)
}

// Loggers returns the loggers of the two levels over root.
func (l *Levels) Loggers(root slog.Handler) (own, plugin *slog.Logger) {
	return slog.New(Filter(root, &l.own)), slog.New(Filter(root, &l.plugin))
}

// Root is a program's root handler: h when set, else one writing through
// logf when set (PrintfHandler), else slog.Default's.
func Root(h slog.Handler, logf func(format string, args ...any)) slog.Handler {
	switch {
	case h != nil:
		return h
	case logf != nil:
		return PrintfHandler(logf)
	}
	return slog.Default().Handler()
}
