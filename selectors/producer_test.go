package selectors_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/selectors"
)

// funcSelector adapts a function.
type funcSelector func(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error)

func (f funcSelector) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	return f(ctx, req)
}

func (funcSelector) Close() error { return nil }

func TestForProducer(t *testing.T) {
	var got *selectors.SelectRequest
	choose := func(choices ...int) funcSelector {
		return func(_ context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
			c := *req
			c.Messages = append([]selectors.Meta(nil), req.Messages...)
			got = &c
			return &selectors.SelectResponse{Choices: choices}, nil
		}
	}
	ps := selectors.ForProducer(choose(2, 0))
	bs, ok := ps.(client.BatchSelector)
	require.True(t, ok, "ForProducer implements client.BatchSelector")
	msgs := []*message.Message{
		{Topic: "t", Key: []byte("k"), Body: []byte("12345")},
		{Topic: "t", Attribute: "a", HasAttribute: true},
	}
	out := make([]int, 2)
	require.NoError(t, bs.SelectBatch(context.Background(), "t", 3, msgs, out))
	require.Equal(t, []int{2, 0}, out)
	require.Equal(t, "t", got.Topic)
	require.Equal(t, []selectors.Partition{{Partition: 0}, {Partition: 1}, {Partition: 2}}, got.Partitions)
	require.Equal(t, []selectors.Meta{{Key: []byte("k"), Size: 5}, {Attribute: "a", HasAttribute: true, Size: 5}}, got.Messages)

	// Smaller topics reuse the cached list.
	require.NoError(t, selectors.ForProducer(choose(1)).(client.BatchSelector).SelectBatch(context.Background(), "t", 2, msgs[:1], out))
	require.Len(t, got.Partitions, 2)

	p, err := selectors.ForProducer(choose(1)).Select("t", 2, msgs[0])
	require.NoError(t, err)
	require.Equal(t, 1, p)

	for _, bad := range [][]int{{5}, {-1}, {}, {0, 0}} {
		_, err := selectors.ForProducer(choose(bad...)).Select("t", 2, msgs[0])
		require.ErrorIs(t, err, selectors.ErrBadChoice, "%v", bad)
	}
	_, err = ps.Select("t", 0, msgs[0])
	require.ErrorIs(t, err, client.ErrNoPartitions)
	require.ErrorIs(t, err, selectors.ErrNoPartitions)

	boom := errors.New("boom")
	_, err = selectors.ForProducer(funcSelector(func(context.Context, *selectors.SelectRequest) (*selectors.SelectResponse, error) {
		return nil, boom
	})).Select("t", 2, msgs[0])
	require.ErrorIs(t, err, boom)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sel, err := selectors.Open(context.Background(), selectors.OpenOptions{})
	require.NoError(t, err)
	err = selectors.ForProducer(sel).(client.BatchSelector).SelectBatch(ctx, "t", 2, msgs, out)
	require.ErrorIs(t, err, context.Canceled)
}
