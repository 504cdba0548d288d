package selectors

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// pluginClient is what the middleware needs of a *host.Plugin.
type pluginClient interface {
	Client() (any, uint64, error)
	Observe(err error)
}

// remote is the Selector Open returns for a plugin: it counts calls and
// errors on the plugin, bounds each call with a timeout, checks the answer,
// and applies the selector failure policy: when the plugin is unavailable,
// fails, times out or answers badly, the message goes round robin instead
// and Select succeeds. Only the caller's own ctx ending makes Select fail.
type remote struct {
	p     pluginClient
	g     pluginrpc.Guard // p's calls: timeout, counting, closed
	name  string
	log   hclog.Logger
	owned io.Closer // the private supervisor, closed by Close

	rr        selector.Selector // the fallback: selector.RoundRobin
	closeOnce sync.Once
	closeErr  error

	// A burst is a run of fallbacks between two successful calls; it is
	// logged once when it starts and once when it ends.
	inBurst    atomic.Bool
	fallbacks  atomic.Int64 // messages chosen by the fallback, in total
	burstStart atomic.Int64 // fallbacks when the current burst began
}

func (r *remote) Select(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error) {
	if r.g.Closed() {
		return 0, ErrClosed
	}
	if err := selector.Check(ctx, topic, partitions); err != nil {
		return 0, err
	}
	i, err := r.call(ctx, topic, partitions, m)
	if err == nil {
		if r.inBurst.Load() {
			r.endBurst()
		}
		return i, nil
	}
	if cerr := callerDone(ctx); cerr != nil {
		return 0, cerr // the caller gave up: nothing to fall back for
	}
	r.fallback(topic, err)
	return r.rr.Select(ctx, topic, partitions, m)
}

// callerDone is ctx's error, or context.DeadlineExceeded once ctx's
// deadline has passed even though ctx does not report it yet. gRPC fails a
// call whose deadline has passed by the clock before the context's timer
// has fired (on a loaded machine it can fire late), and that failure is
// the caller's, not the plugin's.
func callerDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// call makes one checked, timed, counted call to the plugin.
func (r *remote) call(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error) {
	raw, _, err := r.p.Client()
	if err != nil {
		r.g.Observe(err)
		return 0, err
	}
	sel, ok := raw.(selector.Selector)
	if !ok {
		err = fmt.Errorf("%w: dispensed %T", plugins.ErrWrongKind, raw)
		r.g.Observe(err)
		return 0, err
	}
	cctx, cancel := r.g.Context(ctx)
	i, err := sel.Select(cctx, topic, partitions, m)
	cancel()
	if err == nil {
		err = selector.CheckChoice(topic, partitions, i)
	}
	r.g.Observe(err)
	return i, err
}

func (r *remote) fallback(topic string, err error) {
	n := r.fallbacks.Add(1)
	if r.inBurst.CompareAndSwap(false, true) {
		r.burstStart.Store(n - 1)
		r.log.Warn("selector plugin failed; choosing round robin until it recovers",
			"plugin", r.name, "topic", topic, "error", err)
	}
}

func (r *remote) endBurst() {
	if r.inBurst.CompareAndSwap(true, false) {
		r.log.Info("selector plugin recovered", "plugin", r.name,
			"fallback_messages", r.fallbacks.Load()-r.burstStart.Load())
	}
}

// Close stops the plugin process if Open started a private supervisor for
// it; a shared supervisor keeps it (and stops it on its own Close).
func (r *remote) Close() error {
	r.closeOnce.Do(func() {
		r.g.Close()
		if r.owned != nil {
			r.closeErr = r.owned.Close()
		}
	})
	return r.closeErr
}
