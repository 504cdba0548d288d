package offsetstore

import (
	"context"
	"fmt"

	pb "github.com/metaq-go/metaq/offsetstore/proto"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// grpcClient is the host side of one plugin process: a Store over gRPC.
// It is what host.Plugin.Client returns for an offsetstore plugin; the
// remote store in open.go picks the current one at every call.
type grpcClient struct {
	pb pb.OffsetStoreServiceClient
	// done is cancelled by go-plugin when the plugin process is gone.
	done context.Context
}

var _ Store = (*grpcClient)(nil)

func (c *grpcClient) Init(ctx context.Context, req *InitRequest) error {
	_, err := c.pb.Init(ctx, &pb.InitRequest{Config: req.Config})
	return c.fromStatus("init", err)
}

func (c *grpcClient) Commit(ctx context.Context, group string, ps []message.Position) error {
	req := &pb.CommitRequest{Entries: make([]*pb.Entry, len(ps))}
	for i, p := range ps {
		req.Entries[i] = entryToPB(group, p)
	}
	_, err := c.pb.Commit(ctx, req)
	return c.fromStatus("commit", err)
}

func (c *grpcClient) Load(ctx context.Context, group string, ps []message.Position) ([]message.Position, error) {
	req := &pb.LoadRequest{Keys: make([]*pb.Key, len(ps))}
	for i, p := range ps {
		req.Keys[i] = keyToPB(group, p)
	}
	resp, err := c.pb.Load(ctx, req)
	if err != nil {
		return nil, c.fromStatus("load", err)
	}
	ents, found := resp.GetEntries(), resp.GetFound()
	if len(ents) != len(ps) || len(found) != len(ps) {
		return nil, fmt.Errorf("offsetstore plugin: load: %d results for %d keys", len(ents), len(ps))
	}
	out := make([]message.Position, len(ps))
	for i, e := range ents {
		out[i] = offsets.NotStored(ps[i])
		if found[i] {
			out[i].Offset, out[i].MsgID = e.GetOffset(), e.GetMsgId()
		}
	}
	return out, nil
}

// Close does nothing: the supervisor owns the process.
func (c *grpcClient) Close() error { return nil }

// remoteError is an error that came back from the plugin: its text is the
// plugin's, and errors.Is finds the sentinel it carried.
type remoteError struct {
	op       string
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return "offsetstore plugin: " + e.op + ": " + e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// fromStatus maps a gRPC error back (statusCodes): sentinels by ErrorInfo
// reason, a plugin that is gone (or unreachable) to plugins.ErrUnavailable.
func (c *grpcClient) fromStatus(op string, err error) error {
	if err == nil {
		return nil
	}
	if c.done != nil && c.done.Err() != nil {
		return fmt.Errorf("offsetstore plugin: %s: %w (process exited)", op, plugins.ErrUnavailable)
	}
	st, sentinel := statusCodes.FromStatus(err)
	switch {
	case st == nil:
		return fmt.Errorf("offsetstore plugin: %s: %w", op, err)
	case sentinel != nil:
		return &remoteError{op: op, msg: st.Message(), sentinel: sentinel}
	}
	return &remoteError{op: op, msg: st.Code().String() + ": " + st.Message()}
}
