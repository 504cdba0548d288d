package offsetstore

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pb "github.com/metaq-go/metaq/offsetstore/proto"
)

// GRPCPlugin is the go-plugin adapter of the offsetstore kind. Plugin
// mains do not use it directly (they call Serve); hosts hand an empty one
// to host.Supervisor.Launch. It is gRPC only: a net/rpc plugin is refused.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the store a plugin serves; unused on the host side.
	Impl Store
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the store's service (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterOffsetStoreServiceServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns the host's Store for one plugin process; done is
// cancelled by go-plugin when that process is gone.
func (p *GRPCPlugin) GRPCClient(done context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{pb: pb.NewOffsetStoreServiceClient(c), done: done}, nil
}
