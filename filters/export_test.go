package filters

import (
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	filterpb "github.com/metaq-go/metaq/filters/proto"
	"github.com/metaq-go/metaq/plugins"
)

// ServeOld serves impl as a plugin built before the batch channel (it
// answers OpenChannel with Unimplemented) and, unless packed, before packed
// batches (its InitResponse does not offer them).
func ServeOld(impl Filter, packed bool) {
	plugins.Serve(plugins.KindFilter, &oldPlugin{impl: impl, packed: packed}, plugins.ServeOptions{})
}

type oldPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl   Filter
	packed bool
}

func (p *oldPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	filterpb.RegisterFilterServiceServer(s, &oldServer{grpcServer: &grpcServer{impl: p.impl}, packed: p.packed})
	return nil
}

func (p *oldPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, status.Error(codes.Unimplemented, "plugin side only")
}

type oldServer struct {
	*grpcServer
	packed bool
}

func (s *oldServer) Init(ctx context.Context, in *filterpb.InitRequest) (*filterpb.InitResponse, error) {
	resp, err := s.grpcServer.Init(ctx, in)
	if resp != nil {
		resp.Packed = s.packed
	}
	return resp, err
}

func (s *oldServer) Accept(ctx context.Context, in *filterpb.AcceptRequest) (*filterpb.AcceptResponse, error) {
	if len(in.GetPacked()) != 0 && !s.packed {
		return nil, status.Error(codes.InvalidArgument, "old plugin got a packed batch")
	}
	return s.grpcServer.Accept(ctx, in)
}

func (s *oldServer) OpenChannel(context.Context, *filterpb.OpenChannelRequest) (*filterpb.OpenChannelResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method OpenChannel not implemented")
}

// ChannelOpen reports whether in's plugin process has a batch channel open.
func ChannelOpen(in *Instance) bool {
	if in.remote == nil {
		return false
	}
	f, _, err := in.remote.client()
	if err != nil {
		return false
	}
	c, ok := f.(*grpcClient)
	if !ok {
		return false
	}
	m := c.ch.cur.Load()
	return m != nil && !m.broken.Load()
}

// PropsCheckFilter asks for properties and keeps a record whose key is
// "k", with tag "TagA", header region "eu" and create time
// 1700000000123 ms; a record without properties it keeps iff its MsgID is
// even.
func PropsCheckFilter() Filter {
	return WithProperties(NewRecordFilter(func(*InitRequest) (func(*Record) bool, bool, error) {
		return propsCheck, false, nil
	}))
}

func propsCheck(r *Record) bool {
	if r.Key == nil && r.Tags == nil && r.Headers == nil {
		return r.Key == nil && r.Tags == nil && r.Headers == nil && r.CreateTime.IsZero() && r.MsgID%2 == 0
	}
	region, _ := r.Headers.String("region")
	return string(r.Key) == "k" && slices.Contains(r.Tags, "TagA") && region == "eu" &&
		r.CreateTime.UnixMilli() == 1700000000123
}

// NoPropsFilter does not ask for properties and fails a batch in which a
// record carries any (the host must not send them), else keeps all.
func NoPropsFilter() Filter { return noPropsFilter{NewRecordFilter(keepAllCompile)} }

func keepAllCompile(*InitRequest) (func(*Record) bool, bool, error) {
	return func(*Record) bool { return true }, false, nil
}

type noPropsFilter struct{ Filter }

func (f noPropsFilter) Accept(ctx context.Context, req *AcceptRequest) (*AcceptResponse, error) {
	for _, r := range req.Records {
		if r.Properties != nil || r.Key != nil || r.Tags != nil || r.Headers != nil || !r.CreateTime.IsZero() {
			return nil, fmt.Errorf("%w: record %d carries properties unasked", ErrPlugin, r.Offset)
		}
	}
	return f.Filter.Accept(ctx, req)
}
