package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress shows how a long operation (bench, reset-offsets over many
// partitions, produce of a large file) advances, on one line of stderr
// rewritten in place, when stderr is a terminal; otherwise it does
// nothing, so that logs and pipes get no control characters.
type progress struct {
	mu    sync.Mutex
	f     *os.File // nil: stderr is no terminal
	name  string
	last  time.Time
	shown bool
}

// progressEvery bounds how often the line is rewritten.
const progressEvery = 100 * time.Millisecond

// newProgress returns the progress line of the operation name.
func newProgress(e *env, name string) *progress {
	p := &progress{name: name}
	if f, ok := e.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.f = f
	}
	return p
}

// update rewrites the line with the formatted status, at most every
// progressEvery. It is safe for concurrent use.
func (p *progress) update(format string, args ...any) {
	if p == nil || p.f == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); p.shown && now.Sub(p.last) < progressEvery {
		return
	} else {
		p.last = now
	}
	p.shown = true
	fmt.Fprintf(p.f, "\r\033[K%s: %s", p.name, fmt.Sprintf(format, args...))
}

// done clears the line. It is idempotent.
func (p *progress) done() {
	if p == nil || p.f == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.f, "\r\033[K")
		p.shown = false
	}
}
