package host

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/metaq-go/metaq/plugins"
)

// StartError is a plugin that could not be started. Its message is meant
// for the operator (it names the plugin and the binary and says what to
// do); Unwrap gives the sentinel: ErrNotFound, ErrChecksum, ErrCopy,
// ErrStdout, ErrNotGRPC, plugins.ErrWrongKind or ErrHandshake.
type StartError struct {
	Name, Path string
	Err        error
	msg        string
}

func (e *StartError) Error() string { return e.msg }

// Unwrap returns the sentinel.
func (e *StartError) Unwrap() error { return e.Err }

func (p *Plugin) startErr(sentinel error, format string, args ...any) *StartError {
	return &StartError{Name: p.spec.Name, Path: p.spec.Path, Err: sentinel, msg: fmt.Sprintf(format, args...)}
}

// proc is one started plugin process: one go-plugin Client, which can
// never be started again once it has exited (go-plugin#306).
type proc struct {
	client  *plugin.Client
	rpc     plugin.ClientProtocol
	raw     any
	pid     int
	started time.Time
	// dir is the private copy of a pinned binary ("" without a pin),
	// removed when the process is killed.
	dir string
}

// kill stops the process: gracefully (go-plugin closes the connection,
// waits up to 2 s for an exit, then force-kills) unless force, in which
// case it is SIGKILLed first (a hung process would block the graceful
// shutdown RPC). It then removes the process's private binary copy.
func (pr *proc) kill(force bool) {
	if force && pr.pid > 0 {
		if proc, err := os.FindProcess(pr.pid); err == nil && !pr.client.Exited() {
			_ = proc.Kill()
		}
	}
	pr.client.Kill()
	if pr.dir != "" {
		_ = os.RemoveAll(pr.dir)
	}
}

// allowedEnv are the host variables a plugin inherits, when they are set;
// everything else in the host's environment (credentials, METAQ_PASSWORD,
// cloud tokens) stays out of the plugin.
var allowedEnv = []string{"PATH", "HOME", "TMPDIR", "LANG"}

