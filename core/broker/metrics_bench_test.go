package broker

import (
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// BenchmarkProduceScraped is issue 12's benchmark: produce throughput
// while /metrics is scraped every second, against no scraping, in the
// same run. Each iteration runs six pairs of 1.5 s phases (unscraped and
// scraped, in alternating order) of producers putting 100-byte messages
// through the wire protocol, and reports the mean puts/s of both and the
// median of the pairs' ratios (target >= 0.97).
// scrape=10ms is a stress variant: a scrape a hundred times a second;
// control scrapes in neither phase, so its ratio is the noise floor of
// the comparison on the machine at the time.
//
//	go test -run '^$' -bench ProduceScraped -benchtime 1x ./core/broker/
func BenchmarkProduceScraped(b *testing.B) {
	for _, mode := range []struct {
		name      string
		threshold int
		every     time.Duration
	}{
		{"groupcommit/scrape=1s", 0, time.Second},
		{"groupcommit/control", 0, 0},
		{"threshold/scrape=1s", 1000, time.Second},
		{"threshold/control", 1000, 0},
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
				if scrape && mode.every > 0 {
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
			// Short alternating phases, and the median of the pairs'
			// ratios: the machine's load drifts less within a pair.
			const pairs = 6
			var base, scraped float64
			var ratios []float64
			b.ResetTimer()
			for range b.N {
				for i := range pairs {
					var u, s float64
					if i%2 == 0 {
						u, s = phase(false, 1500*time.Millisecond), phase(true, 1500*time.Millisecond)
					} else {
						s, u = phase(true, 1500*time.Millisecond), phase(false, 1500*time.Millisecond)
					}
					base, scraped = base+u, scraped+s
					ratios = append(ratios, s/u)
				}
			}
			sort.Float64s(ratios)
			b.ReportMetric(base/float64(pairs*b.N), "puts/s-unscraped")
			b.ReportMetric(scraped/float64(pairs*b.N), "puts/s-scraped")
			b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
		})
	}
}

// BenchmarkMetricsScrape is the cost of one /metrics scrape (collecting
// and encoding) of a broker with 20 topics of 8 partitions and 20 groups'
// committed offsets: at one scrape a second, the CPU share of one core
// is ns/op / 1e9.
func BenchmarkMetricsScrape(b *testing.B) {
	for _, perPart := range []bool{false, true} {
		b.Run("partition_labels="+strconv.FormatBool(perPart), func(b *testing.B) {
			br := startBroker(b, 1000, func(c *conf.Config) {
				c.MetricsPartitionLabels = perPart
				c.NumPartitions = 8
				c.Topics = nil
				for i := range 20 {
					c.Topics = append(c.Topics, conf.Topic{Name: "t" + strconv.Itoa(i)})
				}
			})
			for g := range 20 {
				var ps []message.Position
				for i := range 20 {
					for p := range int32(8) {
						ps = append(ps, message.Position{Topic: "t" + strconv.Itoa(i), Partition: message.Partition{Partition: p}})
					}
				}
				br.committed.Record("g"+strconv.Itoa(g), ps)
			}
			h := br.metrics.Handler()
			req := httptest.NewRequest("GET", "/metrics", nil)
			b.ReportAllocs()
			b.ResetTimer()
			var n int
			for range b.N {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				n = w.Body.Len()
			}
			b.ReportMetric(float64(n), "scrape-bytes")
		})
	}
}

// BenchmarkMetricsScrapeLag is BenchmarkMetricsScrape with data: 20
// topics of 8 partitions of 2000 records each, 20 groups committed at a
// different record of every partition, so that each scrape counts 3200
// lags in messages with the record-count index (store.Log.CountRecords).
func BenchmarkMetricsScrapeLag(b *testing.B) {
	br := startBroker(b, 1000, func(c *conf.Config) {
		c.NumPartitions = 8
		c.Topics = nil
		for i := range 20 {
			c.Topics = append(c.Topics, conf.Topic{Name: "t" + strconv.Itoa(i)})
		}
	})
	rng := rand.New(rand.NewPCG(1, 2))
	starts := map[string][][]int64{} // topic -> partition -> batch start offsets
	for i := range 20 {
		name := "t" + strconv.Itoa(i)
		t := br.topics.Get(name)
		for _, l := range t.Parts {
			var offs []int64
			for range 20 {
				es := make([]store.Entry, 100)
				for k := range es {
					d := make([]byte, 50+rng.IntN(100))
					es[k] = store.Entry{CRC: message.Checksum(d), Data: d}
				}
				_, off, err := l.AppendSync(es)
				if err != nil {
					b.Fatal(err)
				}
				offs = append(offs, off)
			}
			if err := l.Flush(); err != nil {
				b.Fatal(err)
			}
			starts[name] = append(starts[name], offs)
		}
	}
	for g := range 20 {
		var ps []message.Position
		for i := range 20 {
			name := "t" + strconv.Itoa(i)
			for p, offs := range starts[name] {
				ps = append(ps, message.Position{Topic: name, Partition: message.Partition{Partition: int32(p)}, Offset: offs[rng.IntN(len(offs))]})
			}
		}
		br.committed.Record("g"+strconv.Itoa(g), ps)
	}
	h := br.metrics.Handler()
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
	}
}
