package admin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Resetting a group's offsets, and finding the offset of a time.
//
// A time is found without any broker extension, from what every broker
// answers. The time of a record is its create timestamp when it carries
// one (Message.Timestamp), else the wall-clock millisecond at which the
// broker stored it, which its id carries (a delayed message keeps the id
// of its acceptance: its due time stands for its store). Ids of the
// records the timer did not deliver rise with offsets, so the bisection
// below runs on them, and the scan after it on the records' times. A
// record created after the time asked for but stored before it (a
// producer's clock ahead of the broker's) lies before where the scan
// starts and is not found. The only offsets known to be record starts
// without reading are the segment starts, which the `offset` command
// returns for any offset inside a segment. So:
//
//  1. bisect the byte range [min, max): for a probe x, s = offset(x) is the
//     start of x's segment and a small get at s reads its first records,
//     whose first undelivered one's id gives the time; this finds the last
//     segment whose first record was stored before the time (O(log bytes)
//     small requests);
//  2. scan from that segment's start with gets: the answer is the first
//     record whose time is at or after the time asked for, else the log
//     end.
//
// The scan reads at most about one segment (max_segment_size, 1 GiB by
// default), unless records carry create timestamps older than when they
// were stored (a replay of old data), which it reads past.

// ResetTarget is where ResetOffsets moves a group's offsets: Earliest,
// Latest, ToOffset or ToTime.
type ResetTarget struct {
	kind   string // earliest, latest, offset, time
	offset int64
	ms     int64
}

// Earliest is the oldest stored offset of each partition.
func Earliest() ResetTarget { return ResetTarget{kind: "earliest"} }

// Latest is the end of each partition: only new messages are read.
func Latest() ResetTarget { return ResetTarget{kind: "latest"} }

// ToOffset is a byte offset, which must be the start of a record in every
// partition reset (as a produce result or a consumed message gives it).
func ToOffset(off int64) ResetTarget { return ResetTarget{kind: "offset", offset: off} }

// ToTime is the first message whose time (its create timestamp, else when
// it was stored: message.Record.RecordTime) is at or after t (rounded up to the
// millisecond), or the end of a partition whose messages are all older.
func ToTime(t time.Time) ResetTarget {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ResetTarget{kind: "time", ms: ms}
}

// String names the target: earliest, latest, the offset, or the time as
// @<unix ms>.
func (t ResetTarget) String() string {
	switch t.kind {
	case "offset":
		return strconv.FormatInt(t.offset, 10)
	case "time":
		return "@" + strconv.FormatInt(t.ms, 10)
	}
	return t.kind
}

// ResetOptions narrow and carry out a reset.
type ResetOptions struct {
	// Topics are the topics reset (default: the group's, as
	// DescribeGroup finds them).
	Topics []string
	// Match, if set, keeps only the partitions it accepts.
	Match func(p GroupPartition) bool
	// Execute commits the plan. Without it nothing changes (a dry run).
	// It is refused while the group has live members, which would
	// overwrite the offsets.
	Execute bool
	// Progress, if set, is called with stage "plan" after each
	// partition's new offset is found (done of total partitions) and,
	// with Execute, with stage "commit" after each commit request.
	Progress func(stage string, done, total int)
}

// ResetPartition is one partition of a reset plan.
type ResetPartition struct {
	Topic     string `json:"topic"`
	BrokerID  int    `json:"broker_id"`
	Partition int32  `json:"partition"`
	// Current is the committed offset (nil: none).
	Current *int64 `json:"current"`
	// New is where the offset moves.
	New int64 `json:"new"`
}

// ResetPlan is what ResetOffsets found, and did with Execute.
type ResetPlan struct {
	Group string `json:"group"`
	// To is the target, as ResetTarget.String gives it.
	To       string `json:"to"`
	Executed bool   `json:"executed"`
	// Members are the group's live members (a dry run lists them; an
	// execution is refused while there are any).
	Members    []GroupMember    `json:"-"`
	Partitions []ResetPartition `json:"partitions"`
}

// LiveMembersError refuses to execute a reset while the group has live
// members.
type LiveMembersError struct {
	Group   string
	Members []string
}

