package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// fetched is what a partition's fetcher hands to delivery: whole messages
// with the offset after each (ends[i], from the record's decoded size: never
// recomputed from msgs[i], which the handler may change), then the position
// after them (which a 301 or resync may move without messages), or a
// permanent error.
type fetched struct {
	part *partState
	msgs []message.Message
	ends []int64
	next int64
	err  error
}

// fetcher is the state of one partition's fetch loop.
type fetcher struct {
	c      *brokerConsumer
	ps     *partState
	offset int64 // next offset to get
	// aligned: offset is known to be a record start (not a user's AtOffset
	// that no record has been read from yet).
	aligned bool
	delay   time.Duration // pause before the next get
	buf     []byte
	recs    []message.Record
}

// fetchLoop gets records from ps until ctx ends or a permanent error;
// emit returns false when delivery has stopped.
func (c *brokerConsumer) fetchLoop(ctx context.Context, ps *partState, emit func(*fetched) bool) {
	c.fetchLoopFrom(ctx, ps, ps.pos.Load(), emit)
}

// fetchLoopFrom is fetchLoop from offset from (ps.pos, or a ManualAck
// partition's rewind offset).
func (c *brokerConsumer) fetchLoopFrom(ctx context.Context, ps *partState, from int64, emit func(*fetched) bool) {
	f := &fetcher{c: c, ps: ps, offset: from, aligned: !ps.unaligned}
	for {
		if f.delay > 0 && backoff.Sleep(ctx, f.delay) != nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		out, err := f.fetchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			emit(&fetched{part: ps, err: err})
			return
		}
		if out != nil && !emit(out) {
			return
		}
	}
}

// backoff adds a tenth of the maximum delay (MetaQ's rule).
func (f *fetcher) backoff() {
	maxD := f.c.cfg.maxDelay
	f.delay = min(f.delay+maxD/10, maxD)
}

// fetchOnce runs one get (and a resync if needed). It returns something to
// deliver, nothing (and sets the delay), or a permanent error.
func (f *fetcher) fetchOnce(ctx context.Context) (*fetched, error) {
	c, ps := f.c, f.ps
	rctx, cancel := context.WithTimeout(ctx, c.cn.opts.requestTimeout)
	offset, size := f.offset, ps.fetchSize
	encode := func(dst []byte, op int32) []byte {
		return protocol.AppendGet(dst, c.topic, c.cfg.group, ps.p, offset, int32(size), op)
	}
	var call *call
	var err error
	if c.cfg.filter == "" {
		call, err = c.cn.roundTripBuf(rctx, f.buf, encode)
	} else {
		// The get must go on a connection the filter is registered on.
		var w *wire
		if w, err = c.filterWire(rctx); err == nil {
			call, err = w.roundTripBuf(rctx, f.buf, encode)
		}
		var ferr *filterError
		if errors.As(err, &ferr) {
			cancel()
			return nil, ferr.err
		}
	}
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.logger.Debug("metaq: get failed", "topic", c.topic, "partition", ps.p, "err", err)
			f.backoff()
		}
		return nil, nil
	}
	// Keep the reply buffer for the next get; the pooled call must not keep it.
	code, body, filtered, next := call.code, call.body, call.filtered, call.next
	f.buf = body[:0]
	call.body = nil
	putCall(call)
	switch code {
	case protocol.StatusOK:
		if filtered {
			return f.parseFiltered(body, next)
		}
		return f.parse(ctx, body)
	case protocol.StatusMoved:
		to, ok := protocol.ParseInt64(body)
		if !ok || to == offset || to < 0 {
			c.cfg.logger.Warn("metaq: bad 301 reply", "topic", c.topic, "partition", ps.p, "offset", offset, "body", string(body))
			f.backoff()
			return nil, nil
		}
		// The broker moves us to a segment start or its max offset: record starts.
		f.offset, f.aligned, f.delay = to, true, 0
		ps.unaligned = false
		return &fetched{part: ps, next: to}, nil
	case protocol.StatusNotFound:
		f.backoff()
		return nil, nil
	case protocol.StatusBadRequest:
		return nil, fmt.Errorf("metaq: get %s-%d at %d: %w", c.topic, ps.p, offset, resultError(code, body))
	case protocol.StatusInternalError:
		if bytes.HasPrefix(body, []byte(protocol.CorruptDataPrefix)) {
			// Damaged on the broker's disk: never retried as is. resync
			// re-aligns an offset that may not be a record start, and
			// otherwise reports a *CorruptRecordError.
			return f.resync(ctx, fmt.Errorf("%w: %w", message.ErrCorruptRecord, resultError(code, body)))
		}
		c.cfg.logger.Warn("metaq: get refused", "topic", c.topic, "partition", ps.p, "offset", offset,
			"err", resultError(code, body))
		f.backoff()
		return nil, nil
	default:
		c.cfg.logger.Warn("metaq: get refused", "topic", c.topic, "partition", ps.p, "offset", offset,
			"err", resultError(code, body))
		f.backoff()
		return nil, nil
	}
}

