package filters

import (
	"context"
	"fmt"
	"sync"
)

// CompileFunc turns one instance's InitRequest into a predicate over single
// records, and says whether the predicate reads Record.Body. The predicate
// must be safe for concurrent use. A config it cannot use is an error
// wrapping ErrBadConfig.
type CompileFunc func(req *InitRequest) (keep func(*Record) bool, needBodies bool, err error)

// NewRecordFilter returns a Filter that judges each record of a batch with
// the predicate compiled for the batch's instance. It handles the instance
// table, concurrency and Close, so a builtin or a plugin only writes the
// per-record test. Init with an existing instance replaces its predicate; a
// failed Init leaves the previous one in place.
func NewRecordFilter(compile CompileFunc) Filter {
	return &recordFilter{compile: compile, inst: make(map[string]func(*Record) bool)}
}

type recordFilter struct {
	compile CompileFunc

	mu     sync.RWMutex
	inst   map[string]func(*Record) bool
	closed bool
}

func (f *recordFilter) Init(_ context.Context, req *InitRequest) (*InitResponse, error) {
	keep, bodies, err := f.compile(req)
	if err != nil {
		return nil, fmt.Errorf("instance %q: %w", req.Instance, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	f.inst[req.Instance] = keep
	return &InitResponse{NeedBodies: bodies}, nil
}

func (f *recordFilter) Accept(_ context.Context, req *AcceptRequest) (*AcceptResponse, error) {
	f.mu.RLock()
	keep, ok := f.inst[req.Instance]
	closed := f.closed
	f.mu.RUnlock()
	switch {
	case closed:
		return nil, ErrClosed
	case !ok:
		return nil, fmt.Errorf("%w: %q", ErrUnknownInstance, req.Instance)
	}
	out := make([]bool, len(req.Records))
	for i := range req.Records {
		out[i] = keep(&req.Records[i])
	}
	return &AcceptResponse{Keep: out}, nil
}

func (f *recordFilter) Close() error {
	f.mu.Lock()
	f.closed = true
	f.inst = nil
	f.mu.Unlock()
	return nil
}

// WithProperties returns f with every Init's response asking for
// properties (InitResponse.NeedProperties): in a filter plugin's process
// the records then carry Key, CreateTime, Tags and Headers. For a plugin
// built on NewRecordFilter whose predicates read them:
//
//	filters.Serve(filters.WithProperties(filters.NewRecordFilter(compile)))
func WithProperties(f Filter) Filter { return propsFilter{f} }

type propsFilter struct{ Filter }

func (f propsFilter) Init(ctx context.Context, req *InitRequest) (*InitResponse, error) {
	resp, err := f.Filter.Init(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		resp = &InitResponse{}
	}
	resp.NeedProperties = true
	return resp, nil
}
