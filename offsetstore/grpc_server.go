package offsetstore

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/metaq-go/metaq/offsetstore/proto"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// errorDomain is the ErrorInfo domain that marks our sentinels on the wire.
const errorDomain = "metaq.offsetstore"

// sentinels maps each sentinel to its gRPC code and ErrorInfo reason; the
// client maps the reason back, so no error text is ever matched.
var sentinels = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{offsets.ErrClosed, codes.FailedPrecondition, "CLOSED"},
	{ErrNotInitialized, codes.FailedPrecondition, "NOT_INITIALIZED"},
	{ErrBadConfig, codes.InvalidArgument, "BAD_CONFIG"},
	{offsets.ErrInvalid, codes.InvalidArgument, "INVALID_ENTRY"},
	{plugins.ErrUnavailable, codes.Unavailable, "UNAVAILABLE"},
}

// grpcServer serves a Store over gRPC (the plugin side).
type grpcServer struct {
	pb.UnimplementedOffsetStoreServiceServer
	impl Store
}

func (s *grpcServer) Init(ctx context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	if err := s.impl.Init(ctx, &InitRequest{Config: req.GetConfig()}); err != nil {
		return nil, toStatus(err)
	}
	return &pb.InitResponse{}, nil
}

// Commit hands the store each group's entries of the request, in order
// (the broker sends one group per request; the wire allows several).
func (s *grpcServer) Commit(ctx context.Context, req *pb.CommitRequest) (*pb.CommitResponse, error) {
	entries := req.GetEntries()
	groups, byGroup := splitGroups(len(entries), func(i int) (string, message.Position) {
		e := entries[i]
		return e.GetKey().GetGroup(), positionFromPB(e.GetKey(), e.GetOffset(), e.GetMsgId())
	})
	for _, g := range groups {
		if err := offsets.ValidateCommit(g, byGroup[g].ps); err != nil {
			return nil, toStatus(err)
		}
	}
	for _, g := range groups {
		if err := s.impl.Commit(ctx, g, byGroup[g].ps); err != nil {
			return nil, toStatus(err)
		}
	}
	return &pb.CommitResponse{}, nil
}

// Load asks the store once per group of the request's keys and answers
// in the keys' order.
func (s *grpcServer) Load(ctx context.Context, req *pb.LoadRequest) (*pb.LoadResponse, error) {
	keys := req.GetKeys()
	groups, byGroup := splitGroups(len(keys), func(i int) (string, message.Position) {
		return keys[i].GetGroup(), positionFromPB(keys[i], -1, -1)
	})
	for _, g := range groups {
		if err := offsets.ValidateLoad(g, byGroup[g].ps); err != nil {
			return nil, toStatus(err)
		}
	}
	out := &pb.LoadResponse{Entries: make([]*pb.Entry, len(keys)), Found: make([]bool, len(keys))}
	for _, g := range groups {
		part := byGroup[g]
		res, err := s.impl.Load(ctx, g, part.ps)
		if err != nil {
			return nil, toStatus(err)
		}
		if len(res) != len(part.ps) {
			return nil, status.Errorf(codes.Internal, "offsetstore plugin: Load returned %d positions for %d asked", len(res), len(part.ps))
		}
		for j, r := range res {
			i := part.idx[j]
			found := r.Offset >= 0
			p := part.ps[j] // the key as asked, whatever the store echoed
			p.Offset, p.MsgID = -1, -1
			if found {
				p.Offset, p.MsgID = r.Offset, r.MsgID
			}
			out.Entries[i] = entryToPB(g, p)
			out.Found[i] = found
		}
	}
	return out, nil
}

// groupPart is one group's positions of a request and their indexes in it.
type groupPart struct {
	ps  []message.Position
	idx []int
}

// splitGroups splits the n items of a request (at(i): group and position)
// by group, keeping their order; groups lists the groups in order of
// first appearance.
func splitGroups(n int, at func(i int) (string, message.Position)) (groups []string, byGroup map[string]*groupPart) {
	byGroup = make(map[string]*groupPart, 1)
	for i := range n {
		g, p := at(i)
		part := byGroup[g]
		if part == nil {
			part = &groupPart{}
			byGroup[g] = part
			groups = append(groups, g)
		}
		part.ps = append(part.ps, p)
		part.idx = append(part.idx, i)
	}
	return groups, byGroup
}

// toStatus turns an error from the store into a gRPC status: a sentinel
// keeps its identity through an ErrorInfo reason; context errors become
// Canceled or DeadlineExceeded; anything else is Internal.
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

func positionFromPB(k *pb.Key, offset, msgID int64) message.Position {
	return message.Position{Topic: k.GetTopic(),
		Partition: message.Partition{BrokerID: int(k.GetBrokerId()), Partition: k.GetPartition()},
		Offset:    offset, MsgID: msgID}
}

func keyToPB(group string, p message.Position) *pb.Key {
	return &pb.Key{Group: group, Topic: p.Topic, BrokerId: int64(p.Partition.BrokerID), Partition: p.Partition.Partition}
}

func entryToPB(group string, p message.Position) *pb.Entry {
	return &pb.Entry{Key: keyToPB(group, p), Offset: p.Offset, MsgId: p.MsgID}
}
