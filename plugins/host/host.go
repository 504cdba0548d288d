// Package host is the plugin supervisor used by the broker and the SDK: it
// launches plugin binaries, checks them, keeps them running and stops them.
// It is the only code that calls plugin.NewClient.
package host

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/metaq-go/metaq/plugins"
)

// Spec says which binary to run as a plugin of a kind.
type Spec struct {
	Kind plugins.Kind
	// Name is the plugin's name in server.toml; log lines carry it.
	Name string
	// Path is the binary's path (already resolved against the plugin dir).
	Path string
	// SHA256 is the binary's expected hex sha256; empty skips the check.
	SHA256 string
	Args   []string
	Env    []string
	// Config is handed to the plugin by its kind package (Init); the
	// supervisor does not read it.
	Config map[string]string
}

// Options configure a Supervisor. The zero value is usable.
type Options struct {
	// Logger is the parent of every plugin's logger; default: hclog on
	// stderr at Info.
	Logger hclog.Logger
	// RestartMin and RestartMax bound the jittered restart backoff;
	// defaults 50 ms and 5 s.
	RestartMin, RestartMax time.Duration
	// HealthInterval is how often a running plugin is pinged; default 1 s.
	HealthInterval time.Duration
	// StartTimeout bounds one start (exec, handshake, dispense); default 10 s.
	StartTimeout time.Duration
}

// Info describes a loaded plugin for `stats plugins` and `metaq plugins`.
type Info struct {
	Kind     plugins.Kind
	Name     string
	Path     string
	Version  int
	PID      int
	Restarts int64
	Calls    int64
	Errors   int64
	State    string // "running", "restarting", "stopped"
}

// Supervisor owns plugin processes.
type Supervisor struct {
	opts Options

	mu      sync.Mutex
	plugins []*Plugin
	closed  bool
}

// NewSupervisor returns a supervisor with opts.
func NewSupervisor(opts Options) *Supervisor {
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "plugins", Level: hclog.Info})
	}
	if opts.RestartMin <= 0 {
		opts.RestartMin = 50 * time.Millisecond
	}
	if opts.RestartMax <= 0 {
		opts.RestartMax = 5 * time.Second
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = time.Second
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	return &Supervisor{opts: opts}
}

// Plugin is one supervised plugin process.
type Plugin struct {
	s    *Supervisor
	spec Spec
	impl plugin.Plugin
	log  hclog.Logger

	mu     sync.Mutex
	client *plugin.Client
	raw    any
	gen    uint64
	state  string

	restarts, calls, errs atomic.Int64
}

// ErrClosed is returned once the supervisor is closed.
var ErrClosed = errors.New("host: supervisor closed")

// Launch starts spec's binary, with impl the kind's gRPC plugin adapter
// (its GRPCClient side is used), and keeps it running. It fails with a clear
// error when the first start fails: binary missing, sha256 mismatch, not a
// gRPC plugin, output on stdout before the handshake, or wrong kind.
func (s *Supervisor) Launch(spec Spec, impl plugin.Plugin) (*Plugin, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.mu.Unlock()
	p := &Plugin{s: s, spec: spec, impl: impl, log: s.opts.Logger.Named(spec.Name)}
	if err := p.start(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.plugins = append(s.plugins, p)
	s.mu.Unlock()
	return p, nil
}

func (p *Plugin) start() error {
	spec := p.spec
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(cmd.Environ(), spec.Env...)
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  plugins.Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{plugins.ProtocolVersion(spec.Kind): {plugins.PluginName(spec.Kind): p.impl}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           p.log,
		StartTimeout:     p.s.opts.StartTimeout,
	}
	if spec.SHA256 != "" {
		sum, err := hex.DecodeString(spec.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return fmt.Errorf("plugin %s: sha256 %q is not 64 hex digits", spec.Name, spec.SHA256)
		}
		cfg.SecureConfig = &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	c := plugin.NewClient(cfg)
	rpc, err := c.Client()
	if err != nil {
		c.Kill()
		return fmt.Errorf("plugin %s (%s): start %s: %w", spec.Name, spec.Kind, spec.Path, err)
	}
	raw, err := rpc.Dispense(plugins.PluginName(spec.Kind))
	if err != nil {
		c.Kill()
		return fmt.Errorf("plugin %s: %w: %v", spec.Name, plugins.ErrWrongKind, err)
	}
	p.mu.Lock()
	p.client, p.raw, p.state = c, raw, "running"
	p.gen++
	p.mu.Unlock()
	return nil
}

// Client returns the kind adapter's client for the running process and its
// generation, which changes at every restart (kind packages re-initialise
// their instances when it does). While the process is down it returns
// plugins.ErrUnavailable.
func (p *Plugin) Client() (any, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil || p.client.Exited() {
		return nil, p.gen, plugins.ErrUnavailable
	}
	return p.raw, p.gen, nil
}

// Observe counts one call and its outcome.
func (p *Plugin) Observe(err error) {
	p.calls.Add(1)
	if err != nil {
		p.errs.Add(1)
	}
}

// Spec returns the plugin's spec.
func (p *Plugin) Spec() Spec { return p.spec }

// Info describes the plugin.
func (p *Plugin) Info() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	inf := Info{Kind: p.spec.Kind, Name: p.spec.Name, Path: p.spec.Path, Version: plugins.ProtocolVersion(p.spec.Kind),
		Restarts: p.restarts.Load(), Calls: p.calls.Load(), Errors: p.errs.Load(), State: p.state}
	if p.client != nil {
		if rc := p.client.ReattachConfig(); rc != nil {
			inf.PID = rc.Pid
		}
	}
	return inf
}

// List describes every plugin.
func (s *Supervisor) List() []Info {
	s.mu.Lock()
	ps := append([]*Plugin(nil), s.plugins...)
	s.mu.Unlock()
	out := make([]Info, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Info())
	}
	return out
}

// Close stops every plugin (in parallel) and waits for them. Idempotent.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ps := s.plugins
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.mu.Lock()
			c := p.client
			p.state = "stopped"
			p.mu.Unlock()
			if c != nil {
				c.Kill()
			}
		}()
	}
	wg.Wait()
	return nil
}
