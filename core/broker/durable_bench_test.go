package broker

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// BenchmarkBrokerDurable is issue 8's durable produce in one process (so a
// CPU profile covers the client and the broker, as they share the cores in
// `metaq bench durable`): 1 KiB group-commit puts from 4 connections with
// 64 in flight each, round robin over the partitions of one topic.
func BenchmarkBrokerDurable(b *testing.B) {
	for _, parts := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			br := startBrokerWith(b, func(c *conf.Config) {
				c.UnflushThreshold = 0
				c.NumPartitions = parts
			})
			const conns, window, size = 4, 64, 1024
			data := bytes.Repeat([]byte("x"), size)
			frames := make([][]byte, parts)
			for p := range frames {
				frames[p] = protocol.AppendPut(nil, "t", int32(p), 0, int64(message.Checksum(data)), 1, data)
			}
			b.SetBytes(size)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i := range conns {
				c := dialRaw(b, br.Addr())
				count := b.N / conns
				if i < b.N%conns {
					count++
				}
				sem := make(chan struct{}, window)
				wg.Go(func() {
					var req protocol.Request
					for range count {
						if err := c.dec.Decode(&req); err != nil {
							b.Error(err)
							return
						}
						if req.Code != protocol.StatusOK {
							b.Errorf("put: %d %s", req.Code, req.Body)
							return
						}
						<-sem
					}
				})
				wg.Go(func() {
					for k := range count {
						sem <- struct{}{}
						c.bw.Write(frames[(k*conns+i)%parts])
						if len(sem) == cap(sem) || k == count-1 {
							c.bw.Flush()
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rec/s")
		})
	}
}
