package selectors

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/message"
	selectorpb "github.com/metaq-go/metaq/selectors/proto"
)

// grpcClient is the host side: a selector.Selector that calls a plugin
// process, one message per call. It converts types and errors only; Open's
// middleware checks the answers and applies the failure policy.
type grpcClient struct {
	client selectorpb.SelectorServiceClient
	// doneCtx is done once the plugin process has exited (go-plugin).
	doneCtx context.Context
}

func (c *grpcClient) Select(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if c.doneCtx.Err() != nil {
		return 0, plugins.ErrUnavailable
	}
	resp, err := c.client.Select(ctx, requestToProto(topic, partitions, m))
	if err != nil {
		return 0, c.fromStatus(ctx, err)
	}
	ch := resp.GetChoices()
	if len(ch) != 1 {
		return 0, fmt.Errorf("%w: %d choices for 1 message", ErrBadChoice, len(ch))
	}
	// A choice beyond int's range is out of range anyway: clamp it so the
	// check that follows cannot be fooled by wrap-around.
	if ch[0] < 0 || int64(int(ch[0])) != ch[0] {
		return -1, nil
	}
	return int(ch[0]), nil
}

// requestToProto converts a request of one message with one allocation
// per slice rather than one per element.
func requestToProto(topic string, partitions []message.Partition, m *message.Message) *selectorpb.SelectRequest {
	parts := make([]selectorpb.Partition, len(partitions))
	pps := make([]*selectorpb.Partition, len(partitions))
	for i, p := range partitions {
		parts[i].BrokerId, parts[i].Partition = int64(p.BrokerID), p.Partition
		pps[i] = &parts[i]
	}
	meta := &selectorpb.Meta{Key: m.Key, Attribute: m.Attribute, HasAttribute: m.HasAttribute, Size: int64(m.DataLen())}
	return &selectorpb.SelectRequest{Topic: topic, Partitions: pps, Messages: []*selectorpb.Meta{meta}}
}

// fromStatus maps a call's error back to this package's sentinels
// (statusCodes):
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
	st, sentinel := statusCodes.FromStatus(err)
	switch {
	case st == nil:
		return fmt.Errorf("%w: %v", plugins.ErrUnavailable, err)
	case st.Code() == codes.Canceled, st.Code() == codes.DeadlineExceeded:
		if ctx.Err() != nil {
			return ctx.Err()
		}
	case sentinel == nil:
		sentinel = ErrRemote
	}
	return fmt.Errorf("selector plugin: %w: %s", sentinel, st.Message())
}