// Error names the group and its live members.
func (e *LiveMembersError) Error() string {
	return fmt.Sprintf("group %s has %d live member(s) (%s): refusing to reset its offsets, which they would overwrite; stop them first",
		e.Group, len(e.Members), strings.Join(e.Members, ", "))
}

// ErrNoPartitions: the reset selected no partition.
var ErrNoPartitions = errors.New("admin: no partitions to reset")

// ResetOffsets computes the new committed offset of each partition of
// group g and, with o.Execute, commits them through the brokers, one
// request per broker and topic. The plan is returned in both cases (with
// Execute: what was committed). A broker that cannot be read fails the
// reset before anything is committed.
func (a *Admin) ResetOffsets(ctx context.Context, g string, to ResetTarget, o ResetOptions) (*ResetPlan, error) {
	if to.kind == "" {
		return nil, errors.New("admin: a ResetTarget is needed (Earliest, Latest, ToOffset or ToTime)")
	}
	if to.kind == "offset" && to.offset < 0 || to.kind == "time" && to.ms < 0 {
		return nil, fmt.Errorf("admin: bad reset target %s", to)
	}
	if err := checkName("group", g); err != nil {
		return nil, err
	}
	d, addrs, err := a.loadGroup(ctx, g, o.Topics, false)
	if err != nil {
		return nil, err
	}
	plan := &ResetPlan{Group: g, To: to.String(), Members: d.Members, Partitions: []ResetPartition{}}
	if len(d.Members) > 0 && o.Execute {
		ids := make([]string, len(d.Members))
		for i, m := range d.Members {
			ids[i] = m.ID
		}
		return plan, &LiveMembersError{Group: g, Members: ids}
	}
	var rows []GroupPartition
	for _, r := range d.Partitions {
		if o.Match == nil || o.Match(r) {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		if len(o.Topics) == 0 && o.Match == nil {
			return plan, fmt.Errorf("%w: group %s has no members and no committed offsets (name its topics)", ErrNoPartitions, g)
		}
		return plan, fmt.Errorf("%w: no partition of group %s matches", ErrNoPartitions, g)
	}
	for i, r := range rows {
		n, err := a.newOffset(ctx, addrs[r.BrokerID], r, to)
		if err != nil {
			return plan, err
		}
		plan.Partitions = append(plan.Partitions, ResetPartition{Topic: r.Topic, BrokerID: r.BrokerID, Partition: r.Partition, Current: r.Committed, New: n})
		if o.Progress != nil {
			o.Progress("plan", i+1, len(rows))
		}
	}
	if o.Execute {
		if err := a.commit(ctx, g, addrs, plan.Partitions, o.Progress); err != nil {
			return plan, err
		}
		plan.Executed = true
	}
	return plan, nil
}

func partName(r GroupPartition) string {
	return fmt.Sprintf("%s partition %d of broker %d", r.Topic, r.Partition, r.BrokerID)
}

// newOffset returns the offset r moves to.
func (a *Admin) newOffset(ctx context.Context, addr string, r GroupPartition, to ResetTarget) (int64, error) {
	if r.LogStart == nil || r.LogEnd == nil {
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
		ok, err := a.isRecordStart(ctx, addr, r.Topic, r.Partition, to.offset)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", partName(r), err)
		}
		if !ok {
			return 0, fmt.Errorf("offset %d is not the start of a record in %s (use an offset printed by "+
				"`metaq produce --verbose` or `metaq consume --json`)", to.offset, partName(r))
		}
		return to.offset, nil
	case "time":
		off, err := a.offsetForTime(ctx, addr, r.Topic, r.Partition, to.ms, lo, hi)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", partName(r), err)
		}
		return off, nil
	}
	return 0, fmt.Errorf("admin: unknown reset target %q", to.kind)
}

