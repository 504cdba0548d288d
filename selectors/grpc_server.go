package selectors

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaq-go/metaq/plugins"
	selectorpb "github.com/metaq-go/metaq/selectors/proto"
)

// grpcServer is the plugin side: it serves a Selector as SelectorService.
type grpcServer struct {
	selectorpb.UnimplementedSelectorServiceServer
	impl Selector
}

func (s *grpcServer) Select(ctx context.Context, in *selectorpb.SelectRequest) (*selectorpb.SelectResponse, error) {
	req := requestFromProto(in)
	resp, err := s.impl.Select(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	if resp == nil {
		return nil, status.Error(codes.Internal, "selector returned no response and no error")
	}
	out := &selectorpb.SelectResponse{Choices: make([]int64, len(resp.Choices))}
	for i, c := range resp.Choices {
		out.Choices[i] = int64(c)
	}
	return out, nil
}

// requestFromProto converts a request; the keys share in's memory.
func requestFromProto(in *selectorpb.SelectRequest) *SelectRequest {
	req := &SelectRequest{
		Topic:      in.GetTopic(),
		Partitions: make([]Partition, len(in.GetPartitions())),
		Messages:   make([]Meta, len(in.GetMessages())),
	}
	for i, p := range in.GetPartitions() {
		req.Partitions[i] = Partition{BrokerID: int(p.GetBrokerId()), Partition: p.GetPartition()}
	}
	for i, m := range in.GetMessages() {
		req.Messages[i] = Meta{Key: m.GetKey(), Attribute: m.GetAttribute(), HasAttribute: m.GetHasAttribute(), Size: int(m.GetSize())}
	}
	return req
}

// toStatus maps an implementation's error to a gRPC status: the package's
// sentinels to their codes (see fromStatus), anything else to Internal.
func toStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, ErrNoPartitions):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrBadChoice):
		code = codes.OutOfRange
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrBadConfig):
		code = codes.InvalidArgument
	case errors.Is(err, plugins.ErrUnavailable), errors.Is(err, ErrClosed):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}
