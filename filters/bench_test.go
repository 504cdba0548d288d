package filters_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/message"
)

// withProps gives every record a properties block: a 16-byte key, a create
// time, a tag and 3 headers (issue 26's benchmark message).
func withProps(recs []filters.Record) []filters.Record {
	for i := range recs {
		m := &message.Message{Key: []byte("0123456789abcdef"), Timestamp: time.UnixMilli(1700000000000 + int64(i)), Tags: []string{"TagA"}}
		m.Headers.Add("region", "eu")
		m.Headers.Add("trace", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		m.Headers.AddInt64("n", int64(i))
		recs[i].Properties = m.AppendProperties(nil)[4:]
		recs[i].Flag |= message.FlagHasProperties
	}
	return recs
}

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
// "remote-unasked" is "remote" with records that carry properties (which
// the plugin does not ask for), "remote-props" the same with a plugin that
// asks for them (the attribute filter wrapped in filters.WithProperties).
func BenchmarkFilter(b *testing.B) {
	ctx := context.Background()
	plugins := map[string]*host.Plugin{} // one plugin process per kind
	helpers := map[string]string{"remote": "attr", "remote-grpc-packed": "oldpacked", "remote-grpc": "old",
		"remote-unasked": "attr", "remote-props": "attrprops"}
	parent := b
	for _, kind := range []string{"builtin", "remote", "remote-grpc-packed", "remote-grpc", "remote-unasked", "remote-props"} {
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
				if kind == "remote-unasked" || kind == "remote-props" {
					recs = withProps(recs)
				}
				if kind == "remote" || kind == "remote-unasked" || kind == "remote-props" {
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
