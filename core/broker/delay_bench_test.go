package broker

import (
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// pipelinePuts sends frames on conns connections, up to window in flight
// on each, and waits for every reply (each must be 200).
func pipelinePuts(b *testing.B, addr string, conns, window int, frame func(i int) []byte, n int) {
	b.Helper()
	var wg sync.WaitGroup
	per := n / conns
	for k := range conns {
		c := dialRaw(b, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := make(chan struct{}, window)
			done := make(chan error, 1)
			go func() {
				var r protocol.Request
				for range per {
					if err := c.dec.Decode(&r); err != nil {
						done <- err
						return
					}
					if r.Code != protocol.StatusOK {
						done <- &protocolErr{r.Code, string(r.Body)}
						return
					}
					<-sem
				}
				done <- nil
			}()
			for i := range per {
				sem <- struct{}{}
				c.bw.Write(frame(k*per + i))
				if len(sem) == cap(sem) || i == per-1 {
					c.bw.Flush()
				}
			}
			c.bw.Flush()
			if err := <-done; err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}

type protocolErr struct {
	code int
	body string
}

func (e *protocolErr) Error() string { return strconv.Itoa(e.code) + " " + e.body }

// putFrame is a put of m to partition p of topic t.
func putFrame(m *message.Message, p int32) []byte {
	data := m.AppendData(nil)
	return append(protocol.AppendPutHeader(nil, "t", p, len(data), m.Flag(), int64(message.Checksum(data)), 1), data...)
}

// BenchmarkDelayedPut: durable puts of 1 KiB over 64 partitions, plain and
// delayed (metaq-delay uniform in 0-60 s), in alternating rounds on one
// broker; reports both rates and their ratio.
func BenchmarkDelayedPut(b *testing.B) {
	br := fixture{mods: []func(*conf.Config){func(c *conf.Config) { c.NumPartitions = 64 }}}.start(b)
	const n = 20_000
	body := make([]byte, 1024)
	r := rand.New(rand.NewPCG(1, 1))
	mk := func(delayed bool) [][]byte {
		fs := make([][]byte, n)
		for i := range fs {
			m := &message.Message{Topic: "t", Body: body}
			if delayed {
				m.Delay = time.Duration(r.Int64N(int64(60 * time.Second)))
			}
			fs[i] = putFrame(m, int32(i%64))
		}
		return fs
	}
	plain, delayed := mk(false), mk(true)
	var tp, td time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, arm := range []int{i % 2, 1 - i%2} {
			fs := plain
			if arm == 1 {
				fs = delayed
			}
			start := time.Now()
			pipelinePuts(b, br.Addr(), 4, 256, func(j int) []byte { return fs[j] }, n)
			if arm == 1 {
				td += time.Since(start)
			} else {
				tp += time.Since(start)
			}
		}
	}
	b.StopTimer()
	pr, dr := float64(n*b.N)/tp.Seconds(), float64(n*b.N)/td.Seconds()
	b.ReportMetric(pr, "plain-msgs/s")
	b.ReportMetric(dr, "delayed-msgs/s")
	b.ReportMetric(dr/pr, "delayed/plain")
}

// BenchmarkDelayedDrain: n small delayed messages all due at one time;
// reports the time from that time until every one is in its partition
// and the delivery rate.
func BenchmarkDelayedDrain(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("METAQ_DRAIN_COUNT")); err == nil && v > 0 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		br := fixture{mods: []func(*conf.Config){func(c *conf.Config) { c.NumPartitions = 64 }}}.start(b)
		// All due at one time, after the sends (estimated; checked).
		est := time.Duration(n/25_000+5) * time.Second
		due := time.Now().Add(est).UnixMilli()
		frames := func(j int) []byte {
			m := &message.Message{Topic: "t", Body: []byte("0123456789abcdef0123456789abcdef"),
				DeliverAt: time.UnixMilli(due)}
			return putFrame(m, int32(j%64))
		}
		pipelinePuts(b, br.Addr(), 4, 256, frames, n)
		if time.Now().UnixMilli() >= due {
			b.Fatalf("sending %d took past the due time (%v)", n, est)
		}
		b.Logf("%d sent; pending %d", n, br.delay.Pending())
		time.Sleep(time.Until(time.UnixMilli(due)))
		start := time.Now()
		for br.delay.Delivered.Load() < int64(n) {
			time.Sleep(5 * time.Millisecond)
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("delivered %d of %d in 10 min", br.delay.Delivered.Load(), n)
			}
		}
		d := time.Since(start)
		b.ReportMetric(d.Seconds(), "drain-s")
		b.ReportMetric(float64(n)/d.Seconds(), "delivered-msgs/s")
		if dropped := br.delay.Dropped.Load(); dropped != 0 {
			b.Fatalf("%d dropped", dropped)
		}
		br.Close()
	}
}