// filterError is a permanent failure to register the consumer's filter.
type filterError struct{ err error }

func (e *filterError) Error() string { return e.err.Error() }

// filterWire returns the live connection to c's broker with c's filter
// registered on it for c's topic and group, sending the filter request
// first on a connection that does not have it (a new one after a
// reconnect, or a failover to another broker). A refusal that retrying
// cannot cure (a bad expression, a broker without the command) is a
// *filterError.
func (c *brokerConsumer) filterWire(ctx context.Context) (*wire, error) {
	w, err := c.cn.get(ctx)
	if err != nil {
		return nil, err
	}
	k := filterKey{c.topic, c.cfg.group}
	if w.hasFilter(k, c.cfg.filter) {
		return w, nil
	}
	call, err := w.roundTripBuf(ctx, nil, func(dst []byte, op int32) []byte {
		return protocol.AppendFilter(dst, c.topic, c.cfg.group, c.cfg.filter, op)
	})
	if err != nil {
		return nil, err
	}
	code, body := call.code, string(call.body)
	putCall(call)
	switch {
	case code == protocol.StatusOK:
		w.setFilter(k, c.cfg.filter)
		return w, nil
	case code == protocol.StatusBadRequest && strings.HasPrefix(body, "unknown command"):
		return nil, &filterError{fmt.Errorf("%w: %s answered %q", ErrFilterUnsupported, c.cn.addr, body)}
	case code == protocol.StatusBadRequest:
		return nil, &filterError{fmt.Errorf("%w %q for %s as %s: %s", ErrBadFilter, c.cfg.filter, c.topic, c.cfg.group, body)}
	}
	return nil, fmt.Errorf("metaq: filter for %s as %s: %w", c.topic, c.cfg.group, resultError(code, []byte(body)))
}

// parse walks a value reply: whole records become messages (bodies copied
// into one new slab), a record larger than the get grows it, a bad record
// triggers a resync.
func (f *fetcher) parse(ctx context.Context, body []byte) (*fetched, error) {
	it := message.NewIterator(body, f.offset, 0)
	f.recs = f.recs[:0]
	total := 0
	for it.Next() {
		r := *it.Record()
		f.recs = append(f.recs, r)
		total += len(r.Data)
	}
	if len(f.recs) == 0 {
		if it.Err() != nil {
			return f.resync(ctx, it.Err())
		}
		return f.tooSmall(ctx, body)
	}
	return f.deliver(total, it.NextOffset(), len(body)), nil
}

// parseFiltered walks an fvalue reply (a get the broker ran through the
// group's server-side filter): [int64 BE offset][record] entries, only the
// kept records, each with its own offset; next is where the next get
// starts, past the records the filter skipped.
func (f *fetcher) parseFiltered(body []byte, next int64) (*fetched, error) {
	c, ps := f.c, f.ps
	f.recs = f.recs[:0]
	total := 0
	last := f.offset - 1
	for pos := 0; pos < len(body); {
		var (
			r   message.Record
			n   int
			err error
		)
		if len(body)-pos < 8 {
			err = message.ErrShortRecord
		} else {
			r, n, err = message.ParseRecord(body[pos+8:], 0)
			r.Offset = int64(binary.BigEndian.Uint64(body[pos:]))
		}
		if err == nil && (r.Offset <= last || r.Offset >= next) {
			err = fmt.Errorf("offset %d out of order (previous %d, next %d)", r.Offset, last, next)
		}
		if err != nil {
			// The broker checked every record before filtering, so this is a
			// broken reply rather than bad data: try the same get again later.
			c.cfg.logger.Warn("metaq: bad filtered reply", "topic", c.topic, "partition", ps.p, "offset", f.offset, "err", err)
			f.backoff()
			return nil, nil
		}
		f.recs = append(f.recs, r)
		total += len(r.Data)
		last = r.Offset
		pos += 8 + n
	}
	if next <= f.offset {
		c.cfg.logger.Warn("metaq: bad filtered reply", "topic", c.topic, "partition", ps.p, "offset", f.offset, "next", next)
		f.backoff()
		return nil, nil
	}
	return f.deliver(total, next, int(min(next-f.offset, int64(ps.fetchSize)))), nil
}

