package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
)

// sender is the async send of the handle being measured.
type sender func(ctx context.Context, m *message.Message, cb func(SendResult, error))

// benchSend produces b.N messages of size bytes through send, all in
// flight up to the handle's own limit, and waits for every outcome.
func benchSend(b *testing.B, size int, send sender) {
	var failed atomic.Int64
	var wg sync.WaitGroup
	cb := func(_ SendResult, err error) {
		if err != nil {
			failed.Add(1)
		}
		wg.Done()
	}
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for range b.N {
		wg.Add(1)
		send(ctx, &message.Message{Topic: topic, Body: make([]byte, size)}, cb)
	}
	wg.Wait()
	b.StopTimer()
	reportCPU(b, cpu0)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d sends failed", n)
	}
}

// processCPU is the CPU time (user + system) this process has used: the
// in-process broker's and the client's. Per operation it is steadier than
// wall time on a shared machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU time per operation since cpu0.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkClientProduce compares the Client with the handles it
// replaces, in one run: "producer" is the one-broker brokerProducer and
// "client-direct" the Client with Brokers (same broker, no batching);
// "cluster-producer" is the clusterProducer through ZooKeeper (which
// could not batch) and "client-zk-batched" the Client through the same
// ZooKeeper with Batching(256, 1 MiB, 1 ms).
func BenchmarkClientProduce(b *testing.B) {
	const size = 100
	br := startBroker(b)
	zkAddr := testsvc.ZooKeeper(b)
	w := newZKWriter(b, zkAddr, "/bench-client")
	w.register(0, "m", br.addr, 4)
	b.Run("producer", func(b *testing.B) {
		p := newProducer(b, br.addr)
		benchSend(b, size, p.SendAsync)
	})
	b.Run("client-direct", func(b *testing.B) {
		cl := newClient(b, Brokers(br.addr))
		benchSend(b, size, cl.Produce)
	})
	b.Run("client-direct-batched", func(b *testing.B) {
		cl := newClient(b, Brokers(br.addr), Batching(256, 1<<20, time.Millisecond))
		benchSend(b, size, cl.Produce)
	})
	b.Run("cluster-producer", func(b *testing.B) {
		p, err := openClusterProducer(context.Background(), zkAddr, quiet, withZKRoot("/bench-client"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close(context.Background()) })
		benchSend(b, size, p.SendAsync)
	})
	b.Run("client-zk-batched", func(b *testing.B) {
		cl := newClient(b, ZooKeeper(zkAddr, "/bench-client"), Batching(256, 1<<20, time.Millisecond))
		benchSend(b, size, cl.Produce)
	})
}

// BenchmarkClientConsume reads b.N messages with the one-broker brokerConsumer
// and with the Client's Messages, from the same broker, in one run.
func BenchmarkClientConsume(b *testing.B) {
	const size = 100
	for _, mode := range []string{"consumer", "client"} {
		b.Run(fmt.Sprintf("%s/size=%d", mode, size), func(b *testing.B) {
			br := startBroker(b)
			p := newClient(b, Brokers(br.addr), Batching(1024, 1<<20, time.Millisecond))
			benchSend(b, size, p.Produce)
			b.StopTimer()
			ctx := context.Background()
			var next func() error
			if mode == "consumer" {
				c := newConsumer(b, br.addr)
				it := c.Messages(ctx)
				next = pullN(b, it)
			} else {
				c := newClient(b, Brokers(br.addr), ConsumeTopics(topic))
				next = pullN(b, c.Messages(ctx))
			}
			b.ResetTimer() // benchSend timed the produce: measure only the reads
			b.StartTimer()
			cpu0 := processCPU()
			if err := next(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			reportCPU(b, cpu0)
		})
	}
}

// pullN returns a func that reads b.N messages from it.
func pullN(b *testing.B, it func(func(*message.Message, error) bool)) func() error {
	return func() error {
		n := 0
		var ferr error
		it(func(_ *message.Message, err error) bool {
			if err != nil {
				ferr = err
				return false
			}
			n++
			return n < b.N
		})
		return ferr
	}
}
