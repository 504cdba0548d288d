// Package pluginrpc (not API) is what the four plugin kinds (selectors,
// filters, offset stores, transaction coordinators) share about crossing
// the process boundary: one table per kind of the errors that keep their
// identity over gRPC (Codes, used by each kind's grpc_server and
// grpc_client), and the shape of the middleware every kind puts around a
// builtin or remote implementation (Guard).
package pluginrpc

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code is one error of a kind that crosses the boundary: an error that
// errors.Is Err travels as gRPC code Code, with an ErrorInfo reason
// Reason when the kind has a Domain and Reason is set.
type Code struct {
	Err    error
	Code   codes.Code
	Reason string
}

// Codes is a kind's table. ToStatus tries the entries in order; FromStatus
// finds an entry by its ErrorInfo reason, else by code among the entries
// without a reason, so that an entry without a reason after one with the
// same Err only serves the way back.
type Codes struct {
	// Domain is the ErrorInfo domain marking the kind's reasons on the
	// wire ("metaq.txn"); "" for a kind that maps codes only.
	Domain string
	Table  []Code
}

// ToStatus maps an implementation's error to a gRPC status error (the
// plugin side): the first entry err is, with its reason when it has one;
// anything else is Internal. The message is err's text.
func (c *Codes) ToStatus(err error) error {
	for _, e := range c.Table {
		if !errors.Is(err, e.Err) {
			continue
		}
		st := status.New(e.Code, err.Error())
		if c.Domain != "" && e.Reason != "" {
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: c.Domain, Reason: e.Reason}); derr == nil {
				st = d
			}
		}
		return st.Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// FromStatus reads a call's error (the host side). st is nil when err is
// not a gRPC status (the connection failed); sentinel is the Err of the
// entry the status stands for, nil when none does. Each kind words the
// error it returns around these (its plugin's name, the operation).
func (c *Codes) FromStatus(err error) (st *status.Status, sentinel error) {
	st, ok := status.FromError(err)
	if !ok {
		return nil, nil
	}
	if c.Domain != "" {
		for _, d := range st.Details() {
			info, ok := d.(*errdetails.ErrorInfo)
			if !ok || info.GetDomain() != c.Domain {
				continue
			}
			for _, e := range c.Table {
				if e.Reason != "" && e.Reason == info.GetReason() {
					return st, e.Err
				}
			}
		}
	}
	for _, e := range c.Table {
		if (c.Domain == "" || e.Reason == "") && e.Code == st.Code() {
			return st, e.Err
		}
	}
	return st, nil
}

// Observer counts a plugin's calls and errors (host.Plugin.Observe).
type Observer interface{ Observe(err error) }

// Guard is the part of a kind's middleware that every kind has: the
// kind's closed error after Close, a timeout on each call unless the
// caller's deadline comes first, and each call's outcome counted on the
// plugin's supervisor entry. The kind's middleware adds what is its own
// (validation, answer checks, its failure policy) around Call. The zero
// Guard has no observer and no timeout.
type Guard struct {
	// Obs hears every call's outcome; nil for a builtin.
	Obs Observer
	// Timeout bounds each call; <= 0 is none.
	Timeout time.Duration
	closed  atomic.Bool
}

// Closed reports whether Close was called.
func (g *Guard) Closed() bool { return g.closed.Load() }

// Close marks the Guard closed and reports whether it was open.
func (g *Guard) Close() bool { return !g.closed.Swap(true) }

// Context returns ctx bounded by the call timeout: ctx itself when its
// own deadline comes first.
func (g *Guard) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.Timeout <= 0 {
		return ctx, func() {}
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= g.Timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, g.Timeout)
}

// Observe counts err as one call's outcome and returns it.
func (g *Guard) Observe(err error) error {
	if g.Obs != nil {
		g.Obs.Observe(err)
	}
	return err
}
