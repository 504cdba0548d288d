package selectors

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	selectorpb "github.com/metaq-go/metaq/selectors/proto"
)

// grpcServer is the plugin side: it serves a selector.Selector as
// SelectorService. A request may carry many messages (the wire is batch
// first); each is chosen for with one call of impl.
type grpcServer struct {
	selectorpb.UnimplementedSelectorServiceServer
	impl selector.Selector
}

func (s *grpcServer) Select(ctx context.Context, in *selectorpb.SelectRequest) (*selectorpb.SelectResponse, error) {
	topic := in.GetTopic()
	parts := make([]message.Partition, len(in.GetPartitions()))
	for i, p := range in.GetPartitions() {
		id := p.GetBrokerId()
		if int64(int(id)) != id {
			return nil, status.Errorf(codes.InvalidArgument, "broker id %d out of range", id)
		}
		parts[i] = message.Partition{BrokerID: int(id), Partition: p.GetPartition()}
	}
	out := &selectorpb.SelectResponse{Choices: make([]int64, len(in.GetMessages()))}
	var m message.Message
	for i, meta := range in.GetMessages() {
		// The keys share in's memory; the body is never sent.
		m = message.Message{Topic: topic, Key: meta.GetKey(), Attribute: meta.GetAttribute(), HasAttribute: meta.GetHasAttribute()}
		c, err := s.impl.Select(ctx, topic, parts, &m)
		if err != nil {
			return nil, statusCodes.ToStatus(err)
		}
		out.Choices[i] = int64(c)
	}
	return out, nil
}
