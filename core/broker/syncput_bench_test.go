package broker

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// BenchmarkBrokerSyncPut is issue 8's synchronous durable put in one
// process: one connection, one 100 B group-commit put at a time (write,
// wait for the answer), round robin over the topic's partitions. It
// reports the p50 latency next to the p50 of a raw write + fdatasync of
// 100 B on a pre-written file in the same directory, measured alternately
// in the same run (the journal's files are pre-written too, so that is
// the disk's share of a put).
func BenchmarkBrokerSyncPut(b *testing.B) {
	for _, parts := range []int{1, 512} {
		b.Run(fmt.Sprintf("partitions=%d", parts), func(b *testing.B) {
			br := startBrokerWith(b, func(c *conf.Config) {
				c.UnflushThreshold = 0
				c.NumPartitions = parts
			})
			data := bytes.Repeat([]byte("x"), 100)
			frames := make([][]byte, parts)
			for p := range frames {
				frames[p] = protocol.AppendPut(nil, "t", int32(p), 0, int64(message.Checksum(data)), 1, data)
			}
			c := dialRaw(b, br.Addr())
			raw, err := os.Create(filepath.Join(b.TempDir(), "raw"))
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			const rawSize = 64 << 20
			if err := fsutil.ZeroFill(raw, 0, rawSize); err != nil {
				b.Fatal(err)
			}
			if err := raw.Sync(); err != nil {
				b.Fatal(err)
			}
			var rawOff int64
			put := func(k int) time.Duration {
				t0 := time.Now()
				c.bw.Write(frames[k%parts])
				c.bw.Flush()
				var req protocol.Request
				if err := c.dec.Decode(&req); err != nil {
					b.Fatal(err)
				}
				if req.Code != protocol.StatusOK {
					b.Fatalf("put: %d %s", req.Code, req.Body)
				}
				return time.Since(t0)
			}
			rawSync := func() time.Duration {
				t0 := time.Now()
				if _, err := raw.WriteAt(data, rawOff); err != nil {
					b.Fatal(err)
				}
				rawOff = (rawOff + int64(len(data))) % rawSize
				if err := fsutil.Fdatasync(raw); err != nil {
					b.Fatal(err)
				}
				return time.Since(t0)
			}
			for k := range 50 { // warm up: partitions, journal files
				put(k)
			}
			var puts, raws []time.Duration
			k := 0
			for b.Loop() {
				puts = append(puts, put(k))
				raws = append(raws, rawSync())
				k++
			}
			p50 := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Microseconds())
			}
			rp, pp := p50(raws), p50(puts)
			b.ReportMetric(pp, "put-p50-µs")
			b.ReportMetric(rp, "raw-p50-µs")
			b.ReportMetric(pp/rp, "put/raw")
		})
	}
}

// TestTryWriteNowPartial checks the non-blocking reply write of a
// completion: with the socket's buffers full it writes what fits, leaves
// the rest queued in order for the flusher and never blocks; the client
// then reads every byte, in order.
func TestTryWriteNowPartial(t *testing.T) {
	t.Parallel()
	b := startBrokerWith(t, func(*conf.Config) {})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- nc
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.(*net.TCPConn).SetReadBuffer(4096)
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	defer server.Close()
	server.(*net.TCPConn).SetWriteBuffer(4096)
	c := newConn(b, server)
	if c.raw == nil {
		t.Fatal("no raw conn for a TCP connection")
	}
	var want []byte
	partial := false
	for i := 0; i < 2000 && !partial; i++ {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, 1000)
		want = append(want, chunk...)
		buf, ok := c.lockOut()
		if !ok {
			t.Fatal("conn closed")
		}
		c.out = append(buf, chunk...)
		c.omu.Unlock()
		done := make(chan bool, 1)
		go func() { done <- c.tryWriteNow() }()
		select {
		case wrote := <-done:
			partial = !wrote
		case <-time.After(5 * time.Second):
			t.Fatal("tryWriteNow blocked")
		}
	}
	if !partial {
		t.Fatal("the socket never filled up")
	}
	c.omu.Lock()
	left := len(c.out)
	c.omu.Unlock()
	if left == 0 || left > len(want) {
		t.Fatalf("%d bytes left queued of %d", left, len(want))
	}
	got := make(chan []byte, 1)
	go func() {
		client.SetReadDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, len(want))
		n, _ := io.ReadFull(client, b)
		got <- b[:n]
	}()
	c.wmu.Lock()
	if err := c.writeQueuedLocked(); err != nil {
		t.Fatal(err)
	}
	c.wmu.Unlock()
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("client read %d bytes, not the %d written in order", len(g), len(want))
	}
}
