package client

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// BenchmarkProducerProperties: 1 KiB durable (group commit) puts, 16 in
// flight on one connection, without properties and with a 16-byte key and
// 3 headers (issue 26's target: props/plain >= 0.95x). The two alternate,
// benchPropsRounds times each, on one broker. cpu-ns/op is the process's
// CPU (broker and producer) per put.
func BenchmarkProducerProperties(b *testing.B) {
	br := startBroker(b)
	for i := range 2 * benchPropsRounds {
		c := struct {
			name  string
			props bool
		}{"plain", false}
		if i%2 == 1 {
			c.name, c.props = "props", true
		}
		b.Run(c.name, func(b *testing.B) {
			p := newProducer(b, br.addr)
			mk := func() *message.Message {
				m := &message.Message{Topic: topic, Body: make([]byte, 1024)}
				if c.props {
					m.Key = []byte("order-0123456789")
					m.Timestamp = time.UnixMilli(1_765_000_000_000)
					m.Headers = message.Headers{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
						{Key: "content-type", Value: []byte("application/json")}, {Key: "retry", Value: []byte("0")}}
				}
				return m
			}
			b.SetBytes(1024)
			b.ReportAllocs()
			b.SetParallelism(16)
			cpu0 := cpuNanos()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				m := mk()
				for pb.Next() {
					if _, err := p.Send(context.Background(), m); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

const benchPropsRounds = 5

func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
