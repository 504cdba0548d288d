package offsetstore

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/metaq-go/metaq/offsetstore/proto"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// grpcServer serves a Store over gRPC (the plugin side).
type grpcServer struct {
	pb.UnimplementedOffsetStoreServiceServer
	impl Store
}

func (s *grpcServer) Init(ctx context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	if err := s.impl.Init(ctx, &InitRequest{Config: req.GetConfig()}); err != nil {
		return nil, statusCodes.ToStatus(err)
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
			return nil, statusCodes.ToStatus(err)
		}
	}
	for _, g := range groups {
		if err := s.impl.Commit(ctx, g, byGroup[g].ps); err != nil {
			return nil, statusCodes.ToStatus(err)
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
			return nil, statusCodes.ToStatus(err)
		}
	}
	out := &pb.LoadResponse{Entries: make([]*pb.Entry, len(keys)), Found: make([]bool, len(keys))}
	for _, g := range groups {
		part := byGroup[g]
		res, err := s.impl.Load(ctx, g, part.ps)
		if err != nil {
			return nil, statusCodes.ToStatus(err)
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