// commit stores the plan through each partition's broker, one request per
// (broker, topic).
func (a *Admin) commit(ctx context.Context, g string, addrs map[int]string, plan []ResetPartition, progress func(string, int, int)) error {
	type key struct {
		broker int
		topic  string
	}
	batches := map[key][]protocol.OffsetEntry{}
	var order []key
	for _, p := range plan {
		k := key{p.BrokerID, p.Topic}
		if _, ok := batches[k]; !ok {
			order = append(order, k)
		}
		batches[k] = append(batches[k], protocol.OffsetEntry{Topic: p.Topic, Partition: p.Partition, Offset: p.New, MsgID: -1})
	}
	done := 0
	for _, k := range order {
		entries := batches[k]
		_, err := a.roundTrip(ctx, addrs[k.broker], func(dst []byte, op int32) []byte { return protocol.AppendCommit(dst, g, entries, op) })
		if err != nil {
			return fmt.Errorf("broker %d, topic %s: %w (%d of %d partitions were committed before)",
				k.broker, k.topic, err, done, len(plan))
		}
		done += len(entries)
		if progress != nil {
			progress("commit", done, len(plan))
		}
	}
	return nil
}

// OffsetForTime returns the offset of the first message of a partition
// whose time (create timestamp, else stored) is at or after t, or the partition's end when every message is
// older.
func (a *Admin) OffsetForTime(ctx context.Context, topic string, brokerID int, partition int32, t time.Time) (int64, error) {
	b, err := a.broker(ctx, brokerID)
	if err != nil {
		return 0, err
	}
	po, err := a.Offsets(ctx, topic, brokerID, partition)
	if err != nil {
		return 0, err
	}
	return a.offsetForTime(ctx, b.Addr, topic, partition, ToTime(t).ms, po.Min, po.Max)
}

// errMoved: the log's start moved (retention) during the search.
var errMoved = errors.New("the partition's oldest segment was deleted meanwhile (retention); run the command again")

// get sends `get` and returns the body of its 200 reply; a 301 (off out
// of range) is errMoved.
func (a *Admin) get(ctx context.Context, addr, topic string, part int32, off int64, size int) ([]byte, error) {
	body, err := a.roundTrip(ctx, addr, func(dst []byte, op int32) []byte {
		return protocol.AppendGet(dst, topic, scanGroup, part, off, int32(size), op)
	})
	var be *client.BrokerError
	switch {
	case errors.As(err, &be) && be.Code == protocol.StatusMoved:
		return nil, errMoved
	case errors.As(err, &be) && be.Code == protocol.StatusNotFound:
		return nil, nil // nothing there yet
	case err != nil:
		return nil, fmt.Errorf("get at %d: %w", off, err)
	}
	return body, nil
}

// getRecords is get for reading records: an empty body is an error.
func (a *Admin) getRecords(ctx context.Context, addr, topic string, part int32, off int64, size int) ([]byte, error) {
	body, err := a.get(ctx, addr, topic, part, off, size)
	if err == nil && len(body) == 0 {
		return nil, fmt.Errorf("get at %d: empty reply", off)
	}
	return body, err
}

// maxRecord bounds the size of one record a read grows to (a get reply
// is at most the broker's max_transfer_size).
const maxRecord = 64 << 20

// recordSize is the size of the record whose header starts b, as its
// length field claims; b holds at least message.HeaderSize bytes.
func recordSize(b []byte) int { return message.HeaderSize + int(int32(binary.BigEndian.Uint32(b))) }

// grownSize is the read size for a record larger than size whose header
// starts body, or 0 when its length is bad.
func grownSize(body []byte, size int) int {
	if len(body) < message.HeaderSize {
		return 0
	}
	n := recordSize(body)
	if n <= size || n > maxRecord {
		return 0
	}
	return n
}

