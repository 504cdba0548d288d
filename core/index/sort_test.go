package index

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSortEntries: sortEntries gives the comparison sort's order, for
// entries in rel order (the radix sort) and not (the comparison sort), of
// every size around the threshold, with hashes that repeat and hashes
// that share bytes.
func TestSortEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hashes := map[string]func() uint32{
		"random":       func() uint32 { return rng.Uint32() },
		"few":          func() uint32 { return uint32(rng.IntN(5)) },
		"high bytes":   func() uint32 { return uint32(rng.IntN(256)) << 24 },
		"shared mid":   func() uint32 { return 0x00abcd00 | uint32(rng.IntN(256)) | uint32(rng.IntN(256))<<24 },
		"all the same": func() uint32 { return 7 },
	}
	for name, h := range hashes {
		for _, n := range []int{0, 1, 2, radixMin - 1, radixMin, radixMin + 1, 1000, 5000} {
			for _, inOrder := range []bool{true, false} {
				ents := make([]entry, n)
				rel := uint32(0)
				for i := range ents {
					rel += uint32(rng.IntN(3)) // repeats: a record's id and key entries
					ents[i] = entry{hash: h(), rel: rel}
				}
				if !inOrder && n > 1 {
					rng.Shuffle(n, func(i, j int) { ents[i], ents[j] = ents[j], ents[i] })
				}
				want := slices.Clone(ents)
				slices.SortFunc(want, compareEntries)
				sortEntries(ents)
				require.Equal(t, want, ents, "%s, %d entries, in rel order %v", name, n, inOrder)
			}
		}
	}
}

func BenchmarkSortEntries(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := make([]entry, 200_000)
	for i := range base {
		base[i] = entry{hash: rng.Uint32(), rel: uint32(i / 2 * 1044)}
	}
	ents := make([]entry, len(base))
	for _, c := range []struct {
		name string
		sort func([]entry)
	}{{"radix", sortEntries}, {"comparison", func(e []entry) { slices.SortFunc(e, compareEntries) }}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				copy(ents, base)
				c.sort(ents)
			}
		})
	}
}
