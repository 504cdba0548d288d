package txn

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pb "github.com/metaq-go/metaq/txn/proto"
)

// GRPCPlugin is the go-plugin adapter of the coordinator kind. Plugin
// mains do not use it directly (they call Serve); hosts hand an empty one
// to host.Supervisor.Launch. It is gRPC only: a net/rpc plugin is refused.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the coordinator a plugin serves; unused on the host side.
	Impl Coordinator
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the coordinator's service (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("txn: GRPCPlugin.Impl is nil")
	}
	pb.RegisterCoordinatorServiceServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns the host's Coordinator for one plugin process; done
// is cancelled by go-plugin when that process is gone.
func (p *GRPCPlugin) GRPCClient(done context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{pb: pb.NewCoordinatorServiceClient(c), done: done}, nil
}