// segmentKey returns the bisection's key of the segment starting at off:
// when its first record that the broker's timer did not deliver was
// stored (the millisecond in its id: ids rise with offsets for them). A
// delivered delayed message keeps the id of its acceptance, so it is
// walked past. When no such record lies in the first keyScan bytes the key
// is math.MaxInt64: the bisection then takes the segment as not older than
// the time, which can only make the scan start earlier.
func (a *Admin) segmentKey(ctx context.Context, addr, topic string, part int32, off, end int64) (int64, error) {
	const keyScan = 256 << 10
	size := 16 << 10
	for from := off; from < end && from-off < keyScan; {
		body, err := a.getRecords(ctx, addr, topic, part, from, size)
		if err != nil {
			return 0, err
		}
		it := message.NewIterator(body, from, 0)
		for it.Next() {
			if r := it.Record(); !r.Delivered() {
				ms, _, _ := message.IDParts(r.ID)
				return ms, nil
			}
			if it.NextOffset() >= end {
				return math.MaxInt64, nil
			}
		}
		if err := it.Err(); err != nil {
			return 0, fmt.Errorf("record at %d: %w", it.NextOffset(), err)
		}
		if it.Consumed() == 0 {
			if size = grownSize(body, size); size == 0 {
				return 0, fmt.Errorf("record at %d: bad length", from)
			}
			continue
		}
		from = it.NextOffset()
	}
	return math.MaxInt64, nil
}

// segmentStart returns the start of the segment holding off.
func (a *Admin) segmentStart(ctx context.Context, addr, topic string, part int32, off int64) (int64, error) {
	s, err := a.nearestOffset(ctx, addr, topic, part, off)
	if err != nil {
		return 0, err
	}
	if s > off {
		return 0, errMoved
	}
	return s, nil
}

// offsetForTime returns the offset of the first record of the partition
// whose time (message.Record.RecordTime: its create timestamp, else when
// it was stored) is at or after ms (unix milliseconds), or hi when there
// is none; lo and hi are the partition's min and max offsets.
//
// The bisection finds, by stored time, the last segment whose first
// (undelivered) record was stored before ms: every record before it was
// stored before ms, so it was also created before ms (a producer stamps a
// message before the broker stores it). The scan then walks from there to
// the first record whose time is at or after ms: in the next segment at
// the latest, unless records carry create timestamps older than their
// store (a replay of old data), which it walks past.
func (a *Admin) offsetForTime(ctx context.Context, addr, topic string, part int32, ms, lo, hi int64) (int64, error) {
	if lo >= hi {
		return hi, nil
	}
	end := hi
	t, err := a.segmentKey(ctx, addr, topic, part, lo, end)
	if err != nil {
		return 0, err
	}
	if t >= ms {
		return a.scanForTime(ctx, addr, topic, part, ms, lo, end)
	}
	// Invariant: the segment starting at seg holds x and its key is older
	// than ms; hi is the start of a segment whose key is not older, or
	// the log end.
	x, seg := lo, lo
	for hi-x > 1 {
		mid := x + (hi-x)/2
		s, err := a.segmentStart(ctx, addr, topic, part, mid)
		if err != nil {
			return 0, err
		}
		if s <= seg { // still seg's segment
			x = mid
			continue
		}
		t, err := a.segmentKey(ctx, addr, topic, part, s, end)
		if err != nil {
			return 0, err
		}
		if t < ms {
			x, seg = mid, s
		} else {
			hi = s
		}
	}
	return a.scanForTime(ctx, addr, topic, part, ms, seg, end)
}

// scanForTime walks the records from off (a record start) and returns the
// first one whose time (RecordTime) is at or after ms, or end if none is.
func (a *Admin) scanForTime(ctx context.Context, addr, topic string, part int32, ms, off, end int64) (int64, error) {
	size := 256 << 10
	for off < end {
		body, err := a.getRecords(ctx, addr, topic, part, off, size)
		if err != nil {
			return 0, err
		}
		it := message.NewIterator(body, off, 0)
		for it.Next() {
			r := it.Record()
			if r.RecordTime() >= ms {
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
			if size = grownSize(body, size); size == 0 {
				return 0, fmt.Errorf("record at %d: bad length", off)
			}
			continue
		}
		off = it.NextOffset()
	}
	return end, nil
}

// isRecordStart reports whether a whole, intact record starts at off.
func (a *Admin) isRecordStart(ctx context.Context, addr, topic string, part int32, off int64) (bool, error) {
	size := 64 << 10
	for {
		body, err := a.get(ctx, addr, topic, part, off, size)
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
		if size = grownSize(body, size); size == 0 {
			return false, nil
		}
	}
}
