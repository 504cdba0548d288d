// Package builtin holds the algorithms of the builtin selectors, on plain
// values, so that both package selectors (Open, the round-robin fallback)
// and the public builtin packages (roundrobin, random, hash, fixed) use one
// implementation without an import cycle.
package builtin

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/metaq-go/metaq/sdk/client"
)

// Check returns the error a builtin Select returns before choosing: ctx's
// error once it is done, or client.ErrNoPartitions (selectors.ErrNoPartitions)
// when there is nothing to choose from.
func Check(ctx context.Context, topic string, partitions int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if partitions <= 0 {
		return fmt.Errorf("select for topic %q: %w", topic, client.ErrNoPartitions)
	}
	return nil
}

// RoundRobin is a shared counter: consecutive choices cycle through the
// partitions, across calls and goroutines. The zero value is ready.
type RoundRobin struct{ n atomic.Uint64 }

// Choose fills out with the next len(out) round-robin choices among
// partitions (> 0) partitions.
func (r *RoundRobin) Choose(out []int, partitions int) {
	if len(out) == 0 {
		return
	}
	start := r.n.Add(uint64(len(out))) - uint64(len(out))
	n := uint64(partitions)
	c := start % n
	for i := range out {
		out[i] = int(c)
		if c++; c == n {
			c = 0
		}
	}
}

// Random fills out with uniformly random choices among partitions (> 0).
func Random(out []int, partitions int) {
	for i := range out {
		out[i] = rand.IntN(partitions)
	}
}

// Hash chooses client.KeyPartition (FNV-1a of the key modulo the partition
// count), so equal keys land on the same partition as with client.HashByKey;
// messages without a
// key are spread round robin. The zero value is ready.
type Hash struct{ rr RoundRobin }

// Choose fills out among partitions (> 0) partitions; key(i) is the key of
// message i.
func (h *Hash) Choose(out []int, partitions int, key func(i int) []byte) {
	for i := range out {
		k := key(i)
		if len(k) == 0 {
			h.rr.Choose(out[i:i+1], partitions)
			continue
		}
		out[i] = client.KeyPartition(k, partitions)
	}
}
