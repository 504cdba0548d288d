package selectors

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaq-go/metaq/plugins"
	selectorpb "github.com/metaq-go/metaq/selectors/proto"
)

// grpcClient is the host side: a Selector that calls a plugin process. It
// converts types and errors only; Open's middleware checks the answers and
// applies the failure policy.
type grpcClient struct {
	client selectorpb.SelectorServiceClient
	// doneCtx is done once the plugin process has exited (go-plugin).
	doneCtx context.Context
}

func (c *grpcClient) Select(ctx context.Context, req *SelectRequest) (*SelectResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.doneCtx.Err() != nil {
		return nil, plugins.ErrUnavailable
	}
	resp, err := c.client.Select(ctx, requestToProto(req))
	if err != nil {
		return nil, c.fromStatus(ctx, err)
	}
	out := &SelectResponse{Choices: make([]int, len(resp.GetChoices()))}
	for i, ch := range resp.GetChoices() {
		// A choice beyond int's range is out of range anyway: clamp it so
		// the check that follows cannot be fooled by wrap-around.
		if ch < 0 || int64(int(ch)) != ch {
			ch = -1
		}
		out.Choices[i] = int(ch)
	}
	return out, nil
}

// Close does nothing: the plugin process belongs to its supervisor.
func (c *grpcClient) Close() error { return nil }

// requestToProto converts a request with one allocation per slice rather
// than one per element.
func requestToProto(req *SelectRequest) *selectorpb.SelectRequest {
	parts := make([]selectorpb.Partition, len(req.Partitions))
	pps := make([]*selectorpb.Partition, len(req.Partitions))
	for i, p := range req.Partitions {
		parts[i].BrokerId, parts[i].Partition = int64(p.BrokerID), p.Partition
		pps[i] = &parts[i]
	}
	metas := make([]selectorpb.Meta, len(req.Messages))
	mps := make([]*selectorpb.Meta, len(req.Messages))
	for i := range req.Messages {
		m := &req.Messages[i]
		metas[i].Key, metas[i].Attribute, metas[i].HasAttribute, metas[i].Size = m.Key, m.Attribute, m.HasAttribute, int64(m.Size)
		mps[i] = &metas[i]
	}
	return &selectorpb.SelectRequest{Topic: req.Topic, Partitions: pps, Messages: mps}
}

// fromStatus maps a call's error back to this package's sentinels:
//
//	Canceled, DeadlineExceeded  ctx's error (context.Canceled, context.DeadlineExceeded)
//	Unavailable, or the process gone  plugins.ErrUnavailable
//	FailedPrecondition  ErrNoPartitions
//	OutOfRange          ErrBadChoice
//	InvalidArgument     ErrBadRequest
//	anything else       ErrRemote
func (c *grpcClient) fromStatus(ctx context.Context, err error) error {
	if c.doneCtx.Err() != nil {
		return fmt.Errorf("%w: %v", plugins.ErrUnavailable, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %v", plugins.ErrUnavailable, err)
	}
	var sentinel error
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sentinel = context.Canceled
		if st.Code() == codes.DeadlineExceeded {
			sentinel = context.DeadlineExceeded
		}
	case codes.Unavailable:
		sentinel = plugins.ErrUnavailable
	case codes.FailedPrecondition:
		sentinel = ErrNoPartitions
	case codes.OutOfRange:
		sentinel = ErrBadChoice
	case codes.InvalidArgument:
		sentinel = ErrBadRequest
	default:
		sentinel = ErrRemote
	}
	return fmt.Errorf("selector plugin: %w: %s", sentinel, st.Message())
}
