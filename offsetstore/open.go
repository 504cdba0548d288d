package offsetstore

import (
	"context"
	"fmt"
	"time"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/message"
)

// OpenOptions say which store to open.
type OpenOptions struct {
	// Name is the store's name: a key of Builtins (the broker lists "file"),
	// or the name of an offsetstore plugin (then Plugin is set).
	Name string
	// Config is handed to the store's Init.
	Config map[string]string
	// Plugin, when set, runs the store out of process: the binary is
	// launched through Supervisor and reached over gRPC.
	Plugin *host.Spec
	// Supervisor launches and keeps the plugin running; required with Plugin.
	Supervisor *host.Supervisor
	// Builtins are the in-process stores the caller offers by name. They
	// are listed explicitly by the caller (core lists offsetstore/file);
	// there is no self-registration.
	Builtins map[string]func() Store
	// Timeout bounds each call; default DefaultCallTimeout.
	Timeout time.Duration
}

// Open returns the named store, initialised with opts.Config and wrapped in
// the middleware (validation, timeouts, counting, offsets.ErrClosed after Close).
// A remote store returns plugins.ErrUnavailable while its plugin is down,
// and re-sends Init after each restart before the next call.
func Open(ctx context.Context, opts OpenOptions) (Store, error) {
	var (
		s   Store
		obs pluginrpc.Observer
	)
	switch {
	case opts.Plugin != nil:
		if opts.Supervisor == nil {
			return nil, fmt.Errorf("offsetstore %q: a plugin needs a supervisor", opts.Name)
		}
		spec := *opts.Plugin
		if spec.Kind == "" {
			spec.Kind = plugins.KindOffsetStore
		}
		if spec.Kind != plugins.KindOffsetStore {
			return nil, fmt.Errorf("offsetstore %q: plugin is of kind %q: %w", opts.Name, spec.Kind, plugins.ErrWrongKind)
		}
		if spec.Name == "" {
			spec.Name = opts.Name
		}
		if opts.Config == nil {
			opts.Config = spec.Config
		}
		p, err := opts.Supervisor.Launch(spec, &GRPCPlugin{})
		if err != nil {
			return nil, fmt.Errorf("offsetstore %q: %w", opts.Name, err)
		}
		s, obs = newRemote(p), p
	default:
		newStore := opts.Builtins[opts.Name]
		if newStore == nil {
			return nil, fmt.Errorf("%w: %q is neither a builtin nor a configured plugin", ErrUnknownStore, opts.Name)
		}
		s = newStore()
	}
	m := wrap(s, obs, opts.Timeout)
	if err := m.Init(ctx, &InitRequest{Config: opts.Config}); err != nil {
		m.Close()
		return nil, fmt.Errorf("offsetstore %q: init: %w", opts.Name, err)
	}
	return m, nil
}

// remote is a Store served by a supervised plugin process: host.Reinit
// takes the current process's client for each call and, after a restart
// (a new generation), re-sends Init with the same config first.
type remote struct {
	host.Reinit[Store]
}

// newRemote returns the remote Store of the plugin p (a *host.Plugin,
// or a fake in tests).
func newRemote(p interface{ Client() (any, uint64, error) }) *remote {
	return &remote{host.Reinit[Store]{P: p, What: "offsetstore plugin",
		Send: func(ctx context.Context, c Store, config map[string]string) error {
			return c.Init(ctx, &InitRequest{Config: config})
		}}}
}

func (r *remote) current(ctx context.Context) (Store, error) { return r.Current(ctx) }

func (r *remote) Init(ctx context.Context, req *InitRequest) error {
	return r.Reinit.Init(ctx, req.Config)
}

func (r *remote) Commit(ctx context.Context, group string, ps []message.Position) error {
	s, err := r.current(ctx)
	if err != nil {
		return err
	}
	return s.Commit(ctx, group, ps)
}

func (r *remote) Load(ctx context.Context, group string, ps []message.Position) ([]message.Position, error) {
	s, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	return s.Load(ctx, group, ps)
}

// Close forgets the process; the supervisor stops it when it closes.
func (r *remote) Close() error { return nil }
