package filters_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/plugins/host"
)

// benchRecords is a batch of n records, half of them with attribute "red".
func benchRecords(n int) []filters.Record {
	recs := make([]filters.Record, n)
	for i := range recs {
		attr := "blue"
		if i%2 == 0 {
			attr = "red"
		}
		recs[i] = filters.Record{Offset: int64(i) * 120, MsgID: int64(1<<40 + i), Flag: 1,
			Attribute: attr, HasAttribute: true, Size: 100}
	}
	return recs
}

// BenchmarkFilter measures one Accept call through the broker-facing
// Instance (middleware included) for the builtin attribute filter in
// process and the same filter served by a plugin process, per batch size.
func BenchmarkFilter(b *testing.B) {
	ctx := context.Background()
	var p *host.Plugin // one plugin process for every remote sub-benchmark
	parent := b
	for _, kind := range []string{"builtin", "remote"} {
		for _, n := range []int{1, 16, 256} {
			b.Run(kind+"/batch="+strconv.Itoa(n), func(b *testing.B) {
				opts := filters.OpenOptions{Name: "attribute", Topic: "t", Group: "g", Builtins: builtins,
					Config: map[string]string{"equals": "red"}}
				if kind == "remote" {
					if p == nil {
						_, p = launchHelper(parent, "attr")
					}
					opts.Launched, opts.Name = p, "attr-plugin"
				}
				in, err := filters.Open(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer in.Close()
				recs := benchRecords(n)
				b.ReportAllocs()
				b.SetBytes(int64(n))
				b.ResetTimer()
				for b.Loop() {
					keep, err := in.Accept(ctx, 0, recs)
					if err != nil || len(keep) != n {
						b.Fatalf("keep %d, err %v", len(keep), err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
			})
		}
	}
}
