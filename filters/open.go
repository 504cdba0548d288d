package filters

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
)

// OpenOptions say which filter to open for one topic and group.
type OpenOptions struct {
	// Name is a builtin's name (a key of Builtins: "attribute", "expr") or
	// a filter plugin's name in server.toml.
	Name string
	// Instance names the instance in every request; default "<topic>/<group>".
	Instance string
	// Topic and Group are what the instance filters.
	Topic, Group string
	// Config is handed to the filter's Init.
	Config map[string]string
	// Builtins are the in-process filters by name. The broker lists them
	// explicitly (filters/attr, filters/expr); there is no registration.
	Builtins map[string]func() Filter
	// Launched is a filter plugin already running under a supervisor (see
	// LaunchPlugin): every topic and group that names one plugin shares its
	// process. Otherwise Plugin and Supervisor launch a new one.
	Launched   *host.Plugin
	Plugin     *host.Spec
	Supervisor *host.Supervisor
	// FailurePolicy applies when the filter fails; default FailOpen.
	FailurePolicy FailurePolicy
	// Timeout bounds each call to a plugin; default DefaultTimeout.
	Timeout time.Duration
	// Logf, if set, gets a line when the instance starts failing and when
	// it recovers.
	Logf func(format string, args ...any)
}

// LaunchPlugin starts a filter plugin binary under sup (sha256 check,
// AutoMTLS, restarts) and returns it for OpenOptions.Launched.
func LaunchPlugin(sup *host.Supervisor, spec host.Spec) (*host.Plugin, error) {
	if spec.Kind == "" {
		spec.Kind = plugins.KindFilter
	}
	if spec.Kind != plugins.KindFilter {
		return nil, fmt.Errorf("filter plugin %s: %w (kind %s)", spec.Name, plugins.ErrWrongKind, spec.Kind)
	}
	return sup.Launch(spec, &GRPCPlugin{})
}

// Open returns the instance of opts.Name for one topic and group: a builtin
// runs in process; a plugin is launched (or reused) and reached over gRPC.
// Either is initialised before Open returns, so a bad config fails here
// (ErrBadConfig) rather than at the first get.
func Open(ctx context.Context, opts OpenOptions) (*Instance, error) {
	in := &Instance{
		name: opts.Name, id: opts.Instance, topic: opts.Topic, group: opts.Group,
		policy: opts.FailurePolicy, g: pluginrpc.Guard{Timeout: opts.Timeout}, logf: opts.Logf,
	}
	if in.id == "" {
		in.id = opts.Topic + "/" + opts.Group
	}
	if in.g.Timeout <= 0 {
		in.g.Timeout = DefaultTimeout
	}
	req := &InitRequest{Instance: in.id, Topic: opts.Topic, Group: opts.Group, Config: opts.Config}
	if mk, ok := opts.Builtins[opts.Name]; ok && opts.Launched == nil && opts.Plugin == nil {
		in.f = mk()
		resp, err := in.f.Init(ctx, req)
		if err != nil {
			in.f.Close()
			return nil, fmt.Errorf("filter %s for topic %s group %s: %w", opts.Name, opts.Topic, opts.Group, err)
		}
		in.needBodies = resp != nil && resp.NeedBodies
		return in, nil
	}
	p := opts.Launched
	if p == nil {
		if opts.Plugin == nil || opts.Supervisor == nil {
			return nil, fmt.Errorf("%w: %q is not a builtin and no plugin was given", ErrUnknownFilter, opts.Name)
		}
		var err error
		if p, err = LaunchPlugin(opts.Supervisor, *opts.Plugin); err != nil {
			return nil, err
		}
	}
	in.g.Obs = p
	in.remote = newRemote(p)
	in.f = in.remote
	cctx, cancel := context.WithTimeout(ctx, max(in.g.Timeout, 5*time.Second))
	defer cancel()
	if _, err := in.remote.Init(cctx, req); err != nil {
		in.remote.forget(in.id)
		return nil, fmt.Errorf("filter %s for topic %s group %s: %w", opts.Name, opts.Topic, opts.Group, err)
	}
	return in, nil
}

// NewRemote returns a Filter backed by a running filter plugin. It
// remembers the instances it initialised and re-sends their Init whenever
// the supervisor restarted the process (its generation changed) or the
// process answers ErrUnknownInstance. While the process is down every call
// fails fast with plugins.ErrUnavailable.
func NewRemote(p *host.Plugin) Filter { return newRemote(p) }

type remote struct {
	p *host.Plugin

	mu    sync.RWMutex
	insts map[string]*remoteInst
}

// remoteInst is one instance's Init, replayed after a restart.
type remoteInst struct {
	req        InitRequest
	mu         sync.Mutex    // serialises re-Init
	gen        atomic.Uint64 // generation the instance was last initialised on
	inited     atomic.Bool
	needBodies atomic.Bool
}