// deliver turns f.recs (total data bytes) into messages, copying their data
// into one new slab, and moves the fetch position to next. scanned is how
// many bytes of the partition the get covered, for the fetch-size shrink.
func (f *fetcher) deliver(total int, next int64, scanned int) *fetched {
	c, ps := f.c, f.ps
	slab := make([]byte, total)
	msgs := make([]message.Message, len(f.recs))
	ends := make([]int64, len(f.recs))
	for i := range f.recs {
		r := &f.recs[i]
		ends[i] = r.Offset + int64(r.Size())
		n := copy(slab, r.Data)
		r.Data, slab = slab[:n:n], slab[n:]
		m, err := r.Message(c.topic, ps.p)
		if err != nil {
			// The broker validates attributes on put, so this is unexpected:
			// deliver the raw data rather than lose the message.
			c.cfg.logger.Warn("metaq: bad attribute or properties", "topic", c.topic, "partition", ps.p, "offset", r.Offset, "err", err)
			m = message.Message{Topic: c.topic, Body: r.Data, ID: r.ID, Partition: ps.p, Offset: r.Offset}
		}
		msgs[i] = m
		r.Data = nil
	}
	f.offset, f.aligned, f.delay = next, true, 0
	ps.unaligned = false
	if scanned < ps.fetchSize/2 && ps.fetchSize > c.cfg.fetchSize {
		ps.fetchSize = max(ps.fetchSize/2, c.cfg.fetchSize)
	}
	return &fetched{part: ps, msgs: msgs, ends: ends, next: f.offset}
}

// tooSmall handles a reply with no whole record: grow the get if the first
// record is larger than it, otherwise wait for more data.
func (f *fetcher) tooSmall(ctx context.Context, body []byte) (*fetched, error) {
	c, ps := f.c, f.ps
	if len(body) < message.HeaderSize {
		f.backoff()
		return nil, nil
	}
	if !f.aligned {
		// No whole record at a user-given offset: it may lie inside a
		// record (the last one, say), so re-align instead of waiting for
		// the rest of a record that is not being written.
		return f.resync(ctx, fmt.Errorf("%w: no whole record at a user-given offset", message.ErrCorruptRecord))
	}
	need := int64(message.HeaderSize) + int64(int32(binary.BigEndian.Uint32(body)))
	if need <= int64(ps.fetchSize) {
		f.backoff() // the record is still being written, or the reply was cut short
		return nil, nil
	}
	if need > int64(c.cfg.fetchLimit) {
		return nil, fmt.Errorf("%w: %s-%d offset %d holds a %d-byte record, limit %d",
			ErrRecordTooLarge, c.topic, ps.p, f.offset, need, c.cfg.fetchLimit)
	}
	for int64(ps.fetchSize) < need {
		ps.fetchSize = min(ps.fetchSize*2, c.cfg.fetchLimit)
	}
	f.delay = 0
	return nil, nil
}

// resync asks the broker for the nearest valid offset after a bad record.
// Moving forward skips the bad bytes. Moving back is allowed once when the
// offset came from AtOffset and may not be a record start: reading forward
// from the segment start re-aligns. Anything else would loop: report it.
func (f *fetcher) resync(ctx context.Context, cause error) (*fetched, error) {
	c, ps := f.c, f.ps
	bad := f.offset
	to, err := nearestOffset(ctx, c.cn, c.topic, c.cfg.group, ps.p, bad)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.logger.Warn("metaq: resync failed", "topic", c.topic, "partition", ps.p, "offset", bad, "err", err)
			f.backoff()
		}
		return nil, nil
	}
	if to == bad && !f.aligned {
		// The user's offset is a record start after all: read it as one.
		f.aligned, f.delay = true, 0
		ps.unaligned = false
		return nil, nil
	}
	if to > bad || (to < bad && !f.aligned) {
		c.cfg.logger.Warn("metaq: skipped a bad record", "topic", c.topic, "partition", ps.p, "from", bad, "to", to, "err", cause)
		f.offset, f.aligned, f.delay = to, true, 0
		ps.unaligned = false
		return &fetched{part: ps, next: to}, nil
	}
	return nil, &CorruptRecordError{Topic: c.topic, Partition: ps.p, Offset: bad, Err: cause}
}
