package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// linkWatch tells a person at the CLI, without --log-level, that a group
// consumer lost its broker and when it is back: one line each. The SDK
// retries by itself and logs why through its logger; linkWatch sees those
// records (watchHandler), dials the broker to tell a lost broker from a
// passing refusal, and while it is lost dials it every probeEvery until it
// answers.
type linkWatch struct {
	e          *env
	addr       string
	probeEvery time.Duration
	ctx        context.Context

	mu   sync.Mutex
	busy bool // a check or a probe loop runs
}

func newLinkWatch(ctx context.Context, e *env, addr string) *linkWatch {
	return &linkWatch{e: e, addr: addr, probeEvery: time.Second, ctx: ctx}
}

// trouble is called for each warning the SDK logs; why is its error.
func (w *linkWatch) trouble(why string) {
	w.mu.Lock()
	if w.busy {
		w.mu.Unlock()
		return
	}
	w.busy = true
	w.mu.Unlock()
	go w.check(why)
}

// check dials the broker: if it answers, the warning was something else
// (a refusal, a rebalance) and nothing is printed; else it says the broker
// is lost and probes until it is back.
func (w *linkWatch) check(why string) {
	defer func() {
		w.mu.Lock()
		w.busy = false
		w.mu.Unlock()
	}()
	if w.reachable() {
		return
	}
	fmt.Fprintf(w.e.stderr, "metaq consume: lost the broker at %s (%s); retrying until it is back\n", w.addr, why)
	t := time.NewTicker(w.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		if w.reachable() {
			fmt.Fprintf(w.e.stderr, "metaq consume: the broker at %s is back\n", w.addr)
			return
		}
	}
}

func (w *linkWatch) reachable() bool {
	if w.ctx.Err() != nil {
		return true // stopping: say nothing
	}
	return checkBrokerAt(w.e, w.addr) == nil
}

// watchHandler passes the SDK's log records on to the CLI's logger (which
// is silent without --log-level) and shows each warning or failure (a
// record with an err) to a linkWatch.
type watchHandler struct {
	inner slog.Handler
	w     *linkWatch
}

// Enabled is true at every level: the SDK logs a failed get at debug
// level, and only on failures (its debug records are all error paths).
func (h watchHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h watchHandler) Handle(ctx context.Context, r slog.Record) error {
	why := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			why = a.Value.String()
			return false
		}
		return true
	})
	if why != "" || r.Level >= slog.LevelWarn {
		if why == "" {
			why = r.Message
		}
		h.w.trouble(why)
	}
	if h.inner.Enabled(ctx, r.Level) {
		return h.inner.Handle(ctx, r)
	}
	return nil
}

func (h watchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return watchHandler{inner: h.inner.WithAttrs(as), w: h.w}
}

func (h watchHandler) WithGroup(name string) slog.Handler {
	return watchHandler{inner: h.inner.WithGroup(name), w: h.w}
}
