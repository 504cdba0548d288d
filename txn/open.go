package txn

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
)

// OpenOptions say which coordinator to open.
type OpenOptions struct {
	// Name is the coordinator's name: a key of Builtins (the file
	// coordinator is txn/file.Name, "file"), or the name of a coordinator
	// plugin (then Plugin is set).
	Name string
	// Config is handed to the coordinator's Init (for the file builtin:
	// "path"; for cmd/metaq-txn-mysql: "dsn", "table").
	Config map[string]string
	// Plugin, when set, runs the coordinator out of process: the binary
	// is launched through Supervisor and reached over gRPC. Its Kind is
	// plugins.KindCoordinator (filled in when empty).
	Plugin *host.Spec
	// Supervisor launches and keeps the plugin running. When nil, Open
	// starts a supervisor of its own, closed (killing the plugin) by the
	// coordinator's Close.
	Supervisor *host.Supervisor
	// Logger is the parent of the plugin's logger when Open starts its
	// own supervisor; default hclog on stderr at Info, named "txn".
	Logger hclog.Logger
	// Builtins are the in-process coordinators the caller offers by name,
	// listed explicitly (there is no self-registration), for example
	// {file.Name: file.New}.
	Builtins map[string]func() Coordinator
	// Timeout bounds each call; default DefaultCallTimeout.
	Timeout time.Duration
}

// Open returns the named coordinator, initialised with opts.Config and
// wrapped in the middleware (validation, timeouts, counting, ErrClosed
// after Close). A remote coordinator returns plugins.ErrUnavailable while
// its plugin is down, and re-sends Init after each restart before the
// next call. Its failures are never hidden: a Commit that fails leaves
// its transaction in doubt (txn.ErrInDoubt) until Manager.Recover.
func Open(ctx context.Context, opts OpenOptions) (Coordinator, error) {
	var (
		c       Coordinator
		obs     pluginrpc.Observer
		onClose func() error
	)
	switch {
	case opts.Plugin != nil:
		spec := *opts.Plugin
		if spec.Kind == "" {
			spec.Kind = plugins.KindCoordinator
		}
		if spec.Kind != plugins.KindCoordinator {
			return nil, fmt.Errorf("coordinator %q: plugin is of kind %q: %w", opts.Name, spec.Kind, plugins.ErrWrongKind)
		}
		if spec.Name == "" {
			spec.Name = opts.Name
		}
		if opts.Config == nil {
			opts.Config = spec.Config
		}
		sup := opts.Supervisor
		if sup == nil {
			logger := opts.Logger
			if logger == nil {
				logger = hclog.New(&hclog.LoggerOptions{Name: "txn", Level: hclog.Info})
			}
			sup = host.NewSupervisor(host.Options{Logger: logger})
			onClose = sup.Close
		}
		p, err := sup.Launch(spec, &GRPCPlugin{})
		if err != nil {
			if onClose != nil {
				_ = onClose()
			}
			return nil, fmt.Errorf("coordinator %q: %w", opts.Name, err)
		}
		c, obs = newRemote(p), p
	default:
		newCoord := opts.Builtins[opts.Name]
		if newCoord == nil {
			return nil, fmt.Errorf("%w: %q is neither a builtin nor a configured plugin", ErrUnknownCoordinator, opts.Name)
		}
		c = newCoord()
	}
	m := wrap(c, obs, opts.Timeout)
	m.onClose = onClose
	if err := m.Init(ctx, &InitRequest{Config: opts.Config}); err != nil {
		m.Close()
		return nil, fmt.Errorf("coordinator %q: init: %w", opts.Name, err)
	}
	return m, nil
}

// remote is a Coordinator served by a supervised plugin process: host.Reinit
// takes the current process's client for each call and, after a restart
// (a new generation), re-sends Init with the same config first.
type remote struct {
	host.Reinit[Coordinator]
}

// newRemote returns the remote Coordinator of the plugin p (a *host.Plugin,
// or a fake in tests).
func newRemote(p interface{ Client() (any, uint64, error) }) *remote {
	return &remote{host.Reinit[Coordinator]{P: p, What: "coordinator plugin",
		Send: func(ctx context.Context, c Coordinator, config map[string]string) error {
			return c.Init(ctx, &InitRequest{Config: config})
		}}}
}

func (r *remote) current(ctx context.Context) (Coordinator, error) { return r.Current(ctx) }

func (r *remote) Init(ctx context.Context, req *InitRequest) error {
	return r.Reinit.Init(ctx, req.Config)
}

func (r *remote) Begin(ctx context.Context, req *BeginRequest) (*BeginResponse, error) {
	c, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	return c.Begin(ctx, req)
}

func (r *remote) Commit(ctx context.Context, req *CommitRequest) error {
	c, err := r.current(ctx)
	if err != nil {
		return err
	}
	return c.Commit(ctx, req)
}

func (r *remote) Forget(ctx context.Context, req *ForgetRequest) error {
	c, err := r.current(ctx)
	if err != nil {
		return err
	}
	return c.Forget(ctx, req)
}

func (r *remote) Recover(ctx context.Context, req *RecoverRequest) (*RecoverResponse, error) {
	c, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	return c.Recover(ctx, req)
}

// Close forgets the process; its supervisor stops it.
func (r *remote) Close() error { return nil }
