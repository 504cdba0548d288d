package filters

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	filterpb "github.com/metaq-go/metaq/filters/proto"
)

// GRPCPlugin is the go-plugin adapter of the filter kind. Plugins serve it
// with Impl set (filters.Serve does that); hosts launch binaries with a
// zero GRPCPlugin and get a Filter back from Dispense. It speaks gRPC only:
// the embedded NetRPCUnsupportedPlugin refuses net/rpc.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the plugin author's filter (plugin side only).
	Impl Filter
	// logf logs plugin-side failures outside gRPC calls (a panic on the
	// batch channel); nil logs nothing.
	logf func(format string, args ...any)
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the FilterService backed by Impl.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	filterpb.RegisterFilterServiceServer(s, &grpcServer{impl: p.Impl, logf: p.logf})
	return nil
}

// GRPCClient returns a Filter that calls the plugin process over cc. ctx is
// go-plugin's done-context: it ends when the process exits, after which the
// client answers plugins.ErrUnavailable without trying the connection.
func (p *GRPCPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return newGRPCClient(ctx, filterpb.NewFilterServiceClient(cc)), nil
}
