package timer

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
)

// The acceptance of a delayed put (docs/delayed.md). A put whose
// properties carry metaq-deliver-at or metaq-delay is appended, wrapped in
// a timer record (PutRecord), to a partition of the internal timer topic
// (PartitionOf) so that group commit, the journal, recovery and
// replication cover it, and answered with its msgId and offset -1. The
// broker reads the request, appends and answers; what it checks and builds
// is here, and a refusal is a *RefusedError it maps to its status line.

// RefusedError is a delayed put refused as malformed or out of bounds
// (the broker answers 400 with Msg).
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return e.Msg }

// The refusals of a cancel where one is not taken.
var (
	ErrIdempotentCancel = &RefusedError{"delayed message: the idempotent producer's id and sequence are not taken " +
		"on a cancel (docs/delayed.md)"}
	ErrCancelInTx = &RefusedError{"a cancel of a delayed message is not taken in a transaction " +
		"(send it as a plain put; docs/delayed.md)"}
)

// Limits bound a delayed put: max_delay (ms) and max_message_size now.
type Limits struct {
	MaxDelay       int64
	MaxMessageSize int
}

// LimitsOf is cfg's Limits.
func LimitsOf(cfg *conf.Config) Limits {
	return Limits{MaxDelay: cfg.MaxDelay, MaxMessageSize: cfg.MaxMessageSize}
}

// PartitionOf is the timer partition, of n, of target partition p of
// topic.
func PartitionOf(topic string, p int32, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(topic))
	return int32((h.Sum32() + uint32(p)) % uint32(n))
}

// Check returns why a delayed put of a body of size bytes to topic asking
// for d is refused at now (Unix ms), as a *RefusedError, or nil: a
// delivery further than max_delay, or a record that with its timer header
// exceeds max_message_size. A transactional put is checked so too (its
// delay counts from its commit).
func Check(topic string, size int, d message.Delivery, now int64, lim Limits) error {
	if due := d.Due(now); due-now > lim.MaxDelay {
		return &RefusedError{"delayed message: delivery in " + (time.Duration(due-now) * time.Millisecond).String() +
			" exceeds max_delay " + (time.Duration(lim.MaxDelay) * time.Millisecond).String()}
	}
	if hdr := MessageHeaderSize(topic); size+hdr > lim.MaxMessageSize {
		return &RefusedError{"delayed message of " + strconv.Itoa(size) + " bytes: with its timer header (" + strconv.Itoa(hdr) +
			" bytes) it exceeds max_message_size " + strconv.Itoa(lim.MaxMessageSize)}
	}
	return nil
}

// Accept checks a delayed put of body (flag) to partition p of topic
// asking for d, or a cancel of msgId cancel when it is not 0, at now
// (Unix ms): idempotent says it carries an idempotent producer's id and
// sequence. It returns the put's timer record (PutRecord), or why it is
// refused, a *RefusedError (ErrIdempotentCancel, or Check's).
func Accept(topic string, p int32, flag int32, body []byte, d message.Delivery, cancel int64, idempotent bool,
	now int64, lim Limits) ([]byte, error) {
	if cancel != 0 {
		if idempotent {
			return nil, ErrIdempotentCancel
		}
	} else if err := Check(topic, len(body), d, now, lim); err != nil {
		return nil, err
	}
	return PutRecord(topic, p, flag, body, d, cancel, now), nil
}

// CheckInTx returns why a transactional put of size bytes to topic asking
// for d, or a cancel (cancel != 0), is refused at now: ErrCancelInTx, or
// Check's (its delay counts from the commit); nil when it is taken.
func CheckInTx(topic string, size int, d message.Delivery, cancel int64, now int64, lim Limits) error {
	if cancel != 0 {
		return ErrCancelInTx
	}
	return Check(topic, size, d, now, lim)
}

// PutRecord is the timer record of an accepted delayed put: a cancel of
// msgId cancel when it is not 0, else message body (flag) for partition p
// of topic, due by d at now (a time in the past is now). It does not
// check; Check does.
func PutRecord(topic string, p int32, flag int32, body []byte, d message.Delivery, cancel int64, now int64) []byte {
	if cancel != 0 {
		return AppendCancel(nil, cancel)
	}
	due := max(d.Due(now), now)
	return AppendMessage(make([]byte, 0, len(body)+32+len(topic)),
		&Message{Due: due, Topic: topic, Partition: p, Flag: flag, Data: body})
}

// DueOnArrival reports whether a delivery d asked at now (Unix ms) is due
// at once: its timer loop is woken rather than left to its tick.
func DueOnArrival(d message.Delivery, now int64) bool {
	return d.IsAt && d.At <= now || !d.IsAt && d.Delay == 0
}

// IsDelayed reports whether a body carries a delivery or cancel header
// (malformed ones included).
func IsDelayed(flag int32, data []byte) bool {
	_, _, ok, err := message.TimerHeaders(flag, data)
	return ok || err != nil
}

// MayCopy reports whether a get of the timer topic by group is a slave's
// copy of it: it names this broker's slave group (slave_group, the
// slaves' default "meta-slave-group_<broker_id>"), and with auth on its
// user is an admin (admin is asked then only; the timer log holds the
// payloads of every topic).
func MayCopy(group, slaveGroup string, auth bool, admin func() bool) bool {
	if group != slaveGroup {
		return false
	}
	return !auth || admin()
}

// WheelDir is the directory of timer partition i's wheel in data
// directory dir.
func WheelDir(dir string, i int) string {
	return filepath.Join(dir, conf.TimerTopic+".wheel", strconv.Itoa(i))
}

// HasLog reports whether data directory dir holds timer partitions.
func HasLog(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, conf.TimerTopic+"-0"))
	return err == nil
}

// StatsLines emits `stats delayed`'s lines (the dashboard's delayed
// page's counters).
func (s *Service) StatsLines(line func(string)) {
	line("pending " + strconv.FormatInt(s.Pending(), 10))
	line("accepted " + strconv.FormatInt(s.Accepted.Load(), 10))
	line("delivered " + strconv.FormatInt(s.Delivered.Load(), 10))
	line("cancels " + strconv.FormatInt(s.Cancels.Load(), 10))
	line("dropped " + strconv.FormatInt(s.Dropped.Load(), 10))
	for i := range s.Partitions() {
		line("timer_partition_" + strconv.Itoa(i) + "_pending " + strconv.FormatInt(s.PartitionPending(i), 10))
	}
}

// Stored counts msgs delayed messages a commit stored in timer partition
// i and wakes its loop (one due at once is delivered without waiting for
// its tick).
func (s *Service) Stored(i int, msgs int) {
	s.Accepted.Add(int64(msgs))
	s.Wake(i)
}
