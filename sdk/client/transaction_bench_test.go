package client

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
)

// BenchmarkTransaction compares, in one run against one group-commit
// broker, a local transaction of 10 × 1 KiB messages (BEGIN and the puts
// pipelined, then COMMIT) with 10 plain durable puts of the same
// messages (ProduceSync: all in flight, each acknowledged after fsync).
// One op is 10 messages either way.
//
// tx-10x1KiB and plain-10x1KiB run one operation at a time (ns/op is the
// latency of one transaction, or of the 10 puts); the -x4 variants run
// four goroutines at once on the same Client (ns/op is the inverse of the
// throughput: concurrent commits share their fsyncs, as concurrent puts
// do). alternating times one transaction and 10 plain puts in turn.
//
// METAQ_BENCH_BARE=1 turns off what later issues added to every put by
// default, the idempotent producer and the broker's key and id index
// (issue 26, with budgets of their own), so that the run does the work a
// binary from before them does (issue 24's comparison with the commit
// before the split).
func BenchmarkTransaction(b *testing.B) {
	const n, size = 10, 1 << 10
	bare := os.Getenv("METAQ_BENCH_BARE") != ""
	br := startBroker(b, func(c *conf.Config) { c.IndexKeys = c.IndexKeys && !bare })
	cl := newClient(b, Brokers(br.addr), Idempotence(!bare))
	ctx := context.Background()
	newMsgs := func() []*message.Message {
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = &message.Message{Topic: topic, Body: make([]byte, size)}
		}
		return msgs
	}
	if _, err := cl.ProduceSync(ctx, newMsgs()...); err != nil { // connect, learn the partitions
		b.Fatal(err)
	}
	txOp := func(b *testing.B, msgs []*message.Message) {
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
	plainOp := func(b *testing.B, msgs []*message.Message) {
		if _, err := cl.ProduceSync(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	serial := func(op func(*testing.B, []*message.Message)) func(*testing.B) {
		return func(b *testing.B) {
			b.SetBytes(n * size)
			b.ReportAllocs()
			msgs := newMsgs()
			cpu0 := processCPU()
			for b.Loop() {
				op(b, msgs)
			}
			reportCPU(b, cpu0)
		}
	}
	parallel := func(op func(*testing.B, []*message.Message)) func(*testing.B) {
		return func(b *testing.B) {
			b.SetBytes(n * size)
			b.ReportAllocs()
			b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0))) // 4 goroutines on 2 or 4 Ps
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				msgs := newMsgs()
				for pb.Next() {
					op(b, msgs)
				}
			})
			reportCPU(b, cpu0)
		}
	}
	// Both, alternating, on one goroutine: each op is one transaction and
	// 10 plain puts, timed apart, so that the noise of a shared machine
	// falls on both alike; tx/plain is the ratio of their mean latencies
	// (1/tx/plain is the transaction's share of plain throughput).
	b.Run("alternating", func(b *testing.B) {
		msgs := newMsgs()
		var txT, plainT time.Duration
		for b.Loop() {
			t0 := time.Now()
			txOp(b, msgs)
			t1 := time.Now()
			plainOp(b, msgs)
			txT += t1.Sub(t0)
			plainT += time.Since(t1)
		}
		b.ReportMetric(float64(txT.Nanoseconds())/float64(b.N), "tx-ns/op")
		b.ReportMetric(float64(plainT.Nanoseconds())/float64(b.N), "plain-ns/op")
		b.ReportMetric(float64(plainT)/float64(txT), "plain/tx")
	})
	b.Run("tx-10x1KiB", serial(txOp))
	b.Run("plain-10x1KiB", serial(plainOp))
	b.Run("tx-10x1KiB-x4", parallel(txOp))
	b.Run("plain-10x1KiB-x4", parallel(plainOp))
}