func newRemote(p *host.Plugin) *remote {
	return &remote{p: p, insts: make(map[string]*remoteInst)}
}

func (r *remote) client() (Filter, uint64, error) {
	raw, gen, err := r.p.Client()
	if err != nil {
		if !errors.Is(err, plugins.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", plugins.ErrUnavailable, err)
		}
		return nil, gen, err
	}
	f, ok := raw.(Filter)
	if !ok {
		return nil, gen, fmt.Errorf("%w: dispensed %T", plugins.ErrWrongKind, raw)
	}
	return f, gen, nil
}

func (r *remote) Init(ctx context.Context, req *InitRequest) (*InitResponse, error) {
	f, gen, err := r.client()
	if err != nil {
		return nil, err
	}
	resp, err := f.Init(ctx, req)
	if err != nil {
		return nil, err
	}
	st := &remoteInst{req: *req}
	st.gen.Store(gen)
	st.inited.Store(true)
	st.needBodies.Store(resp.NeedBodies)
	r.mu.Lock()
	r.insts[req.Instance] = st
	r.mu.Unlock()
	return resp, nil
}

func (r *remote) Accept(ctx context.Context, req *AcceptRequest) (*AcceptResponse, error) {
	dl, _ := ctx.Deadline()
	return r.startAccept(ctx, dl, req, false)(false)
}

// startAccept starts an Accept call due by deadline (zero: none; ctx's
// own deadline is not used) and returns the function that waits for the
// reply. Over the plugin's batch channel, when it has one, the request is
// sent before startAccept returns, or with hold queued until flush. req
// must stay valid until the reply: after an ErrUnknownInstance the waiting
// function re-initialises and sends it again.
func (r *remote) startAccept(ctx context.Context, deadline time.Time, req *AcceptRequest, hold bool) acceptFunc {
	f, gen, err := r.client()
	if err != nil {
		return acceptDone(nil, err)
	}
	r.mu.RLock()
	st := r.insts[req.Instance]
	r.mu.RUnlock()
	if st != nil && (!st.inited.Load() || st.gen.Load() != gen) {
		ictx, cancel := withDeadline(ctx, deadline)
		err := st.reinit(ictx, f, gen, req)
		cancel()
		if err != nil {
			return acceptDone(nil, err)
		}
	}
	var wait acceptFunc
	if gc, ok := f.(*grpcClient); ok {
		wait = gc.startAccept(ctx, deadline, req, hold)
	} else {
		actx, cancel := withDeadline(ctx, deadline)
		wait = acceptDone(f.Accept(actx, req))
		cancel()
	}
	return func(discard bool) (*AcceptResponse, error) {
		resp, err := wait(discard)
		if st != nil && !discard && errors.Is(err, ErrUnknownInstance) {
			// The process lost the instance without a generation change (for
			// example a restart the supervisor had not noticed yet): re-Init once.
			ctx, cancel := withDeadline(ctx, deadline)
			defer cancel()
			st.inited.Store(false)
			if err := st.reinit(ctx, f, gen, req); err != nil {
				return nil, err
			}
			resp, err = f.Accept(ctx, req)
		}
		return resp, err
	}
}

// flush writes the calls that startAccept queued with hold.
func (r *remote) flush() {
	if f, _, err := r.client(); err == nil {
		if gc, ok := f.(*grpcClient); ok {
			gc.flush()
		}
	}
}

// reinit re-sends the instance's Init on generation gen. If the restarted
// plugin now asks for bodies that this batch lacks, the batch fails (the
// caller applies its failure policy) and the next one carries bodies.
func (st *remoteInst) reinit(ctx context.Context, f Filter, gen uint64, req *AcceptRequest) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.inited.Load() && st.gen.Load() == gen {
		return nil
	}
	resp, err := f.Init(ctx, &st.req)
	if err != nil {
		return fmt.Errorf("re-init after plugin restart: %w", err)
	}
	had := st.needBodies.Swap(resp.NeedBodies)
	st.gen.Store(gen)
	st.inited.Store(true)
	if resp.NeedBodies && !had && len(req.Records) > 0 {
		return fmt.Errorf("%w: restarted plugin now asks for bodies; retry", plugins.ErrUnavailable)
	}
	return nil
}

func (r *remote) needBodies(instance string) bool {
	r.mu.RLock()
	st := r.insts[instance]
	r.mu.RUnlock()
	return st != nil && st.needBodies.Load()
}

func (r *remote) forget(instance string) {
	r.mu.Lock()
	delete(r.insts, instance)
	r.mu.Unlock()
}

// Close forgets every instance; the process belongs to the supervisor.
func (r *remote) Close() error {
	r.mu.Lock()
	clear(r.insts)
	r.mu.Unlock()
	return nil
}
