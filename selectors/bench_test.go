package selectors_test

import (
	"context"
	"testing"

	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/selectortest"
)

// BenchmarkSelector compares the builtin hash selector in process with the
// same selector served by a plugin process (Open: middleware, gRPC over a
// Unix socket, AutoMTLS): one call per message.
func BenchmarkSelector(b *testing.B) {
	for _, kind := range []string{"builtin", "remote"} {
		b.Run(kind, func(b *testing.B) {
			var s selector.Selector = selector.HashByKey()
			if kind == "remote" {
				s = openHelper(b, "hash", nil)
			}
			ps, msgs := selectortest.Partitions(16), selectortest.Messages(64, 0)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m := msgs[i%len(msgs)]
				i++
				if _, err := s.Select(ctx, m.Topic, ps, m); err != nil {
					b.Fatal(err)
				}
			}
			if r, ok := s.(selectors.Selector); ok {
				if f := selectors.Fallbacks(r); f > 0 {
					b.Fatalf("%d fallbacks: the benchmark measured round robin", f)
				}
			}
		})
	}
}
