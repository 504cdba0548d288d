package selectors

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/selector"
)

// DefaultTimeout bounds one call to a selector plugin; past it the message
// falls back to round robin.
const DefaultTimeout = time.Second

// Plugin names a selector plugin binary for Open.
type Plugin struct {
	// Name names the plugin in logs; default OpenOptions.Name, else the
	// binary's base name.
	Name string
	// Path is the binary's path.
	Path string
	// SHA256 is the binary's expected hex sha256; empty skips the check.
	// With it, every start runs a private copy only if it matches.
	SHA256 string
	// Args are the binary's arguments, Env extra KEY=VALUE variables (the
	// plugin gets only PATH, HOME, TMPDIR and LANG of the host's
	// environment, then Env). Selector plugins take their configuration
	// here: they have no Init call.
	Args []string
	Env  []string
}

// OpenOptions say which selector Open returns. The zero value is the
// builtin round robin.
type OpenOptions struct {
	// Name is a builtin's name (NameRoundRobin, NameRandom, NameHash,
	// NameFixed; empty means round robin) when Plugin is nil. With a
	// Plugin it names the plugin in logs when Plugin.Name is empty.
	Name string
	// Config configures a builtin: fixed needs "partition" (an index into
	// the partition list). Unknown keys are refused, and so is a Config
	// with a Plugin.
	Config map[string]string
	// Plugin, when set, runs a selector plugin binary, supervised
	// (restarted when it dies) until the returned Selector's Close.
	Plugin *Plugin
	// Timeout bounds each plugin call; default DefaultTimeout.
	Timeout time.Duration
	// Logger receives the failure-policy warnings (once per burst of
	// fallbacks) and the plugin's logs; default hclog on stderr at Info,
	// named "selectors".
	Logger hclog.Logger
}

// Open returns the selector opts describe: a builtin, in process, when
// opts.Plugin is nil, else a plugin launched under a supervisor of its own
// and wrapped in the failure policy (see the package doc). The first start
// of a plugin must succeed: a missing binary, a sha256 mismatch or a
// binary that is not a selector plugin fails Open with a clear error.
// Launching is bounded by the supervisor's start timeout; ctx is checked
// before it.
func Open(ctx context.Context, opts OpenOptions) (Selector, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.Plugin == nil {
		return newBuiltin(opts.Name, opts.Config)
	}
	pl := opts.Plugin
	if len(opts.Config) > 0 {
		return nil, fmt.Errorf("%w: selector plugins take no Config; use Args or Env", ErrBadConfig)
	}
	spec := host.Spec{Kind: plugins.KindSelector, Name: pl.Name, Path: pl.Path, SHA256: pl.SHA256,
		Args: slices.Clone(pl.Args), Env: slices.Clone(pl.Env)}
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
	sup := host.NewSupervisor(host.Options{Logger: opts.Logger})
	p, err := sup.Launch(spec, &GRPCPlugin{})
	if err != nil {
		_ = sup.Close()
		return nil, fmt.Errorf("open selector plugin: %w", err)
	}
	return &remote{p: p, g: pluginrpc.Guard{Obs: p, Timeout: opts.Timeout}, name: spec.Name, log: opts.Logger.Named(spec.Name), owned: sup,
		rr: selector.RoundRobin()}, nil
}
