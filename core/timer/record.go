// Package timer is the broker's timer for delayed and scheduled messages
// (docs/delayed.md): a timer log of accepted delayed messages (a partition
// of the internal topic, appended through the normal durable path), an
// on-disk wheel of slots by due minute that indexes it, a small in-memory
// window of what is due now, and delivered marks in the timer log itself,
// so that the delivery position is derived from the log after a restart
// or on a promoted slave.
package timer

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kinds of timer log records (the first byte of a record's data).
const (
	KindMessage = 1 // a delayed message
	KindCancel  = 2 // a tombstone: the message with this id is not delivered
	KindMark    = 3 // a delivered mark
	KindIntent  = 4 // the partitions a delivery round is about to append to
)

// ErrBadRecord means a timer log record does not parse.
var ErrBadRecord = errors.New("timer: bad record")

// Message is a delayed message as the timer log holds it: its target,
// its due time and its put's flag and data (the id is the record's).
type Message struct {
	Due       int64 // Unix ms
	Topic     string
	Partition int32
	Flag      int32
	Data      []byte
}

// Mark says every message at a timer log offset below IndexedTo whose due
// time is at most DueUpTo has been delivered (or cancelled).
type Mark struct {
	DueUpTo   int64
	IndexedTo int64
}

// Target is a partition a delivery round appends to and its end offset
// before the round: a message the round delivered is in it at or after
// From.
type Target struct {
	Topic     string
	Partition int32
	From      int64
}

// AppendIntent encodes a delivery round's intent, written (and durable)
// before the round appends anything:
//
//	[u8 4][u16 n] n x ([int32 partition][int64 from][u16 topicLen][topic])
func AppendIntent(dst []byte, ts []Target) []byte {
	dst = append(dst, KindIntent)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(ts)))
	for _, t := range ts {
		dst = binary.BigEndian.AppendUint32(dst, uint32(t.Partition))
		dst = binary.BigEndian.AppendUint64(dst, uint64(t.From))
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.Topic)))
		dst = append(dst, t.Topic...)
	}
	return dst
}

// MessageHeaderSize is what AppendMessage adds to a message for topic.
func MessageHeaderSize(topic string) int { return 1 + 8 + 4 + 4 + 2 + len(topic) }

// AppendMessage encodes m as a timer log record's data:
//
//	[u8 1][int64 due][int32 partition][int32 flag][u16 topicLen][topic][data]
func AppendMessage(dst []byte, m *Message) []byte {
	dst = append(dst, KindMessage)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.Due))
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.Partition))
	dst = binary.BigEndian.AppendUint32(dst, uint32(m.Flag))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Topic)))
	dst = append(dst, m.Topic...)
	return append(dst, m.Data...)
}

// AppendCancel encodes a tombstone for msgId: [u8 2][int64 msgId].
func AppendCancel(dst []byte, msgID int64) []byte {
	dst = append(dst, KindCancel)
	return binary.BigEndian.AppendUint64(dst, uint64(msgID))
}

// AppendMark encodes a delivered mark: [u8 3][int64 dueUpTo][int64 indexedTo].
func AppendMark(dst []byte, m Mark) []byte {
	dst = append(dst, KindMark)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.DueUpTo))
	return binary.BigEndian.AppendUint64(dst, uint64(m.IndexedTo))
}

// Record is a decoded timer log record's data: Kind says which of the
// other fields is set. Message.Data aliases the input.
type Record struct {
	Kind   byte
	Msg    Message
	Cancel int64
	Mark   Mark
	Intent []Target
}

// Parse decodes a timer log record's data.
func Parse(b []byte) (Record, error) {
	var r Record
	if len(b) == 0 {
		return r, fmt.Errorf("%w: empty", ErrBadRecord)
	}
	r.Kind = b[0]
	switch r.Kind {
	case KindMessage:
		if len(b) < 19 {
			return r, fmt.Errorf("%w: message of %d bytes", ErrBadRecord, len(b))
		}
		r.Msg.Due = int64(binary.BigEndian.Uint64(b[1:]))
		r.Msg.Partition = int32(binary.BigEndian.Uint32(b[9:]))
		r.Msg.Flag = int32(binary.BigEndian.Uint32(b[13:]))
		n := int(binary.BigEndian.Uint16(b[17:]))
		if n == 0 || len(b) < 19+n {
			return r, fmt.Errorf("%w: topic of %d bytes", ErrBadRecord, n)
		}
		r.Msg.Topic = string(b[19 : 19+n])
		r.Msg.Data = b[19+n:]
	case KindCancel:
		if len(b) != 9 {
			return r, fmt.Errorf("%w: cancel of %d bytes", ErrBadRecord, len(b))
		}
		r.Cancel = int64(binary.BigEndian.Uint64(b[1:]))
	case KindMark:
		if len(b) != 17 {
			return r, fmt.Errorf("%w: mark of %d bytes", ErrBadRecord, len(b))
		}
		r.Mark.DueUpTo = int64(binary.BigEndian.Uint64(b[1:]))
		r.Mark.IndexedTo = int64(binary.BigEndian.Uint64(b[9:]))
	case KindIntent:
		if len(b) < 3 {
			return r, fmt.Errorf("%w: intent of %d bytes", ErrBadRecord, len(b))
		}
		n := int(binary.BigEndian.Uint16(b[1:]))
		rest := b[3:]
		r.Intent = make([]Target, 0, min(n, len(rest)/15))
		for range n {
			if len(rest) < 14 {
				return r, fmt.Errorf("%w: intent target of %d bytes", ErrBadRecord, len(rest))
			}
			t := Target{Partition: int32(binary.BigEndian.Uint32(rest)), From: int64(binary.BigEndian.Uint64(rest[4:]))}
			tl := int(binary.BigEndian.Uint16(rest[12:]))
			if tl == 0 || len(rest) < 14+tl {
				return r, fmt.Errorf("%w: intent topic of %d bytes", ErrBadRecord, tl)
			}
			t.Topic = string(rest[14 : 14+tl])
			r.Intent = append(r.Intent, t)
			rest = rest[14+tl:]
		}
		if len(rest) != 0 {
			return r, fmt.Errorf("%w: %d bytes after an intent", ErrBadRecord, len(rest))
		}
	default:
		return r, fmt.Errorf("%w: kind %d", ErrBadRecord, r.Kind)
	}
	return r, nil
}
