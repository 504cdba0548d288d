package selectors

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/selectors/internal/builtin"
)

// pluginClient is what the middleware needs of a *host.Plugin.
type pluginClient interface {
	Client() (any, uint64, error)
	Observe(err error)
}

// remote is the Selector Open returns for a plugin: it counts calls and
// errors on the plugin, bounds each call with a timeout, checks the answer,
// and applies the selector failure policy: when the plugin is unavailable,
// fails, times out or answers badly, the batch goes round robin instead and
// Select succeeds. Only the caller's own ctx ending makes Select fail.
type remote struct {
	p       pluginClient
	name    string
	timeout time.Duration
	log     hclog.Logger
	owned   *host.Supervisor // closed by Close when Open created it

	rr        builtin.RoundRobin
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	// A burst is a run of fallbacks between two successful calls; it is
	// logged once when it starts and once when it ends.
	inBurst    atomic.Bool
	fallbacks  atomic.Int64 // batches chosen by the fallback, in total
	burstStart atomic.Int64 // fallbacks when the current burst began
}

func (r *remote) Select(ctx context.Context, req *SelectRequest) (*SelectResponse, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if err := builtin.Check(ctx, req.Topic, len(req.Partitions)); err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 {
		return &SelectResponse{Choices: []int{}}, nil
	}
	resp, err := r.call(ctx, req)
	if err == nil {
		if r.inBurst.Load() {
			r.endBurst()
		}
		return resp, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr // the caller gave up: nothing to fall back for
	}
	r.fallback(req.Topic, err)
	out := make([]int, len(req.Messages))
	r.rr.Choose(out, len(req.Partitions))
	return &SelectResponse{Choices: out}, nil
}

// call makes one checked, timed, counted call to the plugin.
func (r *remote) call(ctx context.Context, req *SelectRequest) (*SelectResponse, error) {
	raw, _, err := r.p.Client()
	if err != nil {
		r.p.Observe(err)
		return nil, err
	}
	sel, ok := raw.(Selector)
	if !ok {
		err = fmt.Errorf("%w: dispensed %T", plugins.ErrWrongKind, raw)
		r.p.Observe(err)
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	resp, err := sel.Select(cctx, req)
	cancel()
	if err == nil {
		err = checkResponse(req, resp)
	}
	r.p.Observe(err)
	return resp, err
}

// checkResponse verifies one choice per message, each in range.
func checkResponse(req *SelectRequest, resp *SelectResponse) error {
	if resp == nil {
		return fmt.Errorf("%w: no response", ErrBadChoice)
	}
	if len(resp.Choices) != len(req.Messages) {
		return fmt.Errorf("%w: %d choices for %d messages", ErrBadChoice, len(resp.Choices), len(req.Messages))
	}
	n := len(req.Partitions)
	for i, c := range resp.Choices {
		if c < 0 || c >= n {
			return fmt.Errorf("%w: choice %d for message %d, topic %q has %d partitions", ErrBadChoice, c, i, req.Topic, n)
		}
	}
	return nil
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
			"fallback_batches", r.fallbacks.Load()-r.burstStart.Load())
	}
}

// Close stops the plugin process if Open started a private supervisor for
// it; a shared supervisor keeps it (and stops it on its own Close).
func (r *remote) Close() error {
	r.closeOnce.Do(func() {
		r.closed.Store(true)
		if r.owned != nil {
			r.closeErr = r.owned.Close()
		}
	})
	return r.closeErr
}
