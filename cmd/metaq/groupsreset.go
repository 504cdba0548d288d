package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The new offsets of `group reset-offsets`, and committing them.
//
// A time is found without any broker extension, from what every broker
// answers: message ids carry the wall-clock millisecond at which the broker
// stored them, and ids rise with offsets, so the times of a partition's
// records never decrease. The only offsets known to be record starts
// without reading are the segment starts, which the `offset` command
// returns for any offset inside a segment. So:
//
//  1. bisect the byte range [min, max): for a probe x, s = offset(x) is the
//     start of x's segment and a 20-byte get at s is the header of its
//     first record, whose id gives the time; this finds the last segment
//     whose first record is older than the time (O(log bytes) small
//     requests);
//  2. scan that segment's records with gets, up to its end: the answer is
//     the first record at or after the time, else the next segment's start
//     (or the log end).
//
// The scan reads at most one segment (max_segment_size, 1 GiB by default).

// newOffset returns the offset r moves to.
func (gs *groupState) newOffset(e *env, r partRow, to resetTo) (int64, error) {
	bs := gs.brokers[r.BrokerID]
	if bs == nil || bs.err != nil || r.LogStart == nil || r.LogEnd == nil {
		return 0, fmt.Errorf("%s: the log bounds are unknown (broker %d not readable)", partName(r), r.BrokerID)
	}
	lo, hi := *r.LogStart, *r.LogEnd
	switch to.kind {
	case "earliest":
		return lo, nil
	case "latest":
		return hi, nil
	case "offset":
		if to.offset < lo || to.offset > hi {
			return 0, fmt.Errorf("offset %d is outside %s's stored range [%d, %d]", to.offset, partName(r), lo, hi)
		}
		if to.offset == lo || to.offset == hi {
			return to.offset, nil
		}
		ok, err := bs.isRecordStart(e.ctx, r.Topic, r.Partition, to.offset)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", partName(r), err)
		}
		if !ok {
			return 0, fmt.Errorf("offset %d is not the start of a record in %s (use an offset printed by "+
				"`metaq produce --verbose` or `metaq consume --json`)", to.offset, partName(r))
		}
		return to.offset, nil
	case "time":
		off, err := bs.offsetForTime(e.ctx, r.Topic, r.Partition, to.ms, lo, hi)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", partName(r), err)
		}
		return off, nil
	}
	return 0, fmt.Errorf("unknown --to kind %q", to.kind)
}

func partName(r partRow) string {
	return fmt.Sprintf("%s partition %d of broker %d", r.Topic, r.Partition, r.BrokerID)
}

// commit stores the plan through each partition's broker, one request per
// (broker, topic).
func (gs *groupState) commit(e *env, g string, plan []resetRow) error {
	type key struct {
		broker int
		topic  string
	}
	batches := map[key][]client.StoredOffset{}
	var order []key
	for _, p := range plan {
		k := key{p.BrokerID, p.Topic}
		if _, ok := batches[k]; !ok {
			order = append(order, k)
		}
		batches[k] = append(batches[k], client.StoredOffset{Partition: p.Partition, Offset: p.New, MsgID: -1})
	}
	done := 0
	for _, k := range order {
		ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
		err := gs.brokers[k.broker].store.CommitOffsets(ctx, g, k.topic, batches[k])
		cancel()
		if err != nil {
			return fmt.Errorf("broker %d, topic %s: %w (%d of %d partitions were committed before)",
				k.broker, k.topic, err, done, len(plan))
		}
		done += len(batches[k])
	}
	return nil
}

// errMoved: the log's start moved (retention) during the search.
var errMoved = errors.New("the partition's oldest segment was deleted meanwhile (retention); run the command again")

// get sends `get` on the session's raw connection and returns the body of
// its 200 reply (valid until the next call); a 301 (off out of range) is
// errMoved, any other code an error.
func (bs *brokerSession) get(ctx context.Context, topic string, part int32, off int64, size int) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if bs.rc == nil {
		dctx, cancel := context.WithTimeout(ctx, bs.timeout)
		rc, err := dialRaw(dctx, bs.addr)
		cancel()
		if err != nil {
			return nil, err
		}
		bs.rc = rc
	}
	dl := time.Now().Add(bs.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	bs.rc.nc.SetDeadline(dl)
	code, body, err := bs.rc.roundTrip(func(dst []byte, op int32) []byte {
		return protocol.AppendGet(dst, topic, scanGroup, part, off, int32(size), op)
	})
	switch {
	case err != nil:
		bs.rc.Close()
		bs.rc = nil
		return nil, fmt.Errorf("get at %d: %w", off, err)
	case code == protocol.StatusMoved:
		return nil, errMoved
	case code != protocol.StatusOK:
		return nil, fmt.Errorf("get at %d: broker replied %d: %s", off, code, body)
	}
	return body, nil
}

