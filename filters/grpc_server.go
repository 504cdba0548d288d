package filters

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	filterpb "github.com/metaq-go/metaq/filters/proto"
	"github.com/metaq-go/metaq/plugins"
)

// grpcServer is the plugin side: it turns FilterService calls into calls
// on the plugin author's Filter.
type grpcServer struct {
	filterpb.UnimplementedFilterServiceServer
	impl Filter
	logf func(format string, args ...any)
}

func (s *grpcServer) Init(ctx context.Context, in *filterpb.InitRequest) (*filterpb.InitResponse, error) {
	resp, err := s.impl.Init(ctx, &InitRequest{
		Instance: in.GetInstance(), Topic: in.GetTopic(), Group: in.GetGroup(), Config: in.GetConfig(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if resp == nil {
		resp = &InitResponse{}
	}
	return &filterpb.InitResponse{NeedBodies: resp.NeedBodies, Packed: true}, nil
}

func (s *grpcServer) Accept(ctx context.Context, in *filterpb.AcceptRequest) (*filterpb.AcceptResponse, error) {
	n := len(in.GetOffsets())
	if len(in.GetMsgIds()) != n || len(in.GetFlags()) != n || len(in.GetAttributes()) != n ||
		len(in.GetHasAttribute()) != n || len(in.GetSizes()) != n || (len(in.GetBodies()) != 0 && len(in.GetBodies()) != n) {
		return nil, status.Error(codes.InvalidArgument, "filters: accept request columns differ in length")
	}
	if len(in.GetPacked()) != 0 {
		if n != 0 || len(in.GetBodies()) != 0 {
			return nil, status.Error(codes.InvalidArgument, "filters: accept request has both columns and a packed batch")
		}
		// The records alias in.Packed, which nothing else uses.
		recs, err := decodePacked(in.Packed, nil, true)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		resp, err := s.impl.Accept(ctx, &AcceptRequest{
			Instance: in.GetInstance(), Topic: in.GetTopic(), Group: in.GetGroup(), Partition: in.GetPartition(), Records: recs,
		})
		if err != nil {
			return nil, toStatus(err)
		}
		if resp == nil || len(resp.Keep) != len(recs) {
			return nil, status.Error(codes.Internal, ErrBadResponse.Error())
		}
		return &filterpb.AcceptResponse{KeepBits: appendBitmap(nil, resp.Keep)}, nil
	}
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Offset: in.Offsets[i], MsgID: in.MsgIds[i], Flag: in.Flags[i],
			Attribute: in.Attributes[i], HasAttribute: in.HasAttribute[i], Size: int(in.Sizes[i]),
		}
		if len(in.Bodies) != 0 {
			recs[i].Body = in.Bodies[i]
		}
	}
	resp, err := s.impl.Accept(ctx, &AcceptRequest{
		Instance: in.GetInstance(), Topic: in.GetTopic(), Group: in.GetGroup(), Partition: in.GetPartition(), Records: recs,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if resp == nil || len(resp.Keep) != n {
		return nil, status.Error(codes.Internal, ErrBadResponse.Error())
	}
	return &filterpb.AcceptResponse{Keep: resp.Keep}, nil
}

// toStatus maps the kind's sentinels to gRPC status codes.
func toStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, ErrBadConfig):
		code = codes.InvalidArgument
	case errors.Is(err, ErrUnknownInstance):
		code = codes.NotFound
	case errors.Is(err, ErrClosed):
		code = codes.FailedPrecondition
	case errors.Is(err, plugins.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}
