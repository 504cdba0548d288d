package txn

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaq-go/metaq/plugins"
	pb "github.com/metaq-go/metaq/txn/proto"
)

// errorDomain is the ErrorInfo domain that marks our sentinels on the wire.
const errorDomain = "metaq.txn"

// sentinels maps each sentinel to its gRPC code and ErrorInfo reason; the
// client maps the reason back, so no error text is ever matched.
var sentinels = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{ErrClosed, codes.FailedPrecondition, "CLOSED"},
	{ErrNotInitialized, codes.FailedPrecondition, "NOT_INITIALIZED"},
	{ErrBadConfig, codes.InvalidArgument, "BAD_CONFIG"},
	{ErrInvalid, codes.InvalidArgument, "INVALID"},
	{plugins.ErrUnavailable, codes.Unavailable, "UNAVAILABLE"},
}

// grpcServer serves a Coordinator over gRPC (the plugin side).
type grpcServer struct {
	pb.UnimplementedCoordinatorServiceServer
	impl Coordinator
}

func (s *grpcServer) Init(ctx context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	if err := s.impl.Init(ctx, &InitRequest{Config: req.GetConfig()}); err != nil {
		return nil, toStatus(err)
	}
	return &pb.InitResponse{}, nil
}

func (s *grpcServer) Begin(ctx context.Context, req *pb.BeginRequest) (*pb.BeginResponse, error) {
	resp, err := s.impl.Begin(ctx, &BeginRequest{Owner: req.GetOwner()})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.BeginResponse{Xid: xidToPB(resp.XID)}, nil
}

func (s *grpcServer) Commit(ctx context.Context, req *pb.CommitRequest) (*pb.CommitResponse, error) {
	if req.GetDecision() == nil {
		return nil, toStatus(errors.Join(ErrInvalid, errors.New("commit without a decision")))
	}
	if err := s.impl.Commit(ctx, &CommitRequest{Decision: decisionFromPB(req.GetDecision())}); err != nil {
		return nil, toStatus(err)
	}
	return &pb.CommitResponse{}, nil
}

func (s *grpcServer) Forget(ctx context.Context, req *pb.ForgetRequest) (*pb.ForgetResponse, error) {
	xs := make([]XID, len(req.GetXids()))
	for i, x := range req.GetXids() {
		xs[i] = xidFromPB(x)
	}
	if err := s.impl.Forget(ctx, &ForgetRequest{XIDs: xs}); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ForgetResponse{}, nil
}

func (s *grpcServer) Recover(ctx context.Context, req *pb.RecoverRequest) (*pb.RecoverResponse, error) {
	resp, err := s.impl.Recover(ctx, &RecoverRequest{Owners: req.GetOwners()})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.RecoverResponse{Decisions: make([]*pb.Decision, len(resp.Decisions))}
	for i := range resp.Decisions {
		out.Decisions[i] = decisionToPB(&resp.Decisions[i])
	}
	return out, nil
}

// toStatus turns an error from the coordinator into a gRPC status: a
// sentinel keeps its identity through an ErrorInfo reason; context errors
// become Canceled or DeadlineExceeded; anything else is Internal.
func toStatus(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			st := status.New(s.code, err.Error())
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: errorDomain, Reason: s.reason}); derr == nil {
				st = d
			}
			return st.Err()
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func xidToPB(x XID) *pb.XID {
	return &pb.XID{FormatId: x.FormatID, Gtrid: x.Gtrid, Bqual: x.Bqual}
}

func xidFromPB(x *pb.XID) XID {
	out := XID{FormatID: x.GetFormatId(), Gtrid: x.GetGtrid(), Bqual: x.GetBqual()}
	if len(out.Bqual) == 0 {
		out.Bqual = nil
	}
	if len(out.Gtrid) == 0 {
		out.Gtrid = nil
	}
	return out
}

func decisionToPB(d *Decision) *pb.Decision {
	out := &pb.Decision{Xid: xidToPB(d.XID), Owner: d.Owner, Branches: make([]*pb.Branch, len(d.Branches))}
	if !d.LoggedAt.IsZero() {
		out.LoggedAtUnixNano = d.LoggedAt.UnixNano()
	}
	for i, b := range d.Branches {
		out.Branches[i] = &pb.Branch{Resource: b.Resource, Bqual: b.Bqual}
	}
	return out
}

func decisionFromPB(d *pb.Decision) Decision {
	out := Decision{Owner: d.GetOwner()}
	if d.GetXid() != nil {
		out.XID = xidFromPB(d.GetXid())
	}
	if n := d.GetLoggedAtUnixNano(); n != 0 {
		out.LoggedAt = time.Unix(0, n)
	}
	for _, b := range d.GetBranches() {
		br := Branch{Resource: b.GetResource(), Bqual: b.GetBqual()}
		if len(br.Bqual) == 0 {
			br.Bqual = nil
		}
		out.Branches = append(out.Branches, br)
	}
	return out
}
