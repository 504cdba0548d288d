package offsetstore

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/metaq-go/metaq/offsetstore/proto"
	"github.com/metaq-go/metaq/plugins"
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
	{ErrClosed, codes.FailedPrecondition, "CLOSED"},
	{ErrNotInitialized, codes.FailedPrecondition, "NOT_INITIALIZED"},
	{ErrBadConfig, codes.InvalidArgument, "BAD_CONFIG"},
	{ErrInvalidEntry, codes.InvalidArgument, "INVALID_ENTRY"},
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

func (s *grpcServer) Commit(ctx context.Context, req *pb.CommitRequest) (*pb.CommitResponse, error) {
	entries := make([]Entry, len(req.GetEntries()))
	for i, e := range req.GetEntries() {
		entries[i] = Entry{Key: keyFromPB(e.GetKey()), Offset: e.GetOffset(), MsgID: e.GetMsgId()}
		if err := ValidateEntry(entries[i]); err != nil {
			return nil, toStatus(err)
		}
	}
	if err := s.impl.Commit(ctx, entries); err != nil {
		return nil, toStatus(err)
	}
	return &pb.CommitResponse{}, nil
}

func (s *grpcServer) Load(ctx context.Context, req *pb.LoadRequest) (*pb.LoadResponse, error) {
	keys := make([]Key, len(req.GetKeys()))
	for i, k := range req.GetKeys() {
		keys[i] = keyFromPB(k)
		if err := ValidateKey(keys[i]); err != nil {
			return nil, toStatus(err)
		}
	}
	res, err := s.impl.Load(ctx, keys)
	if err != nil {
		return nil, toStatus(err)
	}
	if len(res) != len(keys) {
		return nil, status.Errorf(codes.Internal, "offsetstore plugin: Load returned %d results for %d keys", len(res), len(keys))
	}
	out := &pb.LoadResponse{Entries: make([]*pb.Entry, len(res)), Found: make([]bool, len(res))}
	for i, r := range res {
		e := r.Entry
		e.Key = keys[i]
		if !r.Found {
			e.Offset, e.MsgID = -1, -1
		}
		out.Entries[i] = entryToPB(e)
		out.Found[i] = r.Found
	}
	return out, nil
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

func keyFromPB(k *pb.Key) Key {
	return Key{Group: k.GetGroup(), Topic: k.GetTopic(), BrokerID: int(k.GetBrokerId()), Partition: k.GetPartition()}
}

func keyToPB(k Key) *pb.Key {
	return &pb.Key{Group: k.Group, Topic: k.Topic, BrokerId: int64(k.BrokerID), Partition: k.Partition}
}

func entryToPB(e Entry) *pb.Entry {
	return &pb.Entry{Key: keyToPB(e.Key), Offset: e.Offset, MsgId: e.MsgID}
}
