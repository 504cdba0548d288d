package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

type consConfig struct {
	addr      string
	sec       *security
	topic     string
	group     string
	partition int32
	size      int
	messages  int64
	depth     int // gets in flight
	fetch     int // bytes per get (rounded down to whole records)
	// prog, if set, shows the messages read while it runs.
	prog *progress
}

type consResult struct {
	Msgs     int64         `json:"msgs"`
	Bytes    int64         `json:"bytes"`
	Gets     int64         `json:"gets"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	MsgsPerS float64       `json:"msgs_per_s"`
	MBPerS   float64       `json:"mb_per_s"`
	Filled   int64         `json:"filled"` // messages produced before the timed part
	Start    int64         `json:"start_offset"`
}

// prepareConsume makes sure the partition ends with cfg.messages records of
// cfg.size bytes, producing them if needed, and returns their start offset.
func prepareConsume(ctx context.Context, cfg consConfig, timeout time.Duration) (start, filled int64, err error) {
	rec := int64(message.HeaderSize + cfg.size)
	need := cfg.messages * rec
	cl, err := client.New(append([]client.Opt{client.Logger(silentLogger), client.RequestTimeout(timeout), client.Brokers(cfg.addr)},
		cfg.sec.clientOpts()...)...)
	if err != nil {
		return 0, 0, err
	}
	adm := admin.New(cl)
	defer adm.Close()
	bounds := func() (int64, int64, error) {
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ts, err := adm.Topics(actx)
		if err != nil {
			return 0, 0, err
		}
		for _, t := range ts {
			if t.Name != cfg.topic {
				continue
			}
			for _, o := range t.Offsets {
				if o.Partition == cfg.partition {
					return o.Min, o.Max, nil
				}
			}
		}
		return 0, 0, fmt.Errorf("the broker at %s has no partition %s-%d", cfg.addr, cfg.topic, cfg.partition)
	}
	lo, hi, err := bounds()
	if err != nil {
		return 0, 0, err
	}
	if hi-lo >= need && probeRecord(ctx, cfg, hi-need) {
		return hi - need, 0, nil
	}
	batch := max(1, min(256, (1<<20)/(cfg.size+protocol.MPutEntryHeader)))
	res, err := runProduceBench(ctx, prodConfig{addr: cfg.addr, sec: cfg.sec, topic: cfg.topic, size: cfg.size, producers: 1,
		batch: batch, inflight: 8, messages: cfg.messages, partition: int(cfg.partition)})
	if err != nil {
		return 0, 0, fmt.Errorf("filling %s-%d: %w", cfg.topic, cfg.partition, err)
	}
	if res.Errors > 0 {
		return 0, 0, fmt.Errorf("filling %s-%d: %d messages failed: %s", cfg.topic, cfg.partition, res.Errors, res.FirstErr)
	}
	// In threshold mode the data becomes readable at the next flush.
	want := hi + need
	for end := time.Now().Add(30 * time.Second); ; {
		_, hi, err = bounds()
		if err != nil {
			return 0, 0, err
		}
		if hi >= want || time.Now().After(end) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !probeRecord(ctx, cfg, hi-need) {
		return 0, 0, fmt.Errorf("%s-%d: the last %d records are not all %d bytes (another writer?)", cfg.topic, cfg.partition, cfg.messages, cfg.size)
	}
	return hi - need, cfg.messages, nil
}

// probeRecord reports whether a record of cfg.size bytes starts at off.
func probeRecord(ctx context.Context, cfg consConfig, off int64) bool {
	rc, err := dialRaw(ctx, cfg.sec, cfg.addr)
	if err != nil {
		return false
	}
	defer rc.Close()
	rc.nc.SetDeadline(time.Now().Add(10 * time.Second))
	code, body, err := rc.roundTrip(func(dst []byte, op int32) []byte {
		return protocol.AppendGet(dst, cfg.topic, cfg.group, cfg.partition, off, int32(message.HeaderSize+cfg.size), op)
	})
	if err != nil || code != protocol.StatusOK {
		return false
	}
	r, _, err := message.ParseRecord(body, 0)
	return err == nil && len(r.Data) == cfg.size
}

type getReq struct {
	off int64
	gen int
}

// runConsumeBench reads [start, start+messages*record) of one partition on
// one connection with cfg.depth pipelined gets, checking every record's CRC.
func runConsumeBench(ctx context.Context, cfg consConfig, start int64) (consResult, error) {
	rec := int64(message.HeaderSize + cfg.size)
	end := start + cfg.messages*rec
	fetch := max(int64(cfg.fetch)/rec, 1) * rec
	rc, err := dialRaw(ctx, cfg.sec, cfg.addr)
	if err != nil {
		return consResult{}, err
	}
	defer rc.Close()
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	depth := max(cfg.depth, 1)
	ring := make([]getReq, depth)
	var (
		op      uint32
		issued  = start // next offset to ask for
		expect  = start // next offset to deliver
		gen     int
		pending int
		res     consResult
		wbuf    []byte
		firstOp uint32 // opaques in flight: [firstOp, op)
	)
	res.Start = start
	defer cfg.prog.done()
	t0 := time.Now()
	for expect < end {
		wbuf = wbuf[:0]
		for pending < depth && issued < end {
			size := min(fetch, end-issued)
			ring[op%uint32(depth)] = getReq{off: issued, gen: gen}
			wbuf = protocol.AppendGet(wbuf, cfg.topic, cfg.group, cfg.partition, issued, int32(size), int32(op&0x7FFFFFFF))
			issued += size
			op++
			pending++
		}
		if len(wbuf) > 0 {
			if _, err := rc.nc.Write(wbuf); err != nil {
				return res, err
			}
		}
		if err := rc.dec.Decode(&rc.req); err != nil {
			return res, fmt.Errorf("reading get replies: %w", err)
		}
		if uint32(rc.req.Opaque) != firstOp&0x7FFFFFFF {
			return res, fmt.Errorf("reply out of order: opaque %d, want %d", rc.req.Opaque, firstOp)
		}
		g := ring[firstOp%uint32(depth)]
		firstOp++
		pending--
		res.Gets++
		if g.gen != gen || g.off != expect {
			continue // asked before a short reply moved the position
		}
		if rc.req.Op != protocol.OpValue {
			return res, fmt.Errorf("get %s-%d at %d: broker replied %d %s", cfg.topic, cfg.partition, g.off, rc.req.Code, rc.req.Body)
		}
		body := rc.req.Body
		n := 0
		for {
			r, sz, err := message.ParseRecord(body[n:], 0)
			if err != nil {
				if errors.Is(err, message.ErrShortRecord) {
					break
				}
				return res, fmt.Errorf("record at %d: %w", expect+int64(n), err)
			}
			if len(r.Data) != cfg.size {
				return res, fmt.Errorf("record at %d holds %d bytes, want %d", expect+int64(n), len(r.Data), cfg.size)
			}
			n += sz
			res.Msgs++
		}
		if n == 0 {
			return res, fmt.Errorf("get at %d returned no whole record", expect)
		}
		res.Bytes += int64(n) - int64(n)/rec*message.HeaderSize
		cfg.prog.update("%d of %d messages read", res.Msgs, cfg.messages)
		expect += int64(n)
		if int64(n) < min(fetch, end-g.off) {
			// A short reply (the end of a segment): re-ask from here.
			gen++
			issued = expect
		}
	}
	res.Elapsed = time.Since(t0)
	if s := res.Elapsed.Seconds(); s > 0 {
		res.MsgsPerS = float64(res.Msgs) / s
		res.MBPerS = float64(res.Bytes) / s / 1e6
	}
	return res, nil
}
