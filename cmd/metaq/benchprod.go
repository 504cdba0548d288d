package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The benchmark client speaks sdk/protocol directly: one connection per
// producer, requests pre-encoded except for the opaque, a writer that fills
// one buffer with as many requests as the window allows and writes it in
// one call, and a reader goroutine matching replies to send times by
// opaque. Nothing is allocated per message.

type prodConfig struct {
	addr       string
	sec        *security
	topic      string
	size       int
	producers  int
	batch      int // 1 = put, >1 = mput of batch messages
	inflight   int // requests in flight per producer
	sync       bool
	messages   int64 // total over all producers; 0 = run for duration
	duration   time.Duration
	partition  int // -1 = spread over all partitions
	partitions int // partition count (for spread)
	// idem sends as the SDK's idempotent producer does: each message
	// carries a producer id (one per producer and partition) and its
	// sequence, so each request is encoded as it is sent.
	idem bool
	// build encodes each request as it is sent even without idem (and
	// checksums it), as the SDK does: bench produce --ab's baseline, so
	// that its two arms differ only by the producer's id and sequence.
	build bool
	// prog, if set, shows the acknowledged messages while it runs.
	prog *progress
}

type prodResult struct {
	Msgs     int64         `json:"msgs"`
	Requests int64         `json:"requests"`
	Errors   int64         `json:"errors"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	MsgsPerS float64       `json:"msgs_per_s"`
	MBPerS   float64       `json:"mb_per_s"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
	P999     time.Duration `json:"p999_ns"`
	FirstErr string        `json:"first_error,omitempty"`
	// Lat is the same latency distribution with p99.99 and max.
	Lat latSummary `json:"latency"`
}

// latRec keeps up to cap(s) latency samples (a uniform reservoir beyond).
type latRec struct {
	s   []int64
	n   int64
	max int64 // the largest sample, reservoir or not
	rng *rand.PCG
}

func newLatRec(limit int) *latRec {
	return &latRec{s: make([]int64, 0, limit), rng: rand.NewPCG(1, 2)}
}

func (r *latRec) add(ns int64) {
	r.n++
	r.max = max(r.max, ns)
	if len(r.s) < cap(r.s) {
		r.s = append(r.s, ns)
		return
	}
	if j := r.rng.Uint64() % uint64(r.n); j < uint64(len(r.s)) {
		r.s[j] = ns
	}
}

// percentiles sorts all samples and returns p50, p99, p99.9 (latStats).
func percentiles(recs ...*latRec) (p50, p99, p999 time.Duration) {
	s := latStats(recs...)
	return s.P50, s.P99, s.P999
}

const latSampleLimit = 1 << 20

type prodWorker struct {
	cfg      *prodConfig
	id       int
	nc       net.Conn
	prefix   [][]byte // per partition: the header up to the opaque
	body     []byte   // the request body after "\r\n"
	perReq   int64    // messages per request
	slots    []atomic.Int64
	wake     chan struct{}
	rdone    chan struct{}
	base     time.Time
	lat      *latRec
	acked    atomic.Int64
	okMsgs   atomic.Int64
	errMsgs  atomic.Int64
	firstErr atomic.Value // string
	rerr     error
	started  bool // the reader goroutine runs

	// With cfg.idem: per partition (index into parts) the producer id
	// and next sequence, and the buffers a request is built in.
	parts   []int
	pids    []int64
	seqs    []int64
	payload []byte
	data    []byte
	entries []byte
}

func newProdWorker(cfg *prodConfig, id int, nc net.Conn, base time.Time) *prodWorker {
	w := &prodWorker{cfg: cfg, id: id, nc: nc, base: base, wake: make(chan struct{}, 1), rdone: make(chan struct{}),
		lat: newLatRec(latSampleLimit / max(cfg.producers, 1))}
	payload := make([]byte, cfg.size)
	for i := range payload {
		payload[i] = byte('a' + (i+id)%26)
	}
	crc := message.Checksum(payload)
	parts := []int{cfg.partition}
	if cfg.partition < 0 {
		parts = parts[:0]
		for p := 0; p < max(cfg.partitions, 1); p++ {
			parts = append(parts, p)
		}
	}
	w.parts, w.payload = parts, payload
	if cfg.idem || cfg.build {
		for range parts {
			w.pids = append(w.pids, rand.Int64()|1<<62)
			w.seqs = append(w.seqs, 0)
		}
	}
	if cfg.batch <= 1 {
		w.perReq = 1
		w.body = payload
		for _, p := range parts {
			h := protocol.AppendPutHeader(nil, cfg.topic, int32(p), len(payload), 0, int64(crc), 0)
			w.prefix = append(w.prefix, h[:len(h)-3]) // strip "0\r\n"
		}
	} else {
		w.perReq = int64(cfg.batch)
		for range cfg.batch {
			w.body = protocol.AppendMPutEntry(w.body, 0, int32(crc), payload)
		}
		for _, p := range parts {
			h := protocol.AppendMPutHeader(nil, cfg.topic, int32(p), len(w.body), cfg.batch, 0)
			w.prefix = append(w.prefix, h[:len(h)-3])
		}
	}
	n := max(cfg.inflight, 1)
	if cfg.sync {
		n = 1
	}
	w.slots = make([]atomic.Int64, n)
	return w
}

