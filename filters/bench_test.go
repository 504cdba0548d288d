package filters_test

import (
	"context"
	"strconv"
	"testing"
	"time"

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
// process and the same filter served by a plugin process, per batch size:
// "remote" over the batch channel (the default), "remote-grpc-packed" over
// gRPC with packed batches (a plugin without the channel) and "remote-grpc"
// over gRPC with one protobuf column per field (a plugin from before both).
func BenchmarkFilter(b *testing.B) {
	ctx := context.Background()
	plugins := map[string]*host.Plugin{} // one plugin process per kind
	helpers := map[string]string{"remote": "attr", "remote-grpc-packed": "oldpacked", "remote-grpc": "old"}
	parent := b
	for _, kind := range []string{"builtin", "remote", "remote-grpc-packed", "remote-grpc"} {
		for _, n := range []int{1, 16, 256} {
			b.Run(kind+"/batch="+strconv.Itoa(n), func(b *testing.B) {
				opts := filters.OpenOptions{Name: "attribute", Topic: "t", Group: "g", Builtins: builtins,
					Config: map[string]string{"equals": "red"}}
				if kind != "builtin" {
					p := plugins[kind]
					if p == nil {
						_, p = launchHelper(parent, helpers[kind])
						plugins[kind] = p
					}
					opts.Launched, opts.Name = p, "attr-plugin"
				}
				in, err := filters.Open(ctx, opts)
				if err != nil {
					b.Fatal(err)
				}
				defer in.Close()
				recs := benchRecords(n)
				if kind == "remote" {
					waitChannel(b, in, recs)
				}
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

// waitChannel makes calls until the batch channel to the plugin is open
// (the first calls go over gRPC while it opens), for at most 5 s.
func waitChannel(b *testing.B, in *filters.Instance, recs []filters.Record) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if filters.ChannelOpen(in) {
			return
		}
		in.Accept(context.Background(), 0, recs)
		time.Sleep(time.Millisecond)
	}
	b.Fatal("no batch channel after 5 s")
}