// pluginEnv is a plugin's whole environment before go-plugin appends its
// own variables (the magic cookie, PLUGIN_*): the allowed host variables,
// then the configured KEY=VALUE entries, which override them (exec keeps
// the last value of a duplicate key).
func pluginEnv(extra []string) []string {
	env := make([]string, 0, len(allowedEnv)+len(extra))
	for _, k := range allowedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// afterPinCheck, when set (tests only), runs between verifying a pinned
// copy and executing it.
var afterPinCheck func(spec Spec)

// pinnedCopy copies the binary at spec.Path into a new private directory
// (0700, under the supervisor's TempDir), hashing the bytes as they are
// copied, and returns the directory and the copy's path once its sha256 is
// want. What runs is then exactly what was hashed: swapping the file at
// spec.Path after the check changes nothing, and only the host's user can
// write the copy.
func (p *Plugin) pinnedCopy(want []byte) (dir, path string, err error) {
	spec := p.spec
	src, err := os.Open(spec.Path)
	if err != nil {
		return "", "", p.startErr(ErrNotFound, "plugin %s: binary %s: %v", spec.Name, spec.Path, err)
	}
	defer src.Close()
	dir, err = os.MkdirTemp(p.s.opts.TempDir, "metaq-plugin-")
	if err != nil {
		return "", "", p.startErr(ErrCopy, "plugin %s: private copy of %s: %v", spec.Name, spec.Path, err)
	}
	fail := func(sentinel error, format string, args ...any) (string, string, error) {
		_ = os.RemoveAll(dir)
		return "", "", p.startErr(sentinel, format, args...)
	}
	path = filepath.Join(dir, filepath.Base(spec.Path))
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return fail(ErrCopy, "plugin %s: private copy of %s: %v", spec.Name, spec.Path, err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(dst, h), src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(ErrCopy, "plugin %s: private copy of %s into %s: %v", spec.Name, spec.Path, dir, err)
	}
	if got := h.Sum(nil); subtle.ConstantTimeCompare(got, want) != 1 {
		return fail(ErrChecksum, "plugin %s: sha256 mismatch: refusing to run %s (want %s, got %s)",
			spec.Name, spec.Path, hex.EncodeToString(want), hex.EncodeToString(got))
	}
	if afterPinCheck != nil {
		afterPinCheck(spec)
	}
	return dir, path, nil
}

// launch starts one process of the plugin with a fresh go-plugin Client,
// completes the handshake and dispenses the kind's client. With a sha256
// pin it runs a verified private copy of the binary (pinnedCopy), made
// afresh at every start.
func (p *Plugin) launch() (*proc, error) {
	spec := p.spec
	st, err := os.Stat(spec.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, p.startErr(ErrNotFound, "plugin %s: binary %s not found (build it with make)", spec.Name, spec.Path)
	case err != nil:
		return nil, p.startErr(ErrNotFound, "plugin %s: binary %s: %v", spec.Name, spec.Path, err)
	case !st.Mode().IsRegular() || st.Mode()&0o111 == 0:
		return nil, p.startErr(ErrNotFound, "plugin %s: %s is not an executable file", spec.Name, spec.Path)
	}
	exe, dir := spec.Path, ""
	if spec.SHA256 != "" {
		want, err := hex.DecodeString(spec.SHA256)
		if err != nil || len(want) != sha256.Size {
			return nil, p.startErr(ErrChecksum, "plugin %s: sha256 %q is not 64 hex digits", spec.Name, spec.SHA256)
		}
		if dir, exe, err = p.pinnedCopy(want); err != nil {
			return nil, err
		}
	}
	pr, err := p.start(exe)
	if err != nil {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	pr.dir = dir
	return pr, nil
}

// start runs exe (spec.Path or its pinned copy) under a new go-plugin
// Client, retrying a start that failed with ETXTBSY: a fork in another
// goroutine can briefly hold the just-written copy open for writing.
func (p *Plugin) start(exe string) (*proc, error) {
	for attempt := 1; ; attempt++ {
		pr, err := p.startOnce(exe)
		if err == nil || attempt == textBusyRetries || !isTextBusy(err) {
			return pr, err
		}
		time.Sleep(time.Duration(attempt) * 10 * time.Millisecond)
	}
}

// textBusyRetries bounds the starts tried when exec fails with ETXTBSY.
const textBusyRetries = 5

func (p *Plugin) startOnce(exe string) (*proc, error) {
	spec := p.spec
	cmd := exec.Command(exe, spec.Args...)
	// The allow-list and the configured env only: SkipHostEnv below stops
	// go-plugin from appending os.Environ(); it appends just its own
	// variables (magic cookie, PLUGIN_*).
	cmd.Env = pluginEnv(spec.Env)
	setPdeathsig(cmd)
	cfg := &plugin.ClientConfig{
		HandshakeConfig: plugins.Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			plugins.HandshakeVersion(spec.Kind): {plugins.PluginName(spec.Kind): p.impl},
		},
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           p.log,
		StartTimeout:     p.s.opts.StartTimeout,
		Stderr:           io.Discard, // already turned into log lines
		SyncStdout:       p.stdout,
		SyncStderr:       p.stderr,
	}
	c := plugin.NewClient(cfg)
	rpc, err := c.Client()
	if err != nil {
		c.Kill()
		if isTextBusy(err) {
			return nil, err
		}
		return nil, p.classify(err)
	}
	raw, err := rpc.Dispense(plugins.PluginName(spec.Kind))
	if err != nil {
		c.Kill()
		return nil, p.startErr(plugins.ErrWrongKind, "plugin %s: %s does not serve a %s plugin: %v", spec.Name, spec.Path, spec.Kind, err)
	}
	pr := &proc{client: c, rpc: rpc, raw: raw, started: time.Now()}
	if rc := c.ReattachConfig(); rc != nil {
		pr.pid = rc.Pid
	}
	return pr, nil
}

// go-plugin reports these start failures only as text; these patterns are
// the one place that reads it.
var (
	reStdout      = regexp.MustCompile(`Unrecognized remote plugin message: ([^\n]*)`)
	reProtocol    = regexp.MustCompile(`unsupported plugin protocol "([^"]*)"`)
	reVersion     = regexp.MustCompile(`incompatible API version with plugin\. Plugin version: (\d+)`)
	reNoHandshake = regexp.MustCompile(`plugin exited before we could connect|timeout while waiting for plugin to start`)
)

// classify turns go-plugin's start errors into StartErrors.
func (p *Plugin) classify(err error) error {
	spec, msg := p.spec, err.Error()
	if m := reStdout.FindStringSubmatch(msg); m != nil {
		if m[1] == "" {
			return p.startErr(ErrHandshake, "plugin %s: %s exited before the handshake (is it a metaq plugin built with plugins.Serve? see its log lines)",
				spec.Name, spec.Path)
		}
		return p.startErr(ErrStdout, "plugin %s wrote to stdout before serving: %q (plugins must not print to stdout)", spec.Name, m[1])
	}
	if m := reProtocol.FindStringSubmatch(msg); m != nil {
		return p.startErr(ErrNotGRPC, "plugin %s: only gRPC plugins are supported: %s speaks %s", spec.Name, spec.Path, m[1])
	}
	if m := reVersion.FindStringSubmatch(msg); m != nil {
		v, _ := strconv.Atoi(m[1])
		if k, pv, ok := plugins.KindOfHandshakeVersion(v); ok && k != spec.Kind {
			return p.startErr(plugins.ErrWrongKind, "plugin %s: %s is a %s plugin, not a %s plugin", spec.Name, spec.Path, k, spec.Kind)
		} else if ok {
			return p.startErr(ErrHandshake, "plugin %s: %s speaks %s protocol version %d, this broker version %d (rebuild the plugin)",
				spec.Name, spec.Path, k, pv, plugins.ProtocolVersion(spec.Kind))
		}
		return p.startErr(ErrHandshake, "plugin %s: %s is not a metaq %s plugin (handshake version %d)", spec.Name, spec.Path, spec.Kind, v)
	}
	if reNoHandshake.MatchString(msg) {
		return p.startErr(ErrHandshake, "plugin %s: %s did not complete the handshake: %s (is it a metaq plugin built with plugins.Serve? see its log lines)",
			spec.Name, spec.Path, msg)
	}
	return &StartError{Name: spec.Name, Path: spec.Path, Err: err, msg: fmt.Sprintf("plugin %s: start %s: %v", spec.Name, spec.Path, err)}
}

// ping checks the plugin's gRPC health service with a deadline. go-plugin's
// own Ping has none, so a hung (e.g. SIGSTOPped) plugin would block it.
func (pr *proc) ping(timeout time.Duration) error {
	gc, ok := pr.rpc.(*plugin.GRPCClient)
	if !ok {
		return pr.rpc.Ping()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := grpc_health_v1.NewHealthClient(gc.Conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
	return err
}
