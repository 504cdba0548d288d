package store

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
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
