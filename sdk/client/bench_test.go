package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

var benchSizes = []int{100, 1024}

func BenchmarkProducerSend(b *testing.B) {
	br := startBroker(b)
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			p := newProducer(b, br.addr)
			m := &message.Message{Topic: topic, Body: make([]byte, size)}
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := p.Send(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProducerSendParallel: many goroutines share one pipelined connection.
func BenchmarkProducerSendParallel(b *testing.B) {
	br := startBroker(b)
	p := newProducer(b, br.addr)
	b.SetBytes(100)
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		m := &message.Message{Topic: topic, Body: make([]byte, 100)}
		for pb.Next() {
			if _, err := p.Send(context.Background(), m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchAsync(b *testing.B, size int, opts ...prodOption) {
	br := startBroker(b)
	p, err := newBrokerProducer(br.addr, append(opts, quiet)...)
	if err != nil {
		b.Fatal(err)
	}
	// Each message is its own Message (benchSend): the producer sets its ID.
	benchSend(b, size, p.SendAsync)
	if err := p.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkProducerAsync(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) { benchAsync(b, size) })
	}
}

func BenchmarkProducerBatch(b *testing.B) {
	for _, size := range benchSizes {
		for _, batch := range []int{16, 256} {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				benchAsync(b, size, withBatching(batch, 1<<20, time.Millisecond))
			})
		}
	}
}

func BenchmarkConsume(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			br := startBroker(b)
			p := newProducer(b, br.addr, withBatching(1024, 1<<20, time.Millisecond))
			ctx := context.Background()
			var wg sync.WaitGroup
			for range b.N {
				wg.Add(1)
				p.SendAsync(ctx, &message.Message{Topic: topic, Body: make([]byte, size)}, func(_ SendResult, err error) {
					if err != nil {
						b.Error(err)
					}
					wg.Done()
				})
			}
			wg.Wait()
			c := newConsumer(b, br.addr)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			for _, err := range c.Messages(ctx) {
				if err != nil {
					b.Fatal(err)
				}
				if n++; n == b.N {
					break
				}
			}
		})
	}
}
