package store

import (
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/stretchr/testify/require"
)

func TestIDWorkerLayoutAndOrder(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(message.IDEpoch + 5000)
	w := NewIDWorker(7, func() time.Time { return now })
	id := w.Next(1)
	ms, b, seq := message.IDParts(id)
	require.Equal(t, message.IDEpoch+5000, ms)
	require.Equal(t, 7, b)
	require.Equal(t, 0, seq)
	require.Equal(t, id+1, w.Next(1))

	// A batch gets consecutive ids; one that does not fit moves to the next ms.
	first := w.Next(4000)
	require.Equal(t, id+2, first)
	next := w.Next(100)
	ms2, _, seq2 := message.IDParts(next)
	require.Equal(t, message.IDEpoch+5001, ms2)
	require.Equal(t, 0, seq2)
	require.Greater(t, next, first)
}

func TestIDWorkerClockBackwardsAndRestart(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(message.IDEpoch + 10_000)
	clock := func() time.Time { return now }
	w := NewIDWorker(1, clock)
	last := w.Next(1)
	now = now.Add(-5 * time.Second) // the clock steps back
	for i := 0; i < 10000; i++ {
		id := w.Next(1)
		require.Greater(t, id, last)
		last = id
	}
	// A restarted broker whose clock is behind the stored ids continues above them.
	w2 := NewIDWorker(1, clock)
	w2.Observe(last)
	require.Greater(t, w2.Next(1), last)
}

func TestIDWorkerConcurrentUnique(t *testing.T) {
	t.Parallel()
	w := NewIDWorker(3, nil)
	var mu sync.Mutex
	seen := make(map[int64]bool)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]int64, 0, 5000)
			for i := 0; i < 5000; i++ {
				local = append(local, w.Next(1+i%3))
			}
			mu.Lock()
			for _, id := range local {
				require.False(t, seen[id])
				seen[id] = true
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
}
