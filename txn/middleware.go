package txn

import (
	"context"
	"fmt"
	"time"

	"github.com/metaq-go/metaq/internal/pluginrpc"
)

// DefaultCallTimeout bounds one coordinator call when the caller's context
// has no earlier deadline.
const DefaultCallTimeout = 10 * time.Second

// middleware wraps every coordinator Open returns, builtin or remote:
// request validation (so a plugin sees only well-formed requests, and a
// bad one fails the same way everywhere), answer checks, a per-call
// timeout, call/error counting, and ErrClosed after Close. It never hides
// an error and never retries a Commit: the coordinator's failure policy is
// to return every failure to the caller, whose transaction is then in
// doubt until Recover.
type middleware struct {
	next    Coordinator
	g       pluginrpc.Guard
	onClose func() error
}

// Wrap returns c behind the same middleware Open uses. timeout <= 0 means
// DefaultCallTimeout.
func Wrap(c Coordinator, timeout time.Duration) Coordinator {
	return wrap(c, nil, timeout)
}

func wrap(c Coordinator, obs pluginrpc.Observer, timeout time.Duration) *middleware {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	return &middleware{next: c, g: pluginrpc.Guard{Obs: obs, Timeout: timeout}}
}

func (m *middleware) Init(ctx context.Context, req *InitRequest) error {
	if m.g.Closed() {
		return ErrClosed
	}
	if req == nil {
		req = &InitRequest{}
	}
	ctx, cancel := m.g.Context(ctx)
	defer cancel()
	return m.g.Observe(m.next.Init(ctx, req))
}

func (m *middleware) Begin(ctx context.Context, req *BeginRequest) (*BeginResponse, error) {
	if m.g.Closed() {
		return nil, ErrClosed
	}
	if err := ValidateOwner(req.Owner); err != nil {
		return nil, err
	}
	ctx, cancel := m.g.Context(ctx)
	defer cancel()
	resp, err := m.next.Begin(ctx, req)
	if err == nil {
		if o, ok := resp.XID.Owner(); !ok || o != req.Owner || len(resp.XID.Bqual) != 0 {
			err = fmt.Errorf("txn: coordinator began %s, not a global xid of owner %q", resp.XID, req.Owner)
		}
	}
	if m.g.Observe(err) != nil {
		return nil, err
	}
	return resp, nil
}

func (m *middleware) Commit(ctx context.Context, req *CommitRequest) error {
	if m.g.Closed() {
		return ErrClosed
	}
	if err := req.Decision.Validate(); err != nil {
		return err
	}
	ctx, cancel := m.g.Context(ctx)
	defer cancel()
	return m.g.Observe(m.next.Commit(ctx, req))
}

func (m *middleware) Forget(ctx context.Context, req *ForgetRequest) error {
	if m.g.Closed() {
		return ErrClosed
	}
	for _, x := range req.XIDs {
		if err := x.Validate(); err != nil {
			return err
		}
	}
	if len(req.XIDs) == 0 {
		return nil
	}
	ctx, cancel := m.g.Context(ctx)
	defer cancel()
	return m.g.Observe(m.next.Forget(ctx, req))
}

func (m *middleware) Recover(ctx context.Context, req *RecoverRequest) (*RecoverResponse, error) {
	if m.g.Closed() {
		return nil, ErrClosed
	}
	for _, o := range req.Owners {
		if err := ValidateOwner(o); err != nil {
			return nil, err
		}
	}
	ctx, cancel := m.g.Context(ctx)
	defer cancel()
	resp, err := m.next.Recover(ctx, req)
	if err == nil {
		for i := range resp.Decisions {
			if verr := resp.Decisions[i].Validate(); verr != nil {
				err = fmt.Errorf("txn: coordinator recovered a malformed decision: %w", verr)
				break
			}
		}
	}
	if m.g.Observe(err) != nil {
		return nil, err
	}
	return resp, nil
}

func (m *middleware) Close() error {
	if !m.g.Close() {
		return nil
	}
	err := m.next.Close()
	if m.onClose != nil {
		if cerr := m.onClose(); err == nil {
			err = cerr
		}
	}
	return err
}
