package offsetstore

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/plugins"
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
func (c *countingStore) Commit(context.Context, []Entry) error { c.commits++; return nil }
func (c *countingStore) Load(_ context.Context, ks []Key) ([]Result, error) {
	return make([]Result, len(ks)), nil
}
func (c *countingStore) Close() error { return nil }

func TestRemoteReinitAfterRestart(t *testing.T) {
	ctx := context.Background()
	f := &fakeClient{s: &countingStore{}, gen: 1}
	r := &remote{p: f}
	m := wrap(r, nil, 0)
	cfg := map[string]string{"path": "/x"}
	require.NoError(t, m.Init(ctx, &InitRequest{Config: cfg}))
	e := []Entry{{Key: Key{Group: "g", Topic: "t"}, Offset: 1}}
	require.NoError(t, m.Commit(ctx, e))
	require.Equal(t, 1, f.s.inits)

	f.down = true
	require.ErrorIs(t, m.Commit(ctx, e), plugins.ErrUnavailable)

	// Restarted: a fresh process (generation 2) gets Init again, then the call.
	f.down, f.gen, f.s = false, 2, &countingStore{}
	require.NoError(t, m.Commit(ctx, e))
	require.Equal(t, 1, f.s.inits)
	require.Equal(t, cfg, f.s.config)
	require.Equal(t, 1, f.s.commits)
	res, err := m.Load(ctx, []Key{e[0].Key})
	require.NoError(t, err)
	require.Equal(t, e[0].Key, res[0].Key)
	require.Equal(t, int64(-1), res[0].Offset, "not found is normalised to -1")
	require.Equal(t, 1, f.s.inits)
}

func TestMiddlewareValidatesAndCloses(t *testing.T) {
	ctx := context.Background()
	m := wrap(&countingStore{}, nil, 0)
	for _, e := range []Entry{
		{Key: Key{Topic: "t"}},
		{Key: Key{Group: "g"}},
		{Key: Key{Group: "g", Topic: "t", Partition: -1}},
		{Key: Key{Group: "g", Topic: "t", BrokerID: -1}},
		{Key: Key{Group: "g", Topic: "t"}, Offset: -1},
	} {
		require.ErrorIs(t, m.Commit(ctx, []Entry{e}), ErrInvalidEntry, "%+v", e)
	}
	require.NoError(t, m.Close())
	require.NoError(t, m.Close())
	require.ErrorIs(t, m.Commit(ctx, nil), ErrClosed)
	_, err := m.Load(ctx, nil)
	require.True(t, errors.Is(err, ErrClosed))
}

func TestOpenUnknown(t *testing.T) {
	_, err := Open(context.Background(), OpenOptions{Name: "nope"})
	require.ErrorIs(t, err, ErrUnknownStore)
}
