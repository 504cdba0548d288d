package host

import (
	"bytes"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// maxLogLine is the longest line a lineLogger buffers before logging it.
const maxLogLine = 64 << 10

// lineLogger is an io.Writer that logs each line at Debug. It receives
// what a plugin writes to os.Stdout and os.Stderr after serving (go-plugin's
// SyncStdout/SyncStderr), which would otherwise be discarded.
type lineLogger struct {
	log hclog.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *lineLogger) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.log.Debug(string(bytes.TrimRight(w.buf[:i], "\r")))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) >= maxLogLine {
		w.log.Debug(string(w.buf))
		w.buf = w.buf[:0]
	}
	w.buf = append(make([]byte, 0, len(w.buf)), w.buf...)
	return len(b), nil
}
