package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// BenchmarkHTTPData measures the HTTP data plane against the wire in
// alternating phases on one broker (durable puts, the tests' default):
//
//   - produce: 1 KiB records, 100 per request, from 4 clients: POST
//     .../records (format binary, base64 values; format text as well)
//     against native mput of the same 100 records;
//   - consume: a partition of 20000 1 KiB records read from the start in
//     reads of up to 256 KiB: GET .../records (format binary) against
//     native gets.
//
// It reports records/s of each and the ratios http/native (the figures of
// docs/http.md, "Benchmark"), and the process's CPU per record (client
// and broker: one process).
func BenchmarkHTTPData(b *testing.B) {
	const parts, batch, size, pairs = 4, 100, 1024, 3
	// METAQ_HTTP_BENCH_CONNS clients on each side (4), phases of
	// METAQ_HTTP_BENCH_PHASE seconds (1.5): with few clients the ratio
	// follows how their requests fall into group-commit rounds
	// (docs/benchmarks.md), so it is given at 4 and at 16.
	conns, phaseLen := 4, 1500*time.Millisecond
	if v, err := strconv.Atoi(os.Getenv("METAQ_HTTP_BENCH_CONNS")); err == nil && v > 0 {
		conns = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("METAQ_HTTP_BENCH_PHASE"), 64); err == nil && v > 0 {
		phaseLen = time.Duration(v * float64(time.Second))
	}
	br := startBroker(b, 0, func(c *conf.Config) { c.NumPartitions = parts })
	base := "http://" + br.HTTPAddr()
	// The HTTP clients write a request in one write, as the native ones
	// write an mput (net/http's default 4 KiB buffer sends a 140 KB body
	// as 32 KiB pieces through a 32 KiB buffer it allocates per request:
	// five writes), and read a reply (about 7 KiB) in one read.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, WriteBufferSize: 256 << 10, ReadBufferSize: 16 << 10}, Timeout: time.Minute}
	payload := bytes.Repeat([]byte("abcdefghijklmnop"), size/16)

	mput := make([][]byte, parts)
	for p := range parts {
		var body []byte
		for range batch {
			body = protocol.AppendMPutEntry(body, 0, int32(message.Checksum(payload)), payload)
		}
		mput[p] = append(protocol.AppendMPutHeader(nil, "t", int32(p), len(body), batch, 1), body...)
	}
	jsonBody := func(format string) [][]byte {
		v := string(payload)
		if format == "binary" {
			v = base64.StdEncoding.EncodeToString(payload)
		}
		recs := make([]map[string]any, batch)
		for i := range recs {
			recs[i] = map[string]any{"value": v}
		}
		js, _ := json.Marshal(map[string]any{"format": format, "records": recs})
		return [][]byte{js}
	}
	bodies := map[string][][]byte{"binary": jsonBody("binary"), "text": jsonBody("text")}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	phase := func(work func(i int) int) (perSec float64, cpuPer time.Duration) {
		var recs atomic.Int64
		stop := time.Now().Add(phaseLen)
		c0, t0 := cpu(), time.Now()
		var wg sync.WaitGroup
		for i := range conns {
			wg.Go(func() {
				for time.Now().Before(stop) {
					n := work(i)
					if n < 0 {
						return
					}
					recs.Add(int64(n))
				}
			})
		}
		wg.Wait()
		el, n := time.Since(t0), recs.Load()
		if n == 0 {
			b.Fatal("no records")
		}
		return float64(n) / el.Seconds(), (cpu() - c0) / time.Duration(n)
	}
	natives := make([]*rawClient, conns)
	for i := range natives {
		natives[i] = dialRaw(b, br.Addr())
	}
	native := func(i int) int {
		c := natives[i]
		c.nc.SetDeadline(time.Now().Add(time.Minute))
		if _, err := c.nc.Write(mput[i%parts]); err != nil {
			b.Error(err)
			return -1
		}
		var req protocol.Request
		if err := c.dec.Decode(&req); err != nil || req.Code != 200 {
			b.Errorf("mput: %v %d %s", err, req.Code, req.Body)
			return -1
		}
		return batch
	}
	urls := make([]string, conns)
	replies := make([]bytes.Buffer, conns) // each client's, reused (io.ReadAll grew one per reply)
	for i := range urls {
		urls[i] = base + "/api/v1/data/topics/t/partitions/" + strconv.Itoa(i%parts) + "/records"
	}
	post := func(format string) func(i int) int {
		return func(i int) int {
			resp, err := hc.Post(urls[i], "application/json", bytes.NewReader(bodies[format][0]))
			if err != nil {
				b.Error(err)
				return -1
			}
			// Read to the end, so the connection is kept alive (a
			// json.Decoder stops before EOF and the transport then closed
			// some connections); checked as the native mput is, by its
			// status and that every record has an offset and no error,
			// without decoding each result (the native client does not
			// parse its offsets either).
			replies[i].Reset()
			_, err = replies[i].ReadFrom(resp.Body)
			resp.Body.Close()
			rb := replies[i].Bytes()
			if err != nil || resp.StatusCode != 200 || bytes.Count(rb, []byte(`"offset":`)) != batch || bytes.Contains(rb, []byte(`"error`)) {
				b.Errorf("produce: %v %d %.200s", err, resp.StatusCode, rb)
				return -1
			}
			return batch
		}
	}
	type sum struct{ rate, cpu float64 }
	res := map[string]*sum{}
	add := func(name string, r float64, c time.Duration) {
		if res[name] == nil {
			res[name] = &sum{}
		}
		res[name].rate += r / pairs
		res[name].cpu += float64(c.Nanoseconds()) / 1e3 / pairs
	}
	b.ResetTimer()
	for range b.N {
		clear(res)
		for range pairs {
			r, c := phase(native)
			add("mput", r, c)
			r, c = phase(post("binary"))
			add("http_binary", r, c)
			r, c = phase(post("text"))
			add("http_text", r, c)
		}
	}
	b.StopTimer()
	b.ReportMetric(res["mput"].rate, "mput_recs/s")
	b.ReportMetric(res["http_binary"].rate, "http_bin_recs/s")
	b.ReportMetric(res["http_text"].rate, "http_text_recs/s")
	b.ReportMetric(res["http_binary"].rate/res["mput"].rate, "produce_bin_ratio")
	b.ReportMetric(res["http_text"].rate/res["mput"].rate, "produce_text_ratio")
	b.ReportMetric(res["mput"].cpu, "mput_cpu_us/rec")
	b.ReportMetric(res["http_binary"].cpu, "http_bin_cpu_us/rec")

	// Consume: partition 0 holds what the produce phases wrote (at least
	// 20000 records); each phase reads from the start as far as it gets.
	end := br.topics.Get("t").Parts[0].MaxOffset()
	const readMax = 256 << 10
	offs := make([]int64, conns)
	nget := func(i int) int {
		c := natives[i]
		c.nc.SetDeadline(time.Now().Add(time.Minute))
		if offs[i] >= end {
			offs[i] = 0
		}
		if _, err := c.nc.Write(protocol.AppendGet(nil, "t", "bench", 0, offs[i], readMax, 1)); err != nil {
			b.Error(err)
			return -1
		}
		var req protocol.Request
		if err := c.dec.Decode(&req); err != nil || req.Op != protocol.OpValue {
			b.Errorf("get: %v %d %s", err, req.Code, req.Body)
			return -1
		}
		it := message.NewIterator(req.Body, offs[i], 0)
		n := 0
		for it.Next() {
			n++
		}
		offs[i] = it.NextOffset()
		return n
	}
	hget := func(i int) int {
		if offs[i] >= end {
			offs[i] = 0
		}
		resp, err := hc.Get(base + "/api/v1/data/topics/t/partitions/0/records?format=binary&max_bytes=" + strconv.Itoa(readMax) + "&offset=" + strconv.FormatInt(offs[i], 10))
		if err != nil {
			b.Error(err)
			return -1
		}
		// A client decodes the values: into []byte fields, as a Go
		// client would, encoding/json decoding the base64 in its one
		// pass (json.Unmarshal into json.RawMessage values, then each
		// value into a string, then base64, scanned every value four
		// times: 90% of the process's CPU in this phase was the
		// client's).
		var rr struct {
			Records []struct {
				Value []byte `json:"value"`
			} `json:"records"`
			NextOffset int64 `json:"next_offset"`
		}
		err = json.NewDecoder(resp.Body).Decode(&rr)
		io.Copy(io.Discard, resp.Body) // to the end: the connection is kept
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(rr.Records) == 0 || len(rr.Records[0].Value) != size {
			b.Errorf("read: %v %d", err, resp.StatusCode)
			return -1
		}
		offs[i] = rr.NextOffset
		return len(rr.Records)
	}
	clear(res)
	for range pairs {
		clear(offs)
		r, c := phase(nget)
		add("get", r, c)
		clear(offs)
		r, c = phase(hget)
		add("http_get", r, c)
	}
	b.ReportMetric(res["get"].rate, "get_recs/s")
	b.ReportMetric(res["http_get"].rate, "http_read_recs/s")
	b.ReportMetric(res["http_get"].rate/res["get"].rate, "consume_ratio")
	b.ReportMetric(res["get"].cpu, "get_cpu_us/rec")
	b.ReportMetric(res["http_get"].cpu, "http_read_cpu_us/rec")
}
