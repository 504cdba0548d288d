package offsetstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// DefaultCallTimeout bounds one Init, Commit or Load when the caller's
// context has no earlier deadline.
const DefaultCallTimeout = 10 * time.Second

// observer counts calls and errors (host.Plugin.Observe); nil for builtins.
type observer interface{ Observe(err error) }

// middleware wraps every store Open returns, builtin or remote: input
// validation, a per-call timeout, result normalisation (the requested partitions, -1 for nothing stored), call/error
// counting, and offsets.ErrClosed after Close. It never hides an error: the offset
// store's failure policy is to return every failure to the caller.
type middleware struct {
	next    Store
	obs     observer
	timeout time.Duration
	closed  atomic.Bool
}

// Wrap returns s behind the same middleware Open uses (validation,
// timeout per call, offsets.ErrClosed after Close). timeout <= 0 means
// DefaultCallTimeout.
func Wrap(s Store, timeout time.Duration) Store {
	return wrap(s, nil, timeout)
}

func wrap(s Store, obs observer, timeout time.Duration) *middleware {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	return &middleware{next: s, obs: obs, timeout: timeout}
}

func (m *middleware) observe(err error) error {
	if m.obs != nil {
		m.obs.Observe(err)
	}
	return err
}

func (m *middleware) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= m.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, m.timeout)
}

func (m *middleware) Init(ctx context.Context, req *InitRequest) error {
	if m.closed.Load() {
		return offsets.ErrClosed
	}
	if req == nil {
		req = &InitRequest{}
	}
	ctx, cancel := m.ctx(ctx)
	defer cancel()
	return m.observe(m.next.Init(ctx, req))
}

func (m *middleware) Commit(ctx context.Context, group string, ps []message.Position) error {
	if m.closed.Load() {
		return offsets.ErrClosed
	}
	if err := offsets.ValidateCommit(group, ps); err != nil {
		return err
	}
	if len(ps) == 0 {
		return nil
	}
	ctx, cancel := m.ctx(ctx)
	defer cancel()
	return m.observe(m.next.Commit(ctx, group, ps))
}

func (m *middleware) Load(ctx context.Context, group string, ps []message.Position) ([]message.Position, error) {
	if m.closed.Load() {
		return nil, offsets.ErrClosed
	}
	if err := offsets.ValidateLoad(group, ps); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return []message.Position{}, nil
	}
	ctx, cancel := m.ctx(ctx)
	defer cancel()
	res, err := m.next.Load(ctx, group, ps)
	if err == nil && len(res) != len(ps) {
		err = fmt.Errorf("offsetstore: load returned %d positions for %d asked", len(res), len(ps))
	}
	if m.observe(err) != nil {
		return nil, err
	}
	for i := range res {
		res[i].Topic, res[i].Partition = ps[i].Topic, ps[i].Partition
		if res[i].Offset < 0 {
			res[i].Offset, res[i].MsgID = -1, -1
		}
	}
	return res, nil
}

func (m *middleware) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	return m.next.Close()
}
