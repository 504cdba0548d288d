package broker

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// BenchmarkProduceScraped is issue 12's benchmark: produce throughput
// while /metrics is scraped every second, against no scraping, in the
// same run. Each iteration runs alternating phases (unscraped, scraped,
// twice each) of producers putting 100-byte messages through the wire
// protocol, and reports puts/s of both and their ratio (target >= 0.97).
// scrape=10ms is a stress variant: a scrape a hundred times a second.
//
//	go test -run '^$' -bench ProduceScraped -benchtime 1x ./core/broker/
func BenchmarkProduceScraped(b *testing.B) {
	for _, mode := range []struct {
		name      string
		threshold int
		every     time.Duration
	}{
		{"groupcommit/scrape=1s", 0, time.Second},
		{"threshold/scrape=1s", 1000, time.Second},
		{"threshold/scrape=10ms", 1000, 10 * time.Millisecond},
	} {
		b.Run(mode.name, func(b *testing.B) {
			br := startBroker(b, mode.threshold)
			url := "http://" + br.HTTPAddr() + "/metrics"
			const producers = 8
			phase := func(scrape bool, d time.Duration) float64 {
				var puts atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for range producers {
					c := dialAuth(b, br.Addr(), nil)
					wg.Add(1)
					go func() {
						defer wg.Done()
						body := make([]byte, 100)
						var buf []byte
						for op := int32(1); ; op++ {
							select {
							case <-stop:
								return
							default:
							}
							buf = protocol.AppendPut(buf[:0], "t", 0, 0, -1, op, body)
							if _, err := c.nc.Write(buf); err != nil {
								return
							}
							if err := c.dec.Decode(&c.req); err != nil || c.req.Code != 200 {
								return
							}
							puts.Add(1)
						}
					}()
				}
				if scrape {
					wg.Add(1)
					go func() {
						defer wg.Done()
						tk := time.NewTicker(mode.every)
						defer tk.Stop()
						for {
							select {
							case <-stop:
								return
							case <-tk.C:
								resp, err := http.Get(url)
								if err == nil {
									io.Copy(io.Discard, resp.Body)
									resp.Body.Close()
								}
							}
						}
					}()
				}
				start := time.Now()
				time.Sleep(d)
				n := puts.Load()
				el := time.Since(start)
				close(stop)
				wg.Wait()
				return float64(n) / el.Seconds()
			}
			resp, err := http.Get(url)
			require.NoError(b, err)
			resp.Body.Close()
			var base, scraped float64
			b.ResetTimer()
			for range b.N {
				for range 2 {
					base += phase(false, 3*time.Second)
					scraped += phase(true, 3*time.Second)
				}
			}
			b.ReportMetric(base/float64(2*b.N), "puts/s-unscraped")
			b.ReportMetric(scraped/float64(2*b.N), "puts/s-scraped")
			b.ReportMetric(scraped/base, "ratio")
		})
	}
}
