// Package host is the plugin supervisor used by the broker and the SDK: it
// launches plugin binaries, checks them, keeps them running and stops them.
// It is the only code that calls plugin.NewClient.
//
// Each launched plugin gets a logger named after it (its stderr, hclog JSON
// from plugins.Serve, becomes log lines tagged with the name; what it writes
// to os.Stdout/os.Stderr after serving is logged at Debug), AutoMTLS, an
// environment limited to an allow-list plus its configured variables, an
// optional sha256 pin (the verified private copy is what runs), and on
// Linux Pdeathsig. A monitor goroutine per
// plugin notices within ~50 ms that the process is gone and pings it every
// HealthInterval; a dead or unhealthy plugin is restarted with jittered
// exponential backoff, always with a fresh go-plugin Client. While it is
// down, Plugin.Client returns plugins.ErrUnavailable at once.
package host

import (
	"fmt"
	"os"
	"sync"
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
	// With it, every start copies the binary into a private directory,
	// hashing it on the way, and runs the copy only if it matches.
	SHA256 string
	// Args are the binary's arguments.
	Args []string
	// Env are extra KEY=VALUE variables. The plugin's environment is only
	// PATH, HOME, TMPDIR and LANG from the host (those that are set), then
	// Env (overriding them), then go-plugin's own handshake variables; the
	// rest of the host's environment is not passed.
	Env []string
	// Config is handed to the plugin by its kind package (Init); the
	// supervisor does not read it.
	Config map[string]string
}

// Options configure a Supervisor. The zero value is usable.
type Options struct {
	// Logger is the parent of every plugin's logger (named after the
	// plugin); its level is the level of plugin log lines. Default: hclog
	// on stderr at Info, never go-plugin's Trace default.
	Logger hclog.Logger
	// RestartMin and RestartMax bound the jittered exponential restart
	// backoff; defaults 50 ms and 5 s. The first restart after a plugin
	// that ran for a while exits is immediate.
	RestartMin, RestartMax time.Duration
	// HealthInterval is how often a running plugin is pinged; default 1 s.
	HealthInterval time.Duration
	// HealthTimeout bounds one ping; a plugin that does not answer is
	// killed and restarted. Default 2 s.
	HealthTimeout time.Duration
	// StartTimeout bounds one start (exec and handshake); default 10 s.
	StartTimeout time.Duration
	// TempDir is where the private copies of sha256-pinned binaries are
	// made (one 0700 directory per process, removed when it stops); it
	// must allow exec. Default os.TempDir().
	TempDir string
	// KillTimeout bounds Close: plugins get go-plugin's 2 s to exit
	// gracefully, then are SIGKILLed; whatever is left at KillTimeout is
	// SIGKILLed directly. Default 5 s.
	KillTimeout time.Duration
}

// Plugin states, as in Info.State.
const (
	StateRunning    = "running"
	StateRestarting = "restarting"
	StateStopped    = "stopped"
)

// Info describes a loaded plugin for `stats plugins` and `metaq plugins`.
type Info struct {
	Kind     plugins.Kind
	Name     string
	Path     string
	Version  int // the kind's protocol version
	PID      int // 0 while the process is down
	Restarts int64
	Calls    int64
	Errors   int64
	State    string // StateRunning, StateRestarting, StateStopped
	// Generation counts successful starts (1 after Launch).
	Generation uint64
	// LastError is the last exit, health or restart failure ("" if none).
	LastError string
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
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "plugins", Level: hclog.Info, Output: os.Stderr})
	}
	if opts.RestartMin <= 0 {
		opts.RestartMin = 50 * time.Millisecond
	}
	if opts.RestartMax < opts.RestartMin {
		opts.RestartMax = max(5*time.Second, opts.RestartMin)
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = time.Second
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = 2 * time.Second
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	if opts.TempDir == "" {
		opts.TempDir = os.TempDir()
	}
	if opts.KillTimeout <= 0 {
		opts.KillTimeout = 5 * time.Second
	}
	return &Supervisor{opts: opts}
}

// Launch starts spec's binary, with impl the kind's gRPC plugin adapter
// (its GRPCClient side is used), and keeps it running until Close. It fails
// with a *StartError when the first start fails: binary missing, sha256
// mismatch, output on stdout before the handshake, not a gRPC plugin, or a
// plugin of another kind.
func (s *Supervisor) Launch(spec Spec, impl plugin.Plugin) (*Plugin, error) {
	if !spec.Kind.Valid() {
		return nil, fmt.Errorf("plugin %s: unknown kind %q", spec.Name, spec.Kind)
	}
	if s.isClosed() {
		return nil, ErrClosed
	}
	p := newPlugin(s, spec, impl)
	pr, err := p.launch()
	if err != nil {
		p.log.Error("plugin failed to start", "error", err)
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		pr.kill(false)
		return nil, ErrClosed
	}
	p.running(pr)
	s.plugins = append(s.plugins, p)
	s.mu.Unlock()
	p.log.Info("plugin started", "path", spec.Path, "pid", pr.pid)
	go p.monitor(pr)
	return p, nil
}

func (s *Supervisor) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// List describes every plugin, in launch order.
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

// Close stops every plugin in parallel and waits for them, at most about
// KillTimeout: each gets go-plugin's graceful shutdown (2 s) and is then
// SIGKILLed. Monitors stop, so nothing is restarted. It returns an error
// if some process could not be confirmed gone. Idempotent.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ps := s.plugins
	s.mu.Unlock()

	deadline := time.Now().Add(s.opts.KillTimeout)
	var wg sync.WaitGroup
	errs := make(chan error, len(ps))
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.stop(deadline); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	var first error
	n := 0
	for err := range errs {
		if first == nil {
			first = err
		}
		n++
	}
	if n > 1 {
		return fmt.Errorf("%w (and %d more)", first, n-1)
	}
	return first
}
