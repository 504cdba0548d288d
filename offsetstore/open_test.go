package offsetstore

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/metaq-go/metaq/offsetstore/proto"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// fakeClient plays host.Plugin: a store per generation, or down.
type fakeClient struct {
	s    *countingStore
	gen  uint64
	down bool
}

func (f *fakeClient) Client() (any, uint64, error) {
	if f.down {
		return nil, f.gen, plugins.ErrUnavailable
	}
	return f.s, f.gen, nil
}

type countingStore struct {
	inits   int
	config  map[string]string
	commits int
}

func (c *countingStore) Init(_ context.Context, r *InitRequest) error {
	c.inits++
	c.config = r.Config
	return nil
}
func (c *countingStore) Commit(context.Context, string, []message.Position) error {
	c.commits++
	return nil
}
func (c *countingStore) Load(_ context.Context, _ string, ps []message.Position) ([]message.Position, error) {
	out := make([]message.Position, len(ps))
	for i := range out {
		out[i].Offset, out[i].MsgID = -7, 3 // not found, badly answered
	}
	return out, nil
}
func (c *countingStore) Close() error { return nil }

func TestRemoteReinitAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &fakeClient{s: &countingStore{}, gen: 1}
	r := newRemote(f)
	m := wrap(r, nil, 0)
	cfg := map[string]string{"path": "/x"}
	require.NoError(t, m.Init(ctx, &InitRequest{Config: cfg}))
	e := []message.Position{{Topic: "t", Offset: 1}}
	require.NoError(t, m.Commit(ctx, "g", e))
	require.Equal(t, 1, f.s.inits)

	f.down = true
	require.ErrorIs(t, m.Commit(ctx, "g", e), plugins.ErrUnavailable)

	// Restarted: a fresh process (generation 2) gets Init again, then the call.
	f.down, f.gen, f.s = false, 2, &countingStore{}
	require.NoError(t, m.Commit(ctx, "g", e))
	require.Equal(t, 1, f.s.inits)
	require.Equal(t, cfg, f.s.config)
	require.Equal(t, 1, f.s.commits)
	res, err := m.Load(ctx, "g", e)
	require.NoError(t, err)
	require.Equal(t, offsets.NotStored(e[0]), res[0], "the requested partition, not found normalised to -1")
	require.Equal(t, 1, f.s.inits)
}

func TestMiddlewareValidatesAndCloses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := wrap(&countingStore{}, nil, 0)
	for _, c := range []struct {
		g string
		p message.Position
	}{
		{"", message.Position{Topic: "t"}},
		{"g", message.Position{}},
		{"g", message.Position{Topic: "t", Partition: message.Partition{Partition: -1}}},
		{"g", message.Position{Topic: "t", Partition: message.Partition{BrokerID: -1}}},
		{"g", message.Position{Topic: "t", Offset: -1}},
	} {
		require.ErrorIs(t, m.Commit(ctx, c.g, []message.Position{c.p}), offsets.ErrInvalid, "%+v", c)
	}
	require.NoError(t, m.Close())
	require.NoError(t, m.Close())
	require.ErrorIs(t, m.Commit(ctx, "g", nil), offsets.ErrClosed)
	_, err := m.Load(ctx, "g", nil)
	require.True(t, errors.Is(err, offsets.ErrClosed))
}

func TestOpenUnknown(t *testing.T) {
	t.Parallel()
	_, err := Open(context.Background(), OpenOptions{Name: "nope"})
	require.ErrorIs(t, err, ErrUnknownStore)
}

// groupsStore records the groups of its calls; Load answers offset
// 10*partition, nothing stored for odd partitions.
type groupsStore struct {
	countingStore
	commits map[string][]message.Position
	loads   []string
}

func (s *groupsStore) Commit(_ context.Context, g string, ps []message.Position) error {
	s.commits[g] = append(s.commits[g], ps...)
	return nil
}

func (s *groupsStore) Load(_ context.Context, g string, ps []message.Position) ([]message.Position, error) {
	s.loads = append(s.loads, g)
	out := make([]message.Position, len(ps))
	for i, p := range ps {
		out[i] = offsets.NotStored(p)
		if p.Partition.Partition%2 == 0 {
			out[i].Offset, out[i].MsgID = int64(p.Partition.Partition)*10, 1
		}
	}
	return out, nil
}

// TestServerSplitsGroups: the wire carries a group per key; the plugin
// side hands the store each group's positions in one call, in order, and
// answers in the keys' order. A bad group fails the whole request.
func TestServerSplitsGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &groupsStore{commits: map[string][]message.Position{}}
	srv := &grpcServer{impl: st}
	pos := func(p int32, off int64) message.Position {
		return message.Position{Topic: "t", Partition: message.Partition{BrokerID: 1, Partition: p}, Offset: off, MsgID: 9}
	}
	_, err := srv.Commit(ctx, &pb.CommitRequest{Entries: []*pb.Entry{
		entryToPB("a", pos(0, 1)), entryToPB("b", pos(1, 2)), entryToPB("a", pos(2, 3)),
	}})
	require.NoError(t, err)
	require.Equal(t, map[string][]message.Position{"a": {pos(0, 1), pos(2, 3)}, "b": {pos(1, 2)}}, st.commits)

	resp, err := srv.Load(ctx, &pb.LoadRequest{Keys: []*pb.Key{
		keyToPB("b", pos(1, 0)), keyToPB("a", pos(2, 0)), keyToPB("b", pos(4, 0)),
	}})
	require.NoError(t, err)
	require.Equal(t, []string{"b", "a"}, st.loads, "one call per group")
	require.Equal(t, []bool{false, true, true}, resp.GetFound())
	require.Equal(t, []int64{-1, 20, 40}, []int64{resp.Entries[0].GetOffset(), resp.Entries[1].GetOffset(), resp.Entries[2].GetOffset()})
	require.Equal(t, "b", resp.Entries[2].GetKey().GetGroup())

	_, err = srv.Commit(ctx, &pb.CommitRequest{Entries: []*pb.Entry{entryToPB("c", pos(0, 1)), entryToPB("bad group", pos(0, 1))}})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.NotContains(t, st.commits, "c", "nothing of a bad request is stored")
}
