package store

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchDir returns a directory for benchmark data: under $METAQ_BENCH_DIR
// when set (to measure a given disk; b.TempDir is usually /tmp), else a
// test temporary directory.
func benchDir(b *testing.B) string {
	b.Helper()
	base := os.Getenv("METAQ_BENCH_DIR")
	if base == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(base, "metaq-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func benchLog(b *testing.B, opts Options) *Log {
	b.Helper()
	opts.IDs = &seqIDs{}
	if opts.MaxSegmentSize == 0 {
		opts.MaxSegmentSize = 256 << 20
	}
	l, err := Open(benchDir(b), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

func reportFsyncs(b *testing.B, l *Log, ops int) {
	st := l.Stats()
	b.ReportMetric(float64(st.Fsyncs)/float64(ops), "fsyncs/op")
}

// BenchmarkAppend measures threshold mode (MetaQ's default threshold of
// 1000 unflushed messages): one write per append, an fsync every 1000
// messages.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("threshold/size=%d/batch=%d", size, batch), func(b *testing.B) {
				l := benchLog(b, Options{UnflushThreshold: 1000})
				data := make([]byte, size)
				es := make([]Entry, batch)
				for i := range es {
					es[i] = entry(data)
				}
				w := &nopWaiter{}
				b.ReportAllocs()
				b.SetBytes(int64(size * batch))
				for b.Loop() {
					if err := l.Append(es, w, 0); err != nil {
						b.Fatal(err)
					}
				}
				reportFsyncs(b, l, b.N)
			})
		}
	}
}

