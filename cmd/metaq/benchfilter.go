package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The consumer filter benchmark (bench consume --filter-pass PCT; issue 26:
// "consume with a tag filter that passes 10% of messages: report messages
// examined per second against an unfiltered get"). It appends --messages
// records of --size payload bytes whose tag is "TagA" for PCT% of them
// (evenly spread) and "TagB" for the others (not timed), then reads that
// range with the same pipelined gets as bench consume, alternately
// unfiltered (plain value replies, sendfile) and on a connection that
// registered the consumer filter "TagA" (the broker scans every record,
// evaluates the filter and sends the kept ones as fvalue replies), --rounds
// times each, and reports the records examined per second of both (the
// medians) and their ratio.

type filterBenchResult struct {
	Messages   int64     `json:"messages"`
	PassPct    int       `json:"pass_pct"`
	Rounds     int       `json:"rounds"`
	RecordSize int64     `json:"record_size"`
	Delivered  int64     `json:"delivered"` // per filtered round
	PlainPerS  float64   `json:"unfiltered_examined_per_s"`
	FiltPerS   float64   `json:"filtered_examined_per_s"`
	Ratio      float64   `json:"filtered_over_unfiltered"`
	PlainRuns  []float64 `json:"unfiltered_runs"`
	FiltRuns   []float64 `json:"filtered_runs"`
	// With --broker-pid: the broker's CPU time (user + system) per record
	// examined, in ns, over all rounds of each.
	PlainCPUNs float64 `json:"unfiltered_broker_cpu_ns_per_record,omitempty"`
	FiltCPUNs  float64 `json:"filtered_broker_cpu_ns_per_record,omitempty"`
}

// fillTagged appends cfg.messages tagged records to the partition and
// returns the range they take and the record size.
func fillTagged(ctx context.Context, cfg consConfig, pct int) (start, end, rec int64, err error) {
	rc, err := dialRaw(ctx, cfg.sec, cfg.addr)
	if err != nil {
		return 0, 0, 0, err
	}
	defer rc.Close()
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	payload := make([]byte, cfg.size)
	data := func(keep bool) (int32, []byte) {
		m := message.Message{Body: payload, Tags: []string{"TagB"}}
		if keep {
			m.Tags[0] = "TagA"
		}
		return m.Flag(), m.AppendData(nil)
	}
	flag, keepData := data(true)
	_, dropData := data(false)
	rec = int64(message.HeaderSize + len(keepData))
	batch := max(1, min(256, (1<<20)/(len(keepData)+protocol.MPutEntryHeader)))
	var body []byte
	start = -1
	for i := int64(0); i < cfg.messages; {
		n := int(min(int64(batch), cfg.messages-i))
		body = body[:0]
		for j := range n {
			d := dropData
			if (i+int64(j))*int64(pct)%100 < int64(pct) {
				d = keepData
			}
			body = protocol.AppendMPutEntry(body, flag, int32(message.Checksum(d)), d)
		}
		code, reply, err := rc.roundTrip(func(dst []byte, op int32) []byte {
			dst = protocol.AppendMPutHeader(dst, cfg.topic, cfg.partition, len(body), n, op)
			return append(dst, body...)
		})
		if err != nil {
			return 0, 0, 0, err
		}
		if code != protocol.StatusOK {
			return 0, 0, 0, fmt.Errorf("filling %s-%d: %d %s", cfg.topic, cfg.partition, code, reply)
		}
		_, _, off, _, err := protocol.ParsePutResult(reply)
		if err != nil {
			return 0, 0, 0, err
		}
		if start < 0 {
			start = off
		} else if off != end {
			return 0, 0, 0, fmt.Errorf("filling %s-%d: another writer appended at %d", cfg.topic, cfg.partition, end)
		}
		end = off + int64(n)*rec
		i += int64(n)
	}
	return start, end, rec, nil
}

// runFilteredRead reads [start, end) (records of rec bytes) with cfg.depth
// pipelined gets of cfg.fetch bytes on a new connection, through the
// consumer filter expr if it is not "", checking each delivered record,
// and returns the records delivered and the time taken.
func runFilteredRead(ctx context.Context, cfg consConfig, expr string, start, end, rec int64) (int64, time.Duration, error) {
	rc, err := dialRaw(ctx, cfg.sec, cfg.addr)
	if err != nil {
		return 0, 0, err
	}
	defer rc.Close()
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	group := cfg.group
	if expr != "" {
		group += "-filtered"
		code, body, err := rc.roundTrip(func(dst []byte, op int32) []byte {
			return protocol.AppendFilter(dst, cfg.topic, group, expr, op)
		})
		if err != nil {
			return 0, 0, err
		}
		if code != protocol.StatusOK {
			return 0, 0, fmt.Errorf("filter %q: %d %s", expr, code, body)
		}
	}
	fetch := max(int64(cfg.fetch)/rec, 1) * rec
	depth := max(cfg.depth, 1)
	ring := make([]getReq, depth)
	var (
		op             uint32 = uint32(rc.op) + 1
		firstOp               = op
		issued, expect        = start, start
		gen, pending   int
		delivered      int64
		wbuf           []byte
	)
	t0 := time.Now()
	for expect < end {
		wbuf = wbuf[:0]
		for pending < depth && issued < end {
			size := min(fetch, end-issued)
			ring[op%uint32(depth)] = getReq{off: issued, gen: gen}
			wbuf = protocol.AppendGet(wbuf, cfg.topic, group, cfg.partition, issued, int32(size), int32(op&0x7FFFFFFF))
			issued += size
			op++
			pending++
		}
		if len(wbuf) > 0 {
			if _, err := rc.nc.Write(wbuf); err != nil {
				return 0, 0, err
			}
		}
		r := &rc.req
		if err := rc.dec.Decode(r); err != nil {
			return 0, 0, fmt.Errorf("reading get replies: %w", err)
		}
		if uint32(r.Opaque) != firstOp&0x7FFFFFFF {
			return 0, 0, fmt.Errorf("reply out of order: opaque %d, want %d", r.Opaque, firstOp)
		}
		g := ring[firstOp%uint32(depth)]
		firstOp++
		pending--
		if g.gen != gen || g.off != expect {
			continue // asked before a short reply moved the position
		}
		var next int64
		switch {
		case r.Op == protocol.OpValue:
			n := 0
			for {
				_, sz, err := message.ParseRecord(r.Body[n:], 0)
				if err != nil {
					break
				}
				n += sz
				delivered++
			}
			next = expect + int64(n)
		case r.Op == protocol.OpFValue:
			for pos := 0; pos+8 <= len(r.Body); {
				_, sz, err := message.ParseRecord(r.Body[pos+8:], 0)
				if err != nil {
					return 0, 0, fmt.Errorf("filtered reply at %d: record at %d: %w", expect, binary.BigEndian.Uint64(r.Body[pos:]), err)
				}
				pos += 8 + sz
				delivered++
			}
			next = r.Offset
		case r.Code == protocol.StatusMoved:
			next, _ = protocol.ParseInt64(r.Body)
		default:
			return 0, 0, fmt.Errorf("get %s-%d at %d: broker replied %d %s", cfg.topic, cfg.partition, g.off, r.Code, r.Body)
		}
		if next <= expect {
			return 0, 0, fmt.Errorf("get at %d moved nowhere (next %d)", expect, next)
		}
		if next != min(expect+fetch, end) {
			gen++ // a short reply (a segment's end): re-ask from next
			issued = next
		}
		expect = next
	}
	return delivered, time.Since(t0), nil
}

// benchConsumeFilter runs the consumer filter benchmark.
func benchConsumeFilter(ctx context.Context, cfg consConfig, pct, rounds, brokerPID int) (filterBenchResult, error) {
	res := filterBenchResult{Messages: cfg.messages, PassPct: pct, Rounds: rounds}
	start, end, rec, err := fillTagged(ctx, cfg, pct)
	if err != nil {
		return res, err
	}
	res.RecordSize = rec
	var cpu [2]time.Duration // unfiltered, filtered
	for i := range 2 * rounds {
		expr := ""
		if i%2 == 1 {
			expr = "TagA"
		}
		var c0 time.Duration
		if brokerPID > 0 {
			var ok bool
			if c0, ok = procCPU(brokerPID); !ok {
				return res, fmt.Errorf("--broker-pid %d: no /proc/%d/stat", brokerPID, brokerPID)
			}
		}
		n, d, err := runFilteredRead(ctx, cfg, expr, start, end, rec)
		if err != nil {
			return res, err
		}
		if brokerPID > 0 {
			c1, _ := procCPU(brokerPID)
			cpu[i%2] += c1 - c0
		}
		perS := float64(cfg.messages) / d.Seconds()
		if expr == "" {
			if n != cfg.messages {
				return res, fmt.Errorf("unfiltered: %d records delivered, want %d", n, cfg.messages)
			}
			res.PlainRuns = append(res.PlainRuns, perS)
		} else {
			res.Delivered = n
			res.FiltRuns = append(res.FiltRuns, perS)
		}
	}
	if want := (cfg.messages*int64(pct) + 99) / 100; res.Delivered < want-1 || res.Delivered > want+1 {
		return res, fmt.Errorf("filtered: %d records delivered, want about %d", res.Delivered, want)
	}
	res.PlainPerS, res.FiltPerS = median(slices.Clone(res.PlainRuns)), median(slices.Clone(res.FiltRuns))
	res.Ratio = res.FiltPerS / res.PlainPerS
	if brokerPID > 0 {
		examined := float64(cfg.messages) * float64(rounds)
		res.PlainCPUNs = float64(cpu[0].Nanoseconds()) / examined
		res.FiltCPUNs = float64(cpu[1].Nanoseconds()) / examined
	}
	return res, nil
}

func printConsumeFilter(w io.Writer, cfg consConfig, r filterBenchResult) {
	fmt.Fprintf(w, "bench consume --filter-pass: topic=%s partition=%d size=%d record=%d messages=%d pass=%d%% rounds=%d\n",
		cfg.topic, cfg.partition, cfg.size, r.RecordSize, r.Messages, r.PassPct, r.Rounds)
	fmt.Fprintf(w, "unfiltered get: examined/s=%.0f (runs %s)\n", r.PlainPerS, fmtRuns(r.PlainRuns))
	fmt.Fprintf(w, "filter TagA:    examined/s=%.0f (runs %s) delivered=%d\n", r.FiltPerS, fmtRuns(r.FiltRuns), r.Delivered)
	fmt.Fprintf(w, "filtered/unfiltered=%.2f\n", r.Ratio)
	if r.PlainCPUNs > 0 || r.FiltCPUNs > 0 {
		fmt.Fprintf(w, "broker cpu per record examined: unfiltered=%.0fns filtered=%.0fns (filtered/unfiltered=%.2f)\n",
			r.PlainCPUNs, r.FiltCPUNs, r.FiltCPUNs/r.PlainCPUNs)
	}
}

func fmtRuns(xs []float64) string {
	var b []byte
	for i, x := range xs {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%.0f", x)
	}
	return string(b)
}
