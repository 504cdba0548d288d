package txn

import (
	"context"
	"errors"
	"time"

	pb "github.com/metaq-go/metaq/txn/proto"
)

// grpcServer serves a Coordinator over gRPC (the plugin side).
type grpcServer struct {
	pb.UnimplementedCoordinatorServiceServer
	impl Coordinator
}

func (s *grpcServer) Init(ctx context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	if err := s.impl.Init(ctx, &InitRequest{Config: req.GetConfig()}); err != nil {
		return nil, statusCodes.ToStatus(err)
	}
	return &pb.InitResponse{}, nil
}

func (s *grpcServer) Begin(ctx context.Context, req *pb.BeginRequest) (*pb.BeginResponse, error) {
	resp, err := s.impl.Begin(ctx, &BeginRequest{Owner: req.GetOwner()})
	if err != nil {
		return nil, statusCodes.ToStatus(err)
	}
	return &pb.BeginResponse{Xid: xidToPB(resp.XID)}, nil
}

func (s *grpcServer) Commit(ctx context.Context, req *pb.CommitRequest) (*pb.CommitResponse, error) {
	if req.GetDecision() == nil {
		return nil, statusCodes.ToStatus(errors.Join(ErrInvalid, errors.New("commit without a decision")))
	}
	if err := s.impl.Commit(ctx, &CommitRequest{Decision: decisionFromPB(req.GetDecision())}); err != nil {
		return nil, statusCodes.ToStatus(err)
	}
	return &pb.CommitResponse{}, nil
}

func (s *grpcServer) Forget(ctx context.Context, req *pb.ForgetRequest) (*pb.ForgetResponse, error) {
	xs := make([]XID, len(req.GetXids()))
	for i, x := range req.GetXids() {
		xs[i] = xidFromPB(x)
	}
	if err := s.impl.Forget(ctx, &ForgetRequest{XIDs: xs}); err != nil {
		return nil, statusCodes.ToStatus(err)
	}
	return &pb.ForgetResponse{}, nil
}

func (s *grpcServer) Recover(ctx context.Context, req *pb.RecoverRequest) (*pb.RecoverResponse, error) {
	resp, err := s.impl.Recover(ctx, &RecoverRequest{Owners: req.GetOwners()})
	if err != nil {
		return nil, statusCodes.ToStatus(err)
	}
	out := &pb.RecoverResponse{Decisions: make([]*pb.Decision, len(resp.Decisions))}
	for i := range resp.Decisions {
		out.Decisions[i] = decisionToPB(&resp.Decisions[i])
	}
	return out, nil
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
