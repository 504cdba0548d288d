package filters

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	filterpb "github.com/metaq-go/metaq/filters/proto"
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
		return nil, statusCodes.ToStatus(err)
	}
	if resp == nil {
		resp = &InitResponse{}
	}
	return &filterpb.InitResponse{NeedBodies: resp.NeedBodies, NeedProperties: resp.NeedProperties, Packed: true}, nil
}

func (s *grpcServer) Accept(ctx context.Context, in *filterpb.AcceptRequest) (*filterpb.AcceptResponse, error) {
	n := len(in.GetOffsets())
	if len(in.GetMsgIds()) != n || len(in.GetFlags()) != n || len(in.GetAttributes()) != n ||
		len(in.GetHasAttribute()) != n || len(in.GetSizes()) != n || (len(in.GetBodies()) != 0 && len(in.GetBodies()) != n) ||
		(len(in.GetProperties()) != 0 && len(in.GetProperties()) != n) {
		return nil, status.Error(codes.InvalidArgument, "filters: accept request columns differ in length")
	}
	if len(in.GetPacked()) != 0 {
		if n != 0 || len(in.GetBodies()) != 0 || len(in.GetProperties()) != 0 {
			return nil, status.Error(codes.InvalidArgument, "filters: accept request has both columns and a packed batch")
		}
		// The records alias in.Packed, which nothing else uses.
		recs, err := decodePacked(in.Packed, nil, true)
		if err == nil {
			err = fillProps(recs)
		}
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		keep, err := s.accept(ctx, &AcceptRequest{
			Instance: in.GetInstance(), Topic: in.GetTopic(), Group: in.GetGroup(), Partition: in.GetPartition(), Records: recs,
		})
		if err != nil {
			return nil, err
		}
		return &filterpb.AcceptResponse{KeepBits: appendBitmap(nil, keep)}, nil
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
	propsFromColumn(recs, in.GetProperties())
	keep, err := s.accept(ctx, &AcceptRequest{
		Instance: in.GetInstance(), Topic: in.GetTopic(), Group: in.GetGroup(), Partition: in.GetPartition(), Records: recs,
	})
	if err != nil {
		return nil, err
	}
	return &filterpb.AcceptResponse{Keep: keep}, nil
}

// accept runs the filter on req and returns its verdicts, or a status
// error: the filter's error (statusCodes), or Internal for a Keep list whose
// length is not the batch's.
func (s *grpcServer) accept(ctx context.Context, req *AcceptRequest) ([]bool, error) {
	resp, err := s.impl.Accept(ctx, req)
	if err != nil {
		return nil, statusCodes.ToStatus(err)
	}
	if resp == nil || len(resp.Keep) != len(req.Records) {
		return nil, status.Error(codes.Internal, ErrBadResponse.Error())
	}
	return resp.Keep, nil
}
