package broker

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// BenchmarkIndexKeys is issue 26's "key index on against off": 1 KiB
// durable (group-commit) puts with a 16-byte key, from 4 connections with
// 64 in flight each over 8 partitions, to two in-process brokers, one
// with index_keys on and one off, in alternating phases of 2 s (6 pairs).
// It reports the median over the pairs of the ratio on/off of puts per
// second and of the process's CPU time per put (the indexer's included).
// "control" runs the same with index_keys off on both: its ratios are the
// noise floor of the machine at the time.
func BenchmarkIndexKeys(b *testing.B) {
	b.Run("index", func(b *testing.B) { benchIndexKeys(b, true) })
	b.Run("control", func(b *testing.B) { benchIndexKeys(b, false) })
}

func benchIndexKeys(b *testing.B, index bool) {
	const parts, conns, window, size, pairs = 8, 4, 64, 1024, 6
	phaseLen := 2 * time.Second
	brokers := map[bool]*Broker{}
	for _, on := range []bool{false, true} {
		brokers[on] = startBrokerWith(b, func(c *conf.Config) {
			c.UnflushThreshold = 0
			c.NumPartitions = parts
			c.IndexKeys = on && index
		})
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	// One frame per (partition, key): keys cycle over 4096 values.
	frames := make([][]byte, 4096)
	for k := range frames {
		m := message.Message{Key: fmt.Appendf(nil, "key-%012d", k), Body: body} // 16-byte key
		d := m.AppendData(nil)
		frames[k] = protocol.AppendPut(nil, "t", int32(k%parts), m.Flag(), int64(message.Checksum(d)), 1, d)
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	phase := func(br *Broker) (perSec float64, cpuPerPut time.Duration) {
		var puts atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range conns {
			c := dialRaw(b, br.Addr())
			sem := make(chan struct{}, window)
			wg.Go(func() {
				var req protocol.Request
				for {
					select {
					case <-stop:
						if len(sem) == 0 {
							return
						}
					default:
					}
					if err := c.dec.Decode(&req); err != nil {
						b.Error(err)
						return
					}
					if req.Code != protocol.StatusOK {
						b.Errorf("put: %d %s", req.Code, req.Body)
						return
					}
					puts.Add(1)
					<-sem
				}
			})
			wg.Go(func() {
				for k := i; ; k += conns {
					select {
					case <-stop:
						c.bw.Flush()
						return
					case sem <- struct{}{}:
					}
					c.bw.Write(frames[k%len(frames)])
					if len(sem) == cap(sem) {
						c.bw.Flush()
					}
				}
			})
		}
		c0, t0, n0 := cpu(), time.Now(), puts.Load()
		time.Sleep(phaseLen)
		c1, t1, n1 := cpu(), time.Now(), puts.Load()
		close(stop)
		wg.Wait()
		n := n1 - n0
		return float64(n) / t1.Sub(t0).Seconds(), (c1 - c0) / time.Duration(max(n, 1))
	}
	b.ResetTimer()
	for range b.N {
		var rate, cpuRatio []float64
		var onRate, offRate []float64
		for i := range pairs {
			var r [2]float64
			var c [2]time.Duration
			for _, on := range []bool{i%2 == 0, i%2 != 0} { // alternate which goes first
				idx := 0
				if on {
					idx = 1
				}
				r[idx], c[idx] = phase(brokers[on])
			}
			rate = append(rate, r[1]/r[0])
			cpuRatio = append(cpuRatio, float64(c[1])/float64(c[0]))
			offRate, onRate = append(offRate, r[0]), append(onRate, r[1])
			b.Logf("pair %d: off %.0f puts/s %v CPU/put, on %.0f puts/s %v CPU/put", i, r[0], c[0], r[1], c[1])
		}
		med := func(x []float64) float64 { slices.Sort(x); return (x[len(x)/2] + x[(len(x)-1)/2]) / 2 }
		b.ReportMetric(med(offRate), "off-puts/s")
		b.ReportMetric(med(onRate), "on-puts/s")
		b.ReportMetric(med(rate), "on/off-puts/s")
		b.ReportMetric(med(cpuRatio), "on/off-CPU/put")
	}
}
