package broker

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// BenchmarkAsyncLag is the "async lag p99 under 100k msgs/s": an
// async master (group commit) and its slave in one process (real
// ZooKeeper, the real puller over TCP), 4 connections pipelining puts of
// 100-300 B messages over 16 partitions, paced to a target rate (the
// sub-benchmark's name; $METAQ_LAG_RATE adds one). Each op is a 2 s run.
// Per message it measures the time from the master's acknowledgement
// reaching the producer to the message being readable on the slave (its
// partition's readable end passing the acknowledged offset, polled every
// ~0.5 ms; a message the slave had before the ack arrived counts 0), and
// reports msgs/s (acknowledged, achieved), lag_p50_ms, lag_p99_ms,
// lag_max_ms, and the largest slave_lag_ms the slave's stats showed
// (sampled every 20 ms). The slave's slave_max_delay is the default
// 500 ms. Speed is reported, never asserted.
func BenchmarkAsyncLag(b *testing.B) {
	rates := []int{20_000, 50_000, 100_000}
	if v, err := strconv.Atoi(os.Getenv("METAQ_LAG_RATE")); err == nil && v > 0 {
		rates = append(rates, v)
	}
	zkAddr := testsvc.ZooKeeper(b)
	for _, rate := range rates {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			const parts = 16
			mod := func(c *conf.Config) { c.NumPartitions = parts }
			root := fmt.Sprintf("/lag-bench-%d", time.Now().UnixNano())
			quiet := Options{Logf: func(string, ...any) {}}
			m := replBrokerOpts(b, zkAddr, root, b.TempDir(), "", -1, mod, quiet, knobs{})
			s := replBrokerOpts(b, zkAddr, root, b.TempDir(), "", 1, mod, quiet, knobs{})
			deadline := time.Now().Add(15 * time.Second)
			for !s.slave.Status().Connected {
				if time.Now().After(deadline) {
					b.Fatal("the slave did not connect")
				}
				time.Sleep(10 * time.Millisecond)
			}
			var all lagRun
			b.ResetTimer()
			for range b.N {
				r := runAsyncLag(b, m, s, parts, rate, 2*time.Second)
				all.lags = append(all.lags, r.lags...)
				all.acked += r.acked
				all.took += r.took
				all.statsMax = max(all.statsMax, r.statsMax)
			}
			b.StopTimer()
			slices.Sort(all.lags)
			pct := func(q float64) float64 {
				if len(all.lags) == 0 {
					return 0
				}
				return float64(all.lags[int(q*float64(len(all.lags)-1))]) / 1e6
			}
			b.ReportMetric(float64(all.acked)/all.took.Seconds(), "msgs/s")
			b.ReportMetric(pct(0.5), "lag_p50_ms")
			b.ReportMetric(pct(0.99), "lag_p99_ms")
			b.ReportMetric(pct(1), "lag_max_ms")
			b.ReportMetric(float64(all.statsMax), "stats_lag_max_ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// lagRun is one run's result: per acknowledged message its lag (ns).
type lagRun struct {
	lags     []int64
	acked    int
	took     time.Duration
	statsMax int64
}

// runAsyncLag drives rate msgs/s (as far as the brokers keep up) into m
// for d and measures each acknowledged message's lag on the slave s.
func runAsyncLag(b *testing.B, m, s *Broker, parts, rate int, d time.Duration) lagRun {
	const conns, window = 4, 256
	rng := rand.New(rand.NewPCG(1, 2))
	frames := make([][]byte, 64)
	for i := range frames {
		data := make([]byte, 100+rng.IntN(201))
		for j := range data {
			data[j] = byte('a' + rng.IntN(26))
		}
		frames[i] = protocol.AppendPut(nil, "t", int32(i%parts), 0, int64(message.Checksum(data)), 1, data)
	}
	type ack struct{ off, at int64 }
	acks := make([][]ack, parts)
	var ackMu sync.Mutex
	// vis[p]: the slave's readable end of p over time (ends rise).
	type seen struct{ end, at int64 }
	vis := make([][]seen, parts)
	slaveLogs := s.topics.Get("t").Parts
	start := time.Now()
	mono := func() int64 { return int64(time.Since(start)) }

	stopPoll := make(chan struct{})
	var pollWG sync.WaitGroup
	var statsMax atomic.Int64
	pollWG.Add(2)
	go func() { // the slave's readable ends
		defer pollWG.Done()
		last := make([]int64, parts)
		for {
			now := mono()
			for p, l := range slaveLogs {
				if e := l.MaxOffset(); e > last[p] {
					last[p] = e
					vis[p] = append(vis[p], seen{e, now})
				}
			}
			select {
			case <-stopPoll:
				return
			default:
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	go func() { // the lag the slave reports
		defer pollWG.Done()
		for {
			if v := s.slave.Status().LagMs; v > statsMax.Load() {
				statsMax.Store(v)
			}
			select {
			case <-stopPoll:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	perConn := float64(rate) / conns
	var wg sync.WaitGroup
	errs := make(chan error, 2*conns)
	var acked atomic.Int64
	for c := range conns {
		cl := dialRaw(b, m.Addr())
		sem := make(chan struct{}, window)
		sent := make(chan int, 1)
		wg.Add(2)
		go func() { // replies
			defer wg.Done()
			var req protocol.Request
			want := -1
			for got := 0; want < 0 || got < want; {
				select {
				case n := <-sent:
					want = n
					continue
				case <-sem:
				}
				if err := cl.dec.Decode(&req); err != nil || req.Code != protocol.StatusOK {
					errs <- fmt.Errorf("put: %v %d %s", err, req.Code, req.Body)
					return
				}
				at := mono()
				_, p, off, _, err := protocol.ParsePutResult(req.Body)
				if err != nil {
					errs <- err
					return
				}
				ackMu.Lock()
				acks[p] = append(acks[p], ack{off, at})
				ackMu.Unlock()
				acked.Add(1)
				got++
			}
		}()
		go func() { // paced sends
			defer wg.Done()
			i := 0
			for {
				el := time.Since(start)
				if el >= d {
					break
				}
				if float64(i) >= el.Seconds()*perConn {
					cl.bw.Flush()
					time.Sleep(500 * time.Microsecond)
					continue
				}
				select {
				case sem <- struct{}{}:
				default:
					// The window is full: flush and wait for a reply.
					cl.bw.Flush()
					sem <- struct{}{}
				}
				cl.bw.Write(frames[(c*17+i)%len(frames)])
				i++
				if cl.bw.Buffered() > 32<<10 {
					cl.bw.Flush()
				}
			}
			if err := cl.bw.Flush(); err != nil {
				errs <- err
			}
			sent <- i
		}()
	}
	wg.Wait()
	took := time.Since(start)
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	// Wait (bounded) until the slave has everything acknowledged.
	deadline := time.Now().Add(30 * time.Second)
	for p := range parts {
		ends := m.topics.Get("t").Parts[p].MaxOffset()
		for slaveLogs[p].MaxOffset() < ends {
			if time.Now().After(deadline) {
				b.Fatalf("partition %d: the slave is at %d, the master at %d, 30 s after the load", p, slaveLogs[p].MaxOffset(), ends)
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(2 * time.Millisecond) // one more poll
	close(stopPoll)
	pollWG.Wait()

	r := lagRun{acked: int(acked.Load()), took: took, statsMax: statsMax.Load()}
	for p := range parts {
		v := vis[p]
		for _, a := range acks[p] {
			k, _ := slices.BinarySearchFunc(v, a.off, func(s seen, off int64) int {
				if s.end <= off {
					return -1
				}
				return 1
			})
			if k == len(v) {
				b.Fatalf("partition %d offset %d: never seen on the slave", p, a.off)
			}
			r.lags = append(r.lags, max(0, v[k].at-a.at))
		}
	}
	return r
}
