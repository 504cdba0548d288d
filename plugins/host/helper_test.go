//go:build unix

package host

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/rpc"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/metaq-go/metaq/plugins"
)

// The test binary doubles as the plugin and as a host (go-plugin's
// helper-process pattern): TestMain checks envRole.
const (
	envRole     = "METAQ_HOST_TEST_ROLE"      // "plugin" or "host"
	envMode     = "METAQ_HOST_TEST_MODE"      // plugin: "", "stdout", "netrpc"
	envKind     = "METAQ_HOST_TEST_KIND"      // plugin: the kind it serves (default selector)
	envFailFile = "METAQ_HOST_TEST_FAILFILE"  // plugin: exit at once while this file exists
	envStarts   = "METAQ_HOST_TEST_STARTS"    // plugin: append a line here at every start
	envNoPdeath = "METAQ_HOST_TEST_NOPDEATH"  // host: do not set Pdeathsig
	envEcho     = "METAQ_HOST_TEST_ECHO_ENV"  // plugin: Echo("env") answers this variable
	envHostLog  = "METAQ_HOST_TEST_HOST_LOGS" // host: its supervisor log file
)

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "plugin":
		runPlugin()
		os.Exit(0)
	case "host":
		runHost()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runPlugin() {
	if f := os.Getenv(envStarts); f != "" {
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(fh, os.Getpid())
			fh.Close()
		}
	}
	if f := os.Getenv(envFailFile); f != "" {
		if _, err := os.Stat(f); err == nil {
			fmt.Fprintln(os.Stderr, "failing on purpose")
			os.Exit(3)
		}
	}
	kind := plugins.Kind(os.Getenv(envKind))
	if kind == "" {
		kind = plugins.KindSelector
	}
	switch os.Getenv(envMode) {
	case "stdout":
		fmt.Println("hello from init")
	case "netrpc":
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  plugins.Handshake,
			VersionedPlugins: map[int]plugin.PluginSet{plugins.HandshakeVersion(kind): {plugins.PluginName(kind): netRPCPlugin{}}},
		})
		return
	}
	plugins.Serve(kind, &testPlugin{}, plugins.ServeOptions{})
}

// runHost launches one plugin, prints its pid and waits to be killed.
func runHost() {
	if os.Getenv(envNoPdeath) != "" {
		usePdeathsig = false
	}
	out := os.Stderr
	if f := os.Getenv(envHostLog); f != "" {
		if fh, err := os.Create(f); err == nil {
			out = fh
		}
	}
	s := NewSupervisor(Options{Logger: hclog.New(&hclog.LoggerOptions{Name: "plugins", Level: hclog.Debug, Output: out})})
	exe, _ := os.Executable()
	p, err := s.Launch(Spec{Kind: plugins.KindSelector, Name: "child", Path: exe, Env: []string{envRole + "=plugin", raceEnv()}}, &testPlugin{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("pid", p.Info().PID)
	select {}
}

// testPlugin is a test-only plugin kind: one hand-written unary gRPC
// method, Echo(StringValue) StringValue, no generated code.
type testPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (testPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&echoDesc, echoServer{})
	return nil
}

func (testPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &echoClient{cc: cc}, nil
}

type echoAPI interface {
	Echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

type echoServer struct{}

// selfExe is the running executable on Linux, even once its file is gone.
const selfExe = "/proc/self/exe"

// Echo answers "pid <pid>" to "pid", writes "stdout:<text>" to os.Stdout,
// panics on "panic", reads the variable named by envEcho on "env", answers
// its whole environment (KEY=VALUE entries, NUL-separated) to "environ", the path of
// its executable to "exe" and that executable's sha256 to "exesum", and
// echoes anything else.
func (echoServer) Echo(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	v := in.GetValue()
	switch {
	case v == "pid":
		return wrapperspb.String("pid " + strconv.Itoa(os.Getpid())), nil
	case v == "env":
		return wrapperspb.String(os.Getenv(os.Getenv(envEcho))), nil
	case v == "environ":
		return wrapperspb.String(strings.Join(os.Environ(), "\x00")), nil
	case v == "exe":
		exe, err := os.Executable()
		return wrapperspb.String(exe), err
	case v == "exesum":
		return wrapperspb.String(fileSHA256(selfExe)), nil
	case v == "panic":
		panic("test panic")
	case strings.HasPrefix(v, "stdout:"):
		fmt.Fprintln(os.Stdout, strings.TrimPrefix(v, "stdout:"))
		os.Stdout.Sync()
	}
	return wrapperspb.String(v), nil
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "metaq.hosttest.v1.Echo",
	HandlerType: (*echoAPI)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return srv.(echoAPI).Echo(ctx, req.(*wrapperspb.StringValue))
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/metaq.hosttest.v1.Echo/Echo"}, h)
	}}},
}

type echoClient struct{ cc *grpc.ClientConn }

func (c *echoClient) Echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	out := new(wrapperspb.StringValue)
	if err := c.cc.Invoke(ctx, "/metaq.hosttest.v1.Echo/Echo", in, out); err != nil {
		return nil, err
	}
	return out, nil
}

// netRPCPlugin is a net/rpc plugin, which hosts must refuse.
type netRPCPlugin struct{}

func (netRPCPlugin) Server(*plugin.MuxBroker) (any, error)              { return struct{}{}, nil }
func (netRPCPlugin) Client(*plugin.MuxBroker, *rpc.Client) (any, error) { return struct{}{}, nil }

// syncBuffer collects log output safely across goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// readPIDLine reads "pid N" from a host's stdout.
func readPIDLine(r *bufio.Reader) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("read host output %q: %w", line, err)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "pid %d", &pid); err != nil {
		return 0, fmt.Errorf("host said %q", strings.TrimSpace(line))
	}
	return pid, nil
}

// fileSHA256 is the hex SHA-256 of the file at path, or why it cannot be
// read.
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable: " + err.Error()
	}
	return hex.EncodeToString(h.Sum(nil))
}
