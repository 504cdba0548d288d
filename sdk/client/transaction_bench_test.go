package client

import (
	"context"
	"testing"

	"github.com/metaq-go/metaq/sdk/message"
)

// BenchmarkTransaction compares, in one run against one group-commit
// broker, a local transaction of 10 × 1 KiB messages (BEGIN and the puts
// pipelined, then COMMIT) with 10 plain durable puts of the same
// messages (ProduceSync: all in flight, each acknowledged after fsync).
// One op is 10 messages either way.
func BenchmarkTransaction(b *testing.B) {
	const n, size = 10, 1 << 10
	br := startBroker(b)
	cl := newClient(b, Brokers(br.addr))
	ctx := context.Background()
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = &message.Message{Topic: topic, Body: make([]byte, size)}
	}
	if _, err := cl.ProduceSync(ctx, msgs...); err != nil { // connect, learn the partitions
		b.Fatal(err)
	}
	b.Run("tx-10x1KiB", func(b *testing.B) {
		b.SetBytes(n * size)
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			tx, err := cl.BeginTransaction(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Produce(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
	b.Run("plain-10x1KiB", func(b *testing.B) {
		b.SetBytes(n * size)
		b.ReportAllocs()
		cpu0 := processCPU()
		for b.Loop() {
			if _, err := cl.ProduceSync(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, cpu0)
	})
}