func (w *prodWorker) now() int64 { return int64(time.Since(w.base)) + 1 }

// appendReq appends the request to partition parts[part] with opaque op:
// pre-encoded, or with cfg.idem built with the partition's next
// sequences (and their checksums), as the SDK builds it.
func (w *prodWorker) appendReq(buf []byte, part int, op uint32) []byte {
	if !w.cfg.idem && !w.cfg.build {
		buf = append(buf, w.prefix[part]...)
		buf = strconv.AppendUint(buf, uint64(op&0x7FFFFFFF), 10)
		buf = append(buf, '\r', '\n')
		return append(buf, w.body...)
	}
	p := int32(w.parts[part])
	m := message.Message{Body: w.payload}
	if w.cfg.idem {
		m.ProducerID = w.pids[part]
	}
	if w.cfg.batch <= 1 {
		m.ProducerSeq = w.seqs[part]
		w.seqs[part]++
		w.data = m.AppendData(w.data[:0])
		buf = protocol.AppendPutHeader(buf, w.cfg.topic, p, len(w.data), m.Flag(), int64(message.Checksum(w.data)), int32(op&0x7FFFFFFF))
		return append(buf, w.data...)
	}
	w.entries = w.entries[:0]
	for range w.cfg.batch {
		m.ProducerSeq = w.seqs[part]
		w.seqs[part]++
		w.data = m.AppendData(w.data[:0])
		w.entries = protocol.AppendMPutEntry(w.entries, m.Flag(), int32(message.Checksum(w.data)), w.data)
	}
	buf = protocol.AppendMPutHeader(buf, w.cfg.topic, p, len(w.entries), w.cfg.batch, int32(op&0x7FFFFFFF))
	return append(buf, w.entries...)
}

func (w *prodWorker) fail(code int, body []byte) {
	w.errMsgs.Add(w.perReq)
	if w.firstErr.Load() == nil {
		w.firstErr.Store(strconv.Itoa(code) + " " + string(body))
	}
}

