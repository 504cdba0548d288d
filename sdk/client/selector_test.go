package client

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
)

func TestSelectors(t *testing.T) {
	const parts, n = 7, 7000
	count := func(s PartitionSelector, key func(i int) []byte) []int {
		c := make([]int, parts)
		for i := range n {
			p, err := s.Select("t", parts, &message.Message{Key: key(i)})
			require.NoError(t, err)
			require.True(t, p >= 0 && p < parts)
			c[p]++
		}
		return c
	}
	noKey := func(int) []byte { return nil }

	for _, c := range count(RoundRobin(), noKey) {
		require.Equal(t, n/parts, c)
	}
	for _, c := range count(Random(), noKey) {
		require.InDelta(t, n/parts, c, 250)
	}
	for _, c := range count(HashByKey(), func(i int) []byte { return []byte("key-" + strconv.Itoa(i)) }) {
		require.InDelta(t, n/parts, c, 250)
	}
	for _, c := range count(HashByKey(), noKey) {
		require.Equal(t, n/parts, c, "no key falls back to round robin")
	}
	c := count(Fixed(3), noKey)
	require.Equal(t, n, c[3])

	// The same key always lands on the same partition.
	h := HashByKey()
	p1, _ := h.Select("t", parts, &message.Message{Key: []byte("order-42")})
	for range 10 {
		p2, _ := h.Select("t", parts, &message.Message{Key: []byte("order-42")})
		require.Equal(t, p1, p2)
	}

	_, err := Fixed(7).Select("t", parts, &message.Message{})
	require.Error(t, err)
	_, err = RoundRobin().Select("t", 0, &message.Message{})
	require.ErrorIs(t, err, ErrNoPartitions)

	bs := RoundRobin().(BatchSelector)
	out := make([]int, 10)
	require.NoError(t, bs.SelectBatch(context.Background(), "t", 3, make([]*message.Message, 10), out))
	require.Equal(t, []int{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, out)
}

func TestRoundRobinNonNegative(t *testing.T) {
	r := &roundRobin{}
	r.n.Store(^uint64(0) - 2) // about to wrap
	for range 10 {
		p, err := r.Select("t", 5, nil)
		require.NoError(t, err)
		require.True(t, p >= 0 && p < 5)
	}
}
