package selectors

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/metaq-go/metaq/sdk/selector"
	selectorpb "github.com/metaq-go/metaq/selectors/proto"
)

// GRPCPlugin is the go-plugin adapter of the selector kind. A plugin's main
// serves it with Impl set (Serve does that); a host launches it with Impl
// nil and gets a selector.Selector from the client side. It speaks gRPC
// only.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the plugin's selector; only the plugin side uses it.
	Impl selector.Selector
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers Impl's SelectorService on s (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("selectors: GRPCPlugin.Impl is nil")
	}
	selectorpb.RegisterSelectorServiceServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a selector.Selector calling the plugin over cc (host side).
// doneCtx is done once the plugin process is gone.
func (p *GRPCPlugin) GRPCClient(doneCtx context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &grpcClient{client: selectorpb.NewSelectorServiceClient(cc), doneCtx: doneCtx}, nil
}