// reader matches replies to their send times until the connection closes.
func (w *prodWorker) reader() {
	defer close(w.rdone)
	dec := protocol.NewDecoder(w.nc, protocol.Limits{MaxLine: 4096, MaxBody: 1 << 20})
	var req protocol.Request
	n := int32(len(w.slots))
	t := w.now()
	for {
		fresh := dec.Buffered() == 0
		if err := dec.Decode(&req); err != nil {
			w.rerr = err
			return
		}
		if fresh {
			t = w.now()
		}
		slot := &w.slots[req.Opaque%n]
		if st := slot.Load(); st != 0 {
			w.lat.add(t - st)
		}
		slot.Store(0)
		if req.Code == protocol.StatusOK {
			w.okMsgs.Add(w.perReq)
		} else {
			w.fail(req.Code, req.Body)
		}
		w.acked.Add(1)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// run sends quota requests (or until deadline) and waits for their replies.
func (w *prodWorker) run(ctx context.Context, quota int64, deadline time.Time) (sent int64, err error) {
	if w.cfg.sync {
		return w.runSync(ctx, quota, deadline)
	}
	w.started = true
	go w.reader()
	n := uint32(len(w.slots))
	buf := make([]byte, 0, 256<<10+len(w.body)+256)
	var seq uint32
	np := len(w.prefix)
	part := w.id % np
	for sent < quota || quota == 0 {
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		buf = buf[:0]
		now := w.now()
		for (sent < quota || quota == 0) && len(buf) < 128<<10 {
			slot := &w.slots[seq%n]
			if slot.Load() != 0 {
				break
			}
			slot.Store(now)
			buf = w.appendReq(buf, part, seq)
			seq++
			sent++
			if part++; part == np {
				part = 0
			}
		}
		if len(buf) == 0 {
			select {
			case <-w.wake:
			case <-w.rdone:
				return sent, w.readErr()
			case <-ctx.Done():
				return sent, ctx.Err()
			}
			continue
		}
		if _, err := w.nc.Write(buf); err != nil {
			return sent, err
		}
	}
	for w.acked.Load() < sent {
		select {
		case <-w.wake:
		case <-w.rdone:
			return sent, w.readErr()
		case <-ctx.Done():
			return sent, ctx.Err()
		}
	}
	return sent, nil
}

func (w *prodWorker) readErr() error {
	if w.rerr == nil {
		return errors.New("connection closed")
	}
	return fmt.Errorf("reading replies: %w", w.rerr)
}

// runSync is a synchronous put loop: write one request, read its reply.
func (w *prodWorker) runSync(ctx context.Context, quota int64, deadline time.Time) (sent int64, err error) {
	dec := protocol.NewDecoder(w.nc, protocol.Limits{MaxLine: 4096, MaxBody: 1 << 20})
	var req protocol.Request
	buf := make([]byte, 0, len(w.body)+256)
	part := w.id % len(w.prefix)
	for seq := uint32(0); sent < quota || quota == 0; seq++ {
		if ctx.Err() != nil {
			return sent, ctx.Err()
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		buf = w.appendReq(buf[:0], part, seq)
		if part++; part == len(w.prefix) {
			part = 0
		}
		t0 := time.Now()
		if _, err := w.nc.Write(buf); err != nil {
			return sent, err
		}
		if err := dec.Decode(&req); err != nil {
			return sent, err
		}
		w.lat.add(int64(time.Since(t0)))
		sent++
		w.acked.Add(1)
		if req.Code == protocol.StatusOK {
			w.okMsgs.Add(w.perReq)
		} else {
			w.fail(req.Code, req.Body)
		}
	}
	return sent, nil
}

// runProduceBench runs the producers and sums up.
func runProduceBench(ctx context.Context, cfg prodConfig) (prodResult, error) {
	if cfg.batch > protocol.MaxMPutCount {
		return prodResult{}, fmt.Errorf("--batch %d over the mput limit %d", cfg.batch, protocol.MaxMPutCount)
	}
	if cfg.messages == 0 && cfg.duration <= 0 {
		return prodResult{}, errors.New("give --messages or --duration")
	}
	conns := make([]net.Conn, cfg.producers)
	for i := range conns {
		nc, err := cfg.sec.dial(ctx, cfg.addr)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return prodResult{}, err
		}
		conns[i] = nc
	}
	// A stuck broker must not hang the benchmark: close everything when the
	// context ends or well after the planned end.
	limit := 10 * time.Minute
	if cfg.messages == 0 {
		limit = cfg.duration + time.Minute
	}
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	stop := context.AfterFunc(wctx, func() {
		for _, c := range conns {
			c.Close()
		}
	})
	defer stop()

	base := time.Now()
	var deadline time.Time
	if cfg.messages == 0 {
		deadline = base.Add(cfg.duration)
	}
	perReq := int64(max(cfg.batch, 1))
	workers := make([]*prodWorker, cfg.producers)
	errs := make([]error, cfg.producers)
	var sentReqs atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		w := newProdWorker(&cfg, i, conns[i], base)
		workers[i] = w
		var quota int64
		if cfg.messages > 0 {
			share := cfg.messages / int64(cfg.producers)
			if int64(i) < cfg.messages%int64(cfg.producers) {
				share++
			}
			quota = (share + perReq - 1) / perReq
			if quota == 0 {
				continue
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := w.run(wctx, quota, deadline)
			sentReqs.Add(n)
			errs[i] = err
		}()
	}
	stopProg := func() {}
	if cfg.prog != nil {
		tick := time.NewTicker(progressEvery)
		done, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				var n int64
				for _, w := range workers {
					n += w.okMsgs.Load()
				}
				cfg.prog.update("%d messages acknowledged, %.1fs", n, time.Since(base).Seconds())
			}
		}()
		stopProg = func() { close(done); <-stopped; cfg.prog.done() }
	}
	wg.Wait()
	stopProg()
	elapsed := time.Since(base)
	for _, c := range conns {
		c.Close()
	}
	for _, w := range workers {
		if w.started {
			<-w.rdone
		}
	}
	res := prodResult{Elapsed: elapsed, Requests: sentReqs.Load()}
	recs := make([]*latRec, 0, len(workers))
	for _, w := range workers {
		res.Msgs += w.okMsgs.Load()
		res.Errors += w.errMsgs.Load()
		if s, ok := w.firstErr.Load().(string); ok && res.FirstErr == "" {
			res.FirstErr = s
		}
		recs = append(recs, w.lat)
	}
	res.Lat = latStats(recs...)
	res.P50, res.P99, res.P999 = res.Lat.P50, res.Lat.P99, res.Lat.P999
	if sec := elapsed.Seconds(); sec > 0 {
		res.MsgsPerS = float64(res.Msgs) / sec
		res.MBPerS = float64(res.Msgs) * float64(cfg.size) / sec / 1e6
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	return res, nil
}
