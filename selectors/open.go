package selectors

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
)

// DefaultTimeout bounds one call to a selector plugin; past it the batch
// falls back to round robin.
const DefaultTimeout = time.Second

// OpenOptions say which selector Open returns. The zero value is the
// builtin round robin.
type OpenOptions struct {
	// Name is a builtin's name (NameRoundRobin, NameRandom, NameHash,
	// NameFixed; empty means round robin) when Plugin is nil. With a
	// Plugin it names the plugin in logs when Plugin.Name is empty.
	Name string
	// Config configures a builtin: fixed needs "partition" (an index into
	// the partition list). Unknown keys are refused. Selector plugins have
	// no Init call: they take configuration through Plugin.Args and
	// Plugin.Env, and Open refuses a Config with a Plugin.
	Config map[string]string
	// Plugin, when set, runs a selector plugin binary (its Kind may be
	// empty or plugins.KindSelector).
	Plugin *host.Spec
	// Supervisor launches the plugin. When nil, Open starts a private
	// supervisor that the returned Selector's Close stops. A shared
	// supervisor keeps the plugin running until its own Close.
	Supervisor *host.Supervisor
	// Timeout bounds each plugin call; default DefaultTimeout.
	Timeout time.Duration
	// Logger receives the failure-policy warnings (once per burst of
	// fallbacks) and a private supervisor's logs; default hclog on stderr
	// at Info, named "selectors".
	Logger hclog.Logger
}

// Open returns the selector opts describe: a builtin, in process, when
// opts.Plugin is nil, else a plugin launched through the supervisor and
// wrapped in the failure policy (see the package doc). The first start of a
// plugin must succeed: a missing binary, a sha256 mismatch or a binary that
// is not a selector plugin fails Open with a clear error. Launching is
// bounded by the supervisor's start timeout; ctx is checked before it.
func Open(ctx context.Context, opts OpenOptions) (Selector, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.Plugin == nil {
		return newBuiltin(opts.Name, opts.Config)
	}
	spec := *opts.Plugin
	if spec.Kind == "" {
		spec.Kind = plugins.KindSelector
	}
	if spec.Kind != plugins.KindSelector {
		return nil, fmt.Errorf("open selector plugin %s: %w: spec kind is %q", spec.Path, plugins.ErrWrongKind, spec.Kind)
	}
	if len(opts.Config) > 0 || len(spec.Config) > 0 {
		return nil, fmt.Errorf("%w: selector plugins take no Config; use Args or Env", ErrBadConfig)
	}
	if spec.Name == "" {
		spec.Name = opts.Name
	}
	if spec.Name == "" {
		spec.Name = filepath.Base(spec.Path)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "selectors", Level: hclog.Info})
	}
	sup, owned := opts.Supervisor, (*host.Supervisor)(nil)
	if sup == nil {
		sup = host.NewSupervisor(host.Options{Logger: opts.Logger})
		owned = sup
	}
	p, err := sup.Launch(spec, &GRPCPlugin{})
	if err != nil {
		if owned != nil {
			_ = owned.Close()
		}
		return nil, fmt.Errorf("open selector plugin: %w", err)
	}
	return &remote{p: p, name: spec.Name, timeout: opts.Timeout, log: opts.Logger.Named(spec.Name), owned: owned}, nil
}
