package offsetstore

import (
	"context"
	"fmt"
	"time"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// DefaultCallTimeout bounds one Init, Commit or Load when the caller's
// context has no earlier deadline.
const DefaultCallTimeout = 10 * time.Second

// middleware wraps every store Open returns, builtin or remote: input
// validation, a per-call timeout, result normalisation (the requested partitions, -1 for nothing stored), call/error
// counting, and offsets.ErrClosed after Close. It never hides an error: the offset
// store's failure policy is to return every failure to the caller.
type middleware struct {
	next Store
	g    pluginrpc.Guard
}

// Wrap returns s behind the same middleware Open uses (validation,
// timeout per call, offsets.ErrClosed after Close). timeout <= 0 means
// DefaultCallTimeout.
func Wrap(s Store, timeout time.Duration) Store {
	return wrap(s, nil, timeout)
}

func wrap(s Store, obs pluginrpc.Observer, timeout time.Duration) *middleware {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	return &middleware{next: s, g: pluginrpc.Guard{Obs: obs, Timeout: timeout}}
}

func (m *middleware) Init(ctx context.Context, req *InitRequest) error {
	if m.g.Closed() {
		return offsets.ErrClosed
	}
	if req == nil {
		req = &InitRequest{}
	}
	ctx, cancel := m.g.Context(ctx)
	defer cancel()
	return m.g.Observe(m.next.Init(ctx, req))
}

func (m *middleware) Commit(ctx context.Context, group string, ps []message.Position) error {
	if m.g.Closed() {
		return offsets.ErrClosed
	}
	if err := offsets.ValidateCommit(group, ps); err != nil {
		return err
	}
	if len(ps) == 0 {
		return nil
	}
	ctx, cancel := m.g.Context(ctx)
	defer cancel()
	return m.g.Observe(m.next.Commit(ctx, group, ps))
}

func (m *middleware) Load(ctx context.Context, group string, ps []message.Position) ([]message.Position, error) {
	if m.g.Closed() {
		return nil, offsets.ErrClosed
	}
	if err := offsets.ValidateLoad(group, ps); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return []message.Position{}, nil
	}
	ctx, cancel := m.g.Context(ctx)
	defer cancel()
	res, err := m.next.Load(ctx, group, ps)
	if err == nil && len(res) != len(ps) {
		err = fmt.Errorf("offsetstore: load returned %d positions for %d asked", len(res), len(ps))
	}
	if m.g.Observe(err) != nil {
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
	if !m.g.Close() {
		return nil
	}
	return m.next.Close()
}
