package broker

import (
	"io"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newHCLogger adapts the broker's printf logger to hclog for the plugin
// supervisor, at the configured level (never go-plugin's Trace default).
func newHCLogger(logf func(string, ...any), level string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   "plugins",
		Level:  hclog.LevelFromString(level),
		Output: logfWriter{logf},
	})
}

// logfWriter turns each line hclog writes into one logf call.
type logfWriter struct{ logf func(string, ...any) }

var _ io.Writer = logfWriter{}

func (w logfWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			w.logf("%s", line)
		}
	}
	return len(p), nil
}
