package filters_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// benchBatch is the number of records per get in BenchmarkBrokerGet.
const benchBatch = 256

// fillBroker produces n messages of 100-byte payloads, attributes red and
// blue alternating, and returns their offsets in order.
func fillBroker(b *testing.B, addr string, n int) []int64 {
	b.Helper()
	p, err := client.New(client.Brokers(addr), client.Batching(256, 1<<20, 2*time.Millisecond))
	require.NoError(b, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu      sync.Mutex
		offsets = make([]int64, 0, n)
		failed  atomic.Value
		wg      sync.WaitGroup
	)
	body := make([]byte, 100)
	for i := range n {
		attr := "blue"
		if i%2 == 0 {
			attr = "red"
		}
		wg.Add(1)
		p.Produce(ctx, &message.Message{Topic: "t", Body: body, Attribute: attr, HasAttribute: true}, func(r client.SendResult, err error) {
			defer wg.Done()
			if err != nil {
				failed.Store(err)
				return
			}
			mu.Lock()
			offsets = append(offsets, r.Offset)
			mu.Unlock()
		})
	}
	wg.Wait()
	require.NoError(b, p.Close(ctx))
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	return offsets
}

// BenchmarkBrokerGet measures get throughput at 256 records per get (half
// of them kept by the filter) for a group without a filter (sendfile), with
// the builtin attribute filter in process, and with the same filter in a
// plugin process. seq is one connection doing gets back to back; par is
// several connections at once.
func BenchmarkBrokerGet(b *testing.B) {
	br := startBroker(b, []conf.TopicFilter{
		attrFilter("builtin", "red"),
		{Group: "remote", Filter: "attr-plugin", Config: map[string]string{"equals": "red"}},
	}, helperPlugin(b, "attr-plugin", "attr"))
	offsets := fillBroker(b, br.Addr(), 64*benchBatch)
	// Gets cover exactly benchBatch whole records.
	var starts []int64
	var sizes []int
	for i := 0; i+benchBatch < len(offsets); i += benchBatch {
		starts = append(starts, offsets[i])
		sizes = append(sizes, int(offsets[i+benchBatch]-offsets[i]))
	}
	for _, group := range []string{"none", "builtin", "remote"} {
		for _, mode := range []string{"seq", "par"} {
			b.Run(fmt.Sprintf("%s/batch=%d/%s", group, benchBatch, mode), func(b *testing.B) {
				g := group
				if g == "none" {
					g = "plain"
				}
				check := func(tb testing.TB, r *protocol.Request) {
					switch g {
					case "plain":
						if r.Op != protocol.OpValue {
							tb.Fatalf("reply %s %d", r.Op, r.Code)
						}
					default:
						if r.Op != protocol.OpFValue {
							tb.Fatalf("reply %s %d %s", r.Op, r.Code, r.Body)
						}
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(sizes[0]))
				var gets atomic.Int64
				start := time.Now()
				if mode == "seq" {
					c := dial(b, br.Addr())
					i := 0
					for b.Loop() {
						check(b, c.get(b, g, starts[i], sizes[i]))
						i = (i + 1) % len(starts)
					}
					gets.Store(int64(b.N))
				} else {
					b.SetParallelism(4)
					var id atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						c := dial(b, br.Addr())
						i := int(id.Add(1)) * 7
						for pb.Next() {
							i = (i + 1) % len(starts)
							check(b, c.get(b, g, starts[i], sizes[i]))
							gets.Add(1)
						}
					})
				}
				el := time.Since(start).Seconds()
				b.ReportMetric(float64(gets.Load())/el, "gets/s")
				b.ReportMetric(float64(gets.Load())*benchBatch/el, "records/s")
			})
		}
	}
}
