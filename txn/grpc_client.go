package txn

import (
	"context"
	"fmt"

	"github.com/metaq-go/metaq/plugins"
	pb "github.com/metaq-go/metaq/txn/proto"
)

// grpcClient is the host side of one plugin process: a Coordinator over
// gRPC. It is what host.Plugin.Client returns for a coordinator plugin;
// the remote coordinator in open.go picks the current one at every call.
type grpcClient struct {
	pb pb.CoordinatorServiceClient
	// done is cancelled by go-plugin when the plugin process is gone.
	done context.Context
}

var _ Coordinator = (*grpcClient)(nil)

func (c *grpcClient) Init(ctx context.Context, req *InitRequest) error {
	_, err := c.pb.Init(ctx, &pb.InitRequest{Config: req.Config})
	return c.fromStatus("init", err)
}

func (c *grpcClient) Begin(ctx context.Context, req *BeginRequest) (*BeginResponse, error) {
	resp, err := c.pb.Begin(ctx, &pb.BeginRequest{Owner: req.Owner})
	if err != nil {
		return nil, c.fromStatus("begin", err)
	}
	if resp.GetXid() == nil {
		return nil, fmt.Errorf("coordinator plugin: begin: no xid in the answer")
	}
	return &BeginResponse{XID: xidFromPB(resp.GetXid())}, nil
}

func (c *grpcClient) Commit(ctx context.Context, req *CommitRequest) error {
	_, err := c.pb.Commit(ctx, &pb.CommitRequest{Decision: decisionToPB(&req.Decision)})
	return c.fromStatus("commit", err)
}

func (c *grpcClient) Forget(ctx context.Context, req *ForgetRequest) error {
	out := &pb.ForgetRequest{Xids: make([]*pb.XID, len(req.XIDs))}
	for i, x := range req.XIDs {
		out.Xids[i] = xidToPB(x)
	}
	_, err := c.pb.Forget(ctx, out)
	return c.fromStatus("forget", err)
}

func (c *grpcClient) Recover(ctx context.Context, req *RecoverRequest) (*RecoverResponse, error) {
	resp, err := c.pb.Recover(ctx, &pb.RecoverRequest{Owners: req.Owners})
	if err != nil {
		return nil, c.fromStatus("recover", err)
	}
	out := &RecoverResponse{Decisions: make([]Decision, len(resp.GetDecisions()))}
	for i, d := range resp.GetDecisions() {
		out.Decisions[i] = decisionFromPB(d)
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

func (e *remoteError) Error() string { return "coordinator plugin: " + e.op + ": " + e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// fromStatus maps a gRPC error back (statusCodes): sentinels by ErrorInfo
// reason, a plugin that is gone (or unreachable) to plugins.ErrUnavailable.
func (c *grpcClient) fromStatus(op string, err error) error {
	if err == nil {
		return nil
	}
	if c.done != nil && c.done.Err() != nil {
		return fmt.Errorf("coordinator plugin: %s: %w (process exited)", op, plugins.ErrUnavailable)
	}
	st, sentinel := statusCodes.FromStatus(err)
	switch {
	case st == nil:
		return fmt.Errorf("coordinator plugin: %s: %w", op, err)
	case sentinel != nil:
		return &remoteError{op: op, msg: st.Message(), sentinel: sentinel}
	}
	return &remoteError{op: op, msg: st.Code().String() + ": " + st.Message()}
}
