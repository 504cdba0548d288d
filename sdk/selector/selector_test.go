package selector

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

func parts(n int) []message.Partition {
	ps := make([]message.Partition, n)
	for i := range ps {
		ps[i] = message.Partition{BrokerID: i / 3, Partition: int32(i % 3)}
	}
	return ps
}

func TestBuiltins(t *testing.T) {
	const np, n = 7, 7000
	ctx := context.Background()
	ps := parts(np)
	count := func(s Selector, key func(i int) []byte) []int {
		c := make([]int, np)
		for i := range n {
			p, err := s.Select(ctx, "t", ps, &message.Message{Key: key(i)})
			require.NoError(t, err)
			require.True(t, p >= 0 && p < np)
			c[p]++
		}
		return c
	}
	noKey := func(int) []byte { return nil }

	for _, c := range count(RoundRobin(), noKey) {
		require.Equal(t, n/np, c)
	}
	for _, c := range count(Random(), noKey) {
		require.InDelta(t, n/np, c, 250)
	}
	for _, c := range count(HashByKey(), func(i int) []byte { return []byte("key-" + strconv.Itoa(i)) }) {
		require.InDelta(t, n/np, c, 250)
	}
	for _, c := range count(HashByKey(), noKey) {
		require.Equal(t, n/np, c, "no key falls back to round robin")
	}
	require.Equal(t, n, count(Fixed(3), noKey)[3])

	// The same key always lands on the same partition, KeyIndex's.
	h := HashByKey()
	for range 10 {
		p, err := h.Select(ctx, "t", ps, &message.Message{Key: []byte("order-42")})
		require.NoError(t, err)
		require.Equal(t, KeyIndex([]byte("order-42"), np), p)
	}
}

func TestBuiltinErrors(t *testing.T) {
	ctx := context.Background()
	m := &message.Message{Key: []byte("k")}
	for _, s := range []Selector{RoundRobin(), Random(), HashByKey(), Fixed(0)} {
		_, err := s.Select(ctx, "t", nil, m)
		require.ErrorIs(t, err, ErrNoPartitions)
		done, cancel := context.WithCancel(ctx)
		cancel()
		_, err = s.Select(done, "t", parts(3), m)
		require.ErrorIs(t, err, context.Canceled)
	}
	_, err := Fixed(7).Select(ctx, "t", parts(7), m)
	require.ErrorIs(t, err, ErrBadChoice)
	_, err = Fixed(-1).Select(ctx, "t", parts(7), m)
	require.ErrorIs(t, err, ErrBadChoice)
	require.NoError(t, CheckChoice("t", parts(2), 1))
	require.ErrorIs(t, CheckChoice("t", parts(2), 2), ErrBadChoice)
}

func TestRoundRobinNonNegative(t *testing.T) {
	r := &roundRobin{}
	r.n.Store(^uint64(0) - 2) // about to wrap
	for range 10 {
		p, err := r.Select(context.Background(), "t", parts(5), nil)
		require.NoError(t, err)
		require.True(t, p >= 0 && p < 5)
	}
}

func TestFunc(t *testing.T) {
	var s Selector = Func(func(_ context.Context, _ string, ps []message.Partition, _ *message.Message) (int, error) {
		return len(ps) - 1, nil
	})
	p, err := s.Select(context.Background(), "t", parts(4), &message.Message{})
	require.NoError(t, err)
	require.Equal(t, 3, p)
}
