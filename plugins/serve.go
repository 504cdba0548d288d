package plugins

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ServeOptions are the plugin-side settings of Serve. The zero value is usable.
type ServeOptions struct {
	// Logger is the plugin's logger; it must write to stderr (stdout carries
	// the handshake). Default: DefaultLogger(kind).
	Logger hclog.Logger
	// MaxRecvMsgSize is the largest gRPC request the plugin accepts, in
	// bytes. Default 64 MiB (grpc-go's default is 4 MiB).
	MaxRecvMsgSize int
	// ParentPoll is how often the plugin checks that its host is alive; it
	// exits when the host is gone. Default 500 ms; negative disables.
	ParentPoll time.Duration
}

// DefaultLogger is the logger Serve uses for a plugin of kind k when
// ServeOptions.Logger is nil: hclog JSON on stderr at Info, which the host
// turns into log lines tagged with the plugin's name. A kind package that
// needs the logger before calling Serve builds it with this.
func DefaultLogger(k Kind) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       PluginName(k),
		Level:      hclog.Info,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}

// Serve runs a plugin of kind k whose gRPC adapter is p, until the host
// stops it. Kind packages wrap it in their own one-line Serve(impl). It
// returns once the host is done with the plugin (its gRPC server has
// stopped); go-plugin exits the process itself only when serving fails.
//
// Nothing may be written to stdout before Serve: go-plugin reads the
// handshake from the plugin's stdout, and stray output breaks it.
func Serve(k Kind, p plugin.Plugin, opts ServeOptions) {
	if opts.Logger == nil {
		opts.Logger = DefaultLogger(k)
	}
	if opts.MaxRecvMsgSize <= 0 {
		opts.MaxRecvMsgSize = 64 << 20
	}
	if opts.ParentPoll == 0 {
		opts.ParentPoll = 500 * time.Millisecond
	}
	if opts.ParentPoll > 0 {
		go watchParent(os.Getppid(), opts.ParentPoll, opts.Logger)
	}
	logger := opts.Logger
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{
			HandshakeVersion(k): {PluginName(k): p},
		},
		Logger: logger,
		GRPCServer: func(o []grpc.ServerOption) *grpc.Server {
			o = append(o,
				grpc.MaxRecvMsgSize(opts.MaxRecvMsgSize),
				grpc.MaxSendMsgSize(math.MaxInt32),
				grpc.ChainUnaryInterceptor(recoverUnary(logger)),
			)
			return grpc.NewServer(o...)
		},
	})
}

// recoverUnary turns a panic in one call into an Internal error, so that one
// bad request does not kill the plugin process.
func recoverUnary(logger hclog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				logger.Error("panic in plugin call", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				err = status.Errorf(codes.Internal, "plugin panic: %v", r)
			}
		}()
		return h(ctx, req)
	}
}

// watchParent exits the process once its parent is gone (it is re-parented),
// the portable backstop for Pdeathsig.
func watchParent(ppid int, every time.Duration, logger hclog.Logger) {
	if ppid <= 1 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != ppid {
			logger.Warn("host process is gone; exiting", "parent_pid", ppid)
			os.Exit(2)
		}
	}
}
