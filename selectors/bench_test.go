package selectors_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/hash"
	"github.com/metaq-go/metaq/selectors/selectortest"
)

// BenchmarkSelector compares the builtin hash selector in process with the
// same selector served by a plugin process (Open: middleware, gRPC over a
// Unix socket, AutoMTLS), per batch size. ns/msg is the per-message share.
func BenchmarkSelector(b *testing.B) {
	for _, kind := range []string{"builtin", "remote"} {
		b.Run(kind, func(b *testing.B) {
			var s selectors.Selector = hash.New()
			if kind == "remote" {
				s = openHelper(b, "hash", nil)
			}
			for _, n := range selectortest.Batches {
				b.Run("batch="+strconv.Itoa(n), func(b *testing.B) {
					req := &selectors.SelectRequest{Topic: "bench", Partitions: selectortest.Partitions(16), Messages: selectortest.Messages(n, 0)}
					ctx := context.Background()
					b.ReportAllocs()
					for b.Loop() {
						if _, err := s.Select(ctx, req); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
				})
			}
			if f := selectors.Fallbacks(s); f > 0 {
				b.Fatalf("%d fallbacks: the benchmark measured round robin", f)
			}
		})
	}
}
