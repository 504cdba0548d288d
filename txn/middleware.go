package txn

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultCallTimeout bounds one coordinator call when the caller's context
// has no earlier deadline.
const DefaultCallTimeout = 10 * time.Second

// observer counts calls and errors (host.Plugin.Observe); nil for builtins.
type observer interface{ Observe(err error) }

// middleware wraps every coordinator Open returns, builtin or remote:
// request validation (so a plugin sees only well-formed requests, and a
// bad one fails the same way everywhere), answer checks, a per-call
// timeout, call/error counting, and ErrClosed after Close. It never hides
// an error and never retries a Commit: the coordinator's failure policy is
// to return every failure to the caller, whose transaction is then in
// doubt until Recover.
type middleware struct {
	next    Coordinator
	obs     observer
	timeout time.Duration
	closed  atomic.Bool
	onClose func() error
}

// Wrap returns c behind the same middleware Open uses. timeout <= 0 means
// DefaultCallTimeout.
func Wrap(c Coordinator, timeout time.Duration) Coordinator {
	return wrap(c, nil, timeout)
}

func wrap(c Coordinator, obs observer, timeout time.Duration) *middleware {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	return &middleware{next: c, obs: obs, timeout: timeout}
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
		return ErrClosed
	}
	if req == nil {
		req = &InitRequest{}
	}
	ctx, cancel := m.ctx(ctx)
	defer cancel()
	return m.observe(m.next.Init(ctx, req))
}

func (m *middleware) Begin(ctx context.Context, req *BeginRequest) (*BeginResponse, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if err := ValidateOwner(req.Owner); err != nil {
		return nil, err
	}
	ctx, cancel := m.ctx(ctx)
	defer cancel()
	resp, err := m.next.Begin(ctx, req)
	if err == nil {
		if o, ok := resp.XID.Owner(); !ok || o != req.Owner || len(resp.XID.Bqual) != 0 {
			err = fmt.Errorf("txn: coordinator began %s, not a global xid of owner %q", resp.XID, req.Owner)
		}
	}
	if m.observe(err) != nil {
		return nil, err
	}
	return resp, nil
}

func (m *middleware) Commit(ctx context.Context, req *CommitRequest) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if err := req.Decision.Validate(); err != nil {
		return err
	}
	ctx, cancel := m.ctx(ctx)
	defer cancel()
	return m.observe(m.next.Commit(ctx, req))
}

func (m *middleware) Forget(ctx context.Context, req *ForgetRequest) error {
	if m.closed.Load() {
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
	ctx, cancel := m.ctx(ctx)
	defer cancel()
	return m.observe(m.next.Forget(ctx, req))
}

func (m *middleware) Recover(ctx context.Context, req *RecoverRequest) (*RecoverResponse, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	for _, o := range req.Owners {
		if err := ValidateOwner(o); err != nil {
			return nil, err
		}
	}
	ctx, cancel := m.ctx(ctx)
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
	if m.observe(err) != nil {
		return nil, err
	}
	return resp, nil
}

func (m *middleware) Close() error {
	if m.closed.Swap(true) {
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