// getRecords is get for reading records: an empty body is an error.
func (bs *brokerSession) getRecords(ctx context.Context, topic string, part int32, off int64, size int) ([]byte, error) {
	body, err := bs.get(ctx, topic, part, off, size)
	if err == nil && len(body) == 0 {
		return nil, fmt.Errorf("get at %d: empty reply", off)
	}
	return body, err
}

// recordSize is the size of the record whose header starts b, as its
// length field claims; b holds at least message.HeaderSize bytes.
func recordSize(b []byte) int { return message.HeaderSize + int(int32(binary.BigEndian.Uint32(b))) }

// recordMs returns the time (unix ms) of the record starting at off.
func (bs *brokerSession) recordMs(ctx context.Context, topic string, part int32, off int64) (int64, error) {
	body, err := bs.getRecords(ctx, topic, part, off, message.HeaderSize)
	if err != nil {
		return 0, err
	}
	if len(body) < message.HeaderSize {
		return 0, fmt.Errorf("get at %d: %d bytes, not a record header", off, len(body))
	}
	ms, _, _ := message.IDParts(int64(binary.BigEndian.Uint64(body[8:16])))
	return ms, nil
}

// segmentStart returns the start of the segment holding off.
func (bs *brokerSession) segmentStart(ctx context.Context, topic string, part int32, off int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, bs.timeout)
	defer cancel()
	s, err := bs.adm.Offset(ctx, topic, scanGroup, part, off)
	if err != nil {
		return 0, err
	}
	if s > off {
		return 0, errMoved
	}
	return s, nil
}

// offsetForTime returns the offset of the first record of the partition
// stored at or after ms (unix milliseconds), or hi when there is none; lo
// and hi are the partition's min and max offsets.
func (bs *brokerSession) offsetForTime(ctx context.Context, topic string, part int32, ms, lo, hi int64) (int64, error) {
	if lo >= hi {
		return hi, nil
	}
	t, err := bs.recordMs(ctx, topic, part, lo)
	if err != nil {
		return 0, err
	}
	if t >= ms {
		return lo, nil
	}
	// Invariant: the segment starting at seg holds x and its first record
	// is older than ms; hi is the start of a segment whose first record is
	// not older, or the log end.
	x, seg := lo, lo
	for hi-x > 1 {
		mid := x + (hi-x)/2
		s, err := bs.segmentStart(ctx, topic, part, mid)
		if err != nil {
			return 0, err
		}
		if s <= seg { // still seg's segment
			x = mid
			continue
		}
		t, err := bs.recordMs(ctx, topic, part, s)
		if err != nil {
			return 0, err
		}
		if t < ms {
			x, seg = mid, s
		} else {
			hi = s
		}
	}
	return bs.scanForTime(ctx, topic, part, ms, seg, hi)
}

// scanForTime walks the records from off (a record start) and returns the
// first one stored at or after ms, or end if they are all older.
func (bs *brokerSession) scanForTime(ctx context.Context, topic string, part int32, ms, off, end int64) (int64, error) {
	size := 256 << 10
	for off < end {
		body, err := bs.getRecords(ctx, topic, part, off, size)
		if err != nil {
			return 0, err
		}
		it := message.NewIterator(body, off, 0)
		for it.Next() {
			r := it.Record()
			if t, _, _ := message.IDParts(r.ID); t >= ms {
				return r.Offset, nil
			}
			if it.NextOffset() >= end {
				return end, nil
			}
		}
		if err := it.Err(); err != nil {
			return 0, fmt.Errorf("record at %d: %w", it.NextOffset(), err)
		}
		if it.Consumed() == 0 {
			// One record larger than size: fetch it whole.
			if len(body) < message.HeaderSize {
				return 0, fmt.Errorf("get at %d: %d bytes, not a record", off, len(body))
			}
			n := recordSize(body)
			if n <= size || n > maxReplyBody {
				return 0, fmt.Errorf("record at %d: bad length %d", off, n-message.HeaderSize)
			}
			size = n
			continue
		}
		off = it.NextOffset()
	}
	return end, nil
}

// isRecordStart reports whether a whole, intact record starts at off.
func (bs *brokerSession) isRecordStart(ctx context.Context, topic string, part int32, off int64) (bool, error) {
	size := 64 << 10
	for {
		body, err := bs.get(ctx, topic, part, off, size)
		if err != nil {
			return false, err
		}
		_, _, err = message.ParseRecord(body, 0)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, message.ErrShortRecord) || len(body) < message.HeaderSize {
			return false, nil
		}
		// The record claims more bytes than were read: read that many. A
		// record never spans segments and never exceeds a get reply, so a
		// shorter reply means it is no record.
		n := recordSize(body)
		if n > maxReplyBody || n <= size {
			return false, nil
		}
		size = n
	}
}
