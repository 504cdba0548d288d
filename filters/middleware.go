package filters

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/pluginrpc"
)

// FailurePolicy says what the broker does with a get when its filter fails
// (the plugin is down, errs or times out).
type FailurePolicy int

const (
	// FailOpen serves the get unfiltered (the default, MetaQ's behaviour
	// when no filter class loads).
	FailOpen FailurePolicy = iota
	// FailClosed refuses the get with 503; the consumer backs off and
	// retries, and nothing unfiltered reaches it.
	FailClosed
)

// ParseFailurePolicy parses server.toml's failure_policy: "open" (or empty)
// or "closed".
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	switch s {
	case "", "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return FailOpen, fmt.Errorf("%w: failure_policy %q (want open or closed)", ErrBadConfig, s)
}

func (p FailurePolicy) String() string {
	if p == FailClosed {
		return "closed"
	}
	return "open"
}

// DefaultTimeout bounds one Accept or Init call to a filter plugin.
const DefaultTimeout = time.Second

// Instance is one filter instance bound to a topic and a consumer group:
// what the broker calls for every get of that group. It wraps a builtin or
// a remote Filter in the same middleware: call and error counting (also
// reported to the plugin's supervisor entry), a per-call timeout for
// plugins, and the failure policy. It is safe for concurrent use.
type Instance struct {
	name, id, topic, group string
	f                      Filter
	remote                 *remote         // nil for a builtin
	g                      pluginrpc.Guard // the plugin's counting, the call timeout, closed
	policy                 FailurePolicy
	logf                   func(string, ...any)
	needBodies             bool // builtins; a remote instance asks the adapter

	calls, errs atomic.Int64
	failing     atomic.Bool
}

// Accept judges one get batch of partition: keep has one flag per record.
// On error (the filter failed; the error says why) the caller applies
// Policy. Accept never drops records on its own.
func (in *Instance) Accept(ctx context.Context, partition int32, records []Record) (keep []bool, err error) {
	if in.remote != nil {
		return in.StartAccept(ctx, partition, records).Wait()
	}
	if in.g.Closed() {
		return nil, fmt.Errorf("filter %s: %w", in.name, ErrClosed)
	}
	resp, err := in.f.Accept(ctx, &AcceptRequest{Instance: in.id, Topic: in.topic, Group: in.group, Partition: partition, Records: records})
	return in.finish(resp, err, len(records))
}

// Pending is a batch being judged (StartAccept). It belongs to one
// goroutine.
type Pending struct {
	in   *Instance
	n    int
	wait acceptFunc
	done bool
	keep []bool
	err  error
}

// StartAccept starts judging a batch and returns without waiting for a
// remote filter's answer: the request is on its way to the plugin when it
// returns, and Wait collects the verdicts. A builtin judges the batch before
// StartAccept returns. The records must stay valid until Wait returns. A
// Pending must be waited for, or discarded with Discard. The call's
// timeout (OpenOptions.Timeout) runs from StartAccept.
func (in *Instance) StartAccept(ctx context.Context, partition int32, records []Record) *Pending {
	return in.start(ctx, partition, records, false)
}

// StartAccepts is StartAccept for several batches of one partition at once:
// a plugin gets them in one write.
func (in *Instance) StartAccepts(ctx context.Context, partition int32, batches [][]Record) []*Pending {
	ps := make([]*Pending, len(batches))
	for i, recs := range batches {
		ps[i] = in.start(ctx, partition, recs, true)
	}
	if in.remote != nil {
		in.remote.flush()
	}
	return ps
}

func (in *Instance) start(ctx context.Context, partition int32, records []Record, hold bool) *Pending {
	p := &Pending{in: in, n: len(records)}
	if in.g.Closed() {
		p.done, p.err = true, fmt.Errorf("filter %s: %w", in.name, ErrClosed)
		return p
	}
	req := &AcceptRequest{Instance: in.id, Topic: in.topic, Group: in.group, Partition: partition, Records: records}
	if in.remote != nil {
		// A deadline rather than a context with a timer: see muxConn.
		deadline := time.Now().Add(in.g.Timeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		p.wait = in.remote.startAccept(ctx, deadline, req, hold)
	} else {
		p.wait = acceptDone(in.f.Accept(ctx, req))
	}
	return p
}

// Wait returns the verdicts of the batch, as Accept does. It may be called
// more than once.
func (p *Pending) Wait() (keep []bool, err error) {
	if p.done {
		return p.keep, p.err
	}
	p.done = true
	resp, err := p.wait(false)
	p.keep, p.err = p.in.finish(resp, err, p.n)
	return p.keep, p.err
}

// finish checks and counts the answer to a batch of n records.
func (in *Instance) finish(resp *AcceptResponse, err error, n int) ([]bool, error) {
	if err == nil && (resp == nil || len(resp.Keep) != n) {
		got := -1
		if resp != nil {
			got = len(resp.Keep)
		}
		err = fmt.Errorf("%w: %d for %d records", ErrBadResponse, got, n)
	}
	in.observe(err)
	if err != nil {
		return nil, fmt.Errorf("filter %s (%s/%s): %w", in.name, in.topic, in.group, err)
	}
	return resp.Keep, nil
}

// Discard gives up a batch that will not be waited for. It does not count
// as a call.
func (p *Pending) Discard() {
	if p.done {
		return
	}
	p.done = true
	p.wait(true)
	p.err = fmt.Errorf("filter %s: %w", p.in.name, context.Canceled)
}

func (in *Instance) observe(err error) {
	in.calls.Add(1)
	in.g.Observe(err)
	if err != nil {
		in.errs.Add(1)
		if !in.failing.Swap(true) && in.logf != nil {
			in.logf("filter %s for topic %s group %s failing (failure_policy %s): %v", in.name, in.topic, in.group, in.policy, err)
		}
	} else if in.failing.Load() && in.failing.Swap(false) && in.logf != nil {
		in.logf("filter %s for topic %s group %s recovered", in.name, in.topic, in.group)
	}
}

// NeedBodies reports whether the filter asked for message payloads.
func (in *Instance) NeedBodies() bool {
	if in.remote != nil {
		return in.remote.needBodies(in.id)
	}
	return in.needBodies
}

// Remote reports whether the filter runs in a plugin process (each call
// then costs a round trip to it, which the broker hides by judging the next
// batch ahead of time).
func (in *Instance) Remote() bool { return in.remote != nil }

// Policy is the instance's failure policy.
func (in *Instance) Policy() FailurePolicy { return in.policy }

// Name is the filter's name ("attribute", "expr" or a plugin's name).
func (in *Instance) Name() string { return in.name }

// ID is the instance name sent in every request.
func (in *Instance) ID() string { return in.id }

// Stats returns how many Accept calls the instance made and how many failed.
func (in *Instance) Stats() (calls, errors int64) { return in.calls.Load(), in.errs.Load() }

// Close releases the instance: a builtin is closed; a remote instance is
// forgotten (the plugin process belongs to its supervisor). Idempotent.
func (in *Instance) Close() error {
	if !in.g.Close() {
		return nil
	}
	if in.remote != nil {
		in.remote.forget(in.id)
		return nil
	}
	return in.f.Close()
}