// BenchmarkGroupCommit measures group commit with concurrent synchronous
// producers of 1 KiB messages: every op is acknowledged after an fsync.
func BenchmarkGroupCommit(b *testing.B) {
	const size = 1024
	for _, appenders := range []int{1, 4, 64} {
		b.Run(fmt.Sprintf("size=%d/appenders=%d", size, appenders), func(b *testing.B) {
			l := benchLog(b, Options{})
			data := make([]byte, size)
			var next atomic.Int64
			n := int64(b.N)
			b.ReportAllocs()
			b.SetBytes(size)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range appenders {
				wg.Go(func() {
					es := []Entry{entry(data)}
					for next.Add(1) <= n {
						if _, _, err := l.AppendSync(es); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			reportFsyncs(b, l, b.N)
		})
	}
}

// BenchmarkRawAppendFdatasync is the baseline: a plain file, 1 KiB write()
// per op and an fdatasync every `sync` ops, in the same place the store
// benchmarks write.
func BenchmarkRawAppendFdatasync(b *testing.B) {
	const size = 1024
	for _, every := range []int{1, 256} {
		b.Run(fmt.Sprintf("size=%d/sync=%d", size, every), func(b *testing.B) {
			f, err := os.OpenFile(benchDir(b)+"/raw", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			rec := make([]byte, size)
			b.ReportAllocs()
			b.SetBytes(size)
			i := 0
			for b.Loop() {
				if _, err := f.Write(rec); err != nil {
					b.Fatal(err)
				}
				if i++; i%every == 0 {
					if err := fdatasync(f); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := fdatasync(f); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRead measures Read plus copying the View out (1 MiB reads).
func BenchmarkRead(b *testing.B) {
	l := benchLog(b, Options{UnflushThreshold: 1000})
	data := make([]byte, 1024)
	es := make([]Entry, 64)
	for i := range es {
		es[i] = entry(data)
	}
	w := &nopWaiter{}
	for range 256 { // ~16 MiB
		if err := l.Append(es, w, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		b.Fatal(err)
	}
	const maxSize = 1 << 20
	buf := make([]byte, 0, maxSize)
	max := l.MaxOffset()
	off := int64(0)
	b.ReportAllocs()
	b.SetBytes(maxSize)
	for b.Loop() {
		v, err := l.Read(off, maxSize)
		if err != nil {
			b.Fatal(err)
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			b.Fatal(err)
		}
		if off += maxSize; off+maxSize > max {
			off = 0
		}
	}
}

// flightWaiter hands append outcomes back to a producer that keeps a
// window of appends in flight.
type flightWaiter struct{ ch chan error }

func (w *flightWaiter) AppendDone(_ uint64, _, _ int64, err error) { w.ch <- err }

// BenchmarkDurableProduce is issue 8's durable produce benchmark: 1 KiB
// group-commit puts from 4 producers with 64 appends in flight each, round
// robin over the partitions, acknowledged after the fsync that covers
// them. "journal" commits every partition through one broker-wide journal,
// "perlog" is each log with its own writer and fsync (no journal), and
// raw/sync=256 is the same-run baseline: a plain file, 1 KiB write() per op
// and an fdatasync every 256.
func BenchmarkDurableProduce(b *testing.B) {
	const size, producers, window = 1024, 4, 64
	b.Run("raw/sync=256", func(b *testing.B) {
		f, err := os.OpenFile(benchDir(b)+"/raw", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		rec := make([]byte, size)
		b.SetBytes(size)
		i := 0
		for b.Loop() {
			if _, err := f.Write(rec); err != nil {
				b.Fatal(err)
			}
			if i++; i%256 == 0 {
				if err := fdatasync(f); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rec/s")
	})
	for _, mode := range []string{"journal", "perlog"} {
		for _, parts := range []int{1, 64, 512, 1000} {
			if mode == "perlog" && parts == 1000 {
				continue
			}
			b.Run(fmt.Sprintf("%s/partitions=%d", mode, parts), func(b *testing.B) {
				dataDir := benchDir(b)
				var j *Journal
				if mode == "journal" {
					var err error
					if j, err = OpenJournal(dataDir, JournalOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				logs := make([]*Log, parts)
				for p := range logs {
					l, err := Open(fmt.Sprintf("%s/t-%d", dataDir, p), Options{IDs: &seqIDs{}, MaxSegmentSize: 256 << 20, Journal: j})
					if err != nil {
						b.Fatal(err)
					}
					logs[p] = l
				}
				defer func() {
					for _, l := range logs {
						_ = l.Close()
					}
					if j != nil {
						_ = j.Close()
					}
				}()
				data := make([]byte, size)
				var next atomic.Int64
				n := int64(b.N)
				b.SetBytes(size)
				b.ResetTimer()
				start, cpu0 := time.Now(), processCPU()
				var wg sync.WaitGroup
				for range producers {
					wg.Go(func() {
						es := []Entry{entry(data)}
						w := &flightWaiter{ch: make(chan error, window)}
						inflight := 0
						wait := func() bool {
							err := <-w.ch
							inflight--
							if err != nil {
								b.Error(err)
								return false
							}
							return true
						}
						for k := next.Add(1); k <= n; k = next.Add(1) {
							if inflight == window && !wait() {
								return
							}
							if err := logs[int(k)%parts].Append(es, w, 0); err != nil {
								b.Error(err)
								return
							}
							inflight++
						}
						for inflight > 0 && wait() {
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rec/s")
				if cpu := processCPU() - cpu0; cpu0 > 0 {
					// The producers' CPU too: they share the process.
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
				var fsyncs int64
				if j != nil {
					fsyncs = j.Stats().Fsyncs
				} else {
					for _, l := range logs {
						fsyncs += l.Stats().Fsyncs
					}
				}
				b.ReportMetric(float64(fsyncs)/float64(b.N), "fsyncs/op")
				if j != nil {
					// Mark records written before acknowledgements that
					// no later round covered (Journal.cover).
					b.ReportMetric(float64(j.Stats().Marks)/float64(b.N), "marks/op")
					// Mark records fdatasynced by themselves (the journal
					// idle for 10 ms after one: syncMark).
					b.ReportMetric(float64(j.Stats().MarkSyncs)/float64(b.N), "marksyncs/op")
				}
			})
		}
	}
}
