package host

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/plugins"
)

// Monitor timings.
const (
	// exitPoll is how often a monitor checks whether its process exited.
	exitPoll = 50 * time.Millisecond
	// stableAfter is how long a process must have run for its exit to
	// count as a fresh failure (restarted at once) rather than part of a
	// crash loop (restarted with growing backoff).
	stableAfter = 10 * time.Second
)

// usePdeathsig is cleared only by tests, to check the parent watch in
// plugins.Serve on its own.
var usePdeathsig = true

// Plugin is one supervised plugin: a process that is restarted (as a new
// process, with a new go-plugin Client) whenever it exits or stops answering.
type Plugin struct {
	s              *Supervisor
	spec           Spec
	impl           plugin.Plugin
	log            hclog.Logger
	stdout, stderr *lineLogger

	mu      sync.Mutex
	cur     *proc // nil while down; whoever sets it to nil kills it
	gen     uint64
	state   string
	lastErr string

	restarts, calls, errs atomic.Int64

	kick chan struct{} // Client saw the process exited: wake the monitor
	quit chan struct{} // closed by stop
	done chan struct{} // closed when the monitor returns
}

func newPlugin(s *Supervisor, spec Spec, impl plugin.Plugin) *Plugin {
	log := s.opts.Logger.Named(spec.Name)
	return &Plugin{
		s: s, spec: spec, impl: impl, log: log,
		stdout: &lineLogger{log: log.Named("stdout")},
		stderr: &lineLogger{log: log.Named("stderr")},
		state:  StateRestarting,
		kick:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// running installs a started process as the current one.
func (p *Plugin) running(pr *proc) {
	p.mu.Lock()
	p.cur, p.state = pr, StateRunning
	p.gen++
	p.mu.Unlock()
}

// Client returns the kind adapter's client for the running process and its
// generation, which increments at every successful start (kind packages
// re-initialise their instances when it changes). While the process is down
// it returns an error wrapping plugins.ErrUnavailable, without waiting.
func (p *Plugin) Client() (any, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return nil, p.gen, fmt.Errorf("plugin %s is %s: %w", p.spec.Name, p.state, plugins.ErrUnavailable)
	}
	if p.cur.client.Exited() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
		return nil, p.gen, fmt.Errorf("plugin %s exited: %w", p.spec.Name, plugins.ErrUnavailable)
	}
	return p.cur.raw, p.gen, nil
}

// Observe counts one call and its outcome (kind middleware calls it).
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
	inf := Info{
		Kind: p.spec.Kind, Name: p.spec.Name, Path: p.spec.Path, Version: plugins.ProtocolVersion(p.spec.Kind),
		Restarts: p.restarts.Load(), Calls: p.calls.Load(), Errors: p.errs.Load(),
		State: p.state, Generation: p.gen, LastError: p.lastErr,
	}
	if p.cur != nil {
		inf.PID = p.cur.pid
	}
	return inf
}

func (p *Plugin) stopping() bool {
	select {
	case <-p.quit:
		return true
	default:
		return false
	}
}

// monitor watches the current process and replaces it when it exits or
// fails its health check, until stop.
func (p *Plugin) monitor(pr *proc) {
	defer close(p.done)
	failures := 0
	for {
		reason, force := p.watch(pr)
		if reason == "" {
			return // stopping: stop kills the process
		}
		p.mu.Lock()
		own := p.cur == pr
		if own {
			p.cur, p.state, p.lastErr = nil, StateRestarting, reason
		}
		p.mu.Unlock()
		if !own {
			return // stop took it
		}
		p.restarts.Add(1)
		if time.Since(pr.started) < stableAfter {
			failures++
		} else {
			failures = 0
		}
		p.log.Error("plugin is down; restarting", "reason", reason, "pid", pr.pid)
		pr.kill(force)
		if pr = p.restart(&failures); pr == nil {
			return
		}
	}
}

// watch returns why pr must be replaced (and whether it must be killed
// hard), or "" once the plugin is stopping.
func (p *Plugin) watch(pr *proc) (reason string, force bool) {
	tick := time.NewTicker(exitPoll)
	defer tick.Stop()
	nextPing := time.Now().Add(p.s.opts.HealthInterval)
	for {
		select {
		case <-p.quit:
			return "", false
		case <-p.kick:
		case <-tick.C:
		}
		if pr.client.Exited() {
			return "process exited", false
		}
		if time.Now().Before(nextPing) {
			continue
		}
		if err := pr.ping(p.s.opts.HealthTimeout); err != nil {
			if p.stopping() {
				return "", false
			}
			if pr.client.Exited() {
				return "process exited", false
			}
			return fmt.Sprintf("health check failed: %v", err), true
		}
		nextPing = time.Now().Add(p.s.opts.HealthInterval)
	}
}

// restart starts a new process, retrying with backoff, and returns it; nil
// once the plugin is stopping. failures > 0 delays the first attempt.
func (p *Plugin) restart(failures *int) *proc {
	for {
		if *failures > 0 {
			t := time.NewTimer(p.backoff(*failures))
			select {
			case <-p.quit:
				t.Stop()
				return nil
			case <-t.C:
			}
		} else if p.stopping() {
			return nil
		}
		pr, err := p.launch()
		if err != nil {
			*failures++
			p.mu.Lock()
			p.lastErr = err.Error()
			p.mu.Unlock()
			p.log.Error("plugin restart failed", "error", err, "failures", *failures)
			continue
		}
		p.mu.Lock()
		if p.state == StateStopped {
			p.mu.Unlock()
			pr.kill(false)
			return nil
		}
		p.cur, p.state = pr, StateRunning
		p.gen++
		gen := p.gen
		p.mu.Unlock()
		p.log.Info("plugin restarted", "pid", pr.pid, "generation", gen)
		return pr
	}
}

// backoff is the jittered delay before the next start after n failures in
// a row: uniformly in [b/2, b] for b = RestartMin·2^(n-1), capped at
// RestartMax.
func (p *Plugin) backoff(n int) time.Duration {
	return backoff.Policy{Min: p.s.opts.RestartMin, Max: p.s.opts.RestartMax, Jitter: 0.5}.Delay(n)
}

// stop marks the plugin stopped, stops its monitor and kills its process,
// waiting until deadline at most.
func (p *Plugin) stop(deadline time.Time) error {
	p.mu.Lock()
	if p.state == StateStopped {
		p.mu.Unlock()
		return nil
	}
	pr := p.cur
	p.cur, p.state = nil, StateStopped
	close(p.quit)
	p.mu.Unlock()

	var err error
	if pr != nil {
		killed := make(chan struct{})
		go func() {
			pr.kill(false)
			close(killed)
		}()
		select {
		case <-killed:
		case <-time.After(time.Until(deadline)):
			p.log.Warn("plugin did not stop in time; killing it", "pid", pr.pid)
			pr.kill(true)
			select {
			case <-killed:
			case <-time.After(time.Second):
				err = fmt.Errorf("plugin %s: process %d did not exit", p.spec.Name, pr.pid)
			}
		}
	}
	select {
	case <-p.done:
	case <-time.After(max(time.Until(deadline), 200*time.Millisecond)):
		if err == nil {
			err = fmt.Errorf("plugin %s: still starting at close; it is killed when its start completes", p.spec.Name)
		}
	}
	return err
}
